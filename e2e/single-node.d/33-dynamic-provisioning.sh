# shellcheck shell=bash
# Dynamic provisioning as a user of hack/up.sh's cluster meets it: a claim that names no
# class gets the default StorageClass `standard` (DefaultStorageClass admission), the
# controller manager's hostPath provisioner (--enable-hostpath-provisioner) makes a
# volume bound to it, a pod writes to it, and deleting the claim deletes the volume and
# its directory (the class's Delete policy). Sourced by e2e/single-node.sh; uses its
# step/ok/fail/k helpers.

dyn_cleanup() {
  k delete pod e2e-dyn-writer --ignore-not-found --wait=true >/dev/null 2>&1 || true
  k delete pvc e2e-dyn-claim --ignore-not-found --wait=true >/dev/null 2>&1 || true
}

step "dynamic provisioning: the default StorageClass"
out=$(k get storageclass standard 2>&1) || fail "kubectl get storageclass standard: $out"
printf '%s\n' "$out"
grep -qE '^standard \(default\) +kubernetes.io/host-path +Delete +Immediate' <<<"$out" ||
  fail "storageclass standard is not the default hostPath class"
ok "standard (default), provisioner kubernetes.io/host-path"

step "dynamic provisioning: a claim without a class gets a hostPath volume; a pod writes to it"
dyn_cleanup
out=$(k apply -f - 2>&1 <<'EOF_YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: e2e-dyn-claim}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: e2e-dyn-writer}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: e2e-dyn-claim}}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo provisioned > /data/hello"]
    volumeMounts: [{name: data, mountPath: /data}]
EOF_YAML
) || fail "kubectl apply: $out"
phase=""
for ((i = 0; i < 180; i++)); do
  phase=$(k get pod e2e-dyn-writer -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
  sleep 0.5
done
if [ "$phase" != Succeeded ]; then
  k describe pvc e2e-dyn-claim 2>&1 | tail -n 15 || true
  k describe pod e2e-dyn-writer 2>&1 | tail -n 25 || true
  fail "pod e2e-dyn-writer is '$phase' (expected Succeeded)"
fi
claim=$(k get pvc e2e-dyn-claim -o 'jsonpath={.status.phase}/{.spec.storageClassName}/{.spec.volumeName}') ||
  fail "get pvc"
uid=$(k get pvc e2e-dyn-claim -o 'jsonpath={.metadata.uid}')
pv="pvc-$uid"
[ "$claim" = "Bound/standard/$pv" ] || fail "claim e2e-dyn-claim is '$claim' (expected Bound/standard/$pv)"
got=$(k get pv "$pv" -o 'jsonpath={.status.phase}/{.spec.persistentVolumeReclaimPolicy}/{.metadata.annotations.pv\.kubernetes\.io/provisioned-by}') ||
  fail "get pv $pv"
[ "$got" = Bound/Delete/kubernetes.io/host-path ] || fail "PV $pv is '$got'"
dir=$(k get pv "$pv" -o 'jsonpath={.spec.hostPath.path}')
[[ $dir == /tmp/hostpath_pv/* ]] || fail "PV $pv has hostPath '$dir' (expected /tmp/hostpath_pv/...)"
[ "$(cat "$dir/hello" 2>/dev/null)" = provisioned ] ||
  fail "$dir/hello holds '$(cat "$dir/hello" 2>&1)' (expected 'provisioned')"
events=$(k get events --field-selector involvedObject.name=e2e-dyn-claim \
  -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}')
grep -qx "ProvisioningSucceeded: Successfully provisioned volume $pv using kubernetes.io/host-path" <<<"$events" ||
  fail "no ProvisioningSucceeded event on the claim (events: $events)"
k get pvc e2e-dyn-claim
ok "claim Bound to $pv; the pod's file is in $dir"

step "dynamic provisioning: the claim deleted, its volume and directory go (Delete)"
k delete pod e2e-dyn-writer --wait=true >/dev/null 2>&1 || fail "delete pod"
k delete pvc e2e-dyn-claim --wait=true >/dev/null 2>&1 || fail "delete pvc"
gone=0
for ((i = 0; i < 60; i++)); do
  if ! out=$(k get pv "$pv" -o name 2>&1); then
    grep -q NotFound <<<"$out" && { gone=1; break; }
  fi
  sleep 0.5
done
[ $gone -eq 1 ] || fail "PV $pv is still there 30 s after its claim went: $(k get pv "$pv" 2>&1)"
[ ! -e "$dir" ] || fail "$dir is still there after its volume was deleted"
ok "PV $pv and $dir deleted"
