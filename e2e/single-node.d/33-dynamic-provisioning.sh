# shellcheck shell=bash
# Dynamic provisioning as a user of hack/up.sh's cluster meets it: a claim that names no
# class gets the default StorageClass `standard` (DefaultStorageClass admission), the
# controller manager's hostPath provisioner (--enable-hostpath-provisioner) makes a
# volume bound to it, a pod writes to it, and deleting the claim deletes the volume and
# its directory (the class's Delete policy). A StatefulSet's volumeClaimTemplates get
# their claims the same way, deleted on scale-down with whenScaled: Delete. A pod's generic
# ephemeral volume gets its claim from the ephemeral volume controller, owned by the pod,
# and loses it with the pod (the garbage collector). Sourced by e2e/single-node.sh; uses
# its step/ok/fail/k/kx helpers and KUBECTL.

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

step "dynamic provisioning: a StatefulSet's volumeClaimTemplates; whenScaled Delete on scale-down"
k delete statefulset e2e-sts --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF_YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: e2e-sts}
spec:
  serviceName: e2e-sts
  replicas: 1
  selector: {matchLabels: {app: e2e-sts}}
  persistentVolumeClaimRetentionPolicy: {whenDeleted: Delete, whenScaled: Delete}
  template:
    metadata: {labels: {app: e2e-sts}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: busybox
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "echo kept > /data/hello; sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Mi}}
EOF_YAML
) || fail "kubectl apply: $out"
timeout 90 "$KUBECTL" rollout status statefulset/e2e-sts --timeout=80s >/dev/null 2>&1 ||
  { k describe pod e2e-sts-0 2>&1 | tail -n 20 || true; fail "statefulset e2e-sts not rolled out in 80 s"; }
claim=$(k get pvc data-e2e-sts-0 -o 'jsonpath={.status.phase}/{.spec.storageClassName}/{.spec.volumeName}') ||
  fail "get pvc data-e2e-sts-0"
pv=${claim##*/}
[[ $claim == Bound/standard/pvc-* ]] || fail "claim data-e2e-sts-0 is '$claim' (expected Bound/standard/pvc-...)"
got=$(k exec e2e-sts-0 -- cat /data/hello 2>&1) || fail "kubectl exec: $got"
[ "$got" = kept ] || fail "/data/hello in e2e-sts-0 holds '$got'"
k scale statefulset e2e-sts --replicas=0 >/dev/null || fail "kubectl scale"
gone=0
for ((i = 0; i < 90; i++)); do
  if ! out=$(k get pv "$pv" -o name 2>&1); then
    grep -q NotFound <<<"$out" && ! k get pvc data-e2e-sts-0 -o name >/dev/null 2>&1 && { gone=1; break; }
  fi
  sleep 0.5
done
[ $gone -eq 1 ] ||
  fail "claim data-e2e-sts-0 or $pv still there 45 s after the scale-down: $(k get pvc,pv 2>&1)"
k delete statefulset e2e-sts --wait=true >/dev/null 2>&1 || fail "delete statefulset"
ok "data-e2e-sts-0 Bound to $pv and mounted; claim and volume deleted on scale-down"

step "dynamic provisioning: a generic ephemeral volume gets a claim owned by its pod; deleted with it"
k delete pod e2e-eph --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF_YAML'
apiVersion: v1
kind: Pod
metadata: {name: e2e-eph}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        metadata: {labels: {e2e: ephemeral}}
        spec:
          accessModes: [ReadWriteOnce]
          storageClassName: standard
          resources: {requests: {storage: 10Mi}}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo ephemeral > /scratch/hello; sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
EOF_YAML
) || fail "kubectl apply: $out"
phase=""
for ((i = 0; i < 180; i++)); do
  phase=$(k get pod e2e-eph -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] || [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
  sleep 0.5
done
if [ "$phase" != Running ]; then
  k describe pvc e2e-eph-scratch 2>&1 | tail -n 15 || true
  k describe pod e2e-eph 2>&1 | tail -n 25 || true
  fail "pod e2e-eph is '$phase' (expected Running)"
fi
claim=$(k get pvc e2e-eph-scratch -o 'jsonpath={.status.phase}/{.spec.storageClassName}/{.spec.volumeName}') ||
  fail "get pvc e2e-eph-scratch: $claim"
pv=${claim##*/}
[[ $claim == Bound/standard/pvc-* ]] || fail "claim e2e-eph-scratch is '$claim' (expected Bound/standard/pvc-...)"
pod_uid=$(k get pod e2e-eph -o 'jsonpath={.metadata.uid}') || fail "get pod e2e-eph"
owner=$(k get pvc e2e-eph-scratch -o 'jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].controller}/{.metadata.ownerReferences[0].blockOwnerDeletion}/{.metadata.labels.e2e}') ||
  fail "get pvc e2e-eph-scratch owner"
[ "$owner" = "Pod/e2e-eph/$pod_uid/true/true/ephemeral" ] ||
  fail "claim e2e-eph-scratch owner/label is '$owner' (expected Pod/e2e-eph/$pod_uid/true/true/ephemeral)"
got=""
for ((i = 0; i < 20; i++)); do
  got=$(kx e2e-eph -- cat /scratch/hello) && [ "$got" = ephemeral ] && break
  sleep 0.5
done
[ "$got" = ephemeral ] || fail "/scratch/hello in e2e-eph holds '$got' (expected 'ephemeral')"
dir=$(k get pv "$pv" -o 'jsonpath={.spec.hostPath.path}')
[ "$(cat "$dir/hello" 2>/dev/null)" = ephemeral ] ||
  fail "$dir/hello holds '$(cat "$dir/hello" 2>&1)' (expected 'ephemeral')"
k get pvc e2e-eph-scratch
k delete pod e2e-eph --wait=true >/dev/null 2>&1 || fail "delete pod e2e-eph"
gone=0
for ((i = 0; i < 90; i++)); do
  if ! claim_out=$(k get pvc e2e-eph-scratch -o name 2>&1) && ! out=$(k get pv "$pv" -o name 2>&1); then
    grep -q NotFound <<<"$claim_out" && grep -q NotFound <<<"$out" && { gone=1; break; }
  fi
  sleep 0.5
done
[ $gone -eq 1 ] ||
  fail "claim e2e-eph-scratch or $pv still there 45 s after pod e2e-eph went: $(k get pvc,pv 2>&1)"
ok "e2e-eph-scratch made for the pod, Bound to $pv and written; claim and volume deleted with the pod"
