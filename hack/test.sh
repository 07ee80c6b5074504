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

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked --no-fail-fast

echo
echo "all tests passed"
