#!/usr/bin/env bash
# Idle RSS of kube-apiserver (embedded SQLite store) before and after clients fetched
# the OpenAPI documents (issue 3's "idle RSS < 40 MiB" with kubectl in the picture).
#
# Starts the release kube-apiserver on a free loopback port with a temp PKI and data
# dir, then prints VmRSS from /proc/<pid>/status:
#   1. idle: IDLE_SECS (default 35) after ready, before any OpenAPI request;
#   2. kubectl: after kubectl 1.33 (fresh cache dir) ran `get pods`, `explain pod.spec.containers`,
#      `apply --dry-run=server -f`, `apply -f` twice (client-side; server-side apply
#      is not served) and `create --dry-run=server -f`, then IDLE_SECS idle (the
#      periodic malloc_trim runs every 30 s);
#   3. all: after curl also fetched /openapi/v2 as JSON and as protobuf (gzip and
#      identity), /swagger-2.0.0.pb-v1, /openapi/v3 and every group-version document
#      it lists (gzip and identity), then IDLE_SECS idle.
# Also prints the load average next to each figure. Everything started here is
# stopped by PID and the temp dir removed on exit.
#
# Usage: cargo build --release -p kube-apiserver -p ferrokube-pki-cli &&
#        hack/bench-openapi-rss.sh [path/to/kube-apiserver]
# Environment: PKI (ferrokube-pki binary), KUBECTL, IDLE_SECS override the defaults;
# CACHED_BINARY=1 skips dropping the binary's pages from the page cache (below).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${CARGO_TARGET_DIR:-/var/cache/ferrokube/target}
APISERVER=${1:-$TARGET/release/kube-apiserver}
PKI=${PKI:-$TARGET/release/ferrokube-pki}
KUBECTL=${KUBECTL:-/usr/lib/google-cloud-sdk/bin/kubectl.1.33}
IDLE_SECS=${IDLE_SECS:-35}
CACHED_BINARY=${CACHED_BINARY:-0}

for tool in "$APISERVER" "$PKI" "$KUBECTL" curl python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/ferrokube-openapi-rss.XXXXXX)
PID=
cleanup() {
  local rc=$? i
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The binary starts as read from disk, as a service does after an install or a boot. A
# file that cargo or cp has just written sits in the page cache in large folios, and a
# page fault maps a whole folio: that shows as up to 3 MiB more resident text with the
# same code (docs/benchmarks.md, sessions 17 and 18).
if [ "$CACHED_BINARY" != 1 ]; then
  python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$APISERVER"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PKI" init --dir "$TMP/pki" --server "https://127.0.0.1:$port" >/dev/null
"$APISERVER" --secure-port "$port" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
  --tls-cert-file "$TMP/pki/apiserver.crt" --tls-private-key-file "$TMP/pki/apiserver.key" \
  --client-ca-file "$TMP/pki/ca.crt" --data-dir "$TMP/data" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$TMP/pki/sa.pub" \
  --service-account-signing-key-file "$TMP/pki/sa.key" >"$TMP/apiserver.log" 2>&1 &
PID=$!
URL=https://127.0.0.1:$port
ready=0
for ((i = 0; i < 600; i++)); do # 60 s
  if [ "$(curl -sk -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ]; then
    ready=1
    break
  fi
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if [ "$ready" != 1 ]; then
  echo "kube-apiserver did not become ready" >&2
  grep -v "^  \+[0-9]*:\|^  \+at " "$TMP/apiserver.log" | tail -n 20 >&2
  exit 1
fi
export KUBECONFIG=$TMP/pki/admin.kubeconfig
CURL=(curl -sS --max-time 60 --cacert "$TMP/pki/ca.crt" --cert "$TMP/pki/admin.crt"
  --key "$TMP/pki/admin.key")

rss() { # rss LABEL: VmRSS after IDLE_SECS idle, with the load average
  sleep "$IDLE_SECS"
  printf '%-8s VmRSS %6.1f MiB  (load %s)\n' "$1" \
    "$(awk '/^VmRSS/ {print $2 / 1024}' "/proc/$PID/status")" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
}

echo "kube-apiserver $APISERVER (pid $PID), kubectl $("$KUBECTL" version --client -o json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"
rss idle

cat >"$TMP/cm.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: rss-probe
data:
  a: "1"
EOF
cat >"$TMP/deploy.yaml" <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rss-probe
spec:
  replicas: 1
  selector:
    matchLabels: {app: rss-probe}
  template:
    metadata:
      labels: {app: rss-probe}
    spec:
      containers:
      - name: c
        image: nginx:1.27
EOF
K=("$KUBECTL" --cache-dir "$TMP/kube-cache" --request-timeout 60s)
"${K[@]}" get pods >/dev/null
"${K[@]}" explain pod.spec.containers >/dev/null
"${K[@]}" apply --dry-run=server -f "$TMP/deploy.yaml" >/dev/null
"${K[@]}" apply -f "$TMP/deploy.yaml" >/dev/null
"${K[@]}" apply -f "$TMP/deploy.yaml" >/dev/null
"${K[@]}" create -f "$TMP/cm.yaml" --dry-run=server >/dev/null
rss kubectl

for enc in gzip identity; do
  H=(-H "Accept-Encoding: identity")
  [ "$enc" = gzip ] && H=(--compressed)
  "${CURL[@]}" "${H[@]}" -o /dev/null "$URL/openapi/v2"
  "${CURL[@]}" "${H[@]}" -o /dev/null \
    -H 'Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf' "$URL/openapi/v2"
  "${CURL[@]}" "${H[@]}" -o /dev/null "$URL/swagger-2.0.0.pb-v1"
  "${CURL[@]}" "${H[@]}" "$URL/openapi/v3" >"$TMP/v3.json"
  python3 -c 'import json,sys; [print(p["serverRelativeURL"]) for p in json.load(open(sys.argv[1]))["paths"].values()]' \
    "$TMP/v3.json" | while read -r rel; do
    "${CURL[@]}" "${H[@]}" -o /dev/null "$URL$rel"
  done
done
rss all
