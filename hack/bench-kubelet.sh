#!/usr/bin/env bash
# Kubelet benchmarks (issue 6) on the single-node cluster of hack/up.sh:
#
#   flock /run/ferrokube-e2e.lock hack/bench-kubelet.sh
#
#   1. pod start: `kubectl run` of N (10) busybox `sleep 3600` pods, one after another
#      (imagePullPolicy IfNotPresent, image already imported), each timed from just before
#      `kubectl run` until `kubectl wait` (a watch) sees phase Running; p50 and max.
#      Next to it a containerd floor: the same pause + busybox pair started directly on the
#      same containerd with `ctr run -d` (no CRI sandbox, no CNI: crictl is not installed
#      on this machine), timed the same way, removed afterwards.
#   2. idle RSS: VmRSS of the kubelet (/proc/PID/status) with the N pods Running, after
#      10 s idle.
#   3. kubelet up -> node Ready: the kubelet is stopped by its PID file (as hack/down.sh
#      does), the Node's Ready condition is set to Unknown (as the node lifecycle controller
#      would once the heartbeats stop), the kubelet is started again with the command line
#      hack/up.sh recorded, and the time until `kubectl wait --for=condition=Ready` returns
#      is taken.
#   4. deletes the bench pods; hack/down.sh unless BENCH_KEEP=1.
#
# Binaries: hack/up.sh's (release), or FK_BIN_DIR=<dir> (e.g. the debug ones, built with
# cargo build --bins -p kube-apiserver ... -p ferrokube-kubelet). BENCH_PODS=N changes N.
# Prints one summary table (markdown) at the end. Must run as root, under the e2e lock
# (the cluster's kubelet removes CRI pods it does not know; other kubelet tests share the
# containerd).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"

[ "$(id -u)" -eq 0 ] || fk::die "hack/bench-kubelet.sh must run as root"
PODS=${BENCH_PODS:-10}
if ! [[ $PODS =~ ^[0-9]+$ ]] || [ "$PODS" -lt 1 ] || [ "$PODS" -gt 100 ]; then
  fk::die "BENCH_PODS must be 1..100"
