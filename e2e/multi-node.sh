#!/usr/bin/env bash
# e2e on a kind-style 3-node cluster (hack/up.sh --nodes 3), with the real kubectl:
#
#   e2e/multi-node.sh [more up.sh arguments, e.g. --no-build]
#
#   1. hack/up.sh --nodes 3          -> fk-node1..3 Ready at 172.18.0.11-13, each kubelet
#      joined as `kubeadm join` does (a bootstrap token, its own approved and issued CSR);
#      fk-node1 and fk-node2 run kube-proxy in nftables mode, fk-node3 in iptables mode
#      (each only its own mode's rules), so every Service step below checks both modes
#   2. kubectl create deployment web --image=nginx --replicas=6   -> spread over >= 2 nodes
#   3. kubectl expose deployment web --port=80; a busybox pod pinned on each node resolves
#      `web` and `web.default.svc.cluster.local` to the ClusterIP, which serves nginx; from
#      each node, with that pod's resolv.conf, `web`, `web.default` and
#      `web.default.svc.cluster.local` serve nginx
#   4. a NodePort answers on every node's IP
#   5. pod-to-pod across nodes (each client GETs a web pod on another node)
#   6. sessionAffinity ClientIP pins a client to one backend (a Service without it does not);
#      a headless Service resolves to every backend pod's IP
#   7. scale web to 0 -> its ClusterIP refuses at once on every node; back to 6
#   8. kubectl drain of a node with a PodDisruptionBudget on web: minAvailable 6 of 6 blocks
#      it (drain --timeout=20s fails with "Cannot evict pod as it would violate the pod's
#      disruption budget", the pods stay); minAvailable 5 lets it through one eviction at
#      a time (kubectl retries the 429s; web's ready replicas never fall below 5); its
#      pods move; uncordon
#   9. kill -9 of one node's kubelet and containerd -> the node goes NotReady/unreachable and
#      its pods (tolerationSeconds 5) are replaced on the other nodes; hack/up.sh brings
#      the node back Ready
#  10. hack/down.sh leaves no node process, netns (node or pod), veth, route, cgroup, mount
#      or PID file
#
# Each step checks its output; on failure the script names the step, shows what it saw and
# still runs hack/down.sh (E2E_KEEP=1 leaves the cluster up to debug). Run it under
# `flock /run/ferrokube-e2e.lock` (it shares ports and the runtime with the other e2e).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
# The e2e's cluster keeps its store apart from the one hack/up.sh gives a user
# (/var/lib/ferrokube) and starts it empty: objects left there by earlier use of the
# cluster (a second PodDisruptionBudget on app=web once) must not change what the checks
# see, and the e2e must not touch a user's objects.
export FK_DATA_DIR=${FK_E2E_DATA_DIR:-/var/lib/ferrokube-e2e}
# shellcheck source=hack/lib/runtime.sh
source "$REPO/hack/lib/runtime.sh"
# shellcheck source=hack/lib/cluster.sh
source "$REPO/hack/lib/cluster.sh"
# shellcheck source=hack/lib/nodes.sh
source "$REPO/hack/lib/nodes.sh"

KUBECTL=/usr/bin/kubectl
[ -x "$KUBECTL" ] || fk::die "the real kubectl is expected at $KUBECTL"
[ "$(id -u)" -eq 0 ] || fk::die "e2e/multi-node.sh must run as root"
fk::e2e_fresh_store "$REPO"
export KUBECONFIG=$FK_ADMIN_KUBECONFIG
N=3
NODES=(fk-node1 fk-node2 fk-node3)
# kube-proxy's mode per node (hack/lib/nodes.sh): both of upstream's Linux modes we serve.
export FK_NODE_PROXY_MODES="nftables nftables iptables"

