#!/usr/bin/env bash
# e2e smoke test on a single-node cluster, with the real kubectl (/usr/bin/kubectl):
#
#   e2e/single-node.sh [up.sh arguments, e.g. --etcd or --no-build]
#
#   1. hack/up.sh
#   2. kubectl get nodes            -> this node, Ready
#   3. kubectl run nginx --image=nginx
#   4. the pod reaches Running      (at most 120 s)
#   5. curl http://<pod IP>/        -> nginx's welcome page
#   6. e2e/single-node.d/*.sh       -> further checks, one file per capability
#   7. kubectl delete pod nginx     -> its containers, sandbox, cgroups and log dir go
#                                      within its grace period; the pod is gone
#   8. hack/down.sh
#
# Each step checks its output; on failure the script names the step it stopped at, shows
# what it saw, and still runs hack/down.sh (E2E_KEEP=1 leaves the cluster up to debug).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
# The e2e's cluster keeps its store apart from the one hack/up.sh gives a user
# (/var/lib/ferrokube) and starts it empty: objects left there by earlier use of the
# cluster (a second PodDisruptionBudget on app=web once) must not change what the checks
# see, and the e2e must not touch a user's objects.
export FK_DATA_DIR=${FK_E2E_DATA_DIR:-/var/lib/ferrokube-e2e}
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"

KUBECTL=/usr/bin/kubectl
[ -x "$KUBECTL" ] || fk::die "the real kubectl is expected at $KUBECTL"
[ "$(id -u)" -eq 0 ] || fk::die "e2e/single-node.sh must run as root"
fk::e2e_fresh_store "$REPO"
export KUBECONFIG=$FK_ADMIN_KUBECONFIG

T0=$(date +%s.%N)
STEP=0
STEP_NAME=""
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { STEP=$((STEP + 1)); STEP_NAME=$*; printf '\n=== step %d [%ss]: %s\n' "$STEP" "$(elapsed)" "$*"; }
ok() { printf -- '--- ok: %s\n' "$*"; }
fail() {
  printf '\nFAILED at step %d (%s): %s\n' "$STEP" "$STEP_NAME" "$*" >&2
  exit 1
}
k() { timeout 30 "$KUBECTL" --request-timeout=20s "$@"; }
# `kubectl exec` whose stdout is the answer: kubectl's stderr (where it also logs
# client-side complaints) is kept apart, shown on the terminal, and joined to the output
# only when the command fails, for the failure message.
KX_ERR=$(mktemp)
kx() {
  local out rc=0
  out=$(k exec "$@" 2>"$KX_ERR") || rc=$?
  if [ -s "$KX_ERR" ]; then sed 's/^/  kubectl exec stderr: /' "$KX_ERR" >&2; fi
  if [ $rc -ne 0 ]; then
    printf '%s\n%s' "$out" "$(cat "$KX_ERR")"
    return $rc
  fi
  printf '%s' "$out"
}

finish() {
  local rc=$?
  rm -f "$KX_ERR"
  if [ $rc -ne 0 ] && [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "E2E_KEEP=1: cluster left up (KUBECONFIG=$KUBECONFIG); hack/down.sh to stop it" >&2
    exit $rc
  fi
  if [ "$STEP_NAME" != "hack/down.sh" ]; then
    echo "--- cleaning up: hack/down.sh" >&2
    bash "$REPO/hack/down.sh" >&2 || true
  fi
  if [ $rc -eq 0 ]; then
    printf '\nPASS: single-node e2e in %s s\n' "$(elapsed)"
  fi
  exit $rc
}
trap finish EXIT

# ----------------------------------------------------------------------------------------
step "hack/up.sh $*"
bash "$REPO/hack/up.sh" "$@" || fail "hack/up.sh exited with $?"
ok "cluster up"

NODE=$(fk::node_name)
step "kubectl get nodes: $NODE Ready"
out=$(k get nodes -o wide 2>&1) || fail "kubectl get nodes: $out"
printf '%s\n' "$out"
if ! grep -qE "^${NODE}[[:space:]]+Ready[[:space:]]" <<<"$out"; then
  if [ ! -x "$(fk::target_dir)/release/kubelet" ]; then
    fail "no Ready node $NODE: there is no kubelet binary yet (cmd/kubelet has not landed)"
  fi
  fail "node $NODE is not listed as Ready"
fi
ok "node $NODE Ready"

step "kubectl run nginx --image=nginx"
# A leftover from an earlier, interrupted run would make `run` fail with AlreadyExists.
k delete pod nginx --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k run nginx --image=nginx 2>&1) || fail "kubectl run: $out"
printf '%s\n' "$out"
[ "$out" = "pod/nginx created" ] || fail "expected 'pod/nginx created', got: $out"
ok "pod created"

step "pod nginx Running (at most 120 s)"
phase=""
for ((i = 0; i < 240; i++)); do
  phase=$(k get pod nginx -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] && break
  sleep 0.5
