# shellcheck shell=bash
# Persistent storage as on a bare-metal cluster: a `local` PersistentVolume on the node
# in a WaitForFirstConsumer StorageClass without a provisioner. The claim stays Pending
# until a pod uses it; then the scheduler picks the volume for the node, the binder
# controller binds the pair, the kubelet mounts the node's directory and the pod's file
# lands there. Deleting the claim releases the volume (Retain). Sourced by
# e2e/single-node.sh; uses its step/ok/fail/k helpers and NODE.

PV_DIR=/var/lib/ferrokube-e2e-local-pv

pv_cleanup() {
  k delete pod e2e-pv-writer --ignore-not-found --wait=true >/dev/null 2>&1 || true
  k delete pvc e2e-claim --ignore-not-found --wait=true >/dev/null 2>&1 || true
  k delete pv e2e-local-pv --ignore-not-found --wait=true >/dev/null 2>&1 || true
  k delete storageclass e2e-local --ignore-not-found >/dev/null 2>&1 || true
  rm -rf "$PV_DIR"
}

step "persistent volumes: a local PV, a WaitForFirstConsumer class, a claim"
pv_cleanup
mkdir -p "$PV_DIR"
out=$(k apply -f - 2>&1 <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: e2e-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: e2e-local-pv}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: e2e-local
  local: {path: $PV_DIR}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: e2e-claim}
spec:
  storageClassName: e2e-local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 500Mi}}
EOF
) || fail "kubectl apply: $out"
printf '%s\n' "$out"
phase=""
for ((i = 0; i < 60; i++)); do
  phase=$(k get pv e2e-local-pv -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Available ] && break
  sleep 0.5
done
[ "$phase" = Available ] || fail "PV e2e-local-pv is '$phase' (expected Available)"
events=""
for ((i = 0; i < 60; i++)); do
  events=$(k get events --field-selector involvedObject.name=e2e-claim \
    -o 'jsonpath={range .items[*]}{.reason}{"\n"}{end}' 2>/dev/null || true)
  grep -q WaitForFirstConsumer <<<"$events" && break
  sleep 0.5
done
grep -q WaitForFirstConsumer <<<"$events" ||
  fail "no WaitForFirstConsumer event on the claim (events: $events)"
claim=$(k get pvc e2e-claim -o 'jsonpath={.status.phase}') || fail "get pvc"
[ "$claim" = Pending ] || fail "claim e2e-claim is '$claim' before any pod uses it (expected Pending)"
ok "volume Available, claim Pending: waiting for its first consumer"

step "persistent volumes: a pod using the claim writes to the node's directory"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: e2e-pv-writer}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: e2e-claim}}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo persisted > /data/hello && exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
EOF
) || fail "kubectl apply: $out"
# It keeps running: the kubelet measures a volume only while a running pod has it
# (a finished pod's volumes are torn down, as upstream's).
phase=""
for ((i = 0; i < 180; i++)); do
  phase=$(k get pod e2e-pv-writer -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] && [ -f "$PV_DIR/hello" ] && break
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
  sleep 0.5
done
if [ "$phase" != Running ]; then
  k describe pod e2e-pv-writer 2>&1 | tail -n 25 || true
  k describe pvc e2e-claim 2>&1 | tail -n 15 || true
  fail "pod e2e-pv-writer is '$phase' (expected Running)"
fi
bound=$(k get pvc e2e-claim -o 'jsonpath={.status.phase}/{.spec.volumeName}') || fail "get pvc"
[ "$bound" = Bound/e2e-local-pv ] || fail "claim e2e-claim is '$bound' (expected Bound/e2e-local-pv)"
pv=$(k get pv e2e-local-pv -o 'jsonpath={.status.phase}/{.spec.claimRef.name}') || fail "get pv"
[ "$pv" = Bound/e2e-claim ] || fail "PV e2e-local-pv is '$pv' (expected Bound/e2e-claim)"
[ "$(cat "$PV_DIR/hello" 2>/dev/null)" = persisted ] ||
  fail "$PV_DIR/hello on the node holds '$(cat "$PV_DIR/hello" 2>&1)' (expected 'persisted')"
k get pvc e2e-claim
# The kubelet measures the local volume (upstream's local plugin does; hostPath does not)
# while the pod has it: the filesystem its directory is on.
pv_metrics=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics") || fail "kubelet metrics: $pv_metrics"
pv_series='{namespace="default",persistentvolumeclaim="e2e-claim"}'
pv_capacity=$(awk -v s="kubelet_volume_stats_capacity_bytes$pv_series" '$1 == s { print $2 }' <<<"$pv_metrics")
pv_fs=$(df -B1 --output=size "$PV_DIR" | tail -1 | tr -d ' ')
[ -n "$pv_capacity" ] && [ "$(printf '%.0f' "$pv_capacity")" = "$pv_fs" ] ||
  fail "kubelet_volume_stats_capacity_bytes$pv_series is '$pv_capacity' (the filesystem of $PV_DIR has $pv_fs bytes): $(grep -m3 kubelet_volume_stats <<<"$pv_metrics")"
grep -q "^kubelet_volume_stats_inodes_used$pv_series [0-9]" <<<"$pv_metrics" ||
  fail "no kubelet_volume_stats_inodes_used$pv_series"
ok "claim Bound to the local volume; the file is on the node; the kubelet reports the volume's capacity ($pv_capacity bytes) and inodes"

step "persistent volumes: the claim deleted, the volume is Released and kept (Retain)"
k delete pod e2e-pv-writer --grace-period=1 --wait=true >/dev/null 2>&1 || fail "delete pod"
k delete pvc e2e-claim --wait=true >/dev/null 2>&1 || fail "delete pvc"
phase=""
for ((i = 0; i < 60; i++)); do
  phase=$(k get pv e2e-local-pv -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Released ] && break
  sleep 0.5
done
[ "$phase" = Released ] || fail "PV e2e-local-pv is '$phase' after its claim went (expected Released)"
[ -f "$PV_DIR/hello" ] || fail "the Retain volume's data is gone"
pv_cleanup
ok "Released with its data; cleaned up"
