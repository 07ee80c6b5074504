# shellcheck shell=bash
# Storage object protection in the running cluster: a new PersistentVolumeClaim carries
# kubernetes.io/pvc-protection (StorageObjectInUseProtection admission), and deleting it
# while no pod uses it completes, because the controller manager's pvc-protection
# controller removes the finalizer (without it the claim would stay Terminating).
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "pvc-protection: a new PVC has the finalizer; an unused one is deleted (at most 30 s)"
k delete pvc e2e-protected --ignore-not-found --wait=false >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: e2e-protected}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  resources: {requests: {storage: 1Gi}}
YAML
) || fail "kubectl apply: $out"
fin=$(k get pvc e2e-protected -o 'jsonpath={.metadata.finalizers}')
[ "$fin" = '["kubernetes.io/pvc-protection"]' ] || fail "finalizers are '$fin'"
out=$(k delete pvc e2e-protected --wait=false 2>&1) || fail "kubectl delete: $out"
gone=0
for ((i = 0; i < 60; i++)); do
  if ! out=$(k get pvc e2e-protected -o name 2>&1); then
    grep -q NotFound <<<"$out" && { gone=1; break; }
  fi
  sleep 0.5
done
if [ $gone -ne 1 ]; then
  k get pvc e2e-protected -o yaml 2>&1 | head -n 30 || true
  k patch pvc e2e-protected --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  fail "the unused PVC is still there 30 s after its delete; is the pvc-protection controller running?"
fi
ok "finalizer $fin, and the unused claim deleted"
