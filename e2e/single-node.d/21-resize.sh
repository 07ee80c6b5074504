# shellcheck shell=bash
# In-place pod resize with the real kubectl: `kubectl patch pod --subresource resize`
# changes a running container's cpu in its cgroup without a restart, and the container
# status reports it; a resize beyond the node is PodResizePending (Infeasible).
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "node allocatable: kubepods held to the node's capacity, the QoS tiers weighted"
cg=/sys/fs/cgroup/cpu/kubepods
node_mem=$(k get node "$NODE" -o 'jsonpath={.status.capacity.memory}')
[ "$(cat $cg/cpu.shares)" = $(($(nproc) * 1024)) ] ||
  fail "kubepods cpu.shares is $(cat $cg/cpu.shares) (expected $(($(nproc) * 1024)): $(nproc) cpus)"
[ "$(cat /sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes)" = $((${node_mem%Ki} * 1024)) ] ||
  fail "kubepods memory limit is $(cat /sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes) (capacity $node_mem)"
[ "$(cat $cg/besteffort/cpu.shares)" = 2 ] || fail "besteffort cpu.shares is $(cat $cg/besteffort/cpu.shares) (expected 2)"
k get events --field-selector "involvedObject.name=$NODE,reason=NodeAllocatableEnforced" \
  -o 'jsonpath={.items[*].message}' | grep -q "Updated Node Allocatable limit across pods" ||
  fail "no NodeAllocatableEnforced event on node $NODE"
ok "kubepods cpu.shares $(cat $cg/cpu.shares), memory = capacity, besteffort 2, NodeAllocatableEnforced"

# The burstable tier's cpu.shares as the API says it should be: the CPU requests of the
# node's Burstable pods that have not finished, together (the e2e pods have no init
# containers asking for more than their containers).
burstable_shares_expected() {
  local total=0 v
  for v in $(k get pods -A --field-selector "spec.nodeName=$NODE,status.phase!=Succeeded,status.phase!=Failed" \
    -o 'jsonpath={range .items[?(@.status.qosClass=="Burstable")]}{range .spec.containers[*]}{.resources.requests.cpu}{" "}{end}{end}'); do
    case $v in
      *m) total=$((total + ${v%m})) ;;
      *) total=$((total + v * 1000)) ;;
    esac
  done
  local shares=$((total * 1024 / 1000))
  echo $((shares < 2 ? 2 : shares))
}
# Polled: a pod that just finished or went away leaves the tier when the kubelet's
# informer tells it, a moment after the API.
burstable_shares_match() {
  local i
  for ((i = 0; i < 20; i++)); do
    [ "$(cat $cg/burstable/cpu.shares)" = "$(burstable_shares_expected)" ] && return 0
    sleep 0.5
  done
  return 1
}

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
burstable_shares_match ||
  fail "burstable cpu.shares is $(cat $cg/burstable/cpu.shares) with e2e-resize running (expected $(burstable_shares_expected))"
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
ok "cpu limit 400m in the cgroup (cfs quota 40000) and in the status, no restart; the burstable tier counts the pod"

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
burstable_shares_match ||
  fail "burstable cpu.shares is $(cat $cg/burstable/cpu.shares) after e2e-resize went (expected $(burstable_shares_expected))"
ok "Infeasible, the container left as it was; the burstable tier no longer counts the pod once it is gone"
