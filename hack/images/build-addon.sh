#!/usr/bin/env bash
# Builds an addon image (kube-dns, metrics-server) offline from its binary and pushes it
# into the local registry mirror:
#   registry.k8s.io/ferrokube/<name>:v<version> and :v<version>-<binary digest>
#   -> <registry>/ferrokube/<name>:...
# The image holds the stripped binary as /usr/bin/<binary name> (its entrypoint), the
# shared libraries `ldd` reports for it (copied from the host, like the nginx image) and
# a passwd/group; no shell. Prints the content-addressed tag (v<version>-<digest>), which
# hack/up.sh puts in the Deployment so a rebuilt binary rolls the pods.
#
# Usage: build-addon.sh REGISTRY_ADDR WORK_DIR NAME BINARY VERSION [PORT/PROTO...]
#   e.g. build-addon.sh 127.0.0.1:5000 /var/lib/x dns target/kube-dns 0.1.0 53/udp 53/tcp
# Idempotent: skipped (tag printed) when WORK_DIR/<name>.built records the same binary and
# the registry still serves the tag.
set -euo pipefail
REG=${1:?registry address}
WORK=${2:?work dir}
NAME=${3:?image name}
BIN=${4:?binary}
VERSION=${5:?version}
shift 5
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$BIN" ] || { echo "build-addon: $BIN is not an executable" >&2; exit 1; }
EXE=$(basename "$BIN")

digest=$(cat "$BIN" "$0" | sha256sum | cut -c1-12)
tag="v$VERSION-$digest"
stamp=$WORK/$NAME.built
mkdir -p "$WORK"
if [ "$(cat "$stamp" 2>/dev/null)" = "$tag" ] &&
  curl -sf -o /dev/null --max-time 2 -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REG/v2/ferrokube/$NAME/manifests/$tag"; then
  echo "$tag"
  exit 0
fi

R=$WORK/$NAME
rm -rf "$R" && mkdir -p "$R"/{etc,tmp,usr/bin}
chmod 1777 "$R/tmp"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' >"$R/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$R/etc/group"
install -m 0755 "$BIN" "$R/usr/bin/$EXE"
strip "$R/usr/bin/$EXE"
ldd "$BIN" | awk '$2 == "=>" {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u |
  while read -r lib; do
    [ -f "$lib" ] && install -D -m 0755 "$(readlink -f "$lib")" "$R$lib"
  done
# The binary must start in its own root (no library missing).
chroot "$R" "/usr/bin/$EXE" --help >/dev/null

expose=()
for p in "$@"; do expose+=(--expose "$p"); done
python3 "$HERE/ociimage.py" --registry "$REG" --rootfs "$R" \
  --tag "ferrokube/$NAME:v$VERSION" --tag "ferrokube/$NAME:$tag" \
  --entrypoint "[\"/usr/bin/$EXE\"]" "${expose[@]}" >/dev/null
echo "$tag" >"$stamp"
echo "build-addon: pushed ferrokube/$NAME:$tag ($(du -sh "$R" | cut -f1) rootfs)" >&2
echo "$tag"
