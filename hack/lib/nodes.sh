#!/usr/bin/env bash
# Ferrokube kind-style multi-node cluster: N "nodes" on this machine, each a network
# namespace with its own containerd, kubelet and kube-proxy. Sourced by hack/up.sh
# (--nodes N) and hack/down.sh, after hack/lib/runtime.sh and hack/lib/cluster.sh.
#
#   fk::nodes_up N BIN_DIR   brings up (or keeps) nodes 1..N, removes nodes above N;
#                            idempotent, like up.sh; waits (bounded) for every node Ready
#   fk::nodes_down           tears down every node (processes, pods, cgroups, netns,
#                            veths, routes, the node-side registry listener)
#   fk::nodes_present        the numbers of the nodes whose netns exists
#   fk::host_node_down       removes the single-node shape's host kubelet and kube-proxy
#                            (their pods, rules and Node), when switching to --nodes
#
# Node i (1..N), see shared/runtime/README.md section 6 and gotchas G13-G14:
#   netns fk-node<i>, veth fk-veth<i> (root side, in the control-plane bridge
#   $FK_CP_BRIDGE) <-> eth0 (node side) with 172.18.0.(10+i)/24, default route via
#   $FK_API_ADDR (the apiserver's address on that bridge);
#   pod CIDR 10.244.<i>.0/24 on the node's own CNI bridge cni0; routes to every other
#   node's pod CIDR via that node's IP, in the root netns and in each node netns;
#   containerd started with `nsenter --net` (not `ip netns exec`, which hides
#   /sys/fs/cgroup), with its own root, state, socket, runc Root, CNI conf dir and
#   host-local dataDir, streaming on the node IP; images pulled through the local mirror,
#   which a second docker-registry serves on $FK_API_ADDR:5000 (same storage) since the
#   node netns cannot reach the root netns' loopback;
#   kubelet (node name fk-node<i>, its own client and serving certificates from
#   `ferrokube-pki init` in $FK_PKI_DIR/nodes/fk-node<i> with the cluster CA, cgroupRoot
#   /fk-node<i> so kubelets never share a /kubepods tree, its own root, log and manifest
#   dirs) and kube-proxy (--hostname-override; --proxy-mode from FK_NODE_PROXY_MODES),
#   both inside the netns.
#
# FK_NODE_PROXY_MODES (environment): kube-proxy's mode per node, space-separated, node 1
#   first, e.g. "nftables nftables iptables"; nodes past the list run nftables.
#
# Containment (no packet may leave the machine): in every node netns the Service CIDR is
# routed into an empty bridge kube-svc0, and nftables table ferrokube_contain drops
# anything sent or forwarded through eth0 to an address outside the control-plane subnet
# and the cluster CIDR; the root netns keeps its own containment (rt::contain), which
# drops forwarded traffic towards the uplink.

# shellcheck disable=SC2034
FK_NODE_PREFIX=fk-node
FK_NODE_SUBNET_PREFIX=172.18.0
FK_NODE_IP_OFFSET=10
FK_NODES_ETC=$FK_ETC/nodes
FK_NODES_DATA=$FK_DATA_DIR/nodes
FK_NODES_RUN=$FK_RUN_DIR/nodes
FK_NODE_REGISTRY_ADDR=${FK_API_ADDR}:5000
FK_NODE_REGISTRY_PID=$FK_RUN_DIR/registry-nodes.pid
FK_NODE_REGISTRY_CONFIG=$FK_ETC/registry-nodes.yml
# Short test timings for node failure: the kubelet renews its Lease every 5 s; the
# controller-manager's --node-monitor-grace-period (up.sh) is 20 s with nodes.
FK_NODE_LEASE_SECONDS=20

fk::node_name_of() { printf '%s%s\n' "$FK_NODE_PREFIX" "$1"; }
fk::node_ip_of() { printf '%s.%s\n' "$FK_NODE_SUBNET_PREFIX" "$((FK_NODE_IP_OFFSET + $1))"; }
fk::node_pod_cidr_of() { printf '10.244.%s.0/24\n' "$1"; }
fk::node_proxy_mode_of() { # i
  local modes
  read -r -a modes <<<"${FK_NODE_PROXY_MODES:-}"
  printf '%s\n' "${modes[$(($1 - 1))]:-nftables}"
}
fk::node_sock_of() { printf '%s/%s/containerd/containerd.sock\n' "$FK_NODES_RUN" "$(fk::node_name_of "$1")"; }

# Numbers of the nodes whose netns exists, ascending.
fk::nodes_present() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$FK_NODE_PREFIX\([0-9][0-9]*\)\$/\1/p" | sort -n
}