T0=$(date +%s.%N)
STEP=0
STEP_NAME=""
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { STEP=$((STEP + 1)); STEP_NAME=$*; printf '\n=== step %d [%ss]: %s\n' "$STEP" "$(elapsed)" "$*"; }
ok() { printf -- '--- ok: %s\n' "$*"; }
fail() {
  printf '\nFAILED at step %d (%s): %s\n' "$STEP" "$STEP_NAME" "$*" >&2
  exit 1
}
k() { timeout 30 "$KUBECTL" --request-timeout=20s "$@"; }
# A command in a pod (bounded): `kexec pod -- cmd...`.
kexec() { timeout 20 "$KUBECTL" --request-timeout=15s exec "$@"; }

finish() {
  local rc=$?
  if [ $rc -ne 0 ] && [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "E2E_KEEP=1: cluster left up (KUBECONFIG=$KUBECONFIG); hack/down.sh to stop it" >&2
    exit $rc
  fi
  # Only while the control-plane bridge holds the apiserver's address: without it,
  # 172.18.0.1 is not local and a request would leave the machine by the default route.
  if [ $rc -ne 0 ] && fk::cp_addr_local; then
    k get nodes -o wide >&2 || true
    k get pods -A -o wide >&2 || true
  fi
  if [ "$STEP_NAME" != "hack/down.sh" ]; then
    mn_cleanup
    echo "--- cleaning up: hack/down.sh" >&2
    bash "$REPO/hack/down.sh" >&2 || true
  fi
  if [ $rc -eq 0 ]; then
    printf '\nPASS: multi-node e2e in %s s\n' "$(elapsed)"
  fi
  exit $rc
}
trap finish EXIT

# Waits (at most $2 s) until deployment $1 has $3 ready, up-to-date replicas and no others.
wait_deployment() { # name timeout_s replicas
  local i got=""
  for ((i = 0; i < $2 * 2; i++)); do
    got=$(k get deployment "$1" -o 'jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.replicas}' 2>/dev/null || true)
    [ "$got" = "$3/$3/$3" ] && return 0
    [ "$3" = 0 ] && [ "$got" = "//" ] && return 0
    sleep 0.5
  done
  k get pods -l "app=$1" -o wide || true
  fail "deployment $1: ready/updated/replicas '$got', want $3/$3/$3 after $2 s"
}
# "node pod-IP" of the live (not terminating) pods with label app=$1, one per line.
pods_of() { # app
  k get pods -l "app=$1" -o 'jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}' |
    awk 'NF == 2'
}
# What this test creates (a leftover from an interrupted run would make `create` fail).
mn_cleanup() {
  k delete deployment web who --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete service web web-np who who-sticky who-headless --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete pdb web --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # Pods of an interrupted run may be stuck Terminating on a node that was gone.
  k delete pod -l 'app in (web,who,client)' --ignore-not-found --wait=false --force --grace-period=0 >/dev/null 2>&1 || true
}
# An HTTP GET from inside a pod with busybox nc (to a pod IP and port, headers included);
# prints the response or nc's error.
pod_http() { # pod ip [port]
  # shellcheck disable=SC2016 # $1..$3 are the inner sh's arguments
  kexec "$1" -- sh -c 'printf "GET / HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" | nc -w 3 "$1" "$2" 2>&1' sh "$2" "${3:-80}" 2>&1
}
in_node() { # node command...
  local n=$1
  shift
  nsenter --net="/run/netns/$n" -- "$@"
}

# Pod network namespaces that exist before the run (none of ours may be left after it).
cni_netns() { ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}' | sort; }
CNI_NETNS_BEFORE=$(cni_netns)

# ----------------------------------------------------------------------------------------
step "hack/up.sh --nodes $N $*"
bash "$REPO/hack/up.sh" --nodes "$N" "$@" || fail "hack/up.sh exited with $?"
ok "cluster up"

step "kubectl get nodes: ${NODES[*]} Ready at 172.18.0.11-13"
out=$(k get nodes -o wide 2>&1) || fail "kubectl get nodes: $out"
printf '%s\n' "$out"
for ((i = 1; i <= N; i++)); do
  grep -qE "^fk-node${i}[[:space:]]+Ready[[:space:]].*[[:space:]]172\.18\.0\.$((10 + i))[[:space:]]" <<<"$out" ||
    fail "fk-node$i is not Ready with InternalIP 172.18.0.$((10 + i))"
done
[ "$(grep -c Ready <<<"$out")" -eq $N ] || fail "expected exactly $N nodes"
ok "$N nodes Ready"

step "the nodes joined as kubeadm join does: a bootstrap token, an approved and issued CSR each"
token_id=$(cut -d. -f1 "$FK_PKI_DIR/bootstrap-token") || fail "no bootstrap token in $FK_PKI_DIR"
csrs=$(k get csr -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.username} {.spec.signerName} {.status.conditions[0].type} {.status.certificate}{"\n"}{end}' 2>&1) ||
  fail "kubectl get csr: $csrs"
for n in "${NODES[@]}"; do
  # Its kubeconfig names the pair the CSR issued (and the node is Ready with it).
  conf=$FK_DATA_DIR/nodes/$n/kubelet.conf
  grep -q "client-certificate: .*/kubelet/pki/kubelet-client-current.pem" "$conf" 2>/dev/null ||
    fail "$n: $conf does not name the bootstrapped certificate: $(cat "$conf" 2>&1 | grep -v -- '-data:')"
done
approved=$(awk -v u="system:bootstrap:$token_id" '$1 ~ /^node-csr-/ && $2 == u && $3 == "kubernetes.io/kube-apiserver-client-kubelet" && $4 == "Approved" && $5 != ""' <<<"$csrs" | grep -c . || true)
# One request per node: node-csr-..., by the token's user, for the kubelet client signer,
# approved, with a certificate.
[ "$approved" -eq $N ] || fail "want $N approved and issued node-csr-* requests by system:bootstrap:$token_id, got $approved: $(cut -c1-160 <<<"$csrs")"
ok "$N approved node-csr-* requests by system:bootstrap:$token_id; each kubeconfig names kubelet-client-current.pem"

step "kube-proxy: fk-node1 and fk-node2 program nftables, fk-node3 iptables, each only its own"
for ((i = 1; i <= N; i++)); do
  n=fk-node$i
  mode=$(fk::node_proxy_mode_of "$i")
  rc=0
  in_node "$n" nft list table ip kube-proxy >/dev/null 2>&1 || rc=$?
  saved=$(in_node "$n" iptables-save 2>&1) || fail "$n: iptables-save: $saved"
  kube_chains=$(grep -c '^:KUBE-' <<<"$saved" || true)
  case $mode in
    nftables)
      [ "$rc" = 0 ] || fail "$n (nftables mode): no table ip kube-proxy"
      [ "$kube_chains" = 0 ] || fail "$n (nftables mode): iptables has KUBE- chains: $(grep '^:KUBE-' <<<"$saved" | head -n 5)"
      ;;
    iptables)
      [ "$rc" != 0 ] || fail "$n (iptables mode): the nftables table ip kube-proxy exists"
      # The kubernetes Service (default/kubernetes:https) has its service chain, and the
      # NodePort jump is the last rule of KUBE-SERVICES, as upstream writes them.
      grep -q -- '--comment "default/kubernetes:https cluster IP" .*-j KUBE-SVC-' <<<"$saved" ||
        fail "$n (iptables mode): no rule for default/kubernetes:https in KUBE-SERVICES: $(grep -- '-A KUBE-SERVICES' <<<"$saved" | head -n 5)"
      last=$(grep -- '^-A KUBE-SERVICES .*-j KUBE-' <<<"$saved" | grep -v -- '-j REJECT' | tail -n 1)
      grep -q -- '-j KUBE-NODEPORTS$' <<<"$last" || fail "$n (iptables mode): the last nat KUBE-SERVICES rule is not the NodePort jump: $last"
      ;;
  esac
  printf '  %s: kube-proxy in %s mode, %s KUBE- chains in iptables\n' "$n" "$mode" "$kube_chains"
