# shellcheck shell=bash
# `kubectl get cs`: the apiserver probes the scheduler's and the controller manager's
# /healthz (HTTPS on their default secure ports), and both answer in a working cluster.
# The answer carries upstream's deprecation warning. Sourced by e2e/single-node.sh.

step "kubectl get componentstatuses: the scheduler and the controller manager Healthy"
cs_out=$(k get cs 2>&1) || fail "kubectl get cs: $cs_out"
grep -q 'v1 ComponentStatus is deprecated in v1.19+' <<<"$cs_out" ||
  fail "no deprecation warning in: $cs_out"
grep -Eq '^NAME +STATUS +MESSAGE +ERROR' <<<"$cs_out" || fail "not upstream's columns: $cs_out"
for cs_name in controller-manager scheduler; do
  grep -Eq "^$cs_name +Healthy +ok" <<<"$cs_out" || fail "$cs_name is not Healthy: $cs_out"
done
ok "controller-manager and scheduler Healthy, with the deprecation warning"

step "the scheduler's and the controller manager's /metrics: delegated authentication and authorization"
cs_anon=$(curl -sk --max-time 5 https://127.0.0.1:10259/metrics) || fail "scheduler /metrics: no answer"
grep -q 'forbidden: User \\"system:anonymous\\" cannot get path \\"/metrics\\"' <<<"$cs_anon" ||
  fail "an anonymous /metrics was not refused as upstream: $cs_anon"
k create serviceaccount metrics-reader -n default >/dev/null || fail "create serviceaccount"
k create clusterrolebinding metrics-reader --clusterrole=system:monitoring \
  --serviceaccount=default:metrics-reader >/dev/null || fail "create clusterrolebinding"
cs_token=$(k create token metrics-reader -n default) || fail "create token: $cs_token"
for cs_port in 10259 10257; do
  cs_code=$(curl -sk --max-time 5 -o /tmp/fk-cs-metrics.$$ -w '%{http_code}' \
    -H "Authorization: Bearer $cs_token" "https://127.0.0.1:$cs_port/metrics") || cs_code=none
  [ "$cs_code" = 200 ] && grep -q '^# TYPE ' /tmp/fk-cs-metrics.$$ ||
    fail ":$cs_port/metrics with a system:monitoring token answered $cs_code: $(head -c 300 /tmp/fk-cs-metrics.$$)"
  # client-go's metrics of the component's own API requests (its watches, at least).
  grep -Eq '^rest_client_requests_total\{code="200",host="[^"]+",method="GET"\} [1-9]' /tmp/fk-cs-metrics.$$ ||
    fail ":$cs_port/metrics has no rest_client_requests_total for its GETs: $(grep -m3 rest_client /tmp/fk-cs-metrics.$$)"
  # Its clients are throttled (upstream's QPS and burst): every GET passed a bucket.
  grep -Eq '^rest_client_rate_limiter_duration_seconds_count\{host="[^"]+",verb="GET"\} [1-9]' /tmp/fk-cs-metrics.$$ ||
    fail ":$cs_port/metrics has no rest_client_rate_limiter_duration_seconds for its GETs: $(grep -m3 rate_limiter /tmp/fk-cs-metrics.$$)"
done
rm -f /tmp/fk-cs-metrics.$$
k delete clusterrolebinding metrics-reader >/dev/null || fail "delete clusterrolebinding"
k delete serviceaccount metrics-reader -n default >/dev/null || fail "delete serviceaccount"
ok "anonymous /metrics refused (403); a system:monitoring service account token reads both, with their rest_client_* metrics, throttled GETs included"
