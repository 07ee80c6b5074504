# shellcheck shell=bash
# Custom resources with the controllers: a CustomResourceDefinition's objects in a
# namespace go when the namespace is deleted (the namespace controller finds the
# resource through discovery), and when the definition is deleted the apiserver removes
# its objects first. Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "custom resources: a namespace delete removes them; a CRD delete removes the rest"
k delete namespace e2e-crs --ignore-not-found --wait=true >/dev/null 2>&1 || true
k delete crd widgets.e2e.ferrokube.io --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.ferrokube.io
spec:
  group: e2e.ferrokube.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
) || fail "kubectl apply of the CRD: $out"
out=$(timeout 30 "$KUBECTL" wait --for condition=established --timeout=20s crd/widgets.e2e.ferrokube.io 2>&1) ||
  fail "the CRD was not established: $out"
k create namespace e2e-crs >/dev/null || fail "kubectl create namespace e2e-crs"
for ns in e2e-crs default; do
  out=$(k apply -f - 2>&1 <<EOF
apiVersion: e2e.ferrokube.io/v1
kind: Widget
metadata: {name: w1, namespace: $ns}
spec: {size: 3}
EOF
) || fail "kubectl apply of widget w1 in $ns: $out"
done
out=$(k delete namespace e2e-crs --timeout=60s 2>&1) || {
  k get namespace e2e-crs -o yaml >&2 || true
  fail "namespace e2e-crs with a widget was not deleted: $out"
}
k get widgets -n default w1 >/dev/null 2>&1 || fail "the widget in default went with e2e-crs"
out=$(k delete crd widgets.e2e.ferrokube.io --timeout=30s 2>&1) || fail "kubectl delete crd: $out"
k get crd widgets.e2e.ferrokube.io >/dev/null 2>&1 && fail "the CRD is still there after its delete returned"
ok "namespace e2e-crs deleted with its widget; the CRD deleted with the widget in default"