done
ok "nftables on fk-node1-2, iptables on fk-node3"

step "kubectl create deployment web --image=nginx --replicas=6: spread over the nodes"
mn_cleanup
for ((i = 0; i < 60; i++)); do
  [ -z "$(k get deployment,pods -l 'app in (web,who,client)' -o name 2>/dev/null)" ] && break
  sleep 0.5
done
out=$(k create deployment web --image=nginx --replicas=6 2>&1) || fail "create deployment: $out"
[ "$out" = "deployment.apps/web created" ] || fail "unexpected output: $out"
wait_deployment web 180 6
k get pods -l app=web -o wide
spread=$(pods_of web | awk '{print $1}' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')
nodes_used=$(pods_of web | awk '{print $1}' | sort -u | wc -l)
[ "$nodes_used" -ge 2 ] || fail "the 6 web pods run on $nodes_used node(s): $spread"
ok "6 web pods ready on $nodes_used nodes: $spread"

step "kubectl expose deployment web --port=80; busybox clients pinned on each node"
out=$(k expose deployment web --port=80 2>&1) || fail "expose: $out"
[ "$out" = "service/web exposed" ] || fail "unexpected output: $out"
cip=$(k get service web -o 'jsonpath={.spec.clusterIP}')
for n in "${NODES[@]}"; do
  k apply -f - >/dev/null <<EOF || fail "creating pod client-$n"
apiVersion: v1
kind: Pod
metadata:
  name: client-$n
  labels: {app: client}
spec:
  nodeName: $n
  terminationGracePeriodSeconds: 1
  containers:
  - name: busybox
    image: busybox
    command: [sleep, "3600"]
EOF
done
for n in "${NODES[@]}"; do
  phase=""
  for ((i = 0; i < 240; i++)); do
    phase=$(k get pod "client-$n" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
    [ "$phase" = Running ] && break
    sleep 0.5
  done
  [ "$phase" = Running ] || fail "pod client-$n is '${phase:-none}', not Running, after 120 s"
done
ok "service web at $cip; client pods Running on ${NODES[*]}"

# From a busybox pod on each node, `wget -qO- <name>` as the issue asks: busybox's
# resolver goes through the pod's resolv.conf (search path, ndots:5) to kube-dns, then
# kube-proxy's rules on that node. (Debian's static busybox 1.35 wget segfaults with
# -T, so the bound is `timeout` around it, not -T.)
step "from each node: wget -qO- web, web.default, web.default.svc.cluster.local answer"
for n in "${NODES[@]}"; do
  resolv=$(kexec "client-$n" -- cat /etc/resolv.conf) || fail "client-$n: cat /etc/resolv.conf"
  grep -q "^search default.svc.cluster.local svc.cluster.local cluster.local" <<<"$resolv" ||
    fail "client-$n: resolv.conf without the cluster search path: $resolv"
  for name in web web.default web.default.svc.cluster.local; do
    body=""
    for ((i = 0; i < 15; i++)); do
      body=$(kexec "client-$n" -- timeout 5 wget -qO- "http://$name/" 2>&1 || true)
      grep -q "Welcome to nginx" <<<"$body" && break
      sleep 1
    done
    grep -q "Welcome to nginx" <<<"$body" || fail "client-$n: wget -qO- $name: ${body:-nothing}"
  done
  printf '  client-%s: wget -qO- web, web.default, web.default.svc.cluster.local -> Welcome to nginx!\n' "$n"
done
ok "every name answers on every node"

step "a NodePort answers on every node's IP (from the host)"
out=$(k expose deployment web --name=web-np --type=NodePort --port=80 2>&1) || fail "expose NodePort: $out"
nport=$(k get service web-np -o 'jsonpath={.spec.ports[0].nodePort}')
[ -n "$nport" ] || fail "no nodePort"
for ((j = 1; j <= N; j++)); do
  nip=$(fk::node_ip_of "$j")
  body=""
  for ((i = 0; i < 20; i++)); do
    body=$(curl -s --max-time 3 "http://$nip:$nport/" || true)
    grep -q "Welcome to nginx" <<<"$body" && break
    sleep 1
  done
  grep -q "Welcome to nginx" <<<"$body" || fail "http://$nip:$nport/: ${body:-nothing}"
  printf '  http://%s:%s/ -> Welcome to nginx!\n' "$nip" "$nport"
done
ok "NodePort $nport answers on all $N node IPs"

step "pod-to-pod across nodes: each client gets a web pod on another node"
for n in "${NODES[@]}"; do
  target=$(pods_of web | awk -v n="$n" '$1 != n {print $2; exit}')
  [ -n "$target" ] || fail "no web pod off $n"
  body=$(pod_http "client-$n" "$target" || true)
  grep -q "Welcome to nginx" <<<"$body" || fail "client-$n -> $target: ${body:-nothing}"
  printf '  client-%s -> %s (on %s) ok\n' "$n" "$target" "$(pods_of web | awk -v t="$target" '$2 == t {print $1}')"
done
ok "cross-node pod traffic works"

step "sessionAffinity ClientIP pins a client; a headless Service resolves to every pod IP"
k apply -f - >/dev/null <<'EOF' || fail "creating deployment who and its Services"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: who
spec:
  replicas: 3
  selector:
    matchLabels: {app: who}
  template:
    metadata:
      labels: {app: who}
    spec:
      terminationGracePeriodSeconds: 1
      # Short tolerations: the node-failure step expects replacements within seconds.
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers:
      - name: httpd
        image: busybox
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 80 -h /www']
        readinessProbe:
          tcpSocket: {port: 80}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: who}
spec:
  selector: {app: who}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: who-sticky}
