# shellcheck shell=bash
# The kubelet API's authentication and authorization on :10250 (hack/up.sh runs the
# kubelet as kubeadm does: --anonymous-auth=false, --authentication-token-webhook,
# --authorization-mode=Webhook): no credentials is a 401, a bad token a 401, a client
# certificate of an unprivileged user (signed by the cluster CA) and a service account
# token get upstream's 403, a user granted nodes/stats reads /stats/summary but not
# /pods, and the admin certificate (system:masters) is served. Sourced by
# e2e/single-node.sh; uses its step/ok/fail/k helpers, NODE and FK_PKI_DIR.

KA_DIR=$(mktemp -d)
KA_READER_ROLE=fk-e2e-kubelet-stats-reader
ka_cleanup() {
  k delete clusterrolebinding "$KA_READER_ROLE" --ignore-not-found >/dev/null 2>&1 || true
  k delete clusterrole "$KA_READER_ROLE" --ignore-not-found >/dev/null 2>&1 || true
  rm -rf "$KA_DIR"
}

# ka_cert NAME: a client certificate for user NAME (no groups) signed by the cluster CA.
ka_cert() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$KA_DIR/$1.key" -subj "/CN=$1" -out "$KA_DIR/$1.csr" 2>/dev/null ||
    fail "openssl req for $1"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' \
    >"$KA_DIR/ext.cnf"
  openssl x509 -req -in "$KA_DIR/$1.csr" -CA "$FK_PKI_DIR/ca.crt" -CAkey "$FK_PKI_DIR/ca.key" \
    -set_serial "0x$(openssl rand -hex 12)" -days 1 -extfile "$KA_DIR/ext.cnf" \
    -out "$KA_DIR/$1.crt" 2>/dev/null || fail "signing $1's certificate with $FK_PKI_DIR/ca.key"
}

# ka_get PATH CURL-ARGS...: "<code> <body>" of a GET to the kubelet API.
ka_get() {
  local path=$1 out
  shift
  out=$(curl -sS --max-time 10 -k -o "$KA_DIR/body" -w '%{http_code}' "$@" "$KA_URL$path" 2>&1) ||
    fail "curl $KA_URL$path: $out"
  printf '%s %s' "$out" "$(cat "$KA_DIR/body")"
}

step "kubelet API at :10250 of node $NODE"
KA_IP=$(k get node "$NODE" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}' | cut -d' ' -f1) ||
  fail "node $NODE's address"
KA_PORT=$(k get node "$NODE" -o 'jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}') ||
  fail "node $NODE's kubelet port"
[ -n "$KA_IP" ] && [ -n "$KA_PORT" ] || fail "node $NODE has no InternalIP/kubelet port ('$KA_IP', '$KA_PORT')"
[[ $KA_IP == *:* ]] && KA_IP="[$KA_IP]"
KA_URL="https://$KA_IP:$KA_PORT"
[ -r "$FK_PKI_DIR/ca.key" ] || fail "no cluster CA key at $FK_PKI_DIR/ca.key"
ok "$KA_URL"

step "no credentials: 401 Unauthorized"
out=$(ka_get /pods)
[ "$out" = "401 Unauthorized" ] || { ka_cleanup; fail "expected '401 Unauthorized', got: $out"; }
out=$(ka_get /pods -H "Authorization: Bearer not-a-token")
[ "$out" = "401 Unauthorized" ] || { ka_cleanup; fail "a bad token: expected '401 Unauthorized', got: $out"; }
ok "anonymous requests and unknown tokens refused"

step "an unprivileged user's client certificate: 403 as upstream words it"
ka_cert fk-e2e-nobody
out=$(ka_get /pods --cert "$KA_DIR/fk-e2e-nobody.crt" --key "$KA_DIR/fk-e2e-nobody.key")
want="403 Forbidden (user=fk-e2e-nobody, verb=get, resource=nodes, subresource(s)=[pods proxy])"
[ "$out" = "$want" ] || { ka_cleanup; fail "expected '$want', got: $out"; }
out=$(ka_get /stats/summary --cert "$KA_DIR/fk-e2e-nobody.crt" --key "$KA_DIR/fk-e2e-nobody.key")
want="403 Forbidden (user=fk-e2e-nobody, verb=get, resource=nodes, subresource(s)=[stats])"
[ "$out" = "$want" ] || { ka_cleanup; fail "expected '$want', got: $out"; }
ok "nodes/pods, nodes/proxy and nodes/stats denied"

step "a service account token (TokenReview): 403"
KA_TOKEN=$(k create token default --duration=10m 2>&1) || { ka_cleanup; fail "kubectl create token: $KA_TOKEN"; }
out=$(ka_get /pods -H "Authorization: Bearer $KA_TOKEN")
want="403 Forbidden (user=system:serviceaccount:default:default, verb=get, resource=nodes, subresource(s)=[pods proxy])"
[ "$out" = "$want" ] || { ka_cleanup; fail "expected '$want', got: $out"; }
ok "the token's user is reviewed and denied"

step "a user granted nodes/stats: /stats/summary yes, /pods no"
out=$(k create clusterrole "$KA_READER_ROLE" --verb=get --resource=nodes/stats 2>&1) ||
  { ka_cleanup; fail "create clusterrole: $out"; }
out=$(k create clusterrolebinding "$KA_READER_ROLE" --clusterrole="$KA_READER_ROLE" --user=fk-e2e-reader 2>&1) ||
  { ka_cleanup; fail "create clusterrolebinding: $out"; }
ka_cert fk-e2e-reader
out=$(ka_get /stats/summary --cert "$KA_DIR/fk-e2e-reader.crt" --key "$KA_DIR/fk-e2e-reader.key")
[ "${out%% *}" = 200 ] && grep -q '"nodeName"' <<<"$out" || { ka_cleanup; fail "stats/summary: ${out:0:300}"; }
out=$(ka_get /pods --cert "$KA_DIR/fk-e2e-reader.crt" --key "$KA_DIR/fk-e2e-reader.key")
[ "${out%% *}" = 403 ] || { ka_cleanup; fail "/pods for a stats reader: ${out:0:300}"; }
ok "RBAC decides, per subresource"

step "the admin certificate (system:masters, the apiserver's kubelet client): served"
out=$(ka_get /pods --cert "$FK_PKI_DIR/admin.crt" --key "$FK_PKI_DIR/admin.key")
[ "${out%% *}" = 200 ] && grep -q '"name":"nginx"' <<<"$out" || { ka_cleanup; fail "/pods as admin: ${out:0:300}"; }
out=$(k get --raw "/api/v1/nodes/$NODE/proxy/pods" 2>&1) || { ka_cleanup; fail "nodes/proxy through the apiserver: $out"; }
grep -q '"name":"nginx"' <<<"$out" || { ka_cleanup; fail "nodes/proxy/pods has no nginx: ${out:0:300}"; }
out=$(k exec nginx -- cat /etc/hostname 2>&1) || { ka_cleanup; fail "kubectl exec: $out"; }
[ "$out" = nginx ] || { ka_cleanup; fail "kubectl exec: expected nginx, got: $out"; }
ka_cleanup
ok "/pods with the admin certificate, nodes/proxy and kubectl exec through the apiserver"
