# shellcheck shell=bash
# Node access through the apiserver and the kubelet's HTTPS API (:10250): kubectl logs
# (plain, -f, --previous, --tail, --timestamps, in CrashLoopBackOff), exec (WebSocket v5, SPDY fallback, stdin
# with its end, exit codes) and port-forward (WebSocket-tunnelled SPDY and plain SPDY),
# with kubectl 1.32 and 1.33 where installed (/usr/bin/kubectl may dispatch to a version
# matching the server's, so the versioned binaries are named). Sourced by
# e2e/single-node.sh with the nginx pod Running; uses its step/ok/fail/k helpers and KUBECTL.

NA_KUBECTLS=()
for NA_BIN in /usr/lib/google-cloud-sdk/bin/kubectl.1.32 /usr/lib/google-cloud-sdk/bin/kubectl.1.33; do
  [ -x "$NA_BIN" ] && NA_KUBECTLS+=("$NA_BIN")
done
[ ${#NA_KUBECTLS[@]} -gt 0 ] || NA_KUBECTLS=("$KUBECTL")

na_version() { "$1" version --client 2>/dev/null | sed -n 's/^Client Version: \(v[0-9]*\.[0-9]*\).*/\1/p'; }
# kubectl with a bound on the whole command (no --request-timeout: it would cut streams).
na_k() { local bin=$1; shift; timeout 40 "$bin" "$@"; }
# 8080 as in the docs when it is free, else a free port the kernel picks.
na_free_port() {
  local listeners
  listeners=$(ss -Hltn 'sport = :8080' 2>/dev/null || true)
  if [ -z "$listeners" ]; then
    echo 8080
  else
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  fi
}

# na_port_forward KUBECTL LABEL [ENV=VALUE...]: port-forward pod/nginx, two requests through it.
na_port_forward() {
  local kc=$1 label=$2 port log pid body n i
  shift 2
  port=$(na_free_port)
  log=$(mktemp)
  env "$@" timeout 60 "$kc" port-forward pod/nginx "$port:80" >"$log" 2>&1 &
  pid=$!
  for ((i = 0; i < 80; i++)); do
    grep -q "Forwarding from 127.0.0.1:$port -> 80" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if ! grep -q "Forwarding from 127.0.0.1:$port -> 80" "$log"; then
    kill "$pid" 2>/dev/null || true
    fail "$label: port-forward did not start: $(cat "$log")"
  fi
  for n in 1 2; do
    body=$(curl -s --max-time 5 "http://127.0.0.1:$port/" || true)
    if ! grep -q "Welcome to nginx!" <<<"$body"; then
      kill "$pid" 2>/dev/null || true
      fail "$label: request $n through 127.0.0.1:$port answered: ${body:-nothing}; port-forward said: $(cat "$log")"
    fi
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
  ok "$label: two requests through 127.0.0.1:$port reached nginx"
}

step "kubectl logs nginx: the access-log line of the earlier curl"
out=$(k logs nginx 2>&1) || fail "kubectl logs: $out"
printf '%s\n' "$out" | tail -n 3
grep -qF '"GET / HTTP/1.1" 200' <<<"$out" || fail "no access-log line for GET / in: $out"
ok "logs come from the kubelet"

step "kubectl logs error statuses"
out=$(k logs nginx --previous 2>&1) && fail "logs --previous of a container that never restarted succeeded: $out"
[ "$out" = 'Error from server (BadRequest): previous terminated container "nginx" in pod "nginx" not found' ] ||
  fail "unexpected logs --previous error: $out"
out=$(k logs no-such-pod 2>&1) && fail "logs of a missing pod succeeded: $out"
grep -qF 'pods "no-such-pod" not found' <<<"$out" || fail "unexpected error for a missing pod: $out"
out=$(k exec nginx -c nope -- true 2>&1) && fail "exec into a missing container succeeded: $out"
[ "$out" = 'Error from server (BadRequest): container nope is not valid for pod nginx' ] ||
  fail "unexpected exec error for a missing container: $out"
ok "BadRequest / NotFound as upstream words them"

for kc in "${NA_KUBECTLS[@]}"; do
  v=$(na_version "$kc")
  step "kubectl $v exec nginx -- cat /etc/hostname (WebSocket v5)"
  out=$(na_k "$kc" exec nginx -- cat /etc/hostname 2>&1) || fail "exec: $out"
  [ "$out" = nginx ] || fail "expected 'nginx', got: $out"
  ok "hostname nginx"

  step "kubectl $v exec: stdout, stderr and the exit code apart"
  err=$(mktemp)
  rc=0
  out=$(na_k "$kc" exec nginx -- sh -c 'echo to-stdout; echo to-stderr >&2; exit 7' 2>"$err") || rc=$?
  errout=$(cat "$err")
  rm -f "$err"
  [ "$out" = to-stdout ] || fail "stdout: expected 'to-stdout', got: $out"
  [ "$errout" = $'to-stderr\ncommand terminated with exit code 7' ] || fail "stderr: $errout"
  [ $rc -eq 7 ] || fail "kubectl exited $rc, expected 7"
  ok "stdout, stderr, exit code 7"

  step "kubectl $v exec -i: stdin reaches the command and its end is seen"
  out=$(printf 'one\ntwo\n' | na_k "$kc" exec -i nginx -- sh -c 'cat; echo eof' 2>&1) || fail "exec -i: $out"
  [ "$out" = $'one\ntwo\neof' ] || fail "expected one/two/eof, got: $out"
  ok "stdin copied and closed"

  step "kubectl $v exec over SPDY (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false)"
  out=$(KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false na_k "$kc" exec nginx -- cat /etc/hostname 2>&1) ||
    fail "exec over SPDY: $out"
  [ "$out" = nginx ] || fail "expected 'nginx', got: $out"
  ok "hostname nginx over SPDY"

  step "kubectl $v port-forward pod/nginx (WebSocket-tunnelled SPDY) + curl"
  na_port_forward "$kc" "kubectl $v port-forward"

  step "kubectl $v port-forward over SPDY (KUBECTL_PORT_FORWARD_WEBSOCKETS=false) + curl"
  na_port_forward "$kc" "kubectl $v port-forward (SPDY)" KUBECTL_PORT_FORWARD_WEBSOCKETS=false
done

step "a crash-looping busybox pod for logs -f and --previous"
k delete pod node-access --ignore-not-found --wait=true >/dev/null 2>&1 || true
# stdout and stderr reach the log file through separate pipes, so only the order within
# each stream is fixed; hello-stderr is checked for presence.
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: node-access
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ticker
    image: busybox
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo hello-stdout; echo hello-stderr >&2; i=0; while [ $i -lt 5 ]; do i=$((i+1)); sleep 1; echo tick-$i; done; exit 3"]
EOF
) || fail "creating pod node-access: $out"
phase=""
for ((i = 0; i < 120; i++)); do
  phase=$(k get pod node-access -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] && break
  sleep 0.5
done
[ "$phase" = Running ] || fail "pod node-access is '${phase:-none}', not Running"
ok "node-access Running"

NA_STDOUT=$'hello-stdout\ntick-1\ntick-2\ntick-3\ntick-4\ntick-5'

step "kubectl logs -f node-access: lines arrive as written, the stream ends with the container"
stamped=$(timeout 40 "$KUBECTL" logs -f node-access 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done) ||
  fail "logs -f did not end within 40 s: $stamped"
lines=$(cut -d' ' -f2- <<<"$stamped")
printf '%s\n' "$stamped"
[ "$(grep -v '^hello-stderr$' <<<"$lines")" = "$NA_STDOUT" ] || fail "stdout lines differ: $lines"
[ "$(grep -c '^hello-stderr$' <<<"$lines")" = 1 ] || fail "hello-stderr missing: $lines"
first=$(head -n 1 <<<"$stamped" | cut -d' ' -f1)
last=$(tail -n 1 <<<"$stamped" | cut -d' ' -f1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b - a >= 1.5) }' ||
  fail "all lines arrived at once (first $first, last $last): the log was buffered, not streamed"
