#!/usr/bin/env bash
# Kubelet benchmarks (issue 6) on the single-node cluster of hack/up.sh, as the issue
# defines them. Run as root, under the e2e lock (the cluster's kubelet removes CRI pods it
# does not know; other kubelet tests share the containerd):
#
#   flock /run/ferrokube-e2e.lock hack/bench-kubelet.sh
#
#   1. up command -> node Ready: hack/down.sh, then `hack/up.sh --no-build` timed from its
#      start to the moment its bounded wait sees the node Ready (up.sh prints that
#      moment), and to its end (kube-proxy synced, DNS addon ready). Packages, images and
#      binaries are already present; containerd stays up when hack/up.sh did not start it.
#   2. pod start: `bench-pod-start` (kubelet crate) opens one watch on its pods, then
#      creates N (100) busybox `sleep 3600` pods through the API one after another
#      (sequential, one in flight; imagePullPolicy IfNotPresent, image present), each
#      timed from just before the create until the watch delivers it Running; p50/p99.
#      The last 10 pods stay.
#   3. idle RSS: with those 10 pods Running and the other 90 gone, after 10 s idle,
#      VmRSS of every component (kube-apiserver, kube-controller-manager, kube-scheduler,
#      kube-proxy, kubelet), split into anonymous and file-backed, and of containerd for
#      reference.
#   4. CRI floor: the kubelet is stopped (so it cannot take the floor's pods for orphans),
#      then `ferrokube-cri floor` starts the same pod N times through the CRI only
#      (RunPodSandbox with the CNI network, CreateContainer, StartContainer, until
#      ContainerStatus says RUNNING; the kubelet's own sandbox/container configs), on
#      the same containerd, image present; p50/p99. Ratio = pod start / floor.
#   5. kubelet restart -> node Ready: the Node's Ready condition is set to Unknown (as the
#      node lifecycle controller would), the kubelet is started again with the command
#      line hack/up.sh recorded, and the time until `kubectl wait --for=condition=Ready`
#      returns is taken; then the kubelet's RSS with the 10 pods adopted.
#   6. deletes the bench pods; hack/down.sh unless BENCH_KEEP=1.
#
# Binaries: hack/up.sh's (release), or FK_BIN_DIR=<dir>. BENCH_PODS=N (1..1000) changes N.
# Prints one summary table (markdown) at the end, with the load average.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"

[ "$(id -u)" -eq 0 ] || fk::die "hack/bench-kubelet.sh must run as root"
PODS=${BENCH_PODS:-100}
IDLE_PODS=10
if ! [[ $PODS =~ ^[0-9]+$ ]] || [ "$PODS" -lt 1 ] || [ "$PODS" -gt 1000 ]; then
  fk::die "BENCH_PODS must be 1..1000"
fi
[ "$PODS" -ge "$IDLE_PODS" ] || IDLE_PODS=$PODS
BIN_DIR=${FK_BIN_DIR:-$(fk::target_dir)/release}
KUBELET=$BIN_DIR/kubelet
for b in bench-pod-start ferrokube-cri kubelet kube-apiserver; do
  [ -x "$BIN_DIR/$b" ] || fk::die "$BIN_DIR/$b is missing (cargo build --release --bins -p ferrokube-kubelet ...)"
