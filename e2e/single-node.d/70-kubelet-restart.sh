# shellcheck shell=bash
# Restart safety: kill -9 of the kubelet, then hack/up.sh (which restarts a component that
# died) -> the nginx pod's container is adopted, not restarted: same containerID, same
# restartCount, still Running and serving. Sourced by e2e/single-node.sh with the nginx
# pod Running; uses its step/ok/fail/k helpers, NODE, ip and the script's arguments.

step "kill -9 the kubelet and restart it: nginx's container is adopted, not restarted"
kr_status() {
  k get pod nginx -o 'jsonpath={.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}'
}
kr_before=$(kr_status) || fail "kubectl get pod nginx: $kr_before"
read -r kr_phase kr_cid kr_restarts <<<"$kr_before"
[ "$kr_phase" = Running ] && [ -n "$kr_cid" ] || fail "nginx is not Running with a container: '$kr_before'"
kr_pid=$(cat "$(fk::pidfile kubelet)") || fail "no kubelet PID file"
kill -9 "$kr_pid" || fail "kill -9 $kr_pid (the kubelet)"
for ((i = 0; i < 50; i++)); do
  kill -0 "$kr_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$kr_pid" 2>/dev/null && fail "the kubelet ($kr_pid) survived kill -9 for 5 s"
ok "kubelet $kr_pid killed"

out=$(bash "$REPO/hack/up.sh" "$@" 2>&1) || { printf '%s\n' "$out" | tail -n 20; fail "hack/up.sh after the kill exited non-zero"; }
kr_newpid=$(cat "$(fk::pidfile kubelet)")
[ "$kr_newpid" != "$kr_pid" ] && kill -0 "$kr_newpid" 2>/dev/null \
  || fail "hack/up.sh did not start a new kubelet (PID file: $kr_newpid)"
ok "hack/up.sh started a new kubelet ($kr_newpid)"

# The new kubelet relists the runtime and syncs the pod; watch it for a while: the
# container must stay the same one throughout, and the pod must stay Running.
kr_seen=0
for ((i = 0; i < 30; i++)); do
  kr_now=$(kr_status 2>/dev/null) || { sleep 0.5; continue; }
  [ "$kr_now" = "$kr_before" ] || fail "after the restart nginx is '$kr_now', was '$kr_before'"
  kr_seen=$((kr_seen + 1))
  sleep 0.5
done
[ $kr_seen -ge 10 ] || fail "could read the pod's status only $kr_seen times in 15 s"
grep -q "Welcome to nginx" <<<"$(curl -s --max-time 2 "http://$ip/" || true)" \
  || fail "http://$ip/ stopped answering after the kubelet restart"
ok "same container $kr_cid, restartCount $kr_restarts, still serving"