# Runs a command inside node i's network namespace only (G13: not `ip netns exec`).
fk::in_node() { # i command...
  local i=$1
  shift
  nsenter --net="/run/netns/$(fk::node_name_of "$i")" -- "$@"
}

# ---------------------------------------------------------------- network
fk::node_net_up() { # i
  local i=$1 name ip veth
  name=$(fk::node_name_of "$i")
  ip=$(fk::node_ip_of "$i")
  veth=fk-veth$i
  [ -e "/run/netns/$name" ] || ip netns add "$name"
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$name"
  fi
  ip link set "$veth" master "$FK_CP_BRIDGE" up
  ip -n "$name" link set lo up
  ip -n "$name" link set eth0 up
  ip -n "$name" addr replace "$ip/24" dev eth0
  ip -n "$name" route replace default via "$FK_API_ADDR" dev eth0
  fk::in_node "$i" sysctl -qw net.ipv4.ip_forward=1
  fk::in_node "$i" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  # Containment inside the node: un-NATed Service IPs die in an empty bridge, and nothing
  # leaves through eth0 except to the control plane and other nodes' pods. After the
  # filter priority, so that kube-proxy's rejects (iptables mode's filter chains run at
  # that priority) answer first; a drop here still ends any packet they let through.
  ip -n "$name" link show "$RT_SVC_BRIDGE" >/dev/null 2>&1 ||
    ip -n "$name" link add "$RT_SVC_BRIDGE" type bridge
  ip -n "$name" link set "$RT_SVC_BRIDGE" up
  ip -n "$name" route replace "$RT_SERVICE_CIDR" dev "$RT_SVC_BRIDGE"
  local allowed="${FK_NODE_SUBNET_PREFIX}.0/24, $FK_CLUSTER_CIDR"
  fk::in_node "$i" nft list table inet "$RT_NFT_TABLE" >/dev/null 2>&1 &&
    fk::in_node "$i" nft delete table inet "$RT_NFT_TABLE"
  fk::in_node "$i" nft -f - <<EOF
table inet $RT_NFT_TABLE {
  chain forward {
    type filter hook forward priority filter + 10; policy accept;
    ip daddr $RT_SERVICE_CIDR oifname "$RT_SVC_BRIDGE" counter drop
    oifname "eth0" ip daddr != { $allowed } counter drop
    oifname "eth0" meta nfproto ipv6 counter drop
  }
  chain output {
    type filter hook output priority filter + 10; policy accept;
    ip daddr $RT_SERVICE_CIDR oifname "$RT_SVC_BRIDGE" counter drop
    oifname "eth0" ip daddr != { $allowed } counter drop
    oifname "eth0" meta nfproto ipv6 counter drop
  }
}
EOF
}

# host-gw routes: every node's pod CIDR via its IP, in the root netns and in every other node.
fk::nodes_routes() { # N
  local n=$1 i j
  for ((j = 1; j <= n; j++)); do
    ip route replace "$(fk::node_pod_cidr_of "$j")" via "$(fk::node_ip_of "$j")" dev "$FK_CP_BRIDGE"
    for ((i = 1; i <= n; i++)); do
      [ "$i" -eq "$j" ] && continue
      ip -n "$(fk::node_name_of "$i")" route replace "$(fk::node_pod_cidr_of "$j")" \
        via "$(fk::node_ip_of "$j")" dev eth0
    done
  done
}

# The mirror as the node netns see it: a second docker-registry on the control-plane
# address over the same storage (read-only use; pushes go to $RT_REGISTRY_ADDR).
fk::node_registry_up() {
  rt::write_if_changed "$FK_NODE_REGISTRY_CONFIG" \
    "$(sed "s|^\(  addr: \).*|\1$FK_NODE_REGISTRY_ADDR|" "$RT_REGISTRY_CONFIG")" || true
  if rt::pid_alive "$FK_NODE_REGISTRY_PID" docker-registry &&
    curl -sf -o /dev/null --max-time 2 "http://$FK_NODE_REGISTRY_ADDR/v2/"; then
    return 0
  fi
  rt::stop_pidfile "$FK_NODE_REGISTRY_PID" docker-registry
  rt::daemon docker-registry serve "$FK_NODE_REGISTRY_CONFIG" \
    >>"$FK_LOG_DIR/registry-nodes.log" 2>&1 </dev/null &
  echo $! >"$FK_NODE_REGISTRY_PID"
  fk::wait_for 100 0.1 curl -sf -o /dev/null --max-time 2 "http://$FK_NODE_REGISTRY_ADDR/v2/" ||
    fk::die "the nodes' registry on $FK_NODE_REGISTRY_ADDR did not come up (log: $FK_LOG_DIR/registry-nodes.log)"
}