spec:
  selector: {app: who}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 300}}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: who-headless}
spec:
  clusterIP: None
  selector: {app: who}
  ports: [{port: 80}]
EOF
wait_deployment who 120 3
# 20 requests each from client-fk-node1: how often each backend (its hostname) answered.
backends() { # service
  local ip
  ip=$(k get service "$1" -o 'jsonpath={.spec.clusterIP}')
  kexec client-fk-node1 -- sh -c \
    "for i in \$(seq 20); do printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 $ip 80 | tail -n 1; done" 2>&1 | sort | uniq -c
}
plain=""
for ((i = 0; i < 10; i++)); do
  plain=$(backends who)
  [ "$(wc -l <<<"$plain")" -ge 2 ] && break
  sleep 1
done
[ "$(wc -l <<<"$plain")" -ge 2 ] || fail "20 requests to who all went to one backend: $plain"
sticky=$(backends who-sticky)
printf '  who (no affinity):\n%s\n  who-sticky (ClientIP):\n%s\n' "$plain" "$sticky"
grep -qE '^ *20 who-' <<<"$sticky" ||
  fail "who-sticky: 20 requests did not all reach one backend: $sticky"
want=$(pods_of who | awk '{print $2}' | sort | tr '\n' ' ')
got=""
for ((i = 0; i < 10; i++)); do
  got=$(kexec client-fk-node2 -- nslookup who-headless.default.svc.cluster.local 10.96.0.10 2>&1 |
    awk '/^Name:/ {a=1} a && /^Address/ {print $NF}' | sort | tr '\n' ' ' || true)
  [ "$got" = "$want" ] && break
  sleep 1
