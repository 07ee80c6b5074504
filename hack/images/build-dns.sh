#!/usr/bin/env bash
# Builds the cluster DNS image (the kube-dns addon) offline from the release binary and
# pushes it into the local registry mirror:
#   registry.k8s.io/ferrokube/dns:v<version> and :v<version>-<binary digest>
#   -> <registry>/ferrokube/dns:...
# The image holds the stripped binary, the shared libraries `ldd` reports for it (copied
# from the host, like the nginx image) and a passwd/group; no shell. Prints the
# content-addressed tag (v<version>-<digest>), which hack/up.sh puts in the Deployment so
# a rebuilt binary rolls the pods.
#
# Usage: build-dns.sh REGISTRY_ADDR WORK_DIR KUBE_DNS_BINARY VERSION
# Idempotent: skipped (tag printed) when WORK_DIR/dns.built records the same binary and
# the registry still serves the tag.
set -euo pipefail
REG=${1:?registry address}
WORK=${2:?work dir}
BIN=${3:?kube-dns binary}
VERSION=${4:?version}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$BIN" ] || { echo "build-dns: $BIN is not an executable" >&2; exit 1; }

digest=$(cat "$BIN" "$0" | sha256sum | cut -c1-12)
tag="v$VERSION-$digest"
stamp=$WORK/dns.built
mkdir -p "$WORK"
if [ "$(cat "$stamp" 2>/dev/null)" = "$tag" ] &&
  curl -sf -o /dev/null --max-time 2 -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REG/v2/ferrokube/dns/manifests/$tag"; then
  echo "$tag"
  exit 0
fi

R=$WORK/dns
rm -rf "$R" && mkdir -p "$R"/{etc,tmp,usr/bin}
chmod 1777 "$R/tmp"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' >"$R/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$R/etc/group"
install -m 0755 "$BIN" "$R/usr/bin/kube-dns"
strip "$R/usr/bin/kube-dns"
ldd "$BIN" | awk '$2 == "=>" {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u |
  while read -r lib; do
    [ -f "$lib" ] && install -D -m 0755 "$(readlink -f "$lib")" "$R$lib"
  done
# The binary must start in its own root (no library missing).
chroot "$R" /usr/bin/kube-dns --help >/dev/null

python3 "$HERE/ociimage.py" --registry "$REG" --rootfs "$R" \
  --tag "ferrokube/dns:v$VERSION" --tag "ferrokube/dns:$tag" \
  --entrypoint '["/usr/bin/kube-dns"]' \
  --expose 53/udp --expose 53/tcp --expose 9153/tcp >/dev/null
echo "$tag" >"$stamp"
echo "build-dns: pushed ferrokube/dns:$tag ($(du -sh "$R" | cut -f1) rootfs)" >&2
echo "$tag"
