# shellcheck shell=bash
# HorizontalPodAutoscaler: `kubectl autoscale` of a one-replica Deployment (cpu request
# 100m) with --min=2 brings it to 2 replicas (upstream enforces the bounds before it reads
# any metric); then, from the metrics-server addon's PodMetrics, the autoscaler finds a
# valid cpu metric and `kubectl get hpa` shows a real utilization (idle pods: a few %).
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "kubectl autoscale: a Deployment below --min is scaled up; cpu utilization from metrics-server"
k delete hpa e2e-hpa --ignore-not-found >/dev/null 2>&1 || true
k delete deployment e2e-hpa --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k create deployment e2e-hpa --image=busybox -- sleep 3600 2>&1) ||
  fail "kubectl create deployment: $out"
out=$(k set resources deployment e2e-hpa --requests=cpu=100m 2>&1) ||
  fail "kubectl set resources: $out"
out=$(k autoscale deployment e2e-hpa --min=2 --max=3 --cpu-percent=50 2>&1) ||
  fail "kubectl autoscale: $out"
grep -q 'autoscaled' <<<"$out" || fail "kubectl autoscale said: $out"
replicas=""
for ((i = 0; i < 90; i++)); do
  replicas=$(k get deployment e2e-hpa -o 'jsonpath={.spec.replicas}' 2>/dev/null || true)
  [ "$replicas" = 2 ] && break
  sleep 0.5
done
if [ "$replicas" != 2 ]; then
  k describe hpa e2e-hpa 2>&1 | tail -n 30 || true
  fail "deployment e2e-hpa has spec.replicas '$replicas' (expected 2, the autoscaler's minimum)"
fi
ok "spec.replicas raised to 2"
# New pods have metrics after one or two resolutions (15 s each) and the autoscaler
# syncs every 15 s: at most 90 s.
reason=""
table=""
deadline=$((SECONDS + 90))
while [ $SECONDS -lt $deadline ]; do
  reason=$(k get hpa e2e-hpa -o 'jsonpath={.status.conditions[?(@.type=="ScalingActive")].reason}' 2>/dev/null || true)
  table=$(k get hpa e2e-hpa --no-headers 2>&1 || true)
  [ "$reason" = ValidMetricFound ] &&
    grep -Eq '^e2e-hpa +Deployment/e2e-hpa +cpu: [0-9]+%/50% +2 +3 +2 ' <<<"$table" && break
  sleep 2
done
printf '%s\n' "$table"
if [ "$reason" != ValidMetricFound ]; then
  k describe hpa e2e-hpa 2>&1 | tail -n 20 || true
  fail "ScalingActive reason '$reason' (expected ValidMetricFound from the metrics-server's PodMetrics)"
fi
grep -Eq '^e2e-hpa +Deployment/e2e-hpa +cpu: [0-9]+%/50% +2 +3 +2 ' <<<"$table" ||
  fail "kubectl get hpa: expected REFERENCE Deployment/e2e-hpa, TARGETS cpu: <n>%/50%, MINPODS 2, MAXPODS 3, REPLICAS 2"
ok "ScalingActive True ($reason); kubectl get hpa shows the measured cpu utilization"
k delete hpa e2e-hpa --wait=true >/dev/null 2>&1 || fail "delete hpa"
k delete deployment e2e-hpa --wait=true >/dev/null 2>&1 || fail "delete deployment"
ok "deleted"