# ---------------------------------------------------------------- configuration
fk::node_containerd_config() { # i
  local i=$1 name sock
  name=$(fk::node_name_of "$i")
  sock=$(fk::node_sock_of "$i")
  rt::containerd_toml "# Written by hack/lib/nodes.sh for node $name (rt::containerd_toml): every path its
# own (G14); streaming on the node IP, as the netns' loopback is unreachable from the apiserver." \
    "$FK_NODES_DATA/$name/containerd" "$FK_NODES_RUN/$name/containerd" "$sock" \
    "$FK_NODES_ETC/$name/cni" "$FK_NODES_ETC/$name/certs.d" "$(fk::node_ip_of "$i")" \
    "$sock.ttrpc" "$FK_NODES_DATA/$name/opt" "$FK_NODES_RUN/$name/runc"
}

# No ipMasq: pod IPs are routable between nodes and from the root netns, so pods keep
# their source address (kube-proxy masquerades what needs it).
fk::node_cni_conflist() { # i
  local i=$1
  cat <<JSON
{
  "cniVersion": "1.0.0",
  "name": "ferrokube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(fk::node_pod_cidr_of "$i")", "gateway": "10.244.$i.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$FK_NODES_DATA/$(fk::node_name_of "$i")/cni"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
    {"type": "loopback"}
  ]
}
JSON
}

fk::node_kubelet_config() { # i
  local name
  name=$(fk::node_name_of "$1")
  cat <<YAML
# Written by hack/lib/nodes.sh for node $name.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Its own cgroup tree (/$name/kubepods/...): kubelets never share pod cgroups.
cgroupRoot: /$name
podLogsDir: $FK_NODES_DATA/$name/pod-logs
nodeLeaseDurationSeconds: $FK_NODE_LEASE_SECONDS
nodeStatusUpdateFrequency: 5s
# As kubeadm's: the client certificate the node joined with is renewed before it expires.
rotateCertificates: true
# As kind does: every node shares this machine's disk with the others and with whatever
# else runs here, so disk pressure is not a node's to act on (0% disables a signal);
# memory keeps upstream's default.
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
YAML
}

