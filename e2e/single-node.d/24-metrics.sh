# shellcheck shell=bash
# Resource metrics (deploy/addons/metrics-server.yaml, cmd/metrics-server): the
# metrics-server Deployment that hack/up.sh applies is ready and v1beta1.metrics.k8s.io
# Available; within two metric resolutions (15 s each) `kubectl top nodes` prints the
# node's cpu (millicores) and memory (Mi) and `kubectl top pods -n kube-system` the
# addon pods' usage, and the raw NodeMetrics carry a window. Sourced by
# e2e/single-node.sh; uses its step/ok/fail/k helpers and NODE.
# shellcheck disable=SC2154 # NODE is set by e2e/single-node.sh

step "metrics: metrics-server ready, v1beta1.metrics.k8s.io Available"
avail=""
for ((i = 0; i < 120; i++)); do
  avail=$(k get apiservice v1beta1.metrics.k8s.io \
    -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null || true)
  [ "$avail" = True ] && break
  sleep 0.5
done
if [ "$avail" != True ]; then
  k -n kube-system get pods -l k8s-app=metrics-server -o wide || true
  k get apiservice v1beta1.metrics.k8s.io -o yaml 2>&1 | tail -n 15 || true
  fail "APIService v1beta1.metrics.k8s.io not Available after 60 s (hack/up.sh applies deploy/addons/metrics-server.yaml)"
fi
ok "APIService Available"

step "metrics: kubectl top nodes / kubectl top pods -n kube-system print numbers (at most 75 s)"
top_nodes=""
deadline=$((SECONDS + 75))
while [ $SECONDS -lt $deadline ]; do
  top_nodes=$(k top nodes --no-headers 2>&1 || true)
  grep -Eq "^$NODE +[0-9]+m +[0-9]+% +[0-9]+Mi +[0-9]+% *$" <<<"$top_nodes" && break
  sleep 2
done
printf '%s\n' "$top_nodes"
grep -Eq "^$NODE +[0-9]+m +[0-9]+% +[0-9]+Mi +[0-9]+% *$" <<<"$top_nodes" || {
  k -n kube-system logs -l k8s-app=metrics-server --tail=20 2>&1 || true
  fail "kubectl top nodes: expected '$NODE <n>m <n>% <n>Mi <n>%', got: $top_nodes"
}
ok "kubectl top nodes"
top_pods=""
while [ $SECONDS -lt $deadline ]; do
  top_pods=$(k top pods -n kube-system --no-headers 2>&1 || true)
  grep -Eq '^metrics-server-[a-z0-9-]+ +[0-9]+m +[0-9]+Mi *$' <<<"$top_pods" &&
    grep -Eq '^kube-dns-[a-z0-9-]+ +[0-9]+m +[0-9]+Mi *$' <<<"$top_pods" && break
  sleep 2
done
printf '%s\n' "$top_pods"
grep -Eq '^metrics-server-[a-z0-9-]+ +[0-9]+m +[0-9]+Mi *$' <<<"$top_pods" &&
  grep -Eq '^kube-dns-[a-z0-9-]+ +[0-9]+m +[0-9]+Mi *$' <<<"$top_pods" ||
  fail "kubectl top pods -n kube-system: expected the kube-dns and metrics-server pods with <n>m <n>Mi, got: $top_pods"
ok "kubectl top pods -n kube-system"
window=$(k get --raw "/apis/metrics.k8s.io/v1beta1/nodes/$NODE" 2>&1 | jq -r '.window' 2>/dev/null || true)
[[ "$window" =~ ^[0-9.]+s$ ]] || fail "NodeMetrics $NODE: window '$window'"
ok "NodeMetrics $NODE window $window"
