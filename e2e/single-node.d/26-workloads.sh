# shellcheck shell=bash
# DaemonSets and StatefulSets on the node: a DaemonSet runs one pod on the node (placed
# by the scheduler through its node-name affinity) and `kubectl rollout status` returns;
# a StatefulSet's pods come up in order as e2e-sts-0, e2e-sts-1 with stable hostnames,
# and a deleted one comes back under its name. Sourced by e2e/single-node.sh; uses its
# step/ok/fail/k/kx helpers.

wl_rollout() { # KIND/NAME: kubectl rollout status, bounded
  local out
  out=$(timeout 100 "$KUBECTL" rollout status "$1" --timeout=90s 2>&1) || {
    k get "$1" -o yaml >&2 || true
    k get pods -o wide >&2 || true
    fail "kubectl rollout status $1: $out"
  }
  grep -Eq 'successfully rolled out|roll out complete' <<<"$out" ||
    fail "kubectl rollout status $1 said: $out"
}

step "a DaemonSet runs one pod on the node; a StatefulSet runs e2e-sts-0 and -1 in order"
k delete daemonset e2e-ds --ignore-not-found --wait=true >/dev/null 2>&1 || true
k delete statefulset e2e-sts --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: e2e-ds
spec:
  selector:
    matchLabels: {app: e2e-ds}
  template:
    metadata:
      labels: {app: e2e-ds}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: agent
        image: busybox
        command: ["sleep", "3600"]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: e2e-sts
spec:
  serviceName: e2e-sts
  replicas: 2
  selector:
    matchLabels: {app: e2e-sts}
  template:
    metadata:
      labels: {app: e2e-sts}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: busybox
        command: ["sh", "-c", "hostname > /tmp/h; exec sleep 3600"]
EOF
) || fail "kubectl apply of the DaemonSet and StatefulSet: $out"
wl_rollout daemonset/e2e-ds
node=$(k get pods -l app=e2e-ds -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}')
[ "$node" = "$NODE" ] || fail "the DaemonSet's pods run on '${node//$'\n'/,}', expected one on $NODE"
wl_rollout statefulset/e2e-sts
names=$(k get pods -l app=e2e-sts -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{end}')
[ "$names" = "e2e-sts-0 e2e-sts-1 " ] || fail "StatefulSet pods are '$names'"
# Each component's writes are recorded under its program's name, as upstream's are.
managers=$(k get pod e2e-sts-1 --show-managed-fields \
  -o 'jsonpath={range .metadata.managedFields[*]}{.manager}/{.subresource}{" "}{end}')
for want in "kube-controller-manager/ " "kubelet/status "; do
  [[ " $managers" == *" $want"* ]] || fail "e2e-sts-1's field managers are '$managers', expected $want"
done
[[ " $managers" != *" /"* ]] || fail "e2e-sts-1 has a field manager without a name: '$managers'"
# Controllers' events name their component and no host (upstream's legacy recorder);
# the kubelet's name the node.
sources=$(k get events --field-selector involvedObject.name=e2e-sts -o wide --no-headers |
  awk '$3 == "SuccessfulCreate" {print $5}' | sort -u)
[ "$sources" = statefulset-controller ] ||
  fail "e2e-sts's SuccessfulCreate events come from '${sources//$'\n'/,}', expected statefulset-controller"
sources=$(k get events --field-selector involvedObject.name=e2e-sts-1 -o wide --no-headers |
  awk '$3 == "Started" {print $6 $7}' | sort -u)
[ "$sources" = "kubelet,$NODE" ] || fail "e2e-sts-1's Started events come from '$sources', expected kubelet, $NODE"
# The scheduler's events.k8s.io events, read as core/v1, show their reporter too.
sources=$(k get events --field-selector involvedObject.name=e2e-sts-1 -o wide --no-headers |
  awk '$3 == "Scheduled" {print $5}' | sort -u)
[ "$sources" = "default-scheduler," ] ||
  fail "e2e-sts-1's Scheduled events come from '$sources', expected default-scheduler, <instance>"
out=$(kx e2e-sts-1 -- cat /tmp/h) || fail "exec into e2e-sts-1: $out"
[ "$out" = e2e-sts-1 ] || fail "e2e-sts-1's hostname is '$out'"
uid=$(k get pod e2e-sts-0 -o 'jsonpath={.metadata.uid}')
k delete pod e2e-sts-0 --wait=true >/dev/null 2>&1 || fail "kubectl delete pod e2e-sts-0 failed"
wl_rollout statefulset/e2e-sts
new_uid=$(k get pod e2e-sts-0 -o 'jsonpath={.metadata.uid}')
[ -n "$new_uid" ] && [ "$new_uid" != "$uid" ] || fail "e2e-sts-0 was not recreated (uid '$new_uid')"
k delete daemonset e2e-ds --wait=true >/dev/null 2>&1 || fail "kubectl delete daemonset failed"
k delete statefulset e2e-sts --wait=true >/dev/null 2>&1 || fail "kubectl delete statefulset failed"
ok "DaemonSet pod on $NODE; StatefulSet pods e2e-sts-0, e2e-sts-1 (hostname kept, written by kube-controller-manager and kubelet), e2e-sts-0 recreated"
