#!/usr/bin/env bash
# Ferrokube node runtime: containerd + runc + CNI + offline images + a local registry mirror,
# inside a contained network. Sourced by hack/up.sh, hack/down.sh and hack/test.sh; every
# function is idempotent, runs as root, and only ever stops or removes what it made itself
# (processes by the PID files below, rules in the nftables table `ferrokube_contain`).
#
#   rt::install_packages   Debian packages, installed when missing
#   rt::contain            network containment (MUST run before any pod traffic)
#   rt::configure          containerd config.toml, registry mirror hosts.toml, CNI conflist
#   rt::start_containerd   setsid + PID file; waits until the CRI socket answers
#   rt::build_images       pause/busybox/nginx built offline (hack/images/build.sh)
#   rt::start_registry     docker-registry on 127.0.0.1:5000 (the only place images come from)
#   rt::push_images        push the images into the mirror under the names pulls resolve to
#   rt::ensure             all of the above, in the right order; fast when already done
#   rt::remove_pods        remove every CRI pod sandbox (containers go with them)
#   rt::stop               remove pods, stop registry and containerd by PID
#   rt::uncontain          remove the containment (table, route, kube-svc0)
#
# Containment (see shared/runtime/README.md, "Network containment"): this machine's default
# route leads to a network that is not ours. So: the whole Service CIDR is routed into an
# empty local bridge (kube-svc0) where un-NATed packets die; forwarded traffic leaving through
# the uplink is dropped (pods cannot reach the outside world; the CNI's ipMasq would otherwise
# let them); and containerd resolves docker.io, registry.k8s.io and the other registries
# listed below only through the local mirror: the mirror is also each one's `server`, so
# containerd never falls back to the real registry when the mirror lacks an image.

RT_STATE_DIR=${RT_STATE_DIR:-/var/lib/ferrokube/runtime}
RT_RUN_DIR=${RT_RUN_DIR:-/run/ferrokube}
RT_LOG_DIR=${RT_LOG_DIR:-/var/log/ferrokube}
RT_CONTAINERD_SOCK=${RT_CONTAINERD_SOCK:-/run/containerd/containerd.sock}
RT_CONTAINERD_PID=$RT_RUN_DIR/containerd.pid
RT_REGISTRY_PID=$RT_RUN_DIR/registry.pid
RT_REGISTRY_ADDR=${RT_REGISTRY_ADDR:-127.0.0.1:5000}
RT_SERVICE_CIDR=${RT_SERVICE_CIDR:-10.96.0.0/12}
RT_POD_CIDR=${RT_POD_CIDR:-10.244.0.0/24}
# The cluster's own private ranges (the control-plane bridge fk-br0 and every node's pod
# CIDR): reachable only through local devices, never through the uplink.
RT_LOCAL_ONLY_CIDRS=${RT_LOCAL_ONLY_CIDRS:-172.18.0.0/24, 10.244.0.0/16}
RT_POD_GATEWAY=${RT_POD_GATEWAY:-10.244.0.1}
RT_SVC_BRIDGE=kube-svc0
RT_NFT_TABLE=ferrokube_contain
RT_IMAGE_DIR=${RT_IMAGE_DIR:-/var/cache/ferrokube/images}
RT_PAUSE_IMAGE=registry.k8s.io/pause:3.10
# Registries whose pulls go to the local mirror and nowhere else (`_default` is the catch-all
# of newer containerd versions; 1.6 ignores it). Image references naming any other registry
# must not be used on this machine.
RT_MIRRORED_REGISTRIES=(docker.io registry.k8s.io quay.io ghcr.io gcr.io k8s.gcr.io _default)

RT_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RT_REPO_DIR=$(cd "$RT_LIB_DIR/../.." && pwd)

rt::log() { printf 'runtime: %s\n' "$*" >&2; }
rt::die() { printf 'runtime: error: %s\n' "$*" >&2; return 1; }

rt::need_root() {
  [ "$(id -u)" -eq 0 ] || rt::die "must run as root"
}

# A PID file's process is alive and is the expected program.
rt::pid_alive() { # pidfile comm
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# The interface of the default route (the uplink that is not ours).
rt::uplink() {
  ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}'
}

# Runs a daemon in a session of its own with only stdin, stdout and stderr open, as
# `rt::daemon command args... >>log 2>&1 </dev/null &` ($! is the daemon's own PID: the
# subshell execs setsid, which execs the command). A descriptor inherited from the caller
# would keep e.g. `flock /run/ferrokube-e2e.lock hack/up.sh`'s lock held for as long as
# the daemon lives, long after that command has exited.
rt::daemon() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done
  exec setsid "$@"
}

