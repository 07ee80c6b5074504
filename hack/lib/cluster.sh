#!/usr/bin/env bash
# Ferrokube single-node cluster: paths and process helpers shared by hack/up.sh,
# hack/down.sh and e2e/. Sourced after hack/lib/runtime.sh (it uses rt::log's directories).
#
# Every process is started with setsid, its PID in $FK_RUN_DIR/<name>.pid, its command line
# in $FK_RUN_DIR/<name>.cmd and its log in $FK_LOG_DIR/<name>.log. Only processes whose PID
# file names them (and whose /proc/PID/comm matches) are ever signalled.

# Variables here are used by the scripts that source this file.
# shellcheck disable=SC2034
FK_RUN_DIR=${RT_RUN_DIR:-/run/ferrokube}
FK_LOG_DIR=${RT_LOG_DIR:-/var/log/ferrokube}
FK_ETC=${FK_ETC:-/etc/ferrokube}
FK_PKI_DIR=${FK_PKI_DIR:-$FK_ETC/pki}
FK_DATA_DIR=${FK_DATA_DIR:-/var/lib/ferrokube}
FK_APISERVER_DATA=$FK_DATA_DIR/apiserver
FK_ETCD_DATA=$FK_DATA_DIR/etcd
FK_KUBELET_ROOT=${FK_KUBELET_ROOT:-/var/lib/kubelet}
# The control plane's address: on an empty bridge of ours (this kernel has no dummy
# device), so that pods (through the `kubernetes` Service) and node network namespaces
# can reach the apiserver without it listening on the machine's uplink.
FK_CP_BRIDGE=fk-br0
FK_CP_CIDR=172.18.0.1/24
FK_API_ADDR=172.18.0.1
FK_API_PORT=6443
FK_API_URL=https://$FK_API_ADDR:$FK_API_PORT
FK_ETCD_CLIENT_URL=http://127.0.0.1:2379
FK_ETCD_PEER_URL=http://127.0.0.1:2380
FK_CLUSTER_DNS=10.96.0.10
FK_CLUSTER_DOMAIN=cluster.local
FK_CLUSTER_CIDR=10.244.0.0/16
FK_ADMIN_KUBECONFIG=$FK_PKI_DIR/admin.kubeconfig
# The order up.sh starts them in; down.sh stops them in reverse.
FK_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# Marker: up.sh started containerd and the registry itself (so down.sh may stop them).
FK_OWNS_RUNTIME=$FK_RUN_DIR/up.owns-runtime

# The control-plane bridge and its address (idempotent).
fk::ensure_control_plane_net() {
  ip link show "$FK_CP_BRIDGE" >/dev/null 2>&1 || ip link add "$FK_CP_BRIDGE" type bridge
  # (Captured, not `ip | grep -q`: under pipefail, grep exiting at the first match can
  # SIGPIPE ip, the pipeline fails and `ip addr add` exits 2, "already assigned".)
  grep -qF " $FK_CP_CIDR " <<<"$(ip addr show dev "$FK_CP_BRIDGE")" ||
    ip addr add "$FK_CP_CIDR" dev "$FK_CP_BRIDGE"
  ip link set "$FK_CP_BRIDGE" up
}

fk::remove_control_plane_net() {
  if ip link show "$FK_CP_BRIDGE" >/dev/null 2>&1; then
    ip link del "$FK_CP_BRIDGE" && fk::log "removed bridge $FK_CP_BRIDGE ($FK_CP_CIDR)"
  fi
  return 0
}

fk::log() { printf '%s\n' "$*" >&2; }
fk::die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The Cargo target dir, chosen exactly as hack/test.sh chooses it.
fk::target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    printf '%s\n' "$CARGO_TARGET_DIR"
  elif mkdir -p /var/cache/ferrokube/target 2>/dev/null && [ -w /var/cache/ferrokube/target ]; then
    printf '%s\n' /var/cache/ferrokube/target
  else
    printf '%s\n' "$RT_REPO_DIR/target"
  fi
}

# For the e2e: no cluster of ours running (one on another store would keep its
# controllers' caches and the kubelet's pods across the apiserver's restart) and an empty
# store in $FK_DATA_DIR.
fk::e2e_fresh_store() { # repo
  local name
  for name in "${FK_COMPONENTS[@]}"; do
    if [ -f "$(fk::pidfile "$name")" ]; then
      fk::log "a cluster is up: hack/down.sh first"
      bash "$1/hack/down.sh" >&2
      break
    fi
  done
  rm -rf "$FK_APISERVER_DATA" "$FK_ETCD_DATA"
  # A new store is a new cluster: multi-node kubelets join it again (with a CSR) rather
  # than log in with certificates bootstrapped into the last one.
  rm -rf "$FK_DATA_DIR"/nodes/*/kubelet.conf "$FK_DATA_DIR"/nodes/*/kubelet/pki \
    "$FK_DATA_DIR"/nodes/*/kubelet-ca.sum
}

fk::node_name() { hostname | tr '[:upper:]' '[:lower:]'; }

fk::pidfile() { printf '%s/%s.pid\n' "$FK_RUN_DIR" "$1"; }

# /proc/PID/comm holds at most 15 characters of the executable's name.
fk::comm() { local b; b=$(basename "$1"); printf '%s\n' "${b:0:15}"; }

# PID of a running component we started, or nothing (exit 1).
fk::pid_of() { # name binary
  local f pid
  f=$(fk::pidfile "$1")
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && fk::running "$pid" || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(fk::comm "$2")" ] || return 1
  printf '%s\n' "$pid"
}

# A process that still runs (a zombie waiting for PID 1 to reap it has exited).
fk::running() { # pid
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Stops a component by its PID file: SIGTERM, then (bounded wait) SIGKILL.
fk::stop() { # name binary [timeout_s]
  local name=$1 bin=$2 timeout=${3:-15} pid i t0
  if ! pid=$(fk::pid_of "$name" "$bin"); then
    rm -f "$(fk::pidfile "$name")" "$FK_RUN_DIR/$name.cmd"
    return 0
  fi
  t0=$(date +%s.%N)
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    fk::running "$pid" || break
    sleep 0.1
  done
  if fk::running "$pid"; then
    fk::log "$name (pid $pid) did not exit within ${timeout}s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      fk::running "$pid" || break
      sleep 0.1
    done
  fi
  rm -f "$(fk::pidfile "$name")" "$FK_RUN_DIR/$name.cmd"
  fk::log "stopped $name (pid $pid) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}

# Polls a command until it succeeds: at most `tries` attempts `interval` seconds apart.
fk::wait_for() { # tries interval command...
  local tries=$1 interval=$2 i
  shift 2
  for ((i = 0; i < tries; i++)); do
    "$@" && return 0
    sleep "$interval"
  done
  return 1
}

# kubectl against the cluster as the admin (the real, upstream kubectl).
fk::kubectl() {
  timeout 20 kubectl --kubeconfig "$FK_ADMIN_KUBECONFIG" --request-timeout=10s "$@"
}

fk::apiserver_ready() {
  curl -sf -o /dev/null --max-time 2 --cacert "$FK_PKI_DIR/ca.crt" \
    --cert "$FK_PKI_DIR/admin.crt" --key "$FK_PKI_DIR/admin.key" "$FK_API_URL/readyz"
}

fk::node_ready() {
  local status
  status=$(fk::kubectl get node "$(fk::node_name)" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) || return 1
  [ "$status" = True ]
}
