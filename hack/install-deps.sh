#!/usr/bin/env bash
# Installs what building and testing Ferrokube needs on Debian (bookworm), when missing.
# Idempotent; only Debian packages (and rustup, when no cargo is found) are fetched:
# bookworm's, and etcd-server 3.5 from Debian 13 (trixie) through an apt pin.
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
  [htpasswd]=apache2-utils     # e2e/single-node.d/22-pull-secrets.sh: a registry's bcrypt users
)
missing=()
for cmd in "${!packages[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${packages[$cmd]}")
done
# etcd-client's build script imports google/protobuf/descriptor.proto, which protoc
# alone does not ship.
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)

# rt::apt_install: apt-get install with a policy-rc.d that keeps daemons from starting.
# shellcheck source=hack/lib/runtime.sh
source "$(dirname "$0")/lib/runtime.sh"

if [ ${#missing[@]} -gt 0 ]; then
  need_root "${missing[*]}"
  rt::apt_install "${missing[@]}" ca-certificates
  echo "install-deps: installed ${missing[*]}"
fi

# etcd 3.5, from Debian 13 (trixie). Bookworm's etcd 3.4 evaluates every transaction's
# compares on a copy of its write buffer (fixed in 3.5 by etcd-io/etcd#12896), so a create
# (a compare-and-put transaction, as upstream's apiserver issues) reaches only about 60 %
# of etcd's put rate there, against about 95 % on 3.5 (docs/benchmarks.md, Storage). An
# apt pin takes etcd-server alone from trixie; every other package stays bookworm's.
etcd_version() { etcd --version 2>/dev/null | awk '/^etcd Version:/ { print $3 }'; }
if ! printf '3.5.0\n%s\n' "$(etcd_version)" | sort -C -V; then
  need_root "etcd-server 3.5 (installed: $(etcd_version))"
  cat >/etc/apt/sources.list.d/ferrokube-trixie.sources <<'SOURCES'
# hack/install-deps.sh: etcd-server 3.5 comes from here (see the pin in
# /etc/apt/preferences.d/ferrokube-trixie); nothing else does.
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  cat >/etc/apt/preferences.d/ferrokube-trixie <<'PIN'
# hack/install-deps.sh: only etcd-server comes from trixie.
Package: *
Pin: release n=trixie
Pin-Priority: 1

Package: etcd-server
Pin: release n=trixie
Pin-Priority: 990
PIN
  rt::apt_install etcd-server
  echo "install-deps: installed etcd-server $(etcd_version) from Debian 13"
fi

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "install-deps: installing the Rust toolchain with rustup" >&2
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
fi