# Writes node i's config files; returns 0 when containerd's own config changed.
fk::node_configure() { # i
  local i=$1 name reg changed=1
  name=$(fk::node_name_of "$i")
  mkdir -p "$FK_NODES_DATA/$name/cni" "$FK_NODES_DATA/$name/kubelet" \
    "$FK_NODES_DATA/$name/pod-logs" "$FK_NODES_ETC/$name/manifests" "$FK_NODES_RUN/$name"
  rt::write_if_changed "$FK_NODES_ETC/$name/containerd.toml" "$(fk::node_containerd_config "$i")" && changed=0
  for reg in "${RT_MIRRORED_REGISTRIES[@]}"; do
    rt::write_if_changed "$FK_NODES_ETC/$name/certs.d/$reg/hosts.toml" \
"# Written by hack/lib/nodes.sh: $reg is served by the local mirror only (as seen from
# the node's netns), never by the real registry.
server = \"http://$FK_NODE_REGISTRY_ADDR\"

[host.\"http://$FK_NODE_REGISTRY_ADDR\"]
  capabilities = [\"pull\", \"resolve\"]" || true
  done
  rt::write_if_changed "$FK_NODES_ETC/$name/cni/10-ferrokube-bridge.conflist" "$(fk::node_cni_conflist "$i")" || true
  rt::write_if_changed "$FK_NODES_ETC/$name/kubelet.yaml" "$(fk::node_kubelet_config "$i")" || true
  return $changed
}

# The node's client and serving certificates (system:node:fk-node<i>, SAN = node IP),
# signed by the cluster CA: `ferrokube-pki init` in a directory of its own holding a copy
# of the CA (it reuses a CA it finds and issues the leaves it lacks).
fk::node_pki() { # i bin_dir
  local i=$1 bin_dir=$2 name dir f
  name=$(fk::node_name_of "$i")
  dir=$FK_PKI_DIR/nodes/$name
  mkdir -p "$dir" && chmod 0700 "$dir"
  for f in ca.crt ca.key sa.key sa.pub; do
    cmp -s "$FK_PKI_DIR/$f" "$dir/$f" || cp -p "$FK_PKI_DIR/$f" "$dir/$f"
  done
  "$bin_dir/ferrokube-pki" init --dir "$dir" --server "$FK_API_URL" --node-name "$name" \
    --node-ip "$(fk::node_ip_of "$i")" --service-cluster-ip-range "$RT_SERVICE_CIDR" \
    --advertise-address "$FK_API_ADDR" >/dev/null || fk::die "ferrokube-pki init for $name failed"
}

# ---------------------------------------------------------------- joining
# Nodes join as `kubeadm join` has them do: their kubelets start with a bootstrap token,
# ask for a client certificate through a CertificateSigningRequest (approved and signed by
# kube-controller-manager's csrapproving and csrsigning controllers) and write their own
# kubeconfig. The token (kubeadm's format, hex) is kept in the PKI dir so re-runs reuse it.
fk::bootstrap_token() {
  local f=$FK_PKI_DIR/bootstrap-token hex
  if [ ! -s "$f" ]; then
    hex=$(od -An -N11 -tx1 /dev/urandom | tr -d ' \n')
    (umask 077 && printf '%s.%s\n' "${hex:0:6}" "${hex:6:16}" >"$f")
  fi
  cat "$f"
}

# The token's Secret (valid 24 h from now, as kubeadm's default TTL) and kubeadm's three
# ClusterRoleBindings: the token's group may create CSRs and gets them approved; nodes
# get their renewals approved.
fk::bootstrap_token_up() {
  local token id secret expiration group=system:bootstrappers:kubeadm:default-node-token
  token=$(fk::bootstrap_token)
  id=${token%%.*}
  secret=${token#*.}
  expiration=$(date -u -d '+24 hours' +%Y-%m-%dT%H:%M:%SZ)
  fk::kubectl apply -f - >/dev/null <<YAML || fk::die "creating the nodes' bootstrap token failed"
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: "hack/lib/nodes.sh: the nodes' kubelets join with it"
  token-id: "$id"
  token-secret: "$secret"
  expiration: "$expiration"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$group"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $group
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $group
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
YAML
}

# Node i's bootstrap kubeconfig (kubeadm's bootstrap-kubelet.conf).
fk::node_bootstrap_kubeconfig() { # i
  local name
  name=$(fk::node_name_of "$1")
  cat <<YAML
# Written by hack/lib/nodes.sh for node $name: its kubelet joins with the bootstrap token.
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: $FK_API_URL
    certificate-authority: $FK_PKI_DIR/nodes/$name/ca.crt
users:
- name: tls-bootstrap-token-user
  user:
    token: $(fk::bootstrap_token)
contexts:
- name: tls-bootstrap-token-user@kubernetes
  context:
    cluster: kubernetes
    user: tls-bootstrap-token-user
current-context: tls-bootstrap-token-user@kubernetes
YAML
}

# Where node i's kubelet keeps what it bootstrapped: its kubeconfig and --cert-dir.
fk::node_kubelet_kubeconfig() { printf '%s/%s/kubelet.conf\n' "$FK_NODES_DATA" "$(fk::node_name_of "$1")"; }
fk::node_kubelet_cert_dir() { printf '%s/%s/kubelet/pki\n' "$FK_NODES_DATA" "$(fk::node_name_of "$1")"; }

# Forgets what node i's kubelet bootstrapped (it joins again at its next start): for a
# new store (a new cluster) or a new CA.
fk::node_forget_credentials() { # i
  rm -rf "$(fk::node_kubelet_kubeconfig "$1")" "$(fk::node_kubelet_cert_dir "$1")" \
    "$FK_NODES_DATA/$(fk::node_name_of "$1")/kubelet-ca.sum"
}

# ---------------------------------------------------------------- processes
# Starts (or keeps) a process inside node i's netns: kept when alive with the same command
# line and certificates ($FK_NODE_PKI_SUM) and its binary not replaced, like up.sh's
# start_component.
fk::node_start() { # i component binary args...
  local i=$1 comp=$2 bin=$3 name pid want cmdfile
  shift 3
  name="$(fk::node_name_of "$i")-$comp"
  cmdfile=$FK_RUN_DIR/$name.cmd
  want="$(printf '%q ' "$bin" "$@")
# pki ${FK_NODE_PKI_SUM:-}"
  if pid=$(fk::pid_of "$name" "$bin"); then
    if [ "$(cat "$cmdfile" 2>/dev/null)" = "$want" ] &&
      [[ $(readlink "/proc/$pid/exe" 2>/dev/null) != *" (deleted)" ]]; then
      return 0
    fi
    fk::log "  restarting $name: flags, certificates or binary changed"
    fk::stop "$name" "$bin"
  fi
  printf '\n===== %s starting %s\n%s\n' "$(date -Is)" "$name" "$want" >>"$FK_LOG_DIR/$name.log"
  # setsid and nsenter (no --fork) both exec: the PID is the component's own.
  rt::daemon nsenter --net="/run/netns/$(fk::node_name_of "$i")" -- "$bin" "$@" \
    >>"$FK_LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$(fk::pidfile "$name")"
  printf '%s\n' "$want" >"$cmdfile"
  fk::log "  started $name (pid $!, log $FK_LOG_DIR/$name.log)"
}

# The node's CRI answers (containerd's CRI plugin initializes a moment after its socket
# answers; a kubelet started before that exits with "server is not initialized yet").
fk::node_cri_ready() { # sock cri-tool
  if [ -x "$2" ]; then
    "$2" --endpoint "unix://$1" pods >/dev/null 2>&1
  else
    [ -S "$1" ] && ctr --address "$1" --connect-timeout 2s version >/dev/null 2>&1
  fi
}

fk::node_containerd_up() { # i bin_dir
  local i=$1 cri=${RT_CRI_TOOL:-$2/ferrokube-cri} name sock
  name=$(fk::node_name_of "$i")
  sock=$(fk::node_sock_of "$i")
  if fk::node_configure "$i" && fk::pid_of "$name-containerd" containerd >/dev/null; then
    fk::log "  $name: containerd config changed; restarting containerd"
    fk::stop "$name-containerd" containerd
  fi
  FK_NODE_PKI_SUM="" fk::node_start "$i" containerd "$(command -v containerd)" --config "$FK_NODES_ETC/$name/containerd.toml"
  fk::wait_for 150 0.1 fk::node_cri_ready "$sock" "$cri" || {
    tail -n 20 "$FK_LOG_DIR/$name-containerd.log" >&2
    fk::die "$name: containerd did not come up (log: $FK_LOG_DIR/$name-containerd.log)"
  }
}

# Fingerprint of node i's certificates and kubeconfigs: a change restarts its components.
fk::node_pki_sum() { # i
  cat "$FK_PKI_DIR/nodes/$(fk::node_name_of "$1")"/*.crt \
    "$FK_PKI_DIR/nodes/$(fk::node_name_of "$1")"/*.kubeconfig | sha256sum | cut -c1-16
}

fk::node_components_up() { # i bin_dir
  local i=$1 bin_dir=$2 name ip pki sock
  name=$(fk::node_name_of "$i")
  ip=$(fk::node_ip_of "$i")
  pki=$FK_PKI_DIR/nodes/$name
  sock=unix://$(fk::node_sock_of "$i")
  FK_NODE_PKI_SUM=$(fk::node_pki_sum "$i")
  # A certificate bootstrapped under another CA would never authenticate: join again.
  local ca_sum ca_sum_file=$FK_NODES_DATA/$name/kubelet-ca.sum
  ca_sum=$(sha256sum <"$pki/ca.crt" | cut -c1-16)
  if [ "$(cat "$ca_sum_file" 2>/dev/null)" != "$ca_sum" ]; then
    fk::node_forget_credentials "$i"
    printf '%s\n' "$ca_sum" >"$ca_sum_file"
  fi
  rt::write_if_changed "$pki/bootstrap-kubelet.conf" "$(fk::node_bootstrap_kubeconfig "$i")" || true
  chmod 0600 "$pki/bootstrap-kubelet.conf"
  fk::node_start "$i" kubelet "$bin_dir/kubelet" \
    --bootstrap-kubeconfig="$pki/bootstrap-kubelet.conf" \
    --kubeconfig="$(fk::node_kubelet_kubeconfig "$i")" \
    --cert-dir="$(fk::node_kubelet_cert_dir "$i")" --config="$FK_NODES_ETC/$name/kubelet.yaml" \
    --container-runtime-endpoint="$sock" --image-service-endpoint="$sock" \
    --hostname-override="$name" --node-ip="$ip" --address="$ip" \
    --healthz-bind-address=127.0.0.1 --read-only-port=0 \
    --cluster-dns="$FK_CLUSTER_DNS" --cluster-domain="$FK_CLUSTER_DOMAIN" \
    --cgroup-driver=cgroupfs --root-dir="$FK_NODES_DATA/$name/kubelet" \
    --pod-manifest-path="$FK_NODES_ETC/$name/manifests" --client-ca-file="$pki/ca.crt" \
    --port=10250 --tls-cert-file="$pki/kubelet-server.crt" \
    --tls-private-key-file="$pki/kubelet-server.key" --fail-swap-on=false
  fk::node_start "$i" kube-proxy "$bin_dir/kube-proxy" \
    --kubeconfig="$pki/kube-proxy.kubeconfig" --hostname-override="$name" \
    --cluster-cidr="$FK_CLUSTER_CIDR" --healthz-bind-address=127.0.0.1:10256 \
    --metrics-bind-address=127.0.0.1:10249 --proxy-mode="$(fk::node_proxy_mode_of "$i")"
}

# The apiserver's address is on the control-plane bridge (so requests to it stay local).
fk::cp_addr_local() {
  local addrs
  addrs=$(ip -br addr show dev "$FK_CP_BRIDGE" 2>/dev/null) || return 1
  grep -qF " ${FK_CP_CIDR}" <<<"$addrs"
}

fk::node_ready_named() { # node-name
  local status
  status=$(fk::kubectl get node "$1" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) || return 1
  [ "$status" = True ]
}

# kube-proxy's first sync is done: its nftables table, or in iptables mode its
# KUBE-SERVICES chain, exists in the node's netns. (Output captured first: a `| grep -q`
# under pipefail fails when grep exits early and the writer gets SIGPIPE.)
fk::node_proxy_synced() { # i
  local saved
  case $(fk::node_proxy_mode_of "$1") in
    iptables)
      saved=$(fk::in_node "$1" iptables-save -t nat 2>/dev/null) || return 1
      grep -q '^-A KUBE-SERVICES ' <<<"$saved"
      ;;
    *) fk::in_node "$1" nft list table ip kube-proxy >/dev/null 2>&1 ;;
  esac
}

# ---------------------------------------------------------------- up / down
fk::nodes_up() { # N bin_dir
  local n=$1 bin_dir=$2 i b
  { [ -n "${FK_CP_BRIDGE:-}" ] && ip link show "$FK_CP_BRIDGE" >/dev/null 2>&1; } ||
    fk::die "no control-plane bridge (FK_CP_BRIDGE, fk::ensure_control_plane_net): nodes need the apiserver on it"
  for b in kubelet kube-proxy ferrokube-pki; do
    [ -x "$bin_dir/$b" ] || fk::die "$bin_dir/$b is missing: multi-node needs it"
  done
  # Nodes above N (from an earlier, larger --nodes) go first.
  for i in $(fk::nodes_present); do
    [ "$i" -gt "$n" ] && fk::node_down "$i" "$bin_dir"
  done
  fk::node_registry_up
  for ((i = 1; i <= n; i++)); do
    fk::node_net_up "$i"
  done
  fk::nodes_routes "$n"
  fk::bootstrap_token_up
  for ((i = 1; i <= n; i++)); do
    fk::node_pki "$i" "$bin_dir"
    fk::node_containerd_up "$i" "$bin_dir"
    fk::node_components_up "$i" "$bin_dir"
  done
  local name
  for ((i = 1; i <= n; i++)); do
    name=$(fk::node_name_of "$i")
    local t
    for ((t = 0; t < 180; t++)); do
      fk::node_ready_named "$name" && break
      if ! fk::pid_of "$name-kubelet" "$bin_dir/kubelet" >/dev/null; then
        tail -n 20 "$FK_LOG_DIR/$name-kubelet.log" >&2 || true
        fk::die "$name: the kubelet exited (log: $FK_LOG_DIR/$name-kubelet.log)"
      fi
      sleep 0.5
    done
    if ! fk::node_ready_named "$name"; then
      tail -n 20 "$FK_LOG_DIR/$name-kubelet.log" >&2 || true
      fk::die "node $name not Ready after 90 s (log: $FK_LOG_DIR/$name-kubelet.log)"
    fi
    fk::wait_for 60 0.5 fk::node_proxy_synced "$i" ||
      fk::die "$name: kube-proxy wrote no rules in 30 s (log: $FK_LOG_DIR/$name-kube-proxy.log)"
  done
}

# Removes the mounts under a directory (volume tmpfs the kubelet left), deepest first.
fk::umount_under() { # dir
  local m
  awk -v d="$1/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

# PIDs of what is left of node i once its containerd is stopped: every process in its cgroup
# tree /sys/fs/cgroup/<controller>/fk-node<i> (only its kubelet uses that cgroupRoot) and its
# containerd's shims (their -address is the node's own socket). After a kill -9 of the
# node's containerd (e2e/multi-node.sh's node failure) the shims and containers outlive it,
# and no CRI can remove them.
# Node i's containerd-shims, one "PID command line" each (found by their -address).
fk::node_shims() { # i
  pgrep -af -- "^[^ ]*containerd-shim[^ ]* .*-address $(fk::node_sock_of "$1")( |\$)" || true
}

fk::node_leftover_pids() { # i
  local name
  name=$(fk::node_name_of "$1")
  {
    find /sys/fs/cgroup/*/"$name" -name cgroup.procs -exec cat {} + 2>/dev/null || true
    fk::node_shims "$1" | awk '{print $1}'
  } | sort -un
}

# Kills node i's leftover processes (bounded) and removes its cgroup tree bottom-up.
fk::node_reap() { # i
  local i=$1 name pids t h
  name=$(fk::node_name_of "$i")
  # A frozen cgroup's tasks cannot die.
  # (No cgroup tree at all when the node ran no pod: find's failure is no error.)
  { find /sys/fs/cgroup/freezer/"$name" -name freezer.state 2>/dev/null || true; } |
    while read -r h; do echo THAWED >"$h" 2>/dev/null || true; done
  # The shims' sockets, which a killed shim leaves behind: containerd 1.6 names them
  # /run/containerd/s/<sha256 of "<address>/<namespace>/<id>">.
  local shim_sockets
  shim_sockets=$(fk::node_shims "$i" |
    while read -r _ cmdline; do
      # shellcheck disable=SC2086 # the shim's arguments, one per word
      set -- $cmdline
      local ns="" id="" addr=""
      while [ $# -gt 0 ]; do
        case $1 in -namespace) ns=$2 ;; -id) id=$2 ;; -address) addr=$2 ;; esac
        shift
      done
      [ -n "$ns" ] && [ -n "$id" ] && [ -n "$addr" ] &&
        printf '/run/containerd/s/%s\n' "$(printf '%s' "$addr/$ns/$id" | sha256sum | cut -c1-64)"
    done || true)
  for ((t = 0; t < 100; t++)); do
    pids=$(fk::node_leftover_pids "$i")
    [ -z "$pids" ] && break
    [ "$t" -eq 0 ] && fk::log "  $name: killing leftover process(es) $(tr '\n' ' ' <<<"$pids")"
    # shellcheck disable=SC2086 # one PID per word
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$pids" ] || fk::log "warning: $name: processes still alive after 10 s: $pids"
  local sock
  for sock in $shim_sockets; do
    [ -S "$sock" ] && rm -f "$sock"
  done
  for ((t = 0; t < 50; t++)); do
    for h in /sys/fs/cgroup/*/"$name"; do
      [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    compgen -G "/sys/fs/cgroup/*/$name" >/dev/null || return 0
    sleep 0.1
  done
  fk::log "warning: $name: cgroups left: $(echo /sys/fs/cgroup/*/"$name")"
}