done
[ "$got" = "$want" ] || fail "who-headless resolves to '$got', want the pod IPs '$want'"
ok "ClientIP affinity pins the client; who-headless -> $want"

step "scale web to 0: its ClusterIP refuses at once on every node"
out=$(k scale deployment web --replicas=0 2>&1) || fail "scale: $out"
# Each node's kube-proxy syncs on its own: wait (bounded) until THAT node has put the
# ClusterIP in its no-endpoint-services map (reject), then one request must be refused at
# once. Before that, a request may go to a terminating pod and time out, which is not
# what this step checks.
# (Output captured first: `nft ... | grep -q` under pipefail fails when grep exits early and
# nft gets SIGPIPE.)
# In iptables mode, the filter table's KUBE-SERVICES rejects the ClusterIP instead.
rejected_on() { # node
  local map
  if [ "$1" = fk-node3 ]; then
    map=$(in_node "$1" iptables-save -t filter 2>/dev/null) || return 1
    grep -q -- "^-A KUBE-SERVICES -d $cip/32 -p tcp .*--dport 80 -j REJECT" <<<"$map"
    return
  fi
  map=$(in_node "$1" nft list map ip kube-proxy no-endpoint-services 2>/dev/null) || return 1
  grep -qF "$cip . tcp . 80 " <<<"$map"
}
for n in "${NODES[@]}"; do
  for ((i = 0; i < 120; i++)); do
    rejected_on "$n" && break
    sleep 0.5
  done
  rejected_on "$n" || fail "$n: kube-proxy did not reject $cip (no endpoints) within 60 s: $(in_node "$n" nft list map ip kube-proxy no-endpoint-services 2>&1 | tail -n 5; in_node "$n" iptables-save -t filter 2>&1 | grep -- "$cip" | head -n 5)"
  t0=$(date +%s.%N)
  rc=0
  err=$(in_node "$n" curl -sS -o /dev/null --max-time 3 "http://$cip/" 2>&1) || rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  # curl 7.88 says "Couldn't connect to server" for a refusal too: exit 7 at once it is.
  [ "$rc" = 7 ] || fail "$n: http://$cip/ with no endpoints: curl exit $rc after $secs s ($err), want 7 (refused)"
  awk -v s="$secs" 'BEGIN { exit !(s < 2) }' || fail "$n: refusal took $secs s (a hang, not a reject)"
  printf '  %s: connection refused in %s s\n' "$n" "$secs"