# ---------------------------------------------------------------- packages
rt::install_packages() {
  rt::need_root || return 1
  # command or file -> Debian package
  local -A want=(
    [/usr/bin/containerd]=containerd
    [/usr/sbin/runc]=runc
    [/usr/lib/cni/bridge]=containernetworking-plugins
    [/usr/sbin/nft]=nftables
    [/usr/sbin/iptables-restore]=iptables   # kube-proxy --proxy-mode=iptables
    [/usr/sbin/ip]=iproute2
    [/bin/busybox]=busybox-static
    [/usr/bin/docker-registry]=docker-registry
    [/usr/bin/curl]=curl
    [/usr/bin/gcc]=gcc
    [/usr/include/stdio.h]=libc6-dev
    [/usr/bin/python3]=python3
  )
  local f missing=()
  for f in "${!want[@]}"; do
    [ -e "$f" ] || missing+=("${want[$f]}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  rt::log "installing ${missing[*]}"
  rt::apt_install "${missing[@]}"
}

# apt-get install of Debian packages that must not start their daemons (containerd,
# docker-registry and etcd-server start nothing on their own): a policy-rc.d refusing
# for the length of the install, unless the image has one already.
rt::apt_install() { # package...
  local made_policy=0 rc=0
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
  [ $made_policy -eq 0 ] || rm -f /usr/sbin/policy-rc.d
  return $rc
}

# ---------------------------------------------------------------- containment
rt::contain() {
  rt::need_root || return 1
  local uplink
  uplink=$(rt::uplink)
  # 1. Service CIDR into an empty local bridge: a Service IP no DNAT rule catches dies here.
  if ! ip link show "$RT_SVC_BRIDGE" >/dev/null 2>&1; then
    ip link add "$RT_SVC_BRIDGE" type bridge
  fi
  ip link set "$RT_SVC_BRIDGE" up
  ip route replace "$RT_SERVICE_CIDR" dev "$RT_SVC_BRIDGE"
  # 2. Our own nftables table: forwarded traffic must not leave through the uplink, and pods
  #    must not talk to the uplink network through the host either. Replaced as a whole.
  #    Its chains run after the filter priority, so kube-proxy's rejects (iptables mode's
  #    filter chains run at that priority) answer first; a drop here ends any packet
  #    that earlier chains accepted.
  local rules="table inet $RT_NFT_TABLE {
  chain forward {
    type filter hook forward priority filter + 10; policy accept;
    ip daddr $RT_SERVICE_CIDR oifname \"$RT_SVC_BRIDGE\" counter drop"
  if [ -n "$uplink" ]; then
    rules="$rules
    oifname \"$uplink\" counter drop"
  fi
  rules="$rules
  }
  chain output {
    type filter hook output priority filter + 10; policy accept;
    ip daddr $RT_SERVICE_CIDR oifname \"$RT_SVC_BRIDGE\" counter drop"
  # 3. The host's own traffic to the cluster's ranges when their device is gone (fk-br0
  #    after hack/down.sh, a node's routes) would follow the default route out.
  if [ -n "$uplink" ]; then
    rules="$rules
    ip daddr { $RT_LOCAL_ONLY_CIDRS } oifname \"$uplink\" counter drop"
  fi
  rules="$rules
  }
}"
  nft list table inet "$RT_NFT_TABLE" >/dev/null 2>&1 && nft delete table inet "$RT_NFT_TABLE"
  printf '%s\n' "$rules" | nft -f - || return 1
  # Pods get a cluster DNS address inside the Service CIDR (the kubelet's --cluster-dns),
  # never the host's resolver; nothing here points them elsewhere.
}

rt::uncontain() {
  rt::need_root || return 1
  nft list table inet "$RT_NFT_TABLE" >/dev/null 2>&1 && nft delete table inet "$RT_NFT_TABLE"
  ip route del "$RT_SERVICE_CIDR" dev "$RT_SVC_BRIDGE" 2>/dev/null
  ip link show "$RT_SVC_BRIDGE" >/dev/null 2>&1 && ip link del "$RT_SVC_BRIDGE"
  return 0
}

# ---------------------------------------------------------------- configuration
RT_ETC=${RT_ETC:-/etc/ferrokube}
RT_CONTAINERD_CONFIG=$RT_ETC/containerd/config.toml
RT_CERTS_D=$RT_ETC/containerd/certs.d
RT_CNI_CONF_DIR=$RT_ETC/cni/net.d
RT_CNI_DATA_DIR=$RT_STATE_DIR/cni/networks
RT_REGISTRY_CONFIG=$RT_ETC/registry.yml
RT_REGISTRY_DATA=$RT_STATE_DIR/registry