# Pod network namespaces of node i that its containerd did not remove (it was killed):
# the CNI's netns (/run/netns/cni-*) whose eth0 holds an address of the node's pod CIDR.
# Run before the node's netns goes, which takes the pods' veth pairs (and so the only mark
# of whose they are) along.
fk::node_pod_netns_down() { # i
  local i=$1 ns prefix
  prefix="10.244.$i."
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do
    grep -qF " inet $prefix" <<<"$(ip -n "$ns" -4 -o addr show 2>/dev/null)" || continue
    ip netns del "$ns" 2>/dev/null && fk::log "  $(fk::node_name_of "$i"): removed pod netns $ns"
  done
  return 0
}

fk::node_down() { # i [bin_dir]
  local i=$1 bin_dir=${2:-$(fk::target_dir)/release} name sock cri h
  name=$(fk::node_name_of "$i")
  sock=$(fk::node_sock_of "$i")
  fk::stop "$name-kube-proxy" "$bin_dir/kube-proxy" 30
  fk::stop "$name-kubelet" "$bin_dir/kubelet" 30
  # Pods through the node's CRI (G6: stopping containerd does not stop them).
  cri=${RT_CRI_TOOL:-}
  if [ -z "$cri" ]; then
    for cri in "$bin_dir/ferrokube-cri" "$(fk::target_dir)/release/ferrokube-cri" \
      "$(fk::target_dir)/debug/ferrokube-cri" ""; do
      [ -x "$cri" ] && break
    done
  fi
  if [ -S "$sock" ] && ctr --address "$sock" --connect-timeout 2s version >/dev/null 2>&1; then
    if [ -n "$cri" ]; then
      "$cri" --endpoint "unix://$sock" remove-all-pods >/dev/null ||
        fk::log "warning: $name: removing pods through the CRI failed"
    else
      fk::log "warning: no ferrokube-cri binary; $name's pods left in its containerd"
    fi
  fi
  fk::stop "$name-containerd" containerd 30
  fk::node_reap "$i"
  fk::node_pod_netns_down "$i"
  fk::umount_under "$FK_NODES_DATA/$name"
  fk::umount_under "$FK_NODES_RUN/$name"
  ip route del "$(fk::node_pod_cidr_of "$i")" 2>/dev/null || true
  local j
  for j in $(fk::nodes_present); do
    [ "$j" -eq "$i" ] && continue
    ip -n "$(fk::node_name_of "$j")" route del "$(fk::node_pod_cidr_of "$i")" 2>/dev/null || true
  done
  # The netns takes its eth0 (and so the veth pair), cni0, kube-svc0 and nft tables along.
  ip netns del "$name" 2>/dev/null || true
  ip link del "fk-veth$i" 2>/dev/null || true
  rm -rf "${FK_NODES_DATA:?}/$name/cni" "${FK_NODES_RUN:?}/$name"
  # The Node goes, and so do the pods bound to it: their containers are gone with the
  # node's runtime, and a node of the same name coming back must not inherit them.
  # (Only while fk-br0 holds the apiserver's address: otherwise 172.18.0.1 is not local and
  # the request would leave the machine by the default route.)
  if fk::cp_addr_local && fk::apiserver_ready 2>/dev/null; then
    fk::kubectl delete node "$name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    fk::kubectl delete pods --all-namespaces --field-selector "spec.nodeName=$name" \
      --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  fi
  fk::log "removed node $name"
}