done
out=$(pod_http client-fk-node3 "$cip" || true)
grep -q "Connection refused" <<<"$out" || fail "client-fk-node3: GET http://$cip/ with no endpoints: $out"
out=$(k scale deployment web --replicas=6 2>&1) || fail "scale back: $out"
wait_deployment web 180 6
ok "refused on every node and from a pod; back to 6 replicas"

DRAINED=fk-node3
step "kubectl drain $DRAINED respects a PodDisruptionBudget on web, then moves its pods"
# client-$DRAINED is a bare pod: drain would refuse it without --force; it is done anyway.
# (Terminating still counts for drain: wait until it is gone.)
out=$(timeout 90 "$KUBECTL" delete pod "client-$DRAINED" --timeout=80s 2>&1) || fail "deleting client-$DRAINED: $out"
before=$(pods_of web | awk -v n="$DRAINED" '$1 == n' | wc -l)
before_who=$(pods_of who | awk -v n="$DRAINED" '$1 == n' | wc -l)
[ "$before" -ge 1 ] || fail "no web pod on $DRAINED to drain: $(pods_of web | tr '\n' ';')"
# healthy/desired/allowed of the budget, as the disruption controller reports it.
pdb_status() { k get pdb web -o 'jsonpath={.status.currentHealthy}/{.status.desiredHealthy}/{.status.disruptionsAllowed}' 2>/dev/null || true; }
wait_pdb() { # want timeout_s
  local i got=""
  for ((i = 0; i < $2 * 2; i++)); do
    got=$(pdb_status)
    [ "$got" = "$1" ] && return 0
    sleep 0.5
  done
  fail "PodDisruptionBudget web: healthy/desired/allowed '$got', want $1 after $2 s"
}
# 1. minAvailable 6 of 6: no eviction is allowed, so drain gives up after its timeout.
k apply -f - >/dev/null <<'EOF2' || fail "creating the PodDisruptionBudget web"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 6
  selector:
    matchLabels: {app: web}
