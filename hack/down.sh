#!/usr/bin/env bash
# Tears down what hack/up.sh brought up:
#
#   hack/down.sh [--purge]
#
#   0. removes the nodes of a multi-node cluster (up.sh --nodes N; hack/lib/nodes.sh): per
#      node its kube-proxy and kubelet, its pods (through its CRI), its containerd, pod
#      cgroups, network namespace (with its veth, bridges and nftables rules), the routes
#      to its pod CIDR and its Node object; then the nodes' registry listener,
#   1. stops kube-proxy, the kubelet, kube-scheduler, kube-controller-manager,
#      kube-apiserver and etcd, each by its PID file in /run/ferrokube (SIGTERM, bounded
#      wait, then SIGKILL), then deletes kube-proxy's nftables tables (`kube-proxy
#      --cleanup`) and turns net.ipv4.conf.all.route_localnet back off;
#   2. removes every pod sandbox and its containers through the CRI (ferrokube-cri);
#   3. stops containerd and the local registry when up.sh started them (a containerd that
#      was already running, e.g. left by hack/test.sh, is left running), and removes the
#      empty pod cgroups under /kubepods;
#   4. removes the network devices and rules it made: the CNI bridge cni0 and portmap
#      chains (once containerd is stopped), then, last, the network containment
#      (nftables table ferrokube_contain, the Service CIDR route and kube-svc0) -- but only
#      when no containerd is left that could still start pods.
#
# Packages stay installed. --purge also deletes the cluster's data (embedded store, etcd
# data, kubelet root dir, the hostPath provisioner's volumes in /tmp/hostpath_pv), the PKI
# and kubeconfigs in /etc/ferrokube/pki, and the logs.
# Idempotent: with nothing up, it does nothing and exits 0.
set -euo pipefail

purge=0
for arg in "$@"; do
  case $arg in
    --purge) purge=1 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"
# shellcheck source=hack/lib/nodes.sh
source "$REPO/hack/lib/nodes.sh"

[ "$(id -u)" -eq 0 ] || fk::die "hack/down.sh must run as root"
# Name the command that failed (set -e alone exits with its status and says nothing).
set -E
trap 'fk::log "error: hack/down.sh: \`$BASH_COMMAND\` exited with $? (line $LINENO)"' ERR
T0=$(date +%s.%N)

TARGET_DIR=$(fk::target_dir)
BIN_DIR=$TARGET_DIR/release

# 0. Nodes of a multi-node cluster (with the apiserver still up, to delete their Nodes).
fk::nodes_down "$BIN_DIR"