# The single-node shape's kubelet and kube-proxy on the host, when they run: stopped, their
# pods removed through the CRI, kube-proxy's rules deleted, the Node object deleted.
fk::host_node_down() { # bin_dir node-name
  local bin_dir=$1 node=$2 cri=${RT_CRI_TOOL:-$1/ferrokube-cri}
  # The Node object of the host goes in any case: no kubelet runs for it in this shape.
  if fk::kubectl get node "$node" -o name >/dev/null 2>&1; then
    fk::kubectl delete node "$node" --wait=false >/dev/null 2>&1 || true
    fk::log "  deleted Node $node (the host runs no kubelet with --nodes)"
  fi
  fk::pid_of kubelet "$bin_dir/kubelet" >/dev/null || fk::pid_of kube-proxy "$bin_dir/kube-proxy" >/dev/null ||
    return 0
  fk::log "  removing the single-node shape (host kubelet $node, kube-proxy)"
  fk::stop kube-proxy "$bin_dir/kube-proxy" 30
  fk::stop kubelet "$bin_dir/kubelet" 30
  "$bin_dir/kube-proxy" --cleanup >/dev/null 2>&1 || fk::log "warning: kube-proxy --cleanup failed"
  sysctl -qw net.ipv4.conf.all.route_localnet=0 || true
  if [ -x "$cri" ] && rt::containerd_ready; then
    "$cri" --endpoint "unix://$RT_CONTAINERD_SOCK" remove-all-pods >/dev/null ||
      fk::log "warning: removing the host's pods through the CRI failed"
  fi
  rt::cleanup_cgroups
}

