# shellcheck shell=bash
# Container lifecycle on the node: a failing liveness probe restarts the container
# (restartCount rises, lastState terminated), a readiness probe drives Ready both ways, a
# crashing container reaches CrashLoopBackOff, a postStart hook's effect is seen by the
# container (through its termination message), activeDeadlineSeconds fails the pod, a
# deleted pod held by a finalizer shows its terminal phase and goes once released.
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers. No exec needed.

LC_PODS=(lc-liveness lc-ready lc-crash lc-hook lc-deadline)

# lc_wait POD JSONPATH WANT SECONDS: until the pod's field equals WANT (bounded).
lc_wait() {
  local pod=$1 path=$2 want=$3 secs=$4 got="" i
  for ((i = 0; i < secs * 2; i++)); do
    got=$(k get pod "$pod" -o "jsonpath=$path" 2>/dev/null || true)
    [ "$got" = "$want" ] && return 0
    sleep 0.5
  done
  k get pod "$pod" -o wide >&2 || true
  k get pod "$pod" -o 'jsonpath={.status}' >&2 || true
  echo >&2
  fail "$pod: $path is '${got}', expected '$want' within ${secs}s"
}

step "lifecycle: create pods with probes, hooks, a crash loop and a deadline"
k delete pod "${LC_PODS[@]}" --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: lc-liveness}
  spec:
    terminationGracePeriodSeconds: 2
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sleep, "3600"]
      livenessProbe:
        exec: {command: ["false"]}
        periodSeconds: 1
        failureThreshold: 1
- apiVersion: v1
  kind: Pod
  metadata: {name: lc-ready}
  spec:
    terminationGracePeriodSeconds: 2
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "touch /tmp/ready; sleep 8; rm /tmp/ready; sleep 3600"]
      readinessProbe:
        exec: {command: [cat, /tmp/ready]}
        periodSeconds: 1
- apiVersion: v1
  kind: Pod
  metadata: {name: lc-crash}
  spec:
    terminationGracePeriodSeconds: 2
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "exit 1"]
- apiVersion: v1
  kind: Pod
  metadata: {name: lc-hook}
  spec:
    restartPolicy: Never
    terminationGracePeriodSeconds: 2
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "for i in 1 2 3 4 5 6 7 8 9 10; do [ -f /tmp/hook ] && break; sleep 0.5; done; cat /tmp/hook > /dev/termination-log"]
      lifecycle:
        postStart:
          exec: {command: [sh, -c, "echo -n hooked > /tmp/hook"]}
- apiVersion: v1
  kind: Pod
  metadata: {name: lc-deadline}
  spec:
    activeDeadlineSeconds: 5
    terminationGracePeriodSeconds: 2
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sleep, "3600"]
EOF
) || fail "kubectl apply: $out"
printf '%s\n' "$out"
ok "pods created"

step "lifecycle: a failing liveness probe raises restartCount"
for ((i = 0; i < 120; i++)); do
  rc=$(k get pod lc-liveness -o 'jsonpath={.status.containerStatuses[0].restartCount}' 2>/dev/null || true)
  [ "${rc:-0}" -ge 1 ] && break
  sleep 0.5
done
[ "${rc:-0}" -ge 1 ] || fail "lc-liveness restartCount is '${rc}' after 60 s"
code=$(k get pod lc-liveness -o 'jsonpath={.status.containerStatuses[0].lastState.terminated.exitCode}')
[ "$code" = 137 ] || [ "$code" = 143 ] || fail "lastState.terminated.exitCode is '$code', expected 137 or 143"
ok "restartCount $rc, last instance killed with exit code $code"

step "lifecycle: a readiness probe makes the pod Ready, then not Ready"
lc_wait lc-ready '{.status.conditions[?(@.type=="Ready")].status}' True 60
lc_wait lc-ready '{.status.containerStatuses[0].ready}' true 5
lc_wait lc-ready '{.status.conditions[?(@.type=="Ready")].status}' False 30
lc_wait lc-ready '{.status.containerStatuses[0].restartCount}' 0 1
ok "Ready True, then False once /tmp/ready is gone (no restart)"

step "lifecycle: a crashing container reaches CrashLoopBackOff"
lc_wait lc-crash '{.status.containerStatuses[0].state.waiting.reason}' CrashLoopBackOff 60
# kubectl's STATUS column too (the state alternates with each restart: look a few times).
for ((i = 0; i < 60; i++)); do
  out=$(k get pod lc-crash 2>&1 || true)
  grep -q CrashLoopBackOff <<<"$out" && break
  sleep 0.5
done
printf '%s\n' "$out"
grep -q CrashLoopBackOff <<<"$out" || fail "kubectl get pod never showed CrashLoopBackOff in 30 s"
ok "CrashLoopBackOff"

step "lifecycle: the postStart hook ran before the container read its file"
lc_wait lc-hook '{.status.phase}' Succeeded 60
msg=$(k get pod lc-hook -o 'jsonpath={.status.containerStatuses[0].state.terminated.message}')
[ "$msg" = hooked ] || fail "termination message is '$msg', expected 'hooked'"
ok "termination message '$msg' written by the postStart hook"

step "lifecycle: activeDeadlineSeconds fails the pod"
lc_wait lc-deadline '{.status.phase}' Failed 60
reason=$(k get pod lc-deadline -o 'jsonpath={.status.reason}')
[ "$reason" = DeadlineExceeded ] || fail "reason is '$reason', expected DeadlineExceeded"
ok "Failed with DeadlineExceeded"

step "lifecycle: delete the pods"
k delete pod "${LC_PODS[@]}" --wait=false >/dev/null 2>&1 || fail "kubectl delete failed"
for ((i = 0; i < 120; i++)); do
  left=$(k get pods -o name 2>/dev/null | grep -c '^pod/lc-' || true)
  [ "$left" = 0 ] && break
  sleep 0.5
done
[ "$left" = 0 ] || fail "$left lifecycle pods still exist 60 s after the delete"
ok "gone"

step "lifecycle: a deleted pod held by a finalizer ends Failed, and goes once released"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: lc-held
  finalizers: ["example.com/hold"]
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: busybox
    command: ["sleep", "3600"]
EOF
) || fail "kubectl apply of pod lc-held: $out"
lc_wait lc-held '{.status.phase}' Running 60
k delete pod lc-held --wait=false >/dev/null 2>&1 || fail "kubectl delete pod lc-held failed"
# The kubelet stops it and writes its terminal phase before its last delete.
lc_wait lc-held '{.status.phase}' Failed 60
out=$(k patch pod lc-held --type=merge -p '{"metadata":{"finalizers":null}}' 2>&1) ||
  fail "removing the finalizer of lc-held: $out"
gone=""
for ((i = 0; i < 60; i++)); do
  k get pod lc-held >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.5
done
[ -n "$gone" ] || fail "pod lc-held still exists 30 s after its finalizer was removed"
ok "held pod Failed after its delete, gone once its finalizer was removed"