ok "streamed over $(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.1f", b - a }') s and ended"

step "kubectl logs --previous node-access after a restart"
restarts=0
for ((i = 0; i < 120; i++)); do
  restarts=$(k get pod node-access -o 'jsonpath={.status.containerStatuses[0].restartCount}' 2>/dev/null || true)
  [ "${restarts:-0}" -ge 1 ] && break
  sleep 0.5
done
[ "${restarts:-0}" -ge 1 ] || fail "node-access did not restart within 60 s"
out=$(k logs --previous node-access 2>&1) || fail "logs --previous: $out"
[ "$(grep -v '^hello-stderr$' <<<"$out")" = "$NA_STDOUT" ] || fail "previous instance's stdout differs: $out"
[ "$(grep -c '^hello-stderr$' <<<"$out")" = 1 ] || fail "hello-stderr missing: $out"
out=$(k logs --previous --tail=1 node-access 2>&1) || fail "logs --previous --tail=1: $out"
[ "$out" = tick-5 ] || fail "expected tick-5, got: $out"
out=$(k logs --previous --tail=1 --timestamps node-access 2>&1) || fail "logs --timestamps: $out"
[[ $out =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z\ tick-5$ ]] ||
  fail "expected an RFC 3339 timestamp before tick-5, got: $out"
ok "previous instance's log, --tail and --timestamps"

step "kubectl logs and logs --previous of node-access in CrashLoopBackOff"
# While the next run waits out its back-off, both read the run that just failed (upstream's
# validateContainerLogStatus), not an older one the kubelet may already have removed.
reason=""
for ((i = 0; i < 120; i++)); do
  reason=$(k get pod node-access -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null || true)
  [ "$reason" = CrashLoopBackOff ] && break
  sleep 0.5
done
[ "$reason" = CrashLoopBackOff ] || fail "node-access not in CrashLoopBackOff within 60 s (waiting: '$reason')"
for flag in "" --previous; do
  # shellcheck disable=SC2086 # an empty $flag is no argument
  out=$(k logs $flag --tail=1 node-access 2>&1) || fail "logs $flag in CrashLoopBackOff: $out"
  [ "$out" = tick-5 ] || fail "logs $flag in CrashLoopBackOff: expected tick-5, got: $out"
done
ok "both read the failed run"

step "kubectl delete pod node-access"
k delete pod node-access --wait=false >/dev/null 2>&1 || fail "deleting node-access"
gone=0
for ((i = 0; i < 120; i++)); do
  if ! out=$(k get pod node-access -o name 2>&1); then
    grep -q NotFound <<<"$out" && { gone=1; break; }
  fi
  sleep 0.5
done
[ $gone -eq 1 ] || fail "pod node-access still exists 60 s after the delete"
ok "node-access gone"