fk::nodes_down() { # [bin_dir]
  local i bin_dir=${1:-$(fk::target_dir)/release}
  # Every node's kubelet first: while one node goes, the controllers replace its pods and
  # the kubelet of a node not yet stopped would start their sandboxes mid-teardown.
  for i in $(fk::nodes_present); do
    fk::stop "$(fk::node_name_of "$i")-kube-proxy" "$bin_dir/kube-proxy" 30
    fk::stop "$(fk::node_name_of "$i")-kubelet" "$bin_dir/kubelet" 30
  done
  for i in $(fk::nodes_present); do
    fk::node_down "$i" "${1:-}"
  done
  # Leftovers of a node whose netns is already gone (e.g. an interrupted down).
  local pidfile comp
  for pidfile in "$FK_RUN_DIR/$FK_NODE_PREFIX"*-*.pid; do
    [ -e "$pidfile" ] || continue
    comp=$(basename "$pidfile" .pid)
    case $comp in
      *-containerd) fk::stop "$comp" containerd 30 ;;
      *) fk::stop "$comp" "${1:-$(fk::target_dir)/release}/${comp#"$FK_NODE_PREFIX"*-}" 30 ;;
    esac
  done
  # ... and the shims, containers and cgroups of such a node.
  local leftovers
  leftovers=$( {
    compgen -G "/sys/fs/cgroup/*/$FK_NODE_PREFIX*" || true
    pgrep -af -- "containerd-shim.* -address $FK_NODES_RUN/${FK_NODE_PREFIX}[0-9]+/" || true
  } | sed -n -e "s|.*/$FK_NODE_PREFIX\([0-9][0-9]*\)\$|\1|p" \
    -e "s|.* -address $FK_NODES_RUN/$FK_NODE_PREFIX\([0-9][0-9]*\)/.*|\1|p" | sort -un)
  for i in $leftovers; do
    fk::node_reap "$i"
  done
  rt::stop_pidfile "$FK_NODE_REGISTRY_PID" docker-registry
  rmdir "$FK_NODES_RUN" 2>/dev/null || true
}
