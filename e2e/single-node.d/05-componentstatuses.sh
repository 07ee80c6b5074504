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