fi
BIN_DIR=${FK_BIN_DIR:-$(fk::target_dir)/release}
KUBELET=$BIN_DIR/kubelet
BUSYBOX=docker.io/library/busybox:latest
CTR=(ctr --address "$RT_CONTAINERD_SOCK" -n k8s.io)
PREFIX=bench-kubelet
export KUBECONFIG=$FK_ADMIN_KUBECONFIG
k() { timeout 90 kubectl --request-timeout=60s "$@"; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
# p50 (lower median) and max of whitespace-separated integers.
p50_max() { tr ' ' '\n' <<<"$*" | sed '/^$/d' | sort -n |
  awk '{ v[NR] = $1 } END { printf "%d %d\n", v[int((NR + 1) / 2)], v[NR] }'; }

ctr_ids=()
cleanup() {
  local id
  for id in "${ctr_ids[@]}"; do
    "${CTR[@]}" task rm -f "$id" >/dev/null 2>&1 || true
    "${CTR[@]}" container rm "$id" >/dev/null 2>&1 || true
  done
  ctr_ids=()
  if [ "${BENCH_KEEP:-0}" != 1 ]; then
    bash "$REPO/hack/down.sh" >&2 || true
  fi
}
trap cleanup EXIT

echo "==> hack/up.sh (binaries in $BIN_DIR)" >&2
FK_BIN_DIR=$BIN_DIR bash "$REPO/hack/up.sh" --no-build >&2
"${CTR[@]}" images ls -q | grep -qx "$BUSYBOX" || fk::die "$BUSYBOX is not imported"
NODE=$(fk::node_name)

# ---------------------------------------------------------------- 1. pod start
echo "==> $PODS pods via kubectl run, sequential" >&2
k delete pod -l app=$PREFIX --ignore-not-found --wait=true >/dev/null
pod_ms=()
for ((i = 1; i <= PODS; i++)); do
  t0=$(now)
  k run "$PREFIX-$i" --image="$BUSYBOX" --image-pull-policy=IfNotPresent --restart=Never \
    --labels=app=$PREFIX -- sleep 3600 >/dev/null
  k wait pod "$PREFIX-$i" --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null ||
    fk::die "pod $PREFIX-$i not Running after 60 s"
  pod_ms+=("$(ms_since "$t0")")
  echo "  $PREFIX-$i Running after ${pod_ms[-1]} ms" >&2
done
read -r pod_p50 pod_max < <(p50_max "${pod_ms[*]}")

echo "==> containerd floor: $PODS x (pause + busybox) with ctr run -d" >&2
floor_ms=()
for ((i = 1; i <= PODS; i++)); do
  t0=$(now)
  ctr_ids+=("$PREFIX-pause-$i")
  "${CTR[@]}" run -d "$RT_PAUSE_IMAGE" "$PREFIX-pause-$i" >/dev/null
  ctr_ids+=("$PREFIX-busybox-$i")
  "${CTR[@]}" run -d "$BUSYBOX" "$PREFIX-busybox-$i" sleep 3600 >/dev/null
  floor_ms+=("$(ms_since "$t0")")
done
read -r floor_p50 floor_max < <(p50_max "${floor_ms[*]}")
echo "  ${floor_ms[*]} ms" >&2
for id in "${ctr_ids[@]}"; do
  "${CTR[@]}" task rm -f "$id" >/dev/null 2>&1 || true
  "${CTR[@]}" container rm "$id" >/dev/null 2>&1 || true
done
ctr_ids=()

# ---------------------------------------------------------------- 2. idle RSS
echo "==> kubelet idle RSS with $PODS pods, after 10 s" >&2
sleep 10
kubelet_pid=$(fk::pid_of kubelet "$KUBELET") || fk::die "the kubelet is not running"
running=$(k get pods -l app=$PREFIX --field-selector=status.phase=Running -o name | wc -l)
rss_kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$kubelet_pid/status")
echo "  $running pods Running, VmRSS $rss_kib kB" >&2

# ---------------------------------------------------------------- 3. kubelet up -> Ready
echo "==> kubelet restart -> node $NODE Ready" >&2
cmdfile=$FK_RUN_DIR/kubelet.cmd
saved_cmd=$(cat "$cmdfile")
fk::stop kubelet "$KUBELET" 30
k patch node "$NODE" --subresource=status --type=strategic -p \
  '{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"hack/bench-kubelet.sh stopped the kubelet"}]}}' >/dev/null
[ "$(k get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = Unknown ] ||
  fk::die "could not set the node's Ready condition to Unknown"
eval "kubelet_cmd=( $(head -n 1 <<<"$saved_cmd") )"
t0=$(now)
{
  printf '\n===== %s starting kubelet (hack/bench-kubelet.sh)\n' "$(date -Is)"
  head -n 1 <<<"$saved_cmd"
} >>"$FK_LOG_DIR/kubelet.log"
# shellcheck disable=SC2154 # kubelet_cmd is set by the eval above
rt::daemon "${kubelet_cmd[@]}" >>"$FK_LOG_DIR/kubelet.log" 2>&1 </dev/null &
echo $! >"$(fk::pidfile kubelet)"
printf '%s\n' "$saved_cmd" >"$cmdfile"
k wait node "$NODE" --for=condition=Ready --timeout=60s >/dev/null ||
  fk::die "node $NODE not Ready 60 s after the kubelet started"
ready_ms=$(ms_since "$t0")
echo "  Ready after $ready_ms ms" >&2

k delete pod -l app=$PREFIX --wait=false >/dev/null || true

echo
echo "Kubelet benchmark, node $NODE, $PODS pods, binaries $BIN_DIR, $(date -u '+%F %T') UTC"
echo "load: $(uptime)"
echo
echo "| measurement | p50 | max |"
echo "|---|---|---|"
echo "| \`kubectl run\` -> pod Running (busybox, IfNotPresent), N=$PODS sequential | $pod_p50 ms | $pod_max ms |"
echo "| containerd floor: \`ctr run -d\` pause + busybox (no CRI sandbox/CNI), N=$PODS | $floor_p50 ms | $floor_max ms |"
echo "| kubelet start -> node Ready (\`kubectl wait\`), 1 run | $ready_ms ms | |"
echo "| kubelet VmRSS, $running pods Running, 10 s idle | $((rss_kib / 1024)) MiB ($rss_kib kB) | |"
echo
echo "pod start samples (ms): ${pod_ms[*]}"
echo "floor samples (ms): ${floor_ms[*]}"