EOF2
wait_pdb 6/6/0 60
rc=0
out=$(timeout 60 "$KUBECTL" drain "$DRAINED" --ignore-daemonsets --delete-emptydir-data --timeout=20s 2>&1) || rc=$?
[ $rc -ne 0 ] || fail "drain with minAvailable=6 of 6 succeeded: $out"
grep -q "Cannot evict pod as it would violate the pod's disruption budget" <<<"$out" ||
  fail "drain with minAvailable=6 of 6 failed without the disruption budget error: $out"
printf '%s\n' "$out" | grep -m 1 "Cannot evict pod"
still=$(pods_of web | awk -v n="$DRAINED" '$1 == n' | wc -l)
[ "$still" -eq "$before" ] || fail "$DRAINED ran $before web pod(s) before the blocked drain, $still after"
[ "$(pdb_status)" = 6/6/0 ] || fail "budget after the blocked drain: $(pdb_status), want 6/6/0"
printf '  blocked: drain --timeout=20s exited %s; %s web pod(s) still on %s\n' "$rc" "$still" "$DRAINED"
# 2. minAvailable 5: one eviction at a time; drain retries the 429s until it is done.
out=$(k patch pdb web --type=merge -p '{"spec":{"minAvailable":5}}' 2>&1) || fail "relaxing the budget: $out"
wait_pdb 6/5/1 60
# Sample web's ready replicas while drain runs: the budget keeps them at 5 or more.
ready_log=$(mktemp /tmp/multi-node-ready.XXXXXX)
(
  for ((i = 0; i < 600; i++)); do
    k get deployment web -o 'jsonpath={.status.readyReplicas}{"\n"}' 2>/dev/null || true
    sleep 0.2
  done
) >"$ready_log" &
sampler=$!
rc=0
out=$(timeout 180 "$KUBECTL" drain "$DRAINED" --ignore-daemonsets --delete-emptydir-data --timeout=150s 2>&1) || rc=$?
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
[ $rc -eq 0 ] || fail "drain with minAvailable=5: exit $rc: $out"
printf '%s\n' "$out" | tail -n 5
grep -q "node/$DRAINED drained" <<<"$out" || fail "drain did not report node/$DRAINED drained"
if [ "$before" -ge 2 ]; then
  # Several web pods on the node: all but one eviction were refused at first, and retried.
  grep -q "Cannot evict pod as it would violate the pod's disruption budget" <<<"$out" ||
    fail "drain of $before web pods with one disruption allowed saw no 429: $out"
fi
min_ready=$(grep -E '^[0-9]+$' "$ready_log" | sort -n | head -n 1)
samples=$(grep -cE '^[0-9]+$' "$ready_log" || true)
rm -f "$ready_log"
[ -n "$min_ready" ] || fail "no readyReplicas sample of web during the drain"
[ "$min_ready" -ge 5 ] || fail "web's ready replicas fell to $min_ready during the drain (budget: minAvailable 5)"
[ "$(k get node "$DRAINED" -o 'jsonpath={.spec.unschedulable}')" = true ] || fail "$DRAINED is not cordoned"
wait_deployment web 180 6
wait_deployment who 120 3
left=$( (pods_of web; pods_of who) | awk -v n="$DRAINED" '$1 == n' | wc -l)
[ "$left" -eq 0 ] || fail "$left web/who pod(s) still on $DRAINED"
out=$(k delete pdb web 2>&1) || fail "deleting the budget: $out"
out=$(k uncordon "$DRAINED" 2>&1) || fail "uncordon: $out"
ok "budget held (drain blocked at minAvailable 6; at 5, ready web replicas >= $min_ready in $samples samples); $before web and $before_who who pod(s) moved off $DRAINED; uncordoned"

