#!/usr/bin/env bash
# Benchmark (not a test): wall time to bring up and tear down the kind-style multi-node
# cluster.
#
#   flock /run/ferrokube-e2e.lock hack/bench-cluster.sh [--nodes N] [--runs R]
#
# Per run: `hack/up.sh --nodes N` from a torn-down cluster (control plane, N nodes Ready,
# kube-proxy synced and the DNS addon ready; no build), then a second `hack/up.sh --nodes N`
# with everything up (the idempotent no-op), then `hack/down.sh`. Prints one line per run
# and the median of each column. Uses the binaries in $FK_BIN_DIR (default: the release
# build); build them first. Run it under the e2e lock: it takes the same ports and runtime
# as the e2e tests and the kubelet's integration tests.
set -euo pipefail

nodes=3
runs=3
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ $nodes =~ ^[1-9][0-9]*$ && $runs =~ ^[1-9][0-9]*$ ]] || { echo "--nodes and --runs take numbers >= 1" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
run_logged() { # log command...
  local log=$1
  shift
  "$@" >>"$log" 2>&1 || { tail -n 30 "$log" >&2; echo "failed: $* (log $log)" >&2; exit 1; }
}

log=$(mktemp /tmp/bench-cluster.XXXXXX.log)
echo "bench-cluster: $nodes node(s), $runs run(s); log $log"
bash "$REPO/hack/down.sh" >>"$log" 2>&1 || true
up=() again=() down=()
printf '%-4s %10s %12s %10s\n' run "up (s)" "re-run (s)" "down (s)"
for ((r = 1; r <= runs; r++)); do
  t=$(now); run_logged "$log" bash "$REPO/hack/up.sh" --nodes "$nodes" --no-build; up+=("$(since "$t")")
  t=$(now); run_logged "$log" bash "$REPO/hack/up.sh" --nodes "$nodes" --no-build; again+=("$(since "$t")")
  t=$(now); run_logged "$log" bash "$REPO/hack/down.sh"; down+=("$(since "$t")")
  printf '%-4s %10s %12s %10s\n' "$r" "${up[-1]}" "${again[-1]}" "${down[-1]}"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-4s %10s %12s %10s\n' median "$(median "${up[@]}")" "$(median "${again[@]}")" "$(median "${down[@]}")"