# Writes $2 to $1 when it differs; returns 0 when the file changed.
rt::write_if_changed() {
  local file=$1 content=$2
  if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then
    return 1
  fi
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$content" >"$file.tmp" && mv "$file.tmp" "$file"
}

# Writes every config file; returns 0 when containerd's own config changed (so a running
# containerd must be restarted to see it). Mirror and CNI files are read live.
rt::configure() {
  rt::need_root || return 1
  local changed=1 reg
  if rt::write_if_changed "$RT_CONTAINERD_CONFIG" "$(rt::containerd_config)"; then
    changed=0
  fi
  for reg in "${RT_MIRRORED_REGISTRIES[@]}"; do
    rt::write_if_changed "$RT_CERTS_D/$reg/hosts.toml" \
"# Written by hack/lib/runtime.sh: $reg is served by the local mirror only. The mirror is
# also the server, so a missing image fails instead of falling back to the real registry.
server = \"http://$RT_REGISTRY_ADDR\"

[host.\"http://$RT_REGISTRY_ADDR\"]
  capabilities = [\"pull\", \"resolve\"]" || true
  done
  rt::write_if_changed "$RT_CNI_CONF_DIR/10-ferrokube-bridge.conflist" "$(rt::cni_conflist)" || true
  rt::write_if_changed "$RT_REGISTRY_CONFIG" "version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $RT_REGISTRY_DATA
  delete:
    enabled: true
http:
  addr: $RT_REGISTRY_ADDR" || true
  return $changed
}

# containerd's config.toml (containerd 1.6, schema version 2), one function for the host's
# instance (below) and each node's of a multi-node cluster (hack/lib/nodes.sh). Every path
# an instance owns is a parameter, so instances never share one (G14); the ttrpc address,
# the opt plugin's path and runc's state dir are set only when given (the host's instance
# keeps containerd's defaults).
rt::containerd_toml() { # header root state sock cni_conf_dir certs_d stream_addr [ttrpc_sock opt_dir runc_root]
  local header=$1 root=$2 state=$3 sock=$4 cni_conf_dir=$5 certs_d=$6 stream_addr=$7
  local ttrpc_sock=${8:-} opt_dir=${9:-} runc_root=${10:-}
  printf '%s\n' "$header"
  printf 'version = 2\nroot = "%s"\nstate = "%s"\n\n[grpc]\n  address = "%s"\n' "$root" "$state" "$sock"
  [ -z "$ttrpc_sock" ] || printf '[ttrpc]\n  address = "%s"\n' "$ttrpc_sock"
  [ -z "$opt_dir" ] || printf '\n[plugins."io.containerd.internal.v1.opt"]\n  path = "%s"\n' "$opt_dir"
  cat <<TOML

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$RT_PAUSE_IMAGE"
  # This VM's bounding set lacks CAP_SYS_RESOURCE: negative oom_score_adj values must be
  # clamped to containerd's own, or every sandbox fails to start.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  systemd_cgroup = false
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true
  stream_server_address = "$stream_addr"
  stream_server_port = "0"
  enable_tls_streaming = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
TOML
  [ -z "$runc_root" ] || printf '        Root = "%s"\n' "$runc_root"
  cat <<TOML

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$cni_conf_dir"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$certs_d"
TOML
}

rt::containerd_config() {
  rt::containerd_toml "# Written by hack/lib/runtime.sh. containerd 1.6, config schema version 2." \
    /var/lib/containerd /run/containerd "$RT_CONTAINERD_SOCK" "$RT_CNI_CONF_DIR" "$RT_CERTS_D" 127.0.0.1
}

rt::cni_conflist() {
  cat <<JSON
{
  "cniVersion": "1.0.0",
  "name": "ferrokube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$RT_POD_CIDR", "gateway": "$RT_POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RT_CNI_DATA_DIR"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
    {"type": "loopback"}
  ]
}
JSON
}

# ---------------------------------------------------------------- containerd
# (Without the socket, ctr would retry for 10 s before giving up.)
rt::containerd_ready() {
  [ -S "$RT_CONTAINERD_SOCK" ] &&
    ctr --address "$RT_CONTAINERD_SOCK" --connect-timeout 2s version >/dev/null 2>&1
}

rt::start_containerd() {
  rt::need_root || return 1
  if rt::pid_alive "$RT_CONTAINERD_PID" containerd; then
    return 0
  fi
  if rt::containerd_ready; then
    rt::die "a containerd this script did not start already serves $RT_CONTAINERD_SOCK; stop it first"
    return 1
  fi
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  mkdir -p "$RT_RUN_DIR" "$RT_LOG_DIR" "$RT_CNI_DATA_DIR"
  rt::daemon containerd --config "$RT_CONTAINERD_CONFIG" \
    >>"$RT_LOG_DIR/containerd.log" 2>&1 </dev/null &
  echo $! >"$RT_CONTAINERD_PID"
  local i pid=$!
  for i in $(seq 1 100); do
    rt::containerd_ready && { rt::log "containerd pid $pid ready"; return 0; }
    # (Gone, not "not containerd yet": right after the fork its comm is still setsid.)
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  tail -n 20 "$RT_LOG_DIR/containerd.log" >&2
  rt::die "containerd did not come up (log: $RT_LOG_DIR/containerd.log)"
}

# Stops a process we started, by PID file, waiting (bounded) for it to exit.
rt::stop_pidfile() { # pidfile comm
  rt::pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
  local pid i
  pid=$(cat "$1")
  kill "$pid"
  for i in $(seq 1 100); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  if [ -d "/proc/$pid" ]; then
    kill -KILL "$pid"
    sleep 0.2
  fi
  rm -f "$1"
  rt::log "stopped $2 (pid $pid)"
}

# ---------------------------------------------------------------- registry and images
rt::registry_ready() {
  curl -sf -o /dev/null --max-time 2 "http://$RT_REGISTRY_ADDR/v2/"
}

rt::start_registry() {
  rt::need_root || return 1
  if rt::pid_alive "$RT_REGISTRY_PID" docker-registry; then
    rt::registry_ready && return 0
  elif rt::registry_ready; then
    rt::die "something this script did not start already listens on $RT_REGISTRY_ADDR"
    return 1
  fi
  mkdir -p "$RT_RUN_DIR" "$RT_LOG_DIR" "$RT_REGISTRY_DATA"
  rt::daemon docker-registry serve "$RT_REGISTRY_CONFIG" \
    >>"$RT_LOG_DIR/registry.log" 2>&1 </dev/null &
  echo $! >"$RT_REGISTRY_PID"
  local i
  for i in $(seq 1 100); do
    rt::registry_ready && return 0
    sleep 0.1
  done
  rt::die "registry did not come up (log: $RT_LOG_DIR/registry.log)"
}

# The images the mirror must serve, as registry paths.
RT_IMAGES=(pause:3.10 library/busybox:latest library/nginx:latest library/nginx:1.22.1)

rt::images_present() {
  local img
  for img in "${RT_IMAGES[@]}"; do
    curl -sf -o /dev/null --max-time 2 \
      -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      "http://$RT_REGISTRY_ADDR/v2/${img%:*}/manifests/${img##*:}" || return 1
  done
}

# Builds and pushes the images when the mirror lacks one, or the builder changed.
rt::push_images() {
  rt::need_root || return 1
  local stamp want
  stamp=$RT_IMAGE_DIR/.built
  want=$(cat "$RT_REPO_DIR"/hack/images/* | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && rt::images_present; then
    return 0
  fi
  bash "$RT_REPO_DIR/hack/images/build.sh" "$RT_REGISTRY_ADDR" "$RT_IMAGE_DIR" >&2 || return 1
  echo "$want" >"$stamp"
}

# ---------------------------------------------------------------- all together
rt::ensure() {
  rt::need_root || return 1
  rt::install_packages || return 1
  rt::contain || return 1
  local restart=1
  rt::configure && restart=0
  if [ $restart -eq 0 ] && rt::pid_alive "$RT_CONTAINERD_PID" containerd; then
    rt::log "containerd config changed; restarting containerd"
    rt::stop_pidfile "$RT_CONTAINERD_PID" containerd
  fi
  rt::start_registry || return 1
  rt::push_images || return 1
  rt::start_containerd || return 1
}

# ---------------------------------------------------------------- teardown
# Removes every pod sandbox through the CRI (containers go with them, and the CNI releases
# their network) with the project's CRI tool, when it has been built.
rt::remove_pods() {
  local tool=${RT_CRI_TOOL:-${CARGO_TARGET_DIR:-$RT_REPO_DIR/target}/debug/ferrokube-cri}
  rt::containerd_ready || return 0
  if [ -x "$tool" ]; then
    "$tool" --endpoint "$RT_CONTAINERD_SOCK" remove-all-pods
  else
    rt::log "no CRI tool at $tool (cargo build -p ferrokube-kubelet --bin ferrokube-cri); pods left running"
  fi
}

# Removes the empty pod cgroups under /kubepods (runc leaves the pod-level parents).
rt::cleanup_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/kubepods; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  return 0
}

rt::stop() {
  rt::need_root || return 1
  rt::remove_pods
  rt::stop_pidfile "$RT_CONTAINERD_PID" containerd
  rt::stop_pidfile "$RT_REGISTRY_PID" docker-registry
  rt::cleanup_cgroups
}
