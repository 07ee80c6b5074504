# shellcheck shell=bash
# kubectl debug: an ephemeral container added to the running nginx pod through
# pods/ephemeralcontainers, started by the kubelet in the nginx container's process
# namespace (--target), its status in ephemeralContainerStatuses and its log readable.
# The container runs `ps` and exits, so nothing keeps running (an ephemeral container
# cannot be removed; it stays in the pod's spec as upstream). Sourced by
# e2e/single-node.sh with the nginx pod Running; uses its step/ok/fail/k helpers.

step "kubectl debug nginx --target=nginx: an ephemeral container sees nginx's processes"
out=$(timeout 60 "$KUBECTL" debug nginx --image=busybox --target=nginx \
  --container=debugger -- ps 2>&1) || fail "kubectl debug: $out"
k get pod nginx -o 'jsonpath={.spec.ephemeralContainers[0].name}/{.spec.ephemeralContainers[0].targetContainerName}' |
  grep -qx 'debugger/nginx' || fail "the pod's spec has no ephemeral container debugger targeting nginx"
DBG_STATE=
for ((dbg_i = 0; dbg_i < 120; dbg_i++)); do # 60 s
  DBG_STATE=$(k get pod nginx -o \
    'jsonpath={.status.ephemeralContainerStatuses[?(@.name=="debugger")].state.terminated.reason}')
  [ -n "$DBG_STATE" ] && break
  sleep 0.5
done
[ "$DBG_STATE" = Completed ] ||
  fail "the ephemeral container did not complete: $(k get pod nginx -o jsonpath='{.status.ephemeralContainerStatuses}')"
out=$(k logs nginx -c debugger 2>&1) || fail "kubectl logs -c debugger: $out"
grep -q 'nginx: master process' <<<"$out" || fail "ps in the ephemeral container did not show nginx: $out"
k get pod nginx -o 'jsonpath={.status.phase}' | grep -qx Running || fail "nginx is no longer Running"
ok "debugger ran ps next to nginx's processes and completed; nginx still Running"
