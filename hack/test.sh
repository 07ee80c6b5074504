#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test tier that runs on one machine
# (unit, storage conformance on SQLite and on a real etcd, durability, integration).
# Installs missing Debian packages first, so it runs on a fresh Debian machine as root.
set -euo pipefail
cd "$(dirname "$0")/.."

bash hack/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"

# The build cache lives outside the clone so fresh clones (CI) reuse it.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  if mkdir -p /var/cache/ferrokube/target 2>/dev/null && [ -w /var/cache/ferrokube/target ]; then
    export CARGO_TARGET_DIR=/var/cache/ferrokube/target
  fi
fi
export CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 RUST_BACKTRACE=1

# A shared cache keeps the artifacts of every tree it has built, so it only grows. Keep
# the disk from filling: a run from a fresh clone writes about 12 GiB (every workspace
# crate and test executable under new hashes; about 40 GiB before the integration tests
# became one executable per crate), so below NEED_GIB free, drop the
# incremental state (rebuildable, not used here), then the libraries no build has read
# for two days (other clones' workspace crates), then, if still short, the whole cache
# (a full rebuild is slow, not wrong).
NEED_GIB=24
prune_build_cache() {
  local dir=$1
  free_gib() { df -P --block-size=1G "$dir" | awk 'NR == 2 { print $4 }'; }
  # Test executables (hundreds of MiB each) pile up under new hashes: a clone at another
  # path builds every workspace crate under a new hash, so each fresh-clone run leaves
  # its own behind (48 GB of them had gathered in one day). One not relinked for an hour
  # is stale: this run relinks what it needs, and no clone reuses another's.
  [ -d "$dir/debug/deps" ] &&
    find "$dir/debug/deps" -maxdepth 1 -type f -perm -u+x ! -name '*.so' -mmin +60 -delete
  [ "$(free_gib)" -ge "$NEED_GIB" ] && return 0
  rm -rf "$dir"/debug/incremental "$dir"/release/incremental
  [ "$(free_gib)" -ge "$NEED_GIB" ] && return 0
  # relatime updates a file's access time at least daily while builds read it.
  [ -d "$dir/debug/deps" ] && find "$dir/debug/deps" -maxdepth 1 -type f -atime +2 -delete
  [ "$(free_gib)" -ge "$NEED_GIB" ] && return 0
  echo "less than $NEED_GIB GiB free: emptying the build cache $dir" >&2
  rm -rf "$dir"/debug "$dir"/release
}
if [ -n "${CARGO_TARGET_DIR:-}" ] && [ -d "$CARGO_TARGET_DIR" ]; then
  prune_build_cache "$CARGO_TARGET_DIR"
fi

# Each step says when it began (minutes:seconds since the start), so a run's log shows
# where its time went.
step() { printf '\n==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "systemd units (systemd-analyze verify of deploy/systemd)"
bash hack/verify-systemd.sh

step "container runtime (containerd, CNI, offline images, local registry mirror)"
# The kubelet's integration tests run on the real containerd; they fail (never skip) when
# it is not reachable. rt::ensure applies the network containment first and is quick
# when everything is already up.
if [ "$(id -u)" -eq 0 ]; then
  (source hack/lib/runtime.sh && rt::ensure)
else
  echo "not root: containerd is not set up; the kubelet's runtime tests need it" >&2
fi

step "cargo test"
cargo test --workspace --locked --no-fail-fast

step "build the components for the e2e tiers (debug)"
# One build for every e2e tier: each `cargo build` of another package set unifies
# features differently and would compile the workspace's crates again. Debug binaries
# keep CI from a release build.
cargo build --locked --bins -p kube-apiserver -p kube-scheduler -p kube-controller-manager \
  -p kubelet -p kube-proxy -p kube-dns -p metrics-server -p ferrokube-pki-cli -p ferrokube-kubelet
bin_dir="${CARGO_TARGET_DIR:-$PWD/target}/debug"

step "e2e: kubectl against kube-apiserver (embedded store and etcd)"
E2E_BIN_DIR=$bin_dir bash e2e/apiserver.sh

step "e2e: single-node cluster (hack/up.sh, kubectl run nginx, curl the pod IP, hack/down.sh)"
# Runs after the kubelet's tests: the cluster's kubelet removes pods on the shared
# containerd that it does not own.
if [ "$(id -u)" -eq 0 ]; then
  FK_BIN_DIR=$bin_dir bash e2e/single-node.sh
  step "e2e: 3-node cluster (hack/up.sh --nodes 3: Services, DNS, NodePorts across nodes, drain with a PodDisruptionBudget, node failure, hack/down.sh)"
  # Same binaries; under the lock the other cluster tests take (same ports, same runtime),
  # unless this run holds it already (`flock /run/ferrokube-e2e.lock hack/test.sh` hands
  # its descriptor down; taking it again would wait for ever).
  lock=(flock /run/ferrokube-e2e.lock)
  for fd in "/proc/$$/fd/"*; do
    if [ "$(readlink "$fd")" = /run/ferrokube-e2e.lock ]; then lock=(); fi
  done
  FK_BIN_DIR=$bin_dir "${lock[@]}" bash e2e/multi-node.sh
else
  echo "not root: the single-node and 3-node cluster e2e need root" >&2
  exit 1
fi

echo
echo "all tests passed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
