# shellcheck shell=bash
# pods/proxy and services/proxy: the apiserver forwards HTTP to the nginx pod, by the
# pod's name and port and through a Service's endpoint, as `kubectl proxy` users and
# `kubectl cluster-info`'s links reach them. Sourced by e2e/single-node.sh with the nginx
# pod Running; uses its step/ok/fail/k helpers.

step "pods/proxy and services/proxy reach nginx through the apiserver"
out=$(k get --raw "/api/v1/namespaces/default/pods/nginx:80/proxy/" 2>&1) ||
  fail "GET pods/nginx:80/proxy/: $out"
grep -q 'Welcome to nginx' <<<"$out" || fail "pods/nginx:80/proxy/ answered: $out"
k delete service e2e-proxy --ignore-not-found >/dev/null 2>&1 || true
out=$(k expose pod nginx --name=e2e-proxy --port=8080 --target-port=80 2>&1) ||
  fail "kubectl expose pod nginx: $out"
out=""
for ((proxy_i = 0; proxy_i < 40; proxy_i++)); do # 20 s for the endpoints controller
  out=$(k get --raw "/api/v1/namespaces/default/services/e2e-proxy:8080/proxy/" 2>&1) &&
    grep -q 'Welcome to nginx' <<<"$out" && break
  sleep 0.5
done
grep -q 'Welcome to nginx' <<<"$out" || fail "services/e2e-proxy:8080/proxy/ answered: $out"
k delete service e2e-proxy >/dev/null 2>&1 || fail "kubectl delete service e2e-proxy failed"
ok "nginx's page through pods/nginx:80/proxy/ and services/e2e-proxy:8080/proxy/"