# The victim: a node that runs a who pod (tolerationSeconds 5).
VICTIM=$(pods_of who | awk '{print $1}' | sort | uniq -c | sort -rn | awk '{print $2; exit}')
step "kill -9 $VICTIM's kubelet and containerd: its pods are replaced on the other nodes"
victim_pods=$(pods_of who | awk -v n="$VICTIM" '$1 == n' | wc -l)
for c in kubelet containerd; do
  pid=$(cat "$(fk::pidfile "$VICTIM-$c")") || fail "no PID file for $VICTIM-$c"
  kill -KILL "$pid"
done
state=""
for ((i = 0; i < 120; i++)); do
  state=$(k get node "$VICTIM" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
  [ "$state" != True ] && break
  sleep 0.5
done
[ "$state" != True ] || fail "$VICTIM still Ready 60 s after its kubelet died"
printf '  %s Ready=%s after %s s\n' "$VICTIM" "$state" "$(elapsed)"
moved=0
for ((i = 0; i < 240; i++)); do
  live=$(pods_of who)
  if [ "$(awk -v n="$VICTIM" '$1 != n' <<<"$live" | wc -l)" -ge 3 ] &&
    [ "$(k get deployment who -o 'jsonpath={.status.readyReplicas}' 2>/dev/null || true)" = 3 ]; then
    moved=1
    break
  fi
  sleep 0.5
done
k get pods -l app=who -o wide || true
[ $moved -eq 1 ] || fail "who's $victim_pods pod(s) on $VICTIM were not replaced elsewhere within 120 s"
taints=$(k get node "$VICTIM" -o 'jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}')
grep -q "node.kubernetes.io/unreachable:NoExecute" <<<"$taints" || fail "$VICTIM taints: $taints"
ok "$victim_pods who pod(s) replaced off $VICTIM (taints: $taints)"

step "hack/up.sh --nodes $N again brings $VICTIM back Ready"
rerun_log=$(mktemp /tmp/multi-node-up.XXXXXX.log)
rc=0
bash "$REPO/hack/up.sh" --nodes "$N" --no-build "$@" >"$rerun_log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { tail -n 30 "$rerun_log"; fail "hack/up.sh (re-run) exited with $rc (log $rerun_log)"; }
rm -f "$rerun_log"
fk::node_ready_named "$VICTIM" || fail "$VICTIM not Ready after the re-run"
ok "$VICTIM Ready again"

step "hack/down.sh leaves nothing of the nodes behind"
mn_cleanup
STEP_NAME="hack/down.sh"
bash "$REPO/hack/down.sh" || fail "hack/down.sh exited with $?"
left=""
[ -z "$(fk::nodes_present)" ] || left+=" netns:$(fk::nodes_present | tr '\n' ,)"
links=$(ip -br link)
grep -qE '^(fk-veth|fk-br0)' <<<"$links" && left+=" links:$(awk '/^fk-/ {print $1}' <<<"$links" | tr '\n' ,)"
routes=$(ip route)
grep -q '^10\.244\.[1-9]' <<<"$routes" && left+=" routes"
ls "$FK_RUN_DIR"/fk-node*.pid >/dev/null 2>&1 && left+=" pidfiles"
ls -d /sys/fs/cgroup/*/fk-node* >/dev/null 2>&1 && left+=" cgroups"
pgrep -f "$FK_NODES_ETC/|$FK_NODES_RUN/" >/dev/null && left+=" processes"
grep -qF " $FK_NODES_DATA/" /proc/self/mounts && left+=" mounts"
grep -qF " $FK_NODES_RUN/" /proc/self/mounts && left+=" mounts(run)"
rt::pid_alive "$FK_NODE_REGISTRY_PID" docker-registry && left+=" registry"
new_netns=$(comm -13 <(printf '%s\n' "$CNI_NETNS_BEFORE") <(cni_netns) | grep . | tr '\n' , || true)
[ -z "$new_netns" ] || left+=" pod-netns:$new_netns"
[ -z "$left" ] || fail "left behind:$left"
ok "cluster down, nothing left"
