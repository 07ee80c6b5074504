#!/usr/bin/env bash
# Brings up a single-node Ferrokube cluster on this machine (Debian 12, as root):
#
#   hack/up.sh [--etcd] [--no-build] [--nodes N]
#
#   1. builds the binaries (cargo build --release of the cmd/ packages; target dir as
#      hack/test.sh chooses it: /var/cache/ferrokube/target when writable),
#   2. rt::ensure: packages, network containment (first), containerd + CNI, offline images
#      in the local registry mirror (hack/lib/runtime.sh),
#   3. PKI and one kubeconfig per component (`ferrokube-pki init`, idempotent) in
#      /etc/ferrokube/pki,
#   4. starts every component that exists, with setsid, PID files in /run/ferrokube and logs
#      in /var/log/ferrokube: [etcd,] kube-apiserver (on the control-plane bridge
#      fk-br0, 172.18.0.1, never the uplink), kube-controller-manager,
#      kube-scheduler, kubelet, kube-proxy; waits (bounded) for /readyz, then for the node
#      to be Ready and kube-proxy's first nftables sync,
#   5. the default StorageClass `standard` (deploy/addons/storage-class.yaml: hostPath
#      volumes under /tmp/hostpath_pv from kube-controller-manager's
#      --enable-hostpath-provisioner), the cluster DNS addon (deploy/addons/dns.yaml: the
#      kube-dns Service at 10.96.0.10 and its Deployment; image built from the release
#      binary when it changed), then the metrics-server addon
#      (deploy/addons/metrics-server.yaml: kubectl top, HPAs; built the same way),
#   6. prints `export KUBECONFIG=...` and a first command to try.
#
# --etcd     store in a local etcd (loopback, data in /var/lib/ferrokube/etcd) instead of
#            the embedded store (/var/lib/ferrokube/apiserver)
# --no-build use the binaries already built
# --nodes N  kind-style multi-node cluster instead: no kubelet or kube-proxy on the host;
#            nodes fk-node1..fk-nodeN, each a network namespace (node IP 172.18.0.(10+i),
#            pod CIDR 10.244.i.0/24) on the control-plane bridge with its own containerd,
#            kubelet and kube-proxy, host-gw routes between them (hack/lib/nodes.sh)
# FK_BIN_DIR=<dir> (environment) use the binaries in <dir> and build nothing
#
# Idempotent: with everything up, a re-run changes nothing; a component that died, whose
# flags changed, whose binary was rebuilt or whose PKI changed is (re)started. Tear down
# with hack/down.sh.
set -euo pipefail

T0=$(date +%s.%N)
use_etcd=0
build=1
nodes=0
nodes_arg=0
for arg in "$@"; do
  if [ $nodes_arg -eq 1 ]; then nodes=$arg; nodes_arg=0; continue; fi
  case $arg in
    --nodes) nodes_arg=1; nodes="" ;;
    --nodes=*) nodes=${arg#--nodes=} ;;
    --etcd) use_etcd=1 ;;
    --no-build) build=0 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $nodes =~ ^[0-9]+$ ]] || [ $nodes_arg -eq 1 ]; then
  echo "--nodes takes a number (try --help)" >&2; exit 2
fi

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"
# shellcheck source=hack/lib/nodes.sh
source "$REPO/hack/lib/nodes.sh"

[ "$(id -u)" -eq 0 ] || fk::die "hack/up.sh must run as root (containerd, cgroups, nftables)"
# Name the command that failed (set -e alone exits with its status and says nothing).
set -E
trap 'fk::log "error: hack/up.sh: \`$BASH_COMMAND\` exited with $? (line $LINENO)"' ERR

elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { printf '==> [%6ss] %s\n' "$(elapsed)" "$*" >&2; }

# ---------------------------------------------------------------- 1. build
export PATH="$HOME/.cargo/bin:$PATH"
TARGET_DIR=$(fk::target_dir)
BIN_DIR=${FK_BIN_DIR:-$TARGET_DIR/release}
[ -z "${FK_BIN_DIR:-}" ] || build=0