done
BUSYBOX=docker.io/library/busybox:latest
LABEL=app=bench-pod-start
export KUBECONFIG=$FK_ADMIN_KUBECONFIG
k() { timeout 90 kubectl --request-timeout=60s "$@"; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"; } # name line
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
rss_mib() { # pid
  awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"
}
# VmRSS with its anonymous part (heap, stacks) and its file-backed part (mostly the
# binary's own text pages, shared with the page cache), e.g. "25.1 MiB (anon 6.9, file 18.2)".
rss_split() { # pid
  awk '/^VmRSS:/ { t = $2 } /^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 }
    END { printf "%.1f MiB (anon %.1f, file %.1f)", t / 1024, a / 1024, f / 1024 }' \
    "/proc/$1/status" 2>/dev/null || echo "?"
}

cleanup() {
  if [ "${BENCH_KEEP:-0}" != 1 ]; then
    bash "$REPO/hack/down.sh" >&2 || true
  fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1. up -> node Ready
echo "==> hack/down.sh, then hack/up.sh --no-build (binaries in $BIN_DIR)" >&2
bash "$REPO/hack/down.sh" >&2
up_log=$(mktemp)
t0=$(now)
FK_BIN_DIR=$BIN_DIR bash "$REPO/hack/up.sh" --no-build 2>&1 | tee "$up_log" >&2
up_total_ms=$(ms_since "$t0")
up_ready_ms=$(sed -n 's/.*node .* Ready at \([0-9.]*\) s after start.*/\1/p' "$up_log" |
  awk '{ printf "%.0f", $1 * 1000 }')
load_up=$(cut -d' ' -f1-3 /proc/loadavg)
rm -f "$up_log"
[ -n "$up_ready_ms" ] || fk::die "hack/up.sh did not report the node Ready"
# (Captured, not piped into grep -q: under pipefail an early grep exit can fail the pipe.)
images=$("$BIN_DIR/ferrokube-cri" --endpoint "unix://$RT_CONTAINERD_SOCK" images)
grep -qF "$BUSYBOX" <<<"$images" || fk::die "$BUSYBOX is not in containerd"
NODE=$(fk::node_name)

# ---------------------------------------------------------------- 2. pod start
echo "==> $PODS pods created through the API, sequential, Running seen by a watch" >&2
pod_out=$("$BIN_DIR/bench-pod-start" --count "$PODS" --keep "$IDLE_PODS" --image "$BUSYBOX")
load_pods=$(cut -d' ' -f1-3 /proc/loadavg)
pod_line=$(grep '^pod_start ' <<<"$pod_out")
pod_samples=$(sed -n 's/^samples_ms //p' <<<"$pod_out")

# ---------------------------------------------------------------- 3. idle RSS
echo "==> waiting until $IDLE_PODS bench pods are left, then 10 s idle" >&2
left=""
for ((i = 0; i < 120; i++)); do
  left=$(k get pods -l "$LABEL" -o name | wc -l)
  [ "$left" -le "$IDLE_PODS" ] && break
  sleep 1
done
[ "$left" -le "$IDLE_PODS" ] || fk::die "$left bench pods still exist 120 s after the deletes"
sleep 10
running=$(k get pods -l "$LABEL" --field-selector=status.phase=Running -o name | wc -l)
rss_rows=()
for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet; do
  if pid=$(fk::pid_of "$c" "$BIN_DIR/$c"); then
    rss_rows+=("| $c | $(rss_split "$pid") |")
  else
    rss_rows+=("| $c | not running |")
  fi
done
containerd_pid=$(cat "$RT_CONTAINERD_PID" 2>/dev/null || true)
if [ -n "$containerd_pid" ] && [ -r "/proc/$containerd_pid/status" ]; then
  rss_rows+=("| containerd (reference) | $(rss_mib "$containerd_pid") MiB |")
fi
load_rss=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- 4. CRI floor
echo "==> kubelet stopped; CRI floor: $PODS x the same pod through the CRI only" >&2
cmdfile=$FK_RUN_DIR/kubelet.cmd
saved_cmd=$(cat "$cmdfile")
fk::stop kubelet "$KUBELET" 30
floor_out=$("$BIN_DIR/ferrokube-cri" --endpoint "unix://$RT_CONTAINERD_SOCK" floor \
  --count "$PODS" --image "$BUSYBOX" --pause-image "$RT_PAUSE_IMAGE")
load_floor=$(cut -d' ' -f1-3 /proc/loadavg)
floor_line=$(grep '^floor ' <<<"$floor_out")
floor_samples=$(sed -n 's/^samples_ms //p' <<<"$floor_out")

# ---------------------------------------------------------------- 5. kubelet restart -> Ready
echo "==> kubelet restart -> node $NODE Ready" >&2
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
restart_ready_ms=$(ms_since "$t0")
sleep 10
kubelet_pid=$(fk::pid_of kubelet "$KUBELET") || fk::die "the kubelet is not running"
restarted_rss=$(rss_split "$kubelet_pid")
running_after=$(k get pods -l "$LABEL" --field-selector=status.phase=Running -o name | wc -l)

k delete pod -l "$LABEL" --wait=false >/dev/null || true

pod_p50=$(field p50_ms "$pod_line")
pod_p99=$(field p99_ms "$pod_line")
floor_p50=$(field p50_ms "$floor_line")
floor_p99=$(field p99_ms "$floor_line")
echo
echo "Kubelet benchmark, node $NODE, binaries $BIN_DIR, $(date -u '+%F %T') UTC"
echo
echo "| measurement | p50 | p99 | max | load (1/5/15 min) |"
echo "|---|---|---|---|---|"
echo "| pod create -> Running seen by a watch (busybox, IfNotPresent), N=$PODS sequential | $pod_p50 ms | $pod_p99 ms | $(field max_ms "$pod_line") ms | $load_pods |"
echo "| CRI floor: RunPodSandbox (CNI) + CreateContainer + StartContainer -> RUNNING, same pod, N=$PODS sequential | $floor_p50 ms | $floor_p99 ms | $(field max_ms "$floor_line") ms | $load_floor |"
echo "| ratio pod start / floor | $(ratio "$pod_p50" "$floor_p50")x | $(ratio "$pod_p99" "$floor_p99")x | | |"
echo "| \`hack/up.sh --no-build\` -> node Ready | $up_ready_ms ms | | | $load_up |"
echo "| \`hack/up.sh --no-build\` to its end (kube-proxy synced, DNS ready) | $up_total_ms ms | | | |"
echo "| kubelet restart -> node Ready (\`kubectl wait\`) | $restart_ready_ms ms | | | |"
echo
echo "Idle RSS with $running bench pods Running (plus the DNS addon pod), after $PODS pod starts and 10 s idle (load $load_rss):"
echo
echo "| component | VmRSS |"
echo "|---|---|"
printf '%s\n' "${rss_rows[@]}"
echo "| kubelet, restarted, $running_after pods adopted, 10 s idle | $restarted_rss |"
echo
echo "pod start samples (ms): $pod_samples"
echo "floor samples (ms): $floor_samples"
