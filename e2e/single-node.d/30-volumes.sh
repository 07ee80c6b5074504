# shellcheck shell=bash
# Pod volumes: configMap, secret and emptyDir (shared with an init container, and a
# subdirectory of it mounted through a subPathExpr naming the pod) show their data inside
# a container (read back through its termination message), and an update of
# the ConfigMap reaches the mounted file of a running pod (a readiness probe waiting for the
# new value turns Ready). Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

VOL_PODS=(vol-check vol-watch)

step "volumes: a ConfigMap, a Secret and pods mounting them"
k delete pod "${VOL_PODS[@]}" --ignore-not-found --wait=true >/dev/null 2>&1 || true
k delete configmap vol-cfg --ignore-not-found >/dev/null 2>&1 || true
k delete secret vol-sec --ignore-not-found >/dev/null 2>&1 || true
out=$(k create configmap vol-cfg --from-literal=greeting=hello 2>&1) || fail "create configmap: $out"
out=$(k create secret generic vol-sec --from-literal=password=s3cret 2>&1) || fail "create secret: $out"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: vol-check}
  spec:
    restartPolicy: Never
    terminationGracePeriodSeconds: 2
    volumes:
    - {name: cfg, configMap: {name: vol-cfg}}
    - {name: sec, secret: {secretName: vol-sec}}
    - {name: shared, emptyDir: {}}
    initContainers:
    - name: init
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "echo -n from-init > /shared/x && mkdir -p /shared/vol-check && echo -n from-expr > /shared/vol-check/y"]
      volumeMounts: [{name: shared, mountPath: /shared}]
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sh, -c, 'printf "%s|%s|%s|%s" "$(cat /etc/cfg/greeting)" "$(cat /etc/sec/password)" "$(cat /shared/x)" "$(cat /sub/y)" > /dev/termination-log']
      env:
      - name: POD_NAME
        valueFrom: {fieldRef: {fieldPath: metadata.name}}
      volumeMounts:
      - {name: cfg, mountPath: /etc/cfg}
      - {name: sec, mountPath: /etc/sec}
      - {name: shared, mountPath: /shared}
      - {name: shared, mountPath: /sub, subPathExpr: "$(POD_NAME)"}
- apiVersion: v1
  kind: Pod
  metadata: {name: vol-watch}
  spec:
    terminationGracePeriodSeconds: 2
    volumes:
    - {name: cfg, configMap: {name: vol-cfg}}
    containers:
    - name: c
      image: busybox
      imagePullPolicy: IfNotPresent
      command: [sleep, "3600"]
      readinessProbe:
        exec: {command: [grep, -q, updated, /etc/cfg/greeting]}
        periodSeconds: 1
      volumeMounts: [{name: cfg, mountPath: /etc/cfg}]
EOF
) || fail "kubectl apply: $out"
printf '%s\n' "$out"
ok "created"

step "volumes: configMap, secret, emptyDir and subPathExpr data inside the container"
phase=""
for ((i = 0; i < 120; i++)); do
  phase=$(k get pod vol-check -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
  sleep 0.5
done
msg=$(k get pod vol-check -o 'jsonpath={.status.containerStatuses[0].state.terminated.message}' 2>/dev/null || true)
if [ "$phase" != Succeeded ] || [ "$msg" != "hello|s3cret|from-init|from-expr" ]; then
  k describe pod vol-check 2>&1 | tail -n 30 || true
  fail "vol-check phase '$phase', message '$msg' (expected Succeeded, 'hello|s3cret|from-init|from-expr')"
fi
ok "the container read '$msg'"

step "volumes: a ConfigMap update reaches a running pod's file"
running=""
for ((i = 0; i < 120; i++)); do
  running=$(k get pod vol-watch -o 'jsonpath={.status.containerStatuses[0].state.running.startedAt}' 2>/dev/null || true)
  [ -n "$running" ] && break
  sleep 0.5
done
[ -n "$running" ] || fail "vol-watch is not running after 60 s"
ready=$(k get pod vol-watch -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')
[ "$ready" = False ] || fail "vol-watch is Ready ('$ready') before the update"
out=$(k patch configmap vol-cfg --type merge -p '{"data":{"greeting":"updated"}}' 2>&1) || fail "patch: $out"
for ((i = 0; i < 180; i++)); do
  ready=$(k get pod vol-watch -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
  [ "$ready" = True ] && break
  sleep 0.5
done
[ "$ready" = True ] || fail "the update did not reach /etc/cfg/greeting within 90 s"
ok "the mounted file changed (Ready after $((i / 2)) s)"

step "volumes: delete the pods, the ConfigMap and the Secret"
k delete pod "${VOL_PODS[@]}" --wait=false >/dev/null 2>&1 || fail "kubectl delete pods failed"
k delete configmap vol-cfg >/dev/null 2>&1 || fail "kubectl delete configmap failed"
k delete secret vol-sec >/dev/null 2>&1 || fail "kubectl delete secret failed"
for ((i = 0; i < 120; i++)); do
  left=$(k get pods -o name 2>/dev/null | grep -c '^pod/vol-' || true)
  [ "$left" = 0 ] && break
  sleep 0.5
done
[ "$left" = 0 ] || fail "$left volume pods still exist 60 s after the delete"
ok "gone"
