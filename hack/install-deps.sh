#!/usr/bin/env bash
# Installs what building and testing Ferrokube needs on Debian (bookworm), when missing.
# Idempotent; only Debian packages (and rustup, when no cargo is found) are fetched.
set -euo pipefail

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages ($*); run as root to install them" >&2
    exit 1
  fi
}

# command -> Debian package
declare -A packages=(
  [cc]=build-essential
  [protoc]=protobuf-compiler   # etcd-client and k8s-cri compile protos at build time
  [etcd]=etcd-server           # the etcd backend's conformance tests start a real etcd
  [etcdctl]=etcd-client
  [git]=git
  [curl]=curl
  [dig]=dnsutils               # e2e/single-node.d/50-dns.sh asks the cluster DNS
)
missing=()
for cmd in "${!packages[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${packages[$cmd]}")
done
# etcd-client's build script imports google/protobuf/descriptor.proto, which protoc
# alone does not ship.
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
if [ ${#missing[@]} -gt 0 ]; then
  need_root "${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" ca-certificates >/dev/null
  echo "install-deps: installed ${missing[*]}"
fi

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "install-deps: installing the Rust toolchain with rustup" >&2
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
fi
