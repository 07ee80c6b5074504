# shellcheck shell=bash
# HorizontalPodAutoscaler: `kubectl autoscale` of a one-replica Deployment with --min=2
# brings it to 2 replicas (upstream enforces the bounds before it reads any metric), and
# with no metrics API in this cluster `kubectl get hpa` shows the CPU target as unknown
# and the autoscaler reports why. Sourced by e2e/single-node.sh; uses its step/ok/fail/k
# helpers.

step "kubectl autoscale: a Deployment below --min is scaled up; no metrics API: target <unknown>"
k delete hpa e2e-hpa --ignore-not-found >/dev/null 2>&1 || true
k delete deployment e2e-hpa --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k create deployment e2e-hpa --image=busybox -- sleep 3600 2>&1) ||
  fail "kubectl create deployment: $out"
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
reason=""
for ((i = 0; i < 60; i++)); do
  reason=$(k get hpa e2e-hpa -o 'jsonpath={.status.conditions[?(@.type=="ScalingActive")].reason}' 2>/dev/null || true)
  [ -n "$reason" ] && break
  sleep 0.5
done
[ "$reason" = FailedGetResourceMetric ] ||
  fail "ScalingActive reason '$reason' (expected FailedGetResourceMetric: there is no metrics API)"
table=$(k get hpa e2e-hpa 2>&1) || fail "kubectl get hpa: $table"
printf '%s\n' "$table"
grep -Eq '^e2e-hpa +Deployment/e2e-hpa +cpu: <unknown>/50% +2 +3 +[12] ' <<<"$table" ||
  fail "kubectl get hpa: expected REFERENCE Deployment/e2e-hpa, TARGETS cpu: <unknown>/50%, MINPODS 2, MAXPODS 3, REPLICAS 1 or 2"
ok "ScalingActive False ($reason); kubectl get hpa shows the unknown target"
k delete hpa e2e-hpa --wait=true >/dev/null 2>&1 || fail "delete hpa"
k delete deployment e2e-hpa --wait=true >/dev/null 2>&1 || fail "delete deployment"
ok "deleted"