# 1. Components, in reverse start order (the kubelet first, so nothing recreates pods).
for ((i = ${#FK_COMPONENTS[@]} - 1; i >= 0; i--)); do
  name=${FK_COMPONENTS[i]}
  case $name in
    etcd) bin=etcd ;;
    *) bin=$BIN_DIR/$name ;;
  esac
  fk::stop "$name" "$bin" 30
done

# 1b. kube-proxy's rules (its tables ip/ip6 kube-proxy); the containment stays.
if [ -x "$BIN_DIR/kube-proxy" ]; then
  "$BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || fk::log "warning: kube-proxy --cleanup failed"
else
  for fam in ip ip6; do
    if nft list table "$fam" kube-proxy >/dev/null 2>&1; then nft delete table "$fam" kube-proxy; fi
  done
fi
# kube-proxy set route_localnet=1 for localhost NodePorts; the rule that dropped outside
# packets to 127/8 went with its table, so leaving the sysctl on would accept them.
sysctl -qw net.ipv4.conf.all.route_localnet=0 || fk::log "warning: cannot reset net.ipv4.conf.all.route_localnet"

# 2. Pods, through the CRI (the release ferrokube-cri up.sh built, else a debug one).
if [ -z "${RT_CRI_TOOL:-}" ]; then
  for t in "$BIN_DIR/ferrokube-cri" "$TARGET_DIR/debug/ferrokube-cri"; do
    [ -x "$t" ] && { export RT_CRI_TOOL=$t; break; }
  done
fi
if rt::containerd_ready; then
  if [ -n "${RT_CRI_TOOL:-}" ]; then
    n=$("$RT_CRI_TOOL" --endpoint "unix://$RT_CONTAINERD_SOCK" pods 2>/dev/null | wc -l || true)
    if [ "${n:-0}" -gt 0 ]; then
      fk::log "removing $n pod sandbox(es) through the CRI"
      "$RT_CRI_TOOL" --endpoint "unix://$RT_CONTAINERD_SOCK" remove-all-pods
    fi
  else
    fk::log "warning: no ferrokube-cri binary (hack/up.sh builds it); pods left in containerd"
  fi
fi

# 3. containerd and the registry, when up.sh started them.
if [ -f "$FK_OWNS_RUNTIME" ]; then
  rt::stop_pidfile "$RT_CONTAINERD_PID" containerd
  rt::stop_pidfile "$RT_REGISTRY_PID" docker-registry
  rm -f "$FK_OWNS_RUNTIME"
elif rt::pid_alive "$RT_CONTAINERD_PID" containerd; then
  fk::log "containerd (pid $(cat "$RT_CONTAINERD_PID")) was running before hack/up.sh; left running"
fi
rt::cleanup_cgroups

# 4. Network: the control-plane bridge (its components are stopped), CNI leftovers once
# no containerd can use them, containment last.
fk::remove_control_plane_net
if ! rt::containerd_ready; then
  if ip link show cni0 >/dev/null 2>&1; then
    ip link del cni0 && fk::log "removed bridge cni0"
  fi
  # CNI chains in the nat table (bridge ipMasq, portmap; iptables-nft): per-pod ones went
  # with their sandboxes; the shared portmap chains stay behind. Jumps first, then chains.
  if command -v iptables >/dev/null 2>&1; then
    # (grep finds nothing when no pod ever ran on the host: not an error under pipefail.)
    { iptables -t nat -S 2>/dev/null | grep -E '^-A (PREROUTING|INPUT|OUTPUT|POSTROUTING) .*-j CNI-' || true; } |
      while read -r rule; do eval "iptables -t nat -D ${rule#-A }" || true; done
    chains=$(iptables -t nat -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}')
    for chain in $chains; do iptables -t nat -F "$chain" || true; done
    for chain in $chains; do
      iptables -t nat -X "$chain" && fk::log "removed iptables nat chain $chain"
    done
  fi
  rm -rf "${RT_CNI_DATA_DIR:?}"/*
  rt::uncontain && fk::log "removed the network containment (ferrokube_contain, $RT_SERVICE_CIDR route, kube-svc0)"
else
  fk::log "containerd still runs: network containment kept (pods could still start)"
fi

if [ $purge -eq 1 ]; then
  # Volume tmpfs a killed kubelet left mounted would make rm fail (its kubelet is stopped).
  fk::umount_under "$FK_KUBELET_ROOT"
  # The store that knew the provisioned volumes is gone, so their directories go too.
  rm -rf "$FK_APISERVER_DATA" "$FK_ETCD_DATA" "$FK_KUBELET_ROOT" "$FK_PKI_DIR" "$FK_ETC/manifests" \
    "$FK_NODES_DATA" "$FK_NODES_ETC" /tmp/hostpath_pv
  rm -f "$FK_LOG_DIR/$FK_NODE_PREFIX"*.log "$FK_LOG_DIR/registry-nodes.log"
  for name in "${FK_COMPONENTS[@]}"; do rm -f "$FK_LOG_DIR/$name.log"; done
  fk::log "purged $FK_APISERVER_DATA $FK_ETCD_DATA $FK_KUBELET_ROOT $FK_PKI_DIR and the component logs"
fi

awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "Ferrokube is down (%.1f s).\n", b - a }'
