# shellcheck shell=bash
# In-place pod resize with the real kubectl: `kubectl patch pod --subresource resize`
# changes a running container's cpu in its cgroup without a restart, and the container
# status reports it; a resize beyond the node is PodResizePending (Infeasible).
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "resize: kubectl patch --subresource resize changes a running container's cpu in place"
k delete pod e2e-resize --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF_YAML'
apiVersion: v1
kind: Pod
metadata: {name: e2e-resize}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
EOF_YAML
) || fail "kubectl apply: $out"
k wait --for=condition=Ready pod/e2e-resize --timeout=60s >/dev/null || fail "e2e-resize not Ready in 60 s"
uid=$(k get pod e2e-resize -o 'jsonpath={.metadata.uid}')
cid=$(k get pod e2e-resize -o 'jsonpath={.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
quota_file=/sys/fs/cgroup/cpu/kubepods/burstable/pod$uid/$cid/cpu.cfs_quota_us
[ "$(cat "$quota_file" 2>&1)" = 20000 ] || fail "$quota_file holds '$(cat "$quota_file" 2>&1)' (expected 20000)"
out=$(k patch pod e2e-resize --subresource resize \
  -p '{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"300m"},"limits":{"cpu":"400m"}}}]}}' 2>&1) ||
  fail "kubectl patch --subresource resize: $out"
printf '%s\n' "$out"
got=""
for ((i = 0; i < 60; i++)); do
  got=$(k get pod e2e-resize -o 'jsonpath={.status.containerStatuses[0].resources.limits.cpu}/{.status.containerStatuses[0].restartCount}')
  [ "$got" = 400m/0 ] && [ "$(cat "$quota_file" 2>/dev/null)" = 40000 ] && break
  sleep 0.5
done
[ "$got" = 400m/0 ] || fail "status resources.limits.cpu/restartCount is '$got' (expected 400m/0)"
[ "$(cat "$quota_file" 2>&1)" = 40000 ] || fail "$quota_file holds '$(cat "$quota_file" 2>&1)' (expected 40000)"
ok "cpu limit 400m in the cgroup (cfs quota 40000) and in the status, no restart"

step "resize: a resize beyond the node is PodResizePending (Infeasible)"
k patch pod e2e-resize --subresource resize \
  -p '{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"64"},"limits":{"cpu":"64"}}}]}}' >/dev/null ||
  fail "kubectl patch --subresource resize (64 cpus)"
got=""
for ((i = 0; i < 60; i++)); do
  got=$(k get pod e2e-resize -o 'jsonpath={.status.conditions[?(@.type=="PodResizePending")].reason}')
  [ "$got" = Infeasible ] && break
  sleep 0.5
done
[ "$got" = Infeasible ] || fail "PodResizePending reason is '$got' (expected Infeasible)"
k get pod e2e-resize -o 'jsonpath={.status.conditions[?(@.type=="PodResizePending")].message}{"\n"}'
[ "$(cat "$quota_file" 2>&1)" = 40000 ] || fail "the pending resize changed the cgroup: $(cat "$quota_file" 2>&1)"
k delete pod e2e-resize --wait=true >/dev/null 2>&1 || fail "delete pod e2e-resize"
ok "Infeasible, the container left as it was"