# cmd/ packages that are workspace members (kubelet and kube-controller-manager join when
# they land).
cmd_packages() {
  local dir pkg
  for dir in "$REPO"/cmd/*/; do
    dir=${dir%/}
    [ -f "$dir/Cargo.toml" ] || continue
    grep -q "\"cmd/$(basename "$dir")\"" "$REPO/Cargo.toml" || continue
    pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n 1)
    [ -n "$pkg" ] && printf '%s\n' "$pkg"
  done
}

if [ $build -eq 1 ]; then
  step "build (cargo build --release, target dir $TARGET_DIR)"
  bash "$REPO/hack/install-deps.sh"
  pkgs=()
  while read -r p; do pkgs+=(-p "$p"); done < <(cmd_packages)
  # ferrokube-cri (in the kubelet crate) is how down.sh removes pods through the CRI.
  grep -q '"crates/kubelet"' "$REPO/Cargo.toml" && pkgs+=(-p ferrokube-kubelet)
  (cd "$REPO" && CARGO_TARGET_DIR=$TARGET_DIR cargo build --release --bins "${pkgs[@]}")
fi
T_BUILT=$(date +%s.%N)

# A component "exists" when its binary is built and is more than a placeholder: its --help
# lists the flags we pass.
help_of() { "$1" --help 2>&1 || true; }
have_component() { # binary marker-flag
  [ -x "$1" ] && help_of "$1" | grep -qE -- "(^|[[:space:],])$2([[:space:]=,<[]|$)"
}

# Adds `--flag=value` to ARGS when the binary's --help lists the flag; remembers the rest.
ARGS=()
DROPPED=()
HELP=""
begin_args() { ARGS=(); DROPPED=(); HELP=$(help_of "$1"); }
flag() { # --flag value
  if grep -qE -- "(^|[[:space:],])$1([[:space:]=,<[]|$)" <<<"$HELP"; then
    ARGS+=("$1=$2")
  else
    DROPPED+=("$1")
  fi
}
report_dropped() { # name
  [ ${#DROPPED[@]} -eq 0 ] || fk::log "  note: $1 does not take ${DROPPED[*]} (yet); not passed"
}

for b in kube-apiserver ferrokube-pki; do
  [ -x "$BIN_DIR/$b" ] || fk::die "$BIN_DIR/$b is missing (run without --no-build)"
done

# ---------------------------------------------------------------- 2. runtime
step "runtime: packages, network containment, containerd, images, registry mirror"
owned_before=0
[ -f "$FK_OWNS_RUNTIME" ] && owned_before=1
runtime_was_up=0
rt::pid_alive "$RT_CONTAINERD_PID" containerd && runtime_was_up=1
rt::ensure
fk::ensure_control_plane_net
mkdir -p "$FK_RUN_DIR" "$FK_LOG_DIR"
# down.sh stops containerd and the registry only when up.sh started them (a containerd that
# hack/test.sh left running is not ours to stop).
if [ $runtime_was_up -eq 0 ] || [ $owned_before -eq 1 ]; then
  touch "$FK_OWNS_RUNTIME"
fi

# ---------------------------------------------------------------- 3. PKI
NODE=$(fk::node_name)
step "PKI and kubeconfigs in $FK_PKI_DIR (node $NODE)"
pki_out=$("$BIN_DIR/ferrokube-pki" init --dir "$FK_PKI_DIR" --server "$FK_API_URL" \
  --node-name "$NODE" --node-ip 127.0.0.1 --service-cluster-ip-range "$RT_SERVICE_CIDR" \
  --advertise-address "$FK_API_ADDR")
written=$(grep -c $'\twritten$' <<<"$pki_out" || true)
fk::log "  $written file(s) written, the rest reused"
PKI_SUM=$(cat "$FK_PKI_DIR"/*.crt "$FK_PKI_DIR"/*.kubeconfig | sha256sum | cut -c1-16)

# ---------------------------------------------------------------- 4. components
# Starts (or keeps) one component. Kept when its PID is alive, its recorded command line
# and PKI fingerprint are the same and its binary was not replaced since it started.
start_component() { # name binary args...
  local name=$1 bin=$2 pid want cmdfile reason=""
  shift 2
  cmdfile=$FK_RUN_DIR/$name.cmd
  want="$(printf '%q ' "$bin" "$@")
# pki $PKI_SUM"
  if pid=$(fk::pid_of "$name" "$bin"); then
    if [ "$(cat "$cmdfile" 2>/dev/null)" != "$want" ]; then
      reason="flags or PKI changed"
    elif [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == *" (deleted)" ]]; then
      reason="binary rebuilt"
    else
      fk::log "  $name running (pid $pid), unchanged"
      return 0
    fi
    fk::log "  restarting $name: $reason"
    fk::stop "$name" "$bin"
  elif [ -f "$(fk::pidfile "$name")" ]; then
    fk::log "  $name is not running (died?); starting it again"
  fi
  {
    printf '\n===== %s starting %s\n' "$(date -Is)" "$name"
    printf '%s\n' "$want"
  } >>"$FK_LOG_DIR/$name.log"
  rt::daemon "$bin" "$@" >>"$FK_LOG_DIR/$name.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$(fk::pidfile "$name")"
  printf '%s\n' "$want" >"$cmdfile"
  fk::log "  started $name (pid $pid, log $FK_LOG_DIR/$name.log)"
}

# Fails with the log's tail when a component we just started is gone.
check_alive() { # name binary
  fk::pid_of "$1" "$2" >/dev/null && return 0
  tail -n 25 "$FK_LOG_DIR/$1.log" >&2 || true
  fk::die "$1 exited (log: $FK_LOG_DIR/$1.log)"
}

mkdir -p "$FK_APISERVER_DATA"

# etcd (only with --etcd; a leftover one is stopped otherwise)
ETCD_BIN=$(command -v etcd || true)
if [ $use_etcd -eq 1 ]; then
  [ -n "$ETCD_BIN" ] || fk::die "etcd is not installed (apt-get install etcd-server)"
  step "etcd on loopback (data $FK_ETCD_DATA)"
  mkdir -p "$FK_ETCD_DATA" && chmod 0700 "$FK_ETCD_DATA"
  start_component etcd "$ETCD_BIN" --name=ferrokube --data-dir="$FK_ETCD_DATA" \
    --listen-client-urls="$FK_ETCD_CLIENT_URL" --advertise-client-urls="$FK_ETCD_CLIENT_URL" \
    --listen-peer-urls="$FK_ETCD_PEER_URL" --initial-advertise-peer-urls="$FK_ETCD_PEER_URL" \
    --initial-cluster="ferrokube=$FK_ETCD_PEER_URL" --initial-cluster-state=new \
    --logger=zap --log-outputs=stderr
  fk::wait_for 150 0.2 curl -sf -o /dev/null --max-time 2 "$FK_ETCD_CLIENT_URL/health" \
    || { check_alive etcd "$ETCD_BIN"; fk::die "etcd not healthy after 30 s"; }
elif [ -n "$ETCD_BIN" ] && fk::pid_of etcd "$ETCD_BIN" >/dev/null; then
  step "embedded store: stopping the etcd a previous --etcd run started"
  fk::stop etcd "$ETCD_BIN"
fi

step "kube-apiserver on $FK_API_URL ($([ $use_etcd -eq 1 ] && echo etcd || echo embedded store))"
APISERVER=$BIN_DIR/kube-apiserver
begin_args "$APISERVER"
flag --bind-address "$FK_API_ADDR"
flag --advertise-address "$FK_API_ADDR"
flag --secure-port "$FK_API_PORT"
flag --tls-cert-file "$FK_PKI_DIR/apiserver.crt"
flag --tls-private-key-file "$FK_PKI_DIR/apiserver.key"
flag --client-ca-file "$FK_PKI_DIR/ca.crt"
flag --authorization-mode Node,RBAC
flag --service-cluster-ip-range "$RT_SERVICE_CIDR"
flag --service-account-key-file "$FK_PKI_DIR/sa.pub"
flag --service-account-signing-key-file "$FK_PKI_DIR/sa.key"
flag --service-account-issuer "https://kubernetes.default.svc.$FK_CLUSTER_DOMAIN"
flag --kubelet-client-certificate "$FK_PKI_DIR/admin.crt"
flag --kubelet-client-key "$FK_PKI_DIR/admin.key"
flag --kubelet-certificate-authority "$FK_PKI_DIR/ca.crt"
# The aggregation layer's front proxy, with kubeadm's flags: the front-proxy CA (its own,
# never the client CA) and the client certificate presented to extension apiservers.
flag --requestheader-client-ca-file "$FK_PKI_DIR/front-proxy-ca.crt"
flag --requestheader-allowed-names front-proxy-client
flag --requestheader-username-headers X-Remote-User
flag --requestheader-group-headers X-Remote-Group
flag --requestheader-extra-headers-prefix X-Remote-Extra-
flag --proxy-client-cert-file "$FK_PKI_DIR/front-proxy-client.crt"
flag --proxy-client-key-file "$FK_PKI_DIR/front-proxy-client.key"
# Extension apiservers (metrics-server) are dialled at their Service's endpoints: with
# --nodes the control plane is no node and runs no kube-proxy, so a cluster IP would not
# be reachable from here (upstream's advice for apiservers without kube-proxy).
flag --enable-aggregator-routing true
# The rest of kubeadm's flags: privileged containers allowed (upstream's default is
# false), bootstrap tokens authenticate, and kubelets are dialled at their InternalIP
# (the nodes' names resolve nowhere here; upstream's default tries Hostname first).
flag --allow-privileged true
flag --enable-bootstrap-token-auth true
flag --kubelet-preferred-address-types InternalIP,ExternalIP,Hostname
if [ $use_etcd -eq 1 ]; then
  flag --etcd-servers "$FK_ETCD_CLIENT_URL"
else
  flag --data-dir "$FK_APISERVER_DATA"
fi
report_dropped kube-apiserver
start_component kube-apiserver "$APISERVER" "${ARGS[@]}"
if ! fk::wait_for 300 0.2 fk::apiserver_ready; then
  check_alive kube-apiserver "$APISERVER"
  fk::die "kube-apiserver not ready after 60 s (log: $FK_LOG_DIR/kube-apiserver.log)"
fi
fk::log "  /readyz ok at $(elapsed) s"

STARTED=(kube-apiserver)
MISSING=()

KCM=$BIN_DIR/kube-controller-manager
if have_component "$KCM" --kubeconfig; then
  step "kube-controller-manager"
  begin_args "$KCM"
  flag --kubeconfig "$FK_PKI_DIR/controller-manager.kubeconfig"
  # /metrics asks the apiserver who the caller is and whether it may (as kubeadm).
  flag --authentication-kubeconfig "$FK_PKI_DIR/controller-manager.kubeconfig"
  flag --authorization-kubeconfig "$FK_PKI_DIR/controller-manager.kubeconfig"
  flag --bind-address 127.0.0.1
  flag --secure-port 10257
  flag --leader-elect false
  flag --service-account-private-key-file "$FK_PKI_DIR/sa.key"
  flag --root-ca-file "$FK_PKI_DIR/ca.crt"
  # As kubeadm: each controller runs as its ServiceAccount kube-system/<controller>.
  flag --use-service-account-credentials true
  # As kubeadm: the bootstrap-token controllers (off by default upstream) on as well.
  flag --controllers '*,bootstrapsigner,tokencleaner'
  flag --cluster-signing-cert-file "$FK_PKI_DIR/ca.crt"
  flag --cluster-signing-key-file "$FK_PKI_DIR/ca.key"
  flag --cluster-cidr "$FK_CLUSTER_CIDR"
  flag --service-cluster-ip-range "$RT_SERVICE_CIDR"
  # The single node's spec.podCIDR (its first block is what the node's CNI config uses);
  # the kind-style nodes have fixed pod CIDRs of their own (hack/lib/nodes.sh).
  [ "$nodes" -ne 0 ] || flag --allocate-node-cidrs true
  # Nodes that fail are noticed in 20 s, not 50 (the kubelets renew their Lease every 5 s).
  [ "$nodes" -eq 0 ] || flag --node-monitor-grace-period 20s
  # Volumes for the default StorageClass `standard` (deploy/addons/storage-class.yaml): a
  # directory under /tmp/hostpath_pv per claim, as upstream's local-up-cluster.sh. Every
  # node here, the kind-style ones too, shares this machine's filesystem.
  flag --enable-hostpath-provisioner true
  report_dropped kube-controller-manager
  start_component kube-controller-manager "$KCM" "${ARGS[@]}"
  STARTED+=(kube-controller-manager)
else
  MISSING+=(kube-controller-manager)
fi

SCHED=$BIN_DIR/kube-scheduler
if have_component "$SCHED" --kubeconfig; then
  step "kube-scheduler"
  begin_args "$SCHED"
  flag --kubeconfig "$FK_PKI_DIR/scheduler.kubeconfig"
  flag --authentication-kubeconfig "$FK_PKI_DIR/scheduler.kubeconfig"
  flag --authorization-kubeconfig "$FK_PKI_DIR/scheduler.kubeconfig"
  flag --bind-address 127.0.0.1
  flag --secure-port 10259
  flag --leader-elect false
  report_dropped kube-scheduler
  start_component kube-scheduler "$SCHED" "${ARGS[@]}"
  STARTED+=(kube-scheduler)
else
  MISSING+=(kube-scheduler)
fi

KUBELET=$BIN_DIR/kubelet
PROXY=$BIN_DIR/kube-proxy
if [ "$nodes" -gt 0 ]; then
  # The nodes run their own kubelet and kube-proxy (below); a single-node shape goes.
  fk::host_node_down "$BIN_DIR" "$NODE"
elif have_component "$KUBELET" --kubeconfig; then
  step "kubelet (node $NODE, runtime unix://$RT_CONTAINERD_SOCK)"
  mkdir -p "$FK_KUBELET_ROOT" "$FK_ETC/manifests"
  begin_args "$KUBELET"
  flag --kubeconfig "$FK_PKI_DIR/kubelet.kubeconfig"
  flag --container-runtime-endpoint "unix://$RT_CONTAINERD_SOCK"
  flag --image-service-endpoint "unix://$RT_CONTAINERD_SOCK"
  flag --hostname-override "$NODE"
  flag --node-ip 127.0.0.1
  flag --address 127.0.0.1
  flag --healthz-bind-address 127.0.0.1
  flag --read-only-port 0
  flag --cluster-dns "$FK_CLUSTER_DNS"
  flag --cluster-domain "$FK_CLUSTER_DOMAIN"
  flag --cgroup-driver cgroupfs
  flag --root-dir "$FK_KUBELET_ROOT"
  flag --pod-manifest-path "$FK_ETC/manifests"
  flag --client-ca-file "$FK_PKI_DIR/ca.crt"
  # As kubeadm does: no anonymous requests to :10250, bearer tokens reviewed with
  # TokenReview, everything authorized with SubjectAccessReview (nodes/proxy, ...); the
  # apiserver's --kubelet-client-certificate is in system:masters. The --nodes kubelets
  # get the same from their KubeletConfiguration's v1beta1 defaults.
  flag --anonymous-auth false
  flag --authentication-token-webhook true
  flag --authorization-mode Webhook
  flag --port 10250
  flag --tls-cert-file "$FK_PKI_DIR/kubelet-server.crt"
  flag --tls-private-key-file "$FK_PKI_DIR/kubelet-server.key"
  flag --fail-swap-on false
  flag --pod-infra-container-image "$RT_PAUSE_IMAGE"
  # As kind's kubelet config does (evictionHard nodefs.available, imagefs.available and
  # nodefs.inodesFree "0%"): this disk is shared with everything else on the machine and
  # often fuller than upstream's defaults, so disk pressure would taint and empty the
  # node. 0% disables a signal; memory keeps upstream's default.
  flag --eviction-hard 'memory.available<100Mi,nodefs.available<0%,imagefs.available<0%,nodefs.inodesFree<0%'
  report_dropped kubelet
  start_component kubelet "$KUBELET" "${ARGS[@]}"
  STARTED+=(kubelet)
else
  MISSING+=(kubelet)
fi

if [ "$nodes" -gt 0 ]; then
  :
elif have_component "$PROXY" --cluster-cidr; then
  # nftables mode; its DNAT runs in prerouting/output at priority dstnat (-100), before
  # the containment's filter drops (priority -10) see Service traffic, so ClusterIPs
  # reach pods and unmatched Service IPs still die in kube-svc0.
  step "kube-proxy (nftables, cluster CIDR $FK_CLUSTER_CIDR)"
  begin_args "$PROXY"
  flag --kubeconfig "$FK_PKI_DIR/kube-proxy.kubeconfig"
  flag --hostname-override "$NODE"
  flag --cluster-cidr "$FK_CLUSTER_CIDR"
  flag --healthz-bind-address 127.0.0.1:10256
  flag --metrics-bind-address 127.0.0.1:10249
  report_dropped kube-proxy
  start_component kube-proxy "$PROXY" "${ARGS[@]}"
  STARTED+=(kube-proxy)
else
  MISSING+=(kube-proxy)
fi

# Every started component must still be alive a moment later.
sleep 0.5
for c in "${STARTED[@]}"; do
  case $c in
    kube-apiserver) check_alive "$c" "$APISERVER" ;;
    kube-controller-manager) check_alive "$c" "$KCM" ;;
    kube-scheduler) check_alive "$c" "$SCHED" ;;
    kubelet) check_alive "$c" "$KUBELET" ;;
    kube-proxy) check_alive "$c" "$PROXY" ;;
  esac
done
if [[ " ${STARTED[*]} " == *" kube-scheduler "* ]]; then
  fk::wait_for 100 0.2 curl -skf -o /dev/null --max-time 2 https://127.0.0.1:10259/healthz \
    || fk::log "  warning: kube-scheduler /healthz does not answer yet"
fi

# ---------------------------------------------------------------- 5. node Ready
ready=0
if [[ " ${STARTED[*]} " == *" kubelet "* ]]; then
  step "waiting for node $NODE to be Ready (at most 90 s)"
  if fk::wait_for 180 0.5 fk::node_ready; then
    ready=1
    T_READY=$(date +%s.%N)
    # (To the hundredth: hack/bench-kubelet.sh reads this line.)
    fk::log "  node $NODE Ready at $(awk -v a="$T0" -v b="$T_READY" 'BEGIN { printf "%.2f", b - a }') s after start"
  else
    check_alive kubelet "$KUBELET"
    fk::kubectl get node "$NODE" -o wide >&2 || true
    fk::die "node $NODE not Ready after 90 s (log: $FK_LOG_DIR/kubelet.log)"
  fi
elif [ "$nodes" -gt 0 ]; then
  step "$nodes node(s) fk-node1..fk-node$nodes: netns, containerd, kubelet, kube-proxy (hack/lib/nodes.sh)"
  fk::nodes_up "$nodes" "$BIN_DIR"
  fk::log "  $nodes node(s) Ready, kube-proxy synced, at $(elapsed) s"
  ready=1
  T_READY=$(date +%s.%N)
else
  step "no kubelet binary yet ($KUBELET): not waiting for a Ready node"
fi
if [ "$nodes" -eq 0 ] && [ -n "$(fk::nodes_present)" ]; then
  step "single-node shape: removing the nodes of an earlier --nodes run"
  fk::nodes_down "$BIN_DIR"
fi

if [[ " ${STARTED[*]} " == *" kube-proxy "* ]]; then
  step "waiting for kube-proxy's first nftables sync (at most 30 s)"
  fk::wait_for 60 0.5 nft list table ip kube-proxy >/dev/null 2>&1 \
    || { check_alive kube-proxy "$PROXY"; fk::die "kube-proxy wrote no rules in 30 s (log: $FK_LOG_DIR/kube-proxy.log)"; }
fi

# ------------------------------------------------------------- 6. to 8. the addons
# 6. The default StorageClass `standard` (kubernetes.io/host-path): claims that name no
# class get a hostPath volume from the controller manager. Needs no node.
if [ -f "$REPO/deploy/addons/storage-class.yaml" ]; then
  step "default StorageClass: standard (hostPath volumes under /tmp/hostpath_pv)"
  fk::kubectl apply -f "$REPO/deploy/addons/storage-class.yaml" | sed 's/^/  /' >&2 ||
    fk::die "kubectl apply -f deploy/addons/storage-class.yaml failed"
fi

# Each addon's manifest under deploy/addons, with its image built from the release
# binary and pushed to the mirror (only when the binary changed) and pinned to its
# content tag, so a rebuilt binary rolls the pod.
#
# deploy_addon IMAGE DEPLOYMENT BIN MANIFEST READY_FN TITLE PORT...: build and push the
# image, apply the manifest, then wait (bounded) for READY_FN; a missing binary or
# manifest skips the addon.
deploy_addon() {
  local image=$1 deployment=$2 bin=$3 manifest=$4 ready_fn=$5 title=$6
  shift 6
  [ $ready -eq 1 ] && [ -x "$bin" ] && [ -f "$manifest" ] || return 0
  step "$title: image, ${manifest#"$REPO"/}"
  local version tag
  version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n 1)
  tag=$(bash "$REPO/hack/images/build-addon.sh" "$RT_REGISTRY_ADDR" "$RT_IMAGE_DIR" \
    "$image" "$bin" "$version" "$@") || fk::die "building the $image image failed"
  sed "s|registry.k8s.io/ferrokube/$image:v$version\$|registry.k8s.io/ferrokube/$image:$tag|" \
    "$manifest" | fk::kubectl apply -f - | sed 's/^/  /' >&2 ||
    fk::die "kubectl apply -f $manifest failed"
  if fk::wait_for 120 0.5 "$ready_fn"; then
    fk::log "  $deployment ready (image $tag)"
  else
    fk::log "  warning: $deployment not ready after 60 s:"
    fk::kubectl -n kube-system get pods -l "k8s-app=$deployment" -o wide >&2 || true
  fi
}
deployment_ready() { # NAME: its one replica updated and ready, and no old pod left
  [ "$(fk::kubectl -n kube-system get deployment "$1" \
    -o 'jsonpath={.status.updatedReplicas}/{.status.readyReplicas}/{.status.replicas}' \
    2>/dev/null)" = 1/1/1 ]
}

# 7. Cluster DNS: the kube-dns Service at $FK_CLUSTER_DNS and its Deployment.
dns_ready() { deployment_ready kube-dns; }
# Earlier versions ran the addon on the host network with a client certificate there.
if [ $ready -eq 1 ]; then
  fk::kubectl -n kube-system delete secret kube-dns-kubeconfig --ignore-not-found >/dev/null || true
fi
deploy_addon dns kube-dns "$BIN_DIR/kube-dns" "$REPO/deploy/addons/dns.yaml" dns_ready \
  "cluster DNS (kube-dns at $FK_CLUSTER_DNS)" 53/udp 53/tcp 9153/tcp

# 8. metrics-server: its Deployment and Service and the v1beta1.metrics.k8s.io APIService
# (kubectl top, HPAs on cpu/memory). Ready once the APIService is Available; the first
# metrics follow one --metric-resolution (15 s) later.
metrics_ready() {
  deployment_ready metrics-server &&
    [ "$(fk::kubectl get apiservice v1beta1.metrics.k8s.io \
      -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]
}
deploy_addon metrics-server metrics-server "$BIN_DIR/metrics-server" \
  "$REPO/deploy/addons/metrics-server.yaml" metrics_ready "metrics-server (kubectl top)" 4443/tcp

T_END=$(date +%s.%N)
echo
echo "Ferrokube is up: ${STARTED[*]} ($([ $use_etcd -eq 1 ] && echo "etcd at $FK_ETCD_CLIENT_URL" || echo "embedded store in $FK_APISERVER_DATA"))."
if [ ${#MISSING[@]} -gt 0 ]; then
  echo "Not built yet, so not running: ${MISSING[*]}."
fi
if [ $ready -eq 1 ]; then
  [ "$nodes" -eq 0 ] || NODE="fk-node1..fk-node$nodes"
  awk -v a="$T0" -v b="$T_BUILT" -v r="$T_READY" -v c="$T_END" -v n="$NODE" 'BEGIN {
    printf "Node %s Ready %.1f s after start (%.1f s after the build); all up in %.1f s.\n",
      n, r - a, r - b, c - a }'
else
  awk -v a="$T0" -v b="$T_BUILT" -v c="$T_END" 'BEGIN {
    printf "Up in %.1f s (%.1f s after the build); no node yet.\n", c - a, c - b }'
fi
echo "Logs: $FK_LOG_DIR/<component>.log; stop with: hack/down.sh"
echo
echo "export KUBECONFIG=$FK_ADMIN_KUBECONFIG"
if [ $ready -eq 1 ]; then
  echo "kubectl run nginx --image=nginx"
else
  echo "kubectl get --raw /readyz; kubectl api-resources   # pods need the kubelet"
fi
