#!/usr/bin/env bash
# Runs bench-apiserver (release build) and, once the apiserver is busy in its first API
# create phase (the typed client), samples it for WIN seconds: `perf stat` of its system
# calls and context switches, `perf record -g` of its sqlite-writer thread, and the
# user/system ticks of each of its threads. Used for docs/benchmarks.md (session 24).
#
#   PODS=40000 CONC=16 WIN=2 OUT=/var/tmp/fk-profile bash hack/profile-apiserver.sh
#   perf report -i $OUT/writer.data --no-children --sort sym --stdio
#
# Needs perf. Only the benchmark's own apiserver (a child of bench-apiserver) is sampled.
set -euo pipefail
B=${CARGO_TARGET_DIR:-$(dirname "$0")/../target}/release
PODS=${PODS:-40000}
CONC=${CONC:-16}
WIN=${WIN:-2}
OUT=${OUT:-/var/tmp/fk-profile}
mkdir -p "$OUT"
"$B/bench-apiserver" --backends sqlite --pods "$PODS" --concurrency "$CONC" --gets 5 --lists 1 \
  --cache-lists 1 --watchers 2 --watch-events 2 --idle-secs 1 "$@" \
  >"$OUT/bench.out" 2>"$OUT/bench.err" &
bench=$!
pid=""
for _ in $(seq 1 200); do
  pid=$(pgrep -P "$bench" -f kube-apiserver | head -n 1 || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "no apiserver started" >&2; kill "$bench"; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# Busy: more than 5 ticks (50 ms) of CPU in 100 ms, i.e. the create phase.
prev=$(ticks)
for _ in $(seq 1 600); do
  sleep 0.1
  now=$(ticks) || break
  [ $((now - prev)) -ge 5 ] && break
  prev=$now
done
sleep 0.5
writer=$(grep -l sqlite-writer /proc/"$pid"/task/*/comm | head -n 1 | cut -d/ -f5)
perf record -q -o "$OUT/writer.data" -t "$writer" -g -F 2000 -- sleep "$WIN" &
perf stat -p "$pid" -e 'syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64,syscalls:sys_enter_pread64,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,context-switches' \
  -- sleep "$WIN" 2>"$OUT/perfstat.txt"
wait %1 || true
for t in /proc/"$pid"/task/*; do echo "$(cat "$t/comm") $(awk '{print $14, $15}' "$t/stat")"; done |
  awk '{u[$1]+=$2; s[$1]+=$3} END {for (k in u) print k, "utime", u[k], "stime", s[k]}' >"$OUT/threads.txt"
wait "$bench"
cat "$OUT/perfstat.txt" "$OUT/threads.txt"
grep -E 'creates through the API|CPU per create' "$OUT/bench.out"