done
k get pod nginx -o wide || true
if [ "$phase" != Running ]; then
  k describe pod nginx 2>&1 | tail -n 30 || true
  if [[ $(k get pod nginx -o 'jsonpath={.spec.nodeName}' 2>/dev/null || true) == "" ]]; then
    fail "pod never scheduled (phase '${phase:-none}'); is kube-scheduler running?"
  fi
  fail "pod phase is '${phase:-none}', not Running"
fi
ok "Running after $(elapsed) s since the start of the test"

step "curl the pod IP: nginx's page"
ip=$(k get pod nginx -o 'jsonpath={.status.podIP}')
[[ $ip =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "no pod IP (got '$ip')"
case $ip in 10.244.*) ;; *) fail "pod IP $ip is outside the pod CIDR $RT_POD_CIDR" ;; esac
body=""
for ((i = 0; i < 20; i++)); do
  body=$(curl -s --max-time 2 "http://$ip/" || true)
  [ -n "$body" ] && break
  sleep 0.5
done
grep -q "Welcome to nginx" <<<"$body" || fail "http://$ip/ answered: ${body:-nothing}"
ok "http://$ip/ serves 'Welcome to nginx!'"

# Further checks, one file per capability, run in name order against the live cluster
# (with the nginx pod still Running). Each file is sourced here, so it uses step/ok/fail/k
# and the variables above (NODE, ip, KUBECTL), and must delete what it creates.
for extra in "$REPO"/e2e/single-node.d/*.sh; do
  [ -e "$extra" ] || continue
  # shellcheck source=/dev/null
  source "$extra"
done

step "kubectl delete pod nginx: its containers, sandbox, cgroups and log dir go within its grace period"
CRI=("${FK_BIN_DIR:-$(fk::target_dir)/release}/ferrokube-cri" --endpoint "unix://$RT_CONTAINERD_SOCK")
uid=$(k get pod nginx -o 'jsonpath={.metadata.uid}')
grace=$(k get pod nginx -o 'jsonpath={.spec.terminationGracePeriodSeconds}')
[ -n "$uid" ] && [ -n "$grace" ] || fail "pod nginx has no uid ('$uid') or grace period ('$grace')"
pod_sandboxes_and_containers() {
  local sandboxes
  sandboxes=$("${CRI[@]}" pods | awk -F'\t' '$2 == "default/nginx" { print $1 }')
  [ -n "$sandboxes" ] || return 0
  sed 's/^/sandbox /' <<<"$sandboxes"
  "${CRI[@]}" containers | awk -F'\t' -v ids="$(tr '\n' ' ' <<<"$sandboxes")" '
    BEGIN { n = split(ids, a, " "); for (i = 1; i <= n; i++) want["sandbox=" a[i]] = 1 }
    $5 in want { print "container " $1 " " $2 }'
}
# Everything of the pod's on the node, one line per item; empty once the kubelet is done.
pod_leftovers() {
  pod_sandboxes_and_containers
  find /sys/fs/cgroup -maxdepth 5 -type d -name "pod$uid" -printf 'cgroup %p\n' 2>/dev/null || true
  find /var/log/pods -maxdepth 1 -name "default_nginx_$uid" -printf 'log dir %p\n' 2>/dev/null || true
}
before=$(pod_leftovers)
printf '%s\n' "$before"
for what in sandbox container cgroup "log dir"; do
  grep -q "^$what " <<<"$before" || fail "before the delete there is no $what to watch: $before"
done
t_delete=$(date +%s.%N)
out=$(k delete pod nginx --wait=false 2>&1) || fail "kubectl delete: $out"
printf '%s\n' "$out"
[ "$out" = 'pod "nginx" deleted' ] || fail "expected 'pod \"nginx\" deleted', got: $out"
left=$before
for ((i = 0; i < 2 * grace + 20; i++)); do
  left=$(pod_leftovers)
  [ -z "$left" ] && break
  sleep 0.5
done
took=$(awk -v a="$t_delete" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ -z "$left" ] || fail "${took} s after the delete (grace period ${grace} s) the node still has: $left"
awk -v t="$took" -v g="$grace" 'BEGIN { exit !(t <= g) }' ||
  fail "the pod's containers, sandbox, cgroups and log dir took $took s to go, beyond its grace period of $grace s"
gone=0
for ((i = 0; i < 120; i++)); do
  if ! out=$(k get pod nginx -o name 2>&1); then
    grep -q NotFound <<<"$out" && { gone=1; break; }
  fi
  sleep 0.5
done
[ $gone -eq 1 ] || fail "pod nginx still exists 60 s after the delete"
curl -s --max-time 2 -o /dev/null "http://$ip/" && fail "http://$ip/ still answers after the pod is gone"
ok "containers, sandbox, cgroups and log dir gone in $took s (grace $grace s); pod gone and its IP no longer answers"

step "hack/down.sh"
bash "$REPO/hack/down.sh" || fail "hack/down.sh exited with $?"
for name in "${FK_COMPONENTS[@]}"; do
  [ ! -f "$(fk::pidfile "$name")" ] || fail "$(fk::pidfile "$name") still exists"
done
ok "cluster down"
