# shellcheck shell=bash
# Everyday kubectl workflows that drive several API features at once: `rollout
# history`, `undo` and `restart` of a Deployment (the ReplicaSets' revision annotations,
# the template copied back from the old ReplicaSet); `kubectl cp` both ways (exec with
# tar over the kubelet's streaming); `kubectl run -i --rm` with stdin (attach); and
# `kubectl apply --prune -l` deleting what left the manifests. Sourced by
# e2e/single-node.sh; uses its step/ok/fail/k/kx helpers.

kw_rollout() { # DEPLOYMENT: kubectl rollout status, bounded
  local out
  out=$(timeout 100 "$KUBECTL" rollout status "deployment/$1" --timeout=90s 2>&1) || {
    k get "deployment/$1" -o yaml >&2 || true
    k get rs,pods -l app="$1" -o wide >&2 || true
    fail "kubectl rollout status deployment/$1: $out"
  }
}

step "kubectl rollout history, undo and restart of a Deployment"
k delete deployment e2e-roll --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k create deployment e2e-roll --image=busybox -- sleep 3600 2>&1) || fail "create deployment: $out"
kw_rollout e2e-roll
out=$(k set env deployment/e2e-roll STAGE=two 2>&1) || fail "set env: $out"
kw_rollout e2e-roll
out=$(k rollout history deployment/e2e-roll 2>&1) || fail "rollout history: $out"
grep -Eq '^1[[:space:]]' <<<"$out" && grep -Eq '^2[[:space:]]' <<<"$out" ||
  fail "rollout history does not list revisions 1 and 2: $out"
out=$(k rollout undo deployment/e2e-roll 2>&1) || fail "rollout undo: $out"
grep -q 'rolled back' <<<"$out" || fail "rollout undo said: $out"
kw_rollout e2e-roll
env=$(k get deployment e2e-roll -o jsonpath='{.spec.template.spec.containers[0].env}')
[ -z "$env" ] || fail "after undo the template still has env $env"
out=$(k rollout history deployment/e2e-roll 2>&1) || fail "rollout history: $out"
grep -Eq '^3[[:space:]]' <<<"$out" && ! grep -Eq '^1[[:space:]]' <<<"$out" ||
  fail "after undo, revision 1 should have become 3: $out"
out=$(k rollout restart deployment/e2e-roll 2>&1) || fail "rollout restart: $out"
kw_rollout e2e-roll
restarted=$(k get deployment e2e-roll \
  -o jsonpath='{.spec.template.metadata.annotations.kubectl\.kubernetes\.io/restartedAt}')
[ -n "$restarted" ] || fail "rollout restart left no restartedAt annotation on the template"
ok "revisions 1 and 2, undo made revision 1 the current revision 3, restart rolled out ($restarted)"

step "kubectl cp into a pod and back"
# A pod of the restarted template: the old ones may still be terminating.
pod=$(k get pods -l app=e2e-roll --field-selector=status.phase=Running -o go-template \
  --template='{{range .items}}{{if not .metadata.deletionTimestamp}}{{.metadata.name}}{{"\n"}}{{end}}{{end}}' |
  head -n 1)
[ -n "$pod" ] || fail "no Running e2e-roll pod that is not terminating"
src=$(mktemp)
back=$(mktemp)
printf 'copied through tar at %s\n' "$(date +%s.%N)" >"$src"
out=$(k cp "$src" "$pod:/tmp/e2e-cp.txt" 2>&1) || fail "kubectl cp to the pod: $out"
inside=$(kx "$pod" -- cat /tmp/e2e-cp.txt)
[ "$inside" = "$(cat "$src")" ] || fail "the pod's copy reads $inside"
out=$(k cp "$pod:/tmp/e2e-cp.txt" "$back" 2>&1) || fail "kubectl cp from the pod: $out"
cmp -s "$src" "$back" || fail "the copy back differs: $(cat "$back")"
rm -f "$src" "$back"
k delete deployment e2e-roll --wait=false >/dev/null || fail "delete deployment e2e-roll"
ok "a file went to $pod and came back the same"

step "kubectl run -i --rm: the container reads kubectl's stdin"
k delete pod e2e-attach --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(echo ping | timeout 60 "$KUBECTL" run e2e-attach --rm -i --restart=Never \
  --image=busybox -- sh -c 'read line; echo "got-$line"' 2>/dev/null) ||
  fail "kubectl run -i --rm exited $?: $out"
grep -qx 'got-ping' <<<"$out" || fail "the container answered: $out"
ok "the container read ping and the pod was removed"

step "kubectl apply --prune -l deletes what left the manifests"
prune_dir=$(mktemp -d)
for n in a b; do
  cat >"$prune_dir/$n.yaml" <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: e2e-prune-$n
  labels: {app: e2e-prune}
data: {k: $n}
EOF
done
out=$(k apply --prune -l app=e2e-prune -f "$prune_dir" 2>&1) || fail "apply --prune: $out"
rm "$prune_dir/b.yaml"
out=$(k apply --prune -l app=e2e-prune -f "$prune_dir" 2>&1) || fail "apply --prune: $out"
grep -q 'configmap/e2e-prune-b pruned' <<<"$out" || fail "apply --prune said: $out"
left=$(k get configmaps -l app=e2e-prune -o jsonpath='{.items[*].metadata.name}')
[ "$left" = e2e-prune-a ] || fail "after the prune the ConfigMaps are: $left"
k delete configmap e2e-prune-a >/dev/null || fail "delete configmap e2e-prune-a"
rm -rf "$prune_dir"
ok "e2e-prune-b pruned, e2e-prune-a kept"
