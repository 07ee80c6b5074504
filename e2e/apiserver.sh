#!/usr/bin/env bash
# e2e: the real kubectl against a started kube-apiserver, with no special flags (but an
# audit policy and log, checked by one step).
#
# Runs the same suite of kubectl steps
#   1. embedded SQLite store, /usr/bin/kubectl (the dispatcher: it picks the version
#      matching the server),
#   2. embedded SQLite store, /usr/lib/google-cloud-sdk/bin/kubectl.1.32,
#   3. a real etcd (started here on loopback with a temp data dir, clients over TLS with
#      certificates of its own CA from ferrokube-pki), /usr/bin/kubectl.
# Every step checks kubectl's output (not only its exit code). Prints a summary of
# passed/failed steps and exits non-zero on any failure. Everything started here is
# stopped by PID and every temp dir removed on every exit path.
#
# Binaries: by default `cargo build -p kube-apiserver -p ferrokube-pki-cli -p
# kube-controller-manager` (debug; the controller-manager signs one step's CSR) into
# CARGO_TARGET_DIR (default /var/cache/ferrokube/target, else ./target) and uses them.
# E2E_SKIP_BUILD=1 uses the newest existing build (release or debug) instead;
# E2E_BIN_DIR=<dir> names the directory explicitly. E2E_BACKENDS=sqlite,etcd selects
# the runs. E2E_KEEP=1 keeps the temp dir (logs) for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KUBECTL_DEFAULT=/usr/bin/kubectl
KUBECTL_132=/usr/lib/google-cloud-sdk/bin/kubectl.1.32
BACKENDS=${E2E_BACKENDS:-sqlite,etcd}
CMD_TIMEOUT=60 # seconds, per kubectl invocation

# ---------------------------------------------------------------------------- setup

TMP=$(mktemp -d /tmp/ferrokube-e2e.XXXXXX)
PIDS=() # everything we started, stopped by PID in cleanup
APISERVER_PID=
ETCD_PID=

stop_pid() { # stop_pid PID: TERM, wait at most 10 s, then KILL
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "pid $pid did not exit on TERM in 10 s: KILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? pid
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "kept $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  if [ -d /var/cache/ferrokube/target ] && [ -w /var/cache/ferrokube/target ]; then
    export CARGO_TARGET_DIR=/var/cache/ferrokube/target
  else
    export CARGO_TARGET_DIR=$ROOT/target
  fi
fi

if [ -n "${E2E_BIN_DIR:-}" ]; then
  BIN=$E2E_BIN_DIR
elif [ "${E2E_SKIP_BUILD:-0}" = 1 ]; then
  BIN=
  for dir in "$CARGO_TARGET_DIR/release" "$CARGO_TARGET_DIR/debug"; do
    [ -x "$dir/kube-apiserver" ] && [ -x "$dir/ferrokube-pki" ] || continue
    if [ -z "$BIN" ] || [ "$dir/kube-apiserver" -nt "$BIN/kube-apiserver" ]; then BIN=$dir; fi
  done
  [ -n "$BIN" ] || { echo "no kube-apiserver build under $CARGO_TARGET_DIR" >&2; exit 1; }
else
  cargo build --locked -p kube-apiserver -p ferrokube-pki-cli -p kube-controller-manager >&2
  BIN=$CARGO_TARGET_DIR/debug
fi
echo "binaries: $BIN" >&2
for tool in "$BIN/kube-apiserver" "$BIN/ferrokube-pki" "$BIN/kube-controller-manager" \
  "$KUBECTL_DEFAULT" python3 curl; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

# ------------------------------------------------------------------- step framework

PASSED=()
FAILED=()
CURRENT_RUN=""

# step NAME FUNCTION [ARGS...]: runs FUNCTION in a subshell with errexit; its output
# goes to a per-step log, shown when the step fails.
step() {
  local name="$CURRENT_RUN: $1" fn=$2 log rc
  shift 2
  log=$TMP/steps/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').log
  mkdir -p "$TMP/steps"
  set +e
  (
    set -euo pipefail
    "$fn" "$@"
  ) >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    PASSED+=("$name")
    printf 'PASS  %s\n' "$name"
  else
    FAILED+=("$name")
    printf 'FAIL  %s\n' "$name"
    sed 's/^/      | /' "$log" | tail -n 40
  fi
}

# k ARGS...: kubectl (the run's binary), bounded, echoing the command and its output
# into the step log; the output is also left in $TMP/out for the checks.
k() {
  echo "+ kubectl $*"
  local rc=0
  timeout "$CMD_TIMEOUT" "$KUBECTL" "$@" >"$TMP/out" 2>&1 || rc=$?
  sed 's/^/  /' "$TMP/out"
  if [ "$rc" -ne 0 ]; then
    echo "kubectl exited $rc"
    return "$rc"
  fi
}

# has PATTERN: the last kubectl output matches the extended regexp PATTERN.
has() {
  if ! grep -Eq -- "$1" "$TMP/out"; then
    echo "expected output matching: $1"
    return 1
  fi
}

# lacks PATTERN: the last kubectl output does not match PATTERN.
lacks() {
  if grep -Eq -- "$1" "$TMP/out"; then
    echo "unexpected output matching: $1"
    return 1
  fi
}

# is EXPECTED: the last kubectl output is exactly EXPECTED.
is() {
  local got
  got=$(cat "$TMP/out")
  if [ "$got" != "$1" ]; then
    echo "expected exactly: $1"
    echo "got:              $got"
    return 1
  fi
}

# -------------------------------------------------------------------------- servers

# start_etcd [PKI_DIR]: a single-member etcd on free loopback ports with a temp data
# dir. With PKI_DIR (written by ferrokube-pki init), clients speak TLS to it and need a
# certificate of its own CA (etcd-ca.crt), as in a real control plane; its health is
# then read on a plain metrics port.
start_etcd() {
  local pki=${1:-} client peer health scheme=http i
  local tls=()
  client=$(free_port)
  peer=$(free_port)
  health=$client
  if [ -n "$pki" ]; then
    scheme=https
    health=$(free_port)
    tls=(--cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key"
      --trusted-ca-file "$pki/etcd-ca.crt" --client-cert-auth
      --listen-metrics-urls "http://127.0.0.1:$health")
  fi
  mkdir -p "$TMP/etcd"
  etcd --name e2e --data-dir "$TMP/etcd/data" \
    --listen-client-urls "$scheme://127.0.0.1:$client" \
    --advertise-client-urls "$scheme://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e2e=http://127.0.0.1:$peer" "${tls[@]}" \
    >"$TMP/etcd/etcd.log" 2>&1 &
  ETCD_PID=$!
  PIDS+=("$ETCD_PID")
  ETCD_URL=$scheme://127.0.0.1:$client
  for ((i = 0; i < 200; i++)); do # 20 s
    if curl -sf "http://127.0.0.1:$health/health" 2>/dev/null | grep -q '"health":"true"'; then
      echo "etcd pid $ETCD_PID on $ETCD_URL" >&2
      return 0
    fi
    kill -0 "$ETCD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "etcd did not become healthy; log:" >&2
  tail -n 30 "$TMP/etcd/etcd.log" >&2
  return 1
}

# start_apiserver DIR [EXTRA FLAGS...]: PKI + kube-apiserver on a free loopback port;
# waits (at most 60 s) for /readyz. Sets APISERVER_PID and KUBECONFIG.
start_apiserver() {
  local dir=$1 port
  shift
  port=$(free_port)
  mkdir -p "$dir"
  "$BIN/ferrokube-pki" init --dir "$dir/pki" --server "https://127.0.0.1:$port" >/dev/null
  # The audit log, checked by s_audit_log: secrets at Metadata, configmaps in full.
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: RequestResponse
    resources: [{group: "", resources: ["configmaps"]}]
POLICY
  # Secrets encrypted at rest (checked by s_encryption_at_rest), identity to read the
  # rest: every step that touches a Secret goes through the decorator.
  cat >"$dir/encryption.yaml" <<ENCRYPTION
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc: {keys: [{name: key1, secret: "$(head -c 32 /dev/urandom | base64 -w0)"}]}
      - identity: {}
ENCRYPTION
  export KUBECONFIG=$dir/pki/admin.kubeconfig
  API_URL=https://127.0.0.1:$port
  API_CA=$dir/pki/ca.crt
  launch_apiserver "$dir" "$port" 127.0.0.1 --audit-policy-file "$dir/audit-policy.yaml" \
    --audit-log-path "$dir/audit.log" --data-dir "$dir/data" \
    --encryption-provider-config "$dir/encryption.yaml" "$@" || return 1
  APISERVER_PID=$LAUNCHED_PID
}

# launch_apiserver DIR PORT ADVERTISE_ADDRESS ARGS...: a kube-apiserver with the PKI
# under DIR (log DIR/apiserver-PORT.log); waits for /readyz and sets LAUNCHED_PID.
launch_apiserver() {
  local dir=$1 port=$2 advertise=$3 i
  shift 3
  "$BIN/kube-apiserver" --secure-port "$port" --bind-address 127.0.0.1 \
    --advertise-address "$advertise" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --requestheader-client-ca-file "$dir/pki/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$dir/pki/front-proxy-client.crt" \
    --proxy-client-key-file "$dir/pki/front-proxy-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --allow-privileged=true --enable-bootstrap-token-auth=true \
    --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname "$@" \
    >"$dir/apiserver-$port.log" 2>&1 &
  LAUNCHED_PID=$!
  PIDS+=("$LAUNCHED_PID")
  for ((i = 0; i < 600; i++)); do # 60 s
    if [ "$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$port/readyz")" = 200 ]; then
      echo "kube-apiserver pid $LAUNCHED_PID on https://127.0.0.1:$port" >&2
      return 0
    fi
    kill -0 "$LAUNCHED_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "kube-apiserver did not become ready; log:" >&2
  tail -n 30 "$dir/apiserver-$port.log" >&2
  return 1
}

# --------------------------------------------------------------------------- steps

# The audit log of the run's apiserver: kubectl's configmap create in full (request
# object, kubectl's user agent), its secret create at Metadata, the secret's value
# nowhere in the log.
s_audit_log() {
  local log=$RUN_DIR/audit.log i
  k -n "$NS" create configmap audit-cm --from-literal=k=audit-value
  k -n "$NS" create secret generic audit-secret --from-literal=password=e2e-audit-secret
  for ((i = 0; i < 100; i++)); do # 10 s: events are written off the request path
    if grep -q '"name":"audit-cm"' "$log" && grep -q '"name":"audit-secret"' "$log"; then break; fi
    sleep 0.1
  done
  python3 - "$log" "$NS" <<'CHECK'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
ns = sys.argv[2]
def created(resource, name):
    for e in events:
        ref = e.get("objectRef", {})
        if (ref.get("resource"), ref.get("name"), ref.get("namespace"), e["verb"]) == (resource, name, ns, "create"):
            return e
    sys.exit(f"no create event for {resource}/{name} in {ns}")
cm = created("configmaps", "audit-cm")
assert cm["level"] == "RequestResponse" and cm["stage"] == "ResponseComplete", cm
assert cm["requestObject"]["data"]["k"] == "audit-value", cm
assert cm["responseObject"]["metadata"]["uid"], cm
assert cm["userAgent"].startswith("kubectl"), cm
assert cm["responseStatus"]["code"] == 201, cm
secret = created("secrets", "audit-secret")
assert secret["level"] == "Metadata", secret
assert "requestObject" not in secret and "responseObject" not in secret, secret
assert not any(e["stage"] == "RequestReceived" for e in events), "RequestReceived is omitted"
print("audit events ok")
CHECK
  if grep -q -e e2e-audit-secret -e "$(printf e2e-audit-secret | base64)" "$log"; then
    echo "the secret's value is in the audit log"
    return 1
  fi
}
# Each runs in namespace $NS with $KUBECTL; manifests live in $MAN.

write_manifests() {
  mkdir -p "$MAN"
  cat >"$MAN/app-v1.yaml" <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
    tier: frontend
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
        env:
        - name: KEEP
          value: "1"
        - name: REMOVED
          value: "2"
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels:
    app: web
data:
  color: blue
  size: large
---
apiVersion: v1
kind: Secret
metadata:
  name: web-secret
  labels:
    app: web
type: Opaque
stringData:
  password: s3cret
EOF
  # v2: label tier removed, track added; env REMOVED removed, ADDED added; image and
  # ConfigMap data changed; Service and Secret unchanged.
  sed -e 's/    tier: frontend/    track: stable/' \
    -e 's/image: nginx:1.27/image: nginx:1.28/' \
    -e 's/- name: REMOVED/- name: ADDED/' -e 's/value: "2"/value: "3"/' \
    -e 's/  size: large/  size: small/' \
    "$MAN/app-v1.yaml" >"$MAN/app-v2.yaml"
  cat >"$MAN/held.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: held
  finalizers:
  - e2e.ferrokube.io/hold
data:
  k: v
EOF
}

s_version() {
  k version
  has '^Server Version: v1\.33'
}

s_create_namespace() {
  k create namespace "$NS"
  has "^namespace/$NS created"
  k get namespace "$NS"
  has "^$NS +Active"
}

s_apply_v1() {
  k apply -n "$NS" -f "$MAN/app-v1.yaml"
  has '^deployment.apps/web created'
  has '^service/web created'
  has '^configmap/web-config created'
  has '^secret/web-secret created'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.template.spec.containers[0].env[*].name}'
  is 'KEEP REMOVED'
  # Changed out of band (not in the last-applied configuration): kept by the next apply.
  k label deployment web -n "$NS" owner=ops
  has 'deployment.apps/web labeled'
}

s_apply_v2() {
  k apply -n "$NS" -f "$MAN/app-v2.yaml"
  has '^deployment.apps/web configured'
  has '^configmap/web-config configured'
  has '^service/web unchanged'
  # A Secret applied with stringData reports "configured" on every apply upstream too:
  # the live object holds data, so kubectl's patch always re-adds stringData.
  has '^secret/web-secret (unchanged|configured)'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.template.spec.containers[0].env[*].name}'
  is 'KEEP ADDED'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.template.spec.containers[0].image}'
  is 'nginx:1.28'
  k get deployment web -n "$NS" --show-labels
  has 'app=web'
  has 'track=stable'
  has 'owner=ops'
  lacks 'tier=frontend'
  k get configmap web-config -n "$NS" -o 'jsonpath={.data.size}'
  is 'small'
}

# Server-side apply: kubectl's own field manager owns what it applied, a field no
# longer applied goes, `kubectl scale` takes .spec.replicas (a conflict until
# --force-conflicts), and an object made by client-side apply moves to server-side
# apply without a conflict on its own fields.
s_server_side_apply() {
  local dir
  dir=$(mktemp -d "$TMP/ssa.XXXXXX")
  ssa_manifest() { # ssa_manifest REPLICAS DATA_LINES
    cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: ssa}
spec:
  replicas: $1
  selector: {matchLabels: {app: ssa}}
  template:
    metadata: {labels: {app: ssa}}
    spec:
      containers: [{name: web, image: nginx:1.28}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ssa}
data:
$2
EOF
  }
  ssa_manifest 2 $'  a: "1"\n  b: "2"' >"$dir/v1.yaml"
  ssa_manifest 2 '  a: "1"' >"$dir/v2.yaml"
  ssa_manifest 3 '  a: "1"' >"$dir/v3.yaml"
  k apply --server-side -n "$NS" -f "$dir/v1.yaml"
  has '^deployment.apps/ssa serverside-applied'
  has '^configmap/ssa serverside-applied'
  k get deployment ssa -n "$NS" --show-managed-fields \
    -o 'jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}'
  is 'kubectl/Apply'
  k get deployment ssa -n "$NS" -o yaml
  lacks 'managedFields'
  k apply --server-side -n "$NS" -f "$dir/v2.yaml"
  k get configmap ssa -n "$NS" -o 'jsonpath={.data}'
  is '{"a":"1"}'
  k scale deployment ssa -n "$NS" --replicas=5
  has 'deployment.apps/ssa scaled'
  if k apply --server-side -n "$NS" -f "$dir/v3.yaml"; then
    echo "expected a conflict on .spec.replicas"
    return 1
  fi
  # The manager of `kubectl scale` is its User-Agent's program name (kubectl.1.32 too).
  has 'Apply failed with 1 conflict: conflict with "kubectl[.0-9]*" with subresource "scale" using apps/v1: \.spec\.replicas'
  has 'force-conflicts'
  k get deployment ssa -n "$NS" -o 'jsonpath={.spec.replicas}'
  is '5'
  k apply --server-side --force-conflicts -n "$NS" -f "$dir/v3.yaml"
  has '^deployment.apps/ssa serverside-applied'
  k get deployment ssa -n "$NS" -o 'jsonpath={.spec.replicas}'
  is '3'
  # From client-side apply: kubectl's fields of the last-applied configuration move.
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: csa}\ndata: {a: "1"}\n' >"$dir/csa1.yaml"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: csa}\ndata: {a: "2"}\n' >"$dir/csa2.yaml"
  k apply -n "$NS" -f "$dir/csa1.yaml"
  has '^configmap/csa created'
  k apply --server-side -n "$NS" -f "$dir/csa2.yaml"
  has '^configmap/csa serverside-applied'
  k get configmap csa -n "$NS" -o 'jsonpath={.data.a}'
  is '2'
  k delete -n "$NS" deployment/ssa configmap/ssa configmap/csa
}

s_get_wide() {
  k get deployment web -n "$NS" -o wide
  has '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +CONTAINERS +IMAGES +SELECTOR'
  has '^web +0/2 .* web +nginx:1.28 +app=web'
  k get service web -n "$NS" -o wide
  has '^NAME +TYPE +CLUSTER-IP +EXTERNAL-IP +PORT\(S\) +AGE +SELECTOR'
  has '^web +ClusterIP +10\.[0-9.]+ +<none> +80/TCP .* app=web'
}

s_get_yaml() {
  k get deployment web -n "$NS" -o yaml
  has '^kind: Deployment'
  has '^apiVersion: apps/v1'
  has '^  name: web'
  has "^  namespace: $NS"
  has 'kubectl.kubernetes.io/last-applied-configuration'
}

s_get_json() {
  k get configmap web-config -n "$NS" -o json
  python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
assert o["kind"] == "ConfigMap", o["kind"]
assert o["data"] == {"color": "blue", "size": "small"}, o["data"]
assert o["metadata"]["uid"] and o["metadata"]["resourceVersion"], o["metadata"]
' "$TMP/out"
}

s_get_jsonpath() {
  k get deployment web -n "$NS" -o 'jsonpath={.metadata.name}:{.spec.replicas}:{.spec.selector.matchLabels.app}'
  is 'web:2:web'
  k get secret web-secret -n "$NS" -o 'jsonpath={.data.password}'
  is "$(printf s3cret | base64)"
}

s_get_selector() {
  k get deployments,services,configmaps -n "$NS" -l app=web
  has '^deployment.apps/web '
  has '^service/web '
  has '^configmap/web-config '
  k get configmaps -n "$NS" -l 'app in (web),track!=x'
  has '^web-config '
  k get deployments -n "$NS" -l app=nothing
  has "No resources found in $NS namespace"
}

s_get_show_labels() {
  k get configmaps -n "$NS" --show-labels
  has '^NAME +DATA +AGE +LABELS'
  has '^web-config +2 .* app=web'
}

s_get_all_namespaces() {
  k get configmaps -A
  has '^NAMESPACE +NAME +DATA +AGE'
  has "^$NS +web-config +2 "
  k get namespaces
  has '^kube-system +Active'
  k get services -A
  has '^default +kubernetes +ClusterIP '
  has "^$NS +web +ClusterIP "
}

s_get_watch() {
  local out=$TMP/watch.out i wpid
  : >"$out"
  timeout 30 "$KUBECTL" get configmap web-config -n "$NS" -w \
    -o 'jsonpath={.metadata.name}={.data.color}{"\n"}' >"$out" 2>&1 &
  wpid=$!
  for ((i = 0; i < 150; i++)); do # initial state printed, at most 15 s
    grep -q '^web-config=blue$' "$out" && break
    sleep 0.1
  done
  grep -q '^web-config=blue$' "$out" || {
    echo "watch did not print the initial state:"
    cat "$out"
    kill "$wpid" 2>/dev/null
    return 1
  }
  k patch configmap web-config -n "$NS" --type merge -p '{"data":{"color":"red"}}'
  has 'configmap/web-config patched'
  for ((i = 0; i < 150; i++)); do # the update, at most 15 s
    grep -q '^web-config=red$' "$out" && break
    sleep 0.1
  done
  kill "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  echo "watch printed:"
  cat "$out"
  grep -q '^web-config=red$' "$out" || {
    echo "watch did not print the update"
    return 1
  }
  # Back to blue for the edit step.
  k patch configmap web-config -n "$NS" --type merge -p '{"data":{"color":"blue"}}'
}

s_patch_strategic() {
  k patch deployment web -n "$NS" --type strategic \
    -p '{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"PATCHED","value":"4"}]}]}}}}'
  has 'deployment.apps/web patched'
  # Strategic: env merged by name into the existing list (a merge patch would replace it).
  k get deployment web -n "$NS" -o 'jsonpath={.spec.template.spec.containers[0].env[*].name}'
  has 'KEEP'
  has 'ADDED'
  has 'PATCHED'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.template.spec.containers[0].image}'
  is 'nginx:1.28'
}

s_patch_merge() {
  k patch deployment web -n "$NS" --type merge -p '{"metadata":{"labels":{"patched":"merge"}}}'
  has 'deployment.apps/web patched'
  k get deployment web -n "$NS" -o 'jsonpath={.metadata.labels.patched}/{.metadata.labels.app}'
  is 'merge/web'
}

s_patch_json() {
  k patch deployment web -n "$NS" --type json \
    -p '[{"op":"replace","path":"/spec/replicas","value":3},{"op":"add","path":"/metadata/annotations/json-patched","value":"yes"}]'
  has 'deployment.apps/web patched'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.replicas}/{.metadata.annotations.json-patched}'
  is '3/yes'
}

s_edit() {
  EDITOR="sed -i -e s/color:\ blue/color:\ green/" k edit configmap web-config -n "$NS"
  has 'configmap/web-config edited'
  k get configmap web-config -n "$NS" -o 'jsonpath={.data.color}'
  is 'green'
}

s_label() {
  k label deployment web -n "$NS" env=prod
  has 'deployment.apps/web labeled'
  k get deployment web -n "$NS" -o 'jsonpath={.metadata.labels.env}'
  is 'prod'
  k label deployment web -n "$NS" env=staging --overwrite
  has 'deployment.apps/web labeled'
  k get deployments -n "$NS" -l env=staging
  has '^web '
  k label deployment web -n "$NS" env-
  has 'deployment.apps/web unlabeled'
  k get deployment web -n "$NS" --show-labels
  lacks 'env='
}

s_annotate() {
  k annotate deployment web -n "$NS" e2e.ferrokube.io/note='hello world'
  has 'deployment.apps/web annotated'
  k get deployment web -n "$NS" -o 'jsonpath={.metadata.annotations.e2e\.ferrokube\.io/note}'
  is 'hello world'
}

s_scale() {
  k scale deployment web -n "$NS" --replicas=5
  has 'deployment.apps/web scaled'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.replicas}'
  is '5'
  k scale deployment web -n "$NS" --current-replicas=5 --replicas=1
  has 'deployment.apps/web scaled'
  k get deployment web -n "$NS" -o 'jsonpath={.spec.replicas}'
  is '1'
}

s_explain() {
  k explain pod.spec.containers
  has '^KIND: +Pod'
  has '^VERSION: +v1'
  has '^FIELD: +containers <\[\]Container>'
  has '^ +image\s+<string>'
  has '^ +name\s+<string> -required-'
  has '^ +imagePullPolicy\s+<string>$'
  has '^ +enum: Always, IfNotPresent, Never$'
  # An enum field's values and their descriptions, as upstream's OpenAPI has them.
  k explain deployment.spec.strategy.type
  has '^ENUM:$'
  has '^ +Recreate$'
  has '^ +- `"RollingUpdate"` Replace the old ReplicaSets'
}

s_api_resources() {
  k api-resources
  has '^NAME +SHORTNAMES +APIVERSION +NAMESPACED +KIND'
  has '^pods +po +v1 +true +Pod'
  has '^deployments +deploy +apps/v1 +true +Deployment'
  has '^namespaces +ns +v1 +false +Namespace'
  has '^leases +coordination.k8s.io/v1 +true +Lease'
  k api-resources --api-group=apps -o name
  has '^deployments.apps$'
}

s_api_versions() {
  k api-versions
  has '^v1$'
  has '^apps/v1$'
  has '^batch/v1$'
  has '^rbac.authorization.k8s.io/v1$'
  has '^coordination.k8s.io/v1$'
  has '^autoscaling/v1$'
  has '^autoscaling/v2$'
}

# autoscaling/v1 and v2 are one resource: an old v1 manifest applies, and v2 (what
# kubectl prefers) shows the same object.
s_hpa_versions() {
  cat >"$TMP/hpa-v1.yaml" <<EOF
apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: hpa-v1, namespace: $NS}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 5
  targetCPUUtilizationPercentage: 60
EOF
  k apply -f "$TMP/hpa-v1.yaml"
  has 'horizontalpodautoscaler.autoscaling/hpa-v1 created'
  k -n "$NS" get hpa hpa-v1 -o jsonpath='{.apiVersion} {.spec.metrics[0].resource.target.averageUtilization}'
  is 'autoscaling/v2 60'
  k -n "$NS" get horizontalpodautoscalers.v1.autoscaling hpa-v1 -o jsonpath='{.apiVersion} {.spec.targetCPUUtilizationPercentage}'
  is 'autoscaling/v1 60'
  k -n "$NS" get hpa hpa-v1
  has '^hpa-v1 +Deployment/web +cpu: <unknown>/60% +2 +5 +0 '
  k apply -f "$TMP/hpa-v1.yaml"
  has 'horizontalpodautoscaler.autoscaling/hpa-v1 unchanged'
  k -n "$NS" delete -f "$TMP/hpa-v1.yaml"
  has 'deleted'
}

# Kinds without a PATCH operation make kubectl list CustomResourceDefinitions before it
# validates them; the reviews have no metadata. Both must work from a file.
s_reviews_from_files() {
  cat >"$TMP/sar.yaml" <<EOF
apiVersion: authorization.k8s.io/v1
kind: SubjectAccessReview
spec:
  user: jane
  resourceAttributes: {verb: list, resource: pods, namespace: $NS}
EOF
  k create -f "$TMP/sar.yaml" -o 'jsonpath={.status.allowed}'
  is 'false'
  cat >"$TMP/ssar.yaml" <<EOF
apiVersion: authorization.k8s.io/v1
kind: SelfSubjectAccessReview
spec:
  resourceAttributes: {verb: list, resource: pods, namespace: $NS}
EOF
  k create -f "$TMP/ssar.yaml" -o 'jsonpath={.status.allowed}'
  is 'true'
  k api-resources --api-group=authorization.k8s.io
  has '^subjectaccessreviews +authorization.k8s.io/v1 +false +SubjectAccessReview$'
  has '^localsubjectaccessreviews +authorization.k8s.io/v1 +true +LocalSubjectAccessReview$'
  k api-resources --api-group=apiextensions.k8s.io
  has '^customresourcedefinitions +crd,crds +apiextensions.k8s.io/v1 +false +CustomResourceDefinition$'
  # A Binding from a file goes to the legacy bindings collection.
  # No controllers here: the ServiceAccount plugin needs the pod's account made by hand.
  k create serviceaccount binder -n "$NS"
  k run bindme -n "$NS" --image=nginx --restart=Never --overrides='{"spec": {"serviceAccountName": "binder"}}'
  cat >"$TMP/binding.yaml" <<EOF
apiVersion: v1
kind: Binding
metadata: {name: bindme, namespace: $NS}
target: {apiVersion: v1, kind: Node, name: e2e-node}
EOF
  k create -f "$TMP/binding.yaml"
  has 'created'
  k get pod bindme -n "$NS" -o 'jsonpath={.spec.nodeName}'
  is 'e2e-node'
  if k create -f "$TMP/binding.yaml"; then return 1; fi
  has 'already assigned to node "e2e-node"'
  k delete pod bindme -n "$NS" --grace-period=0 --force
  k delete serviceaccount binder -n "$NS"
}

s_secret_generic() {
  k create secret generic gen -n "$NS" --from-literal=user=admin --from-literal=pass='p@ss'
  has '^secret/gen created'
  k get secret gen -n "$NS" -o 'jsonpath={.type} {.data.user}'
  is "Opaque $(printf admin | base64)"
}

s_secret_tls() {
  k create secret tls tls -n "$NS" --cert "$RUN_DIR/pki/apiserver.crt" --key "$RUN_DIR/pki/apiserver.key"
  has '^secret/tls created'
  k get secret tls -n "$NS"
  has '^tls +kubernetes.io/tls +2 '
}

s_secret_docker_registry() {
  k create secret docker-registry regcred -n "$NS" --docker-server=registry.example:5000 \
    --docker-username=bob --docker-password=hunter2
  has '^secret/regcred created'
  k get secret regcred -n "$NS" -o 'jsonpath={.type}'
  is 'kubernetes.io/dockerconfigjson'
  k get secret regcred -n "$NS" -o 'jsonpath={.data.\.dockerconfigjson}'
  base64 -d <"$TMP/out" | grep -q '"registry.example:5000"' || {
    echo "docker config does not name the registry"
    return 1
  }
}

s_configmap_literal() {
  k create configmap lit -n "$NS" --from-literal=a=1 --from-literal=b=two
  has '^configmap/lit created'
  k get configmap lit -n "$NS" -o 'jsonpath={.data.a},{.data.b}'
  is '1,two'
}

s_delete_finalizer() {
  local i
  k apply -n "$NS" -f "$MAN/held.yaml"
  has '^configmap/held created'
  k delete configmap held -n "$NS" --wait=false
  has 'configmap "held" deleted'
  # Marked, not gone: the finalizer holds it.
  k get configmap held -n "$NS" -o 'jsonpath={.metadata.deletionTimestamp}|{.metadata.finalizers[*]}'
  has '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z\|e2e.ferrokube.io/hold$'
  k patch configmap held -n "$NS" --type json -p '[{"op":"remove","path":"/metadata/finalizers"}]'
  has 'configmap/held patched'
  for ((i = 0; i < 50; i++)); do # at most 5 s
    if ! timeout "$CMD_TIMEOUT" "$KUBECTL" get configmap held -n "$NS" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  k get configmap held -n "$NS" --ignore-not-found -o name
  is ''
  if k get configmap held -n "$NS"; then return 1; fi
  has 'Error from server \(NotFound\): configmaps "held" not found'
}

# Custom resources: a CustomResourceDefinition applied, established, and its resource
# used as any other (table columns, defaults, validation, scale, status), then deleted
# with its objects.
s_custom_resources() {
  local group="$NS.example.com" i
  cat >"$MAN/crd.yaml" <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.$group
spec:
  group: $group
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cronSpec]
            properties:
              cronSpec: {type: string}
              image: {type: string}
              replicas: {type: integer, minimum: 1, default: 1}
          status:
            type: object
            properties:
              replicas: {type: integer}
YAML
  k apply -f "$MAN/crd.yaml"
  has "^customresourcedefinition.apiextensions.k8s.io/crontabs.$group created"
  k wait --for condition=established --timeout=20s "crd/crontabs.$group"
  has "condition met"
  # A rule with a misspelt field is refused when the definition is written.
  sed 's/^            required: \[cronSpec\]$/&\n            x-kubernetes-validations: [{rule: "self.replicsa >= 1"}]/' \
    "$MAN/crd.yaml" >"$MAN/crd-bad-rule.yaml"
  grep -q replicsa "$MAN/crd-bad-rule.yaml"
  if k apply -f "$MAN/crd-bad-rule.yaml"; then echo "expected kubectl to fail"; return 1; fi
  has "x-kubernetes-validations\[0\]\.rule: Invalid value: apiextensions\.ValidationRule\{Rule:\"self\.replicsa >= 1\", Message:\"\", .*\}: compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'"
  k api-resources --api-group="$group"
  has "^crontabs +ct +$group/v1 +true +CronTab"
  k explain crontabs.spec
  has '^KIND: +CronTab'
  has '^ +cronSpec\s+<string> -required-'
  has '^ +replicas\s+<integer>'
  cat >"$MAN/crontab.yaml" <<YAML
apiVersion: $group/v1
kind: CronTab
metadata:
  name: my-cron
  namespace: $NS
spec:
  cronSpec: "* * * * */5"
  image: my-cron-image
YAML
  k apply -f "$MAN/crontab.yaml"
  has "^crontab.$group/my-cron created"
  k get crontabs -n "$NS"
  has '^NAME +SPEC +REPLICAS +AGE$'
  has '^my-cron +\* \* \* \* \*/5 +1 +[0-9]+s$'
  sed -i 's/my-cron-image/my-cron-image:2/' "$MAN/crontab.yaml"
  k apply -f "$MAN/crontab.yaml"
  has "^crontab.$group/my-cron configured"
  k get ct my-cron -n "$NS" -o 'jsonpath={.spec.image}|{.spec.replicas}|{.metadata.generation}'
  is 'my-cron-image:2|1|2'
  k scale ct my-cron -n "$NS" --replicas=3
  has "^crontab.$group/my-cron scaled"
  k patch ct my-cron -n "$NS" --type merge -p '{"spec":{"image":"other"}}'
  has "^crontab.$group/my-cron patched"
  k get ct my-cron -n "$NS" -o 'jsonpath={.spec.image}|{.spec.replicas}'
  is 'other|3'
  cat >"$MAN/crontab-bad.yaml" <<YAML
apiVersion: $group/v1
kind: CronTab
metadata:
  name: bad
  namespace: $NS
spec:
  replicas: 0
YAML
  if k create -f "$MAN/crontab-bad.yaml"; then return 1; fi
  has 'The CronTab "bad" is invalid'
  has 'spec.cronSpec: Required value'
  has 'spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1'
  sed -i 's/replicas: 0/cronSpec: x\n  bogus: 1/' "$MAN/crontab-bad.yaml"
  if k create -f "$MAN/crontab-bad.yaml"; then return 1; fi
  has 'unknown field "spec.bogus"'
  k delete crd "crontabs.$group"
  has "customresourcedefinition.apiextensions.k8s.io \"crontabs.$group\" deleted"
  for ((i = 0; i < 50; i++)); do # at most 5 s: discovery forgets the resource
    if ! timeout "$CMD_TIMEOUT" "$KUBECTL" api-resources --api-group="$group" 2>/dev/null | grep -q crontabs; then break; fi
    sleep 0.1
  done
  if k get crontabs -n "$NS"; then return 1; fi
  has 'the server doesn.t have a resource type "crontabs"'
}

s_apiservices() {
  local group="$NS.metrics.example.com" i
  k get apiservices
  has '^v1\.apps +Local +True +[0-9]+'
  has '^v1\. +Local +True +[0-9]+'
  cat >"$MAN/apiservice.yaml" <<YAML
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.$group
spec:
  group: $group
  version: v1beta1
  service: {namespace: kube-system, name: missing-$NS}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
YAML
  k apply -f "$MAN/apiservice.yaml"
  has "^apiservice.apiregistration.k8s.io/v1beta1.$group created"
  for ((i = 0; i < 50; i++)); do # at most 5 s: the availability check
    if timeout "$CMD_TIMEOUT" "$KUBECTL" get apiservice "v1beta1.$group" 2>/dev/null | grep -q ServiceNotFound; then break; fi
    sleep 0.1
  done
  k get apiservice "v1beta1.$group"
  has "^v1beta1.$group +kube-system/missing-$NS +False \(ServiceNotFound\) +[0-9]+"
  k get apiservice "v1beta1.$group" -o 'jsonpath={.spec.service.port}|{.status.conditions[0].message}'
  is "443|service/missing-$NS in \"kube-system\" is not present"
  if k get --raw "/apis/$group/v1beta1/namespaces/default/things"; then return 1; fi
  has 'ServiceUnavailable'
  k delete -f "$MAN/apiservice.yaml"
  has "apiservice.apiregistration.k8s.io \"v1beta1.$group\" deleted"
}

s_delete() {
  k delete deployment,service,secret -n "$NS" -l app=web
  has 'deployment.apps "web" deleted'
  has 'service "web" deleted'
  has 'secret "web-secret" deleted'
  k get deployments,services -n "$NS"
  has "No resources found in $NS namespace"
}

s_auth_whoami() {
  k auth whoami
  has '^Username +kubernetes-admin$'
  has '^Groups +\[system:masters system:authenticated\]$'
  k auth whoami --as=jane --as-group=devs
  has '^Username +jane$'
  has '^Groups +\[devs system:authenticated\]$'
}

s_auth_can_i() {
  k auth can-i --list --as=system:serviceaccount:default:default
  has '^selfsubjectaccessreviews.authorization.k8s.io +\[\] +\[\] +\[create\]$'
  has '^selfsubjectreviews.authentication.k8s.io +\[\] +\[\] +\[create\]$'
  has '^ +\[/healthz\] +\[\] +\[get\]$'
  lacks '^pods'
  k auth can-i list pods -n "$NS"
  is yes
  if k auth can-i list pods -n "$NS" --as=system:serviceaccount:default:default; then return 1; fi
  is no
  k create rolebinding sa-view -n "$NS" --clusterrole=view --serviceaccount=default:default
  local i
  for ((i = 0; i < 50; i++)); do
    k auth can-i list pods -n "$NS" --as=system:serviceaccount:default:default && break
    sleep 0.1
  done
  is yes
  if k auth can-i list secrets -n "$NS" --as=system:serviceaccount:default:default; then return 1; fi
  k delete rolebinding sa-view -n "$NS"
}

s_create_token() {
  # No controller-manager here: the namespace's default service account is made by hand.
  k create serviceaccount default -n "$NS"
  k create token default -n "$NS"
  # The output is the token alone, a JWT (header.payload.signature); kubectl adds no
  # newline when its output is not a terminal.
  [ "$(wc -l <"$TMP/out")" -eq 0 ]
  has '^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$'
  local token payload
  token=$(cat "$TMP/out")
  payload=$(python3 -c 'import base64,json,sys; p=sys.argv[1].split(".")[1]; print(json.dumps(json.loads(base64.urlsafe_b64decode(p+"="*(-len(p)%4))), sort_keys=True))' "$token")
  echo "payload: $payload"
  grep -q "\"sub\": \"system:serviceaccount:$NS:default\"" <<<"$payload"
  grep -q '"aud": \["https://kubernetes.default.svc.cluster.local"\]' <<<"$payload"
  grep -q '"iss": "https://kubernetes.default.svc.cluster.local"' <<<"$payload"
  k --kubeconfig=/dev/null --server="$API_URL" --certificate-authority="$API_CA" --token="$token" auth whoami
  has "^Username +system:serviceaccount:$NS:default$"
  has '^Groups +\[system:serviceaccounts system:serviceaccounts:'"$NS"' system:authenticated\]$'
  if k --kubeconfig=/dev/null --server="$API_URL" --certificate-authority="$API_CA" --token="$token" get pods -n "$NS"; then return 1; fi
  has 'Error from server \(Forbidden\): pods is forbidden: User "system:serviceaccount:'"$NS"':default" cannot list resource "pods" in API group "" in the namespace "'"$NS"'"'
  k create token default -n "$NS" --duration=1m || true
  has 'may not specify a duration less than 10 minutes'
  k delete serviceaccount default -n "$NS"
}

# The stored bytes of KEY: from etcd with etcdctl on the etcd run, from the SQLite
# file otherwise (read-only; the apiserver keeps writing).
stored_value() {
  if [ "$RUN_DIR" = "$TMP/etcd-run" ]; then
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" --cacert "$RUN_DIR/pki/etcd-ca.crt" \
      --cert "$RUN_DIR/pki/apiserver-etcd-client.crt" --key "$RUN_DIR/pki/apiserver-etcd-client.key" \
      get "$1" --print-value-only
  else
    python3 - "$RUN_DIR/data/state.db" "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
row = db.execute("SELECT l.value FROM kv_current c JOIN kv_log l ON l.rev = c.rev WHERE c.key = ?",
                 (sys.argv[2].encode(),)).fetchone()
sys.stdout.buffer.write(row[0] if row else b"")
PY
  fi
}

s_encryption_at_rest() {
  k create secret generic at-rest -n "$NS" --from-literal=password=e2e-hunter2-plain
  stored_value "/registry/secrets/$NS/at-rest" >"$TMP/stored"
  head -c 48 "$TMP/stored" | od -c | head -3
  if [ "$(head -c 23 "$TMP/stored")" != "k8s:enc:aescbc:v1:key1:" ]; then
    echo "expected the stored Secret to start with k8s:enc:aescbc:v1:key1:"
    return 1
  fi
  if grep -aq -e 'e2e-hunter2-plain' -e "$(printf e2e-hunter2-plain | base64)" "$TMP/stored"; then
    echo "the stored Secret holds its value in the clear"
    return 1
  fi
  k get secret at-rest -n "$NS" -o jsonpath='{.data.password}'
  [ "$(base64 -d <"$TMP/out")" = e2e-hunter2-plain ]
  # A ConfigMap is no secret: stored as it is.
  k create configmap at-rest -n "$NS" --from-literal=colour=blue-e2e
  stored_value "/registry/configmaps/$NS/at-rest" >"$TMP/stored"
  grep -aq 'blue-e2e' "$TMP/stored"
  k delete secret,configmap at-rest -n "$NS"
}

s_bootstrap_token() {
  # kubeadm's token format: a Secret bootstrap-token-<id> in kube-system, used as the
  # bearer token <id>.<secret> (--enable-bootstrap-token-auth).
  k create secret generic bootstrap-token-e2e0ab -n kube-system \
    --type=bootstrap.kubernetes.io/token --from-literal=token-id=e2e0ab \
    --from-literal=token-secret=0123456789abcdef --from-literal=usage-bootstrap-authentication=true \
    --from-literal=auth-extra-groups=system:bootstrappers:kubeadm:default-node-token
  local as_token=(--kubeconfig=/dev/null --server="$API_URL" --certificate-authority="$API_CA")
  k "${as_token[@]}" --token=e2e0ab.0123456789abcdef auth whoami
  has '^Username +system:bootstrap:e2e0ab$'
  has '^Groups +\[system:bootstrappers system:bootstrappers:kubeadm:default-node-token system:authenticated\]$'
  if k "${as_token[@]}" --token=e2e0ab.0123456789abcdee auth whoami; then return 1; fi
  has 'Unauthorized'
  k delete secret bootstrap-token-e2e0ab -n kube-system
  if k "${as_token[@]}" --token=e2e0ab.0123456789abcdef auth whoami; then return 1; fi
  has 'Unauthorized'
}

s_certificate_approve() {
  # kubectl certificate approve PUTs the approval subresource; get shows the condition.
  local name="e2e-$NS"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$name" -keyout "$TMP/$name.key" -out "$TMP/$name.csr" 2>/dev/null
  cat >"$TMP/$name.yaml" <<YAML
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: $name
spec:
  signerName: kubernetes.io/kube-apiserver-client
  usages: ["client auth"]
  request: $(base64 -w0 <"$TMP/$name.csr")
YAML
  k apply -f "$TMP/$name.yaml"
  k certificate approve "$name"
  has "^certificatesigningrequest.certificates.k8s.io/$name approved$"
  k get csr "$name"
  has "^$name +[0-9smh]+ +kubernetes.io/kube-apiserver-client +.* +<none> +Approved$"
  # The controller-manager's signer (only it, for this step) issues the certificate
  # with the cluster CA, and kubectl logs in with it.
  "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG" --controllers csrsigning \
    --cluster-signing-cert-file "$API_CA" --cluster-signing-key-file "${API_CA%.crt}.key" \
    --secure-port 0 --leader-elect=false >"$TMP/$name-kcm.log" 2>&1 &
  local kcm=$! i
  trap 'stop_pid '"$kcm" EXIT
  for ((i = 0; i < 300; i++)); do # 30 s
    k get csr "$name" -o 'jsonpath={.status.certificate}'
    [ -s "$TMP/out" ] && break
    sleep 0.1
  done
  base64 -d <"$TMP/out" >"$TMP/$name.crt"
  k get csr "$name"
  has "^$name +[0-9smh]+ +kubernetes.io/kube-apiserver-client +.* +<none> +Approved,Issued$"
  k --kubeconfig=/dev/null --server="$API_URL" --certificate-authority="$API_CA" \
    --client-certificate="$TMP/$name.crt" --client-key="$TMP/$name.key" auth whoami
  has "^Username +$name$"
  k delete csr "$name"
}

s_anonymous() {
  # Anonymous requests are allowed (--anonymous-auth defaults to true) and authorized
  # by RBAC: system:public-info-viewer only.
  local code
  code=$(curl -sk -o "$TMP/out" -w '%{http_code}' "$API_URL/version")
  [ "$code" = 200 ] && has '"gitVersion"'
  code=$(curl -sk -o "$TMP/out" -w '%{http_code}' "$API_URL/api/v1/namespaces/$NS/pods")
  cat "$TMP/out"
  [ "$code" = 403 ]
  has 'pods is forbidden: User \\"system:anonymous\\" cannot list resource \\"pods\\" in API group \\"\\" in the namespace'
  # Indented for curl, as upstream's isPrettyPrint; compact when told otherwise.
  has '^  "kind": "Status",$'
  curl -sk -o "$TMP/out" "$API_URL/api/v1/namespaces/$NS/pods?pretty=false"
  has '^\{"apiVersion":"v1",.*"kind":"Status"'
  code=$(curl -sk -o "$TMP/out" -w '%{http_code}' -H 'Authorization: Bearer nope' "$API_URL/healthz")
  [ "$code" = 401 ]
}

s_pod_security() {
  # PodSecurity admission: enforce rejects with upstream's message, a Deployment only
  # warns, relabelling warns about existing pods, an invalid level is refused.
  local ns=$NS-pss
  k create namespace "$ns"
  # No controllers here: the ServiceAccount plugin needs the account made by hand.
  k create serviceaccount default -n "$ns"
  k label namespace "$ns" pod-security.kubernetes.io/enforce=restricted
  if k -n "$ns" run p --image=nginx --privileged; then echo "expected kubectl to fail"; return 1; fi
  has 'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged \(container "p" must not set securityContext.privileged=true\), allowPrivilegeEscalation != false'
  k -n "$ns" create deployment web --image=nginx
  has '^Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false \(container "nginx"'
  has '^deployment.apps/web created'
  k label namespace "$ns" pod-security.kubernetes.io/enforce=baseline --overwrite
  k -n "$ns" run plain --image=nginx
  k label --dry-run=server --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted
  has '^Warning: existing pods in namespace "'"$ns"'" violate the new PodSecurity enforce level "restricted:latest"'
  has '^Warning: plain: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile'
  if k label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=bogus; then echo "expected kubectl to fail"; return 1; fi
  has 'metadata.labels\[pod-security.kubernetes.io/enforce\]: Invalid value: "bogus": must be one of privileged, baseline, restricted'
  k delete namespace "$ns" --wait=false
}

s_webhook_configuration() {
  # admissionregistration.k8s.io/v1: a validating webhook nobody serves, for labelled
  # ConfigMaps only: creating one fails under failurePolicy Fail; then it is removed.
  local name=$NS-unreachable
  cat >"$MAN/webhook.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $name
webhooks:
- name: unreachable.e2e.example.com
  clientConfig:
    url: https://127.0.0.1:1/validate
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  objectSelector:
    matchLabels: {e2e-webhook: "$NS"}
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 2
YAML
  k apply -f "$MAN/webhook.yaml"
  has "validatingwebhookconfiguration.admissionregistration.k8s.io/$name created"
  k get validatingwebhookconfigurations "$name"
  has "^$name +1 +"
  cat >"$MAN/hooked.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: hooked
  labels: {e2e-webhook: "$NS"}
YAML
  if k -n "$NS" create -f "$MAN/hooked.yaml"; then echo "expected kubectl to fail"; return 1; fi
  has 'Internal error occurred: failed calling webhook "unreachable.e2e.example.com": failed to call webhook: Post "https://127.0.0.1:1/validate\?timeout=2s"'
  k delete validatingwebhookconfiguration "$name"
  k -n "$NS" create -f "$MAN/hooked.yaml"
  k -n "$NS" delete configmap hooked
}

s_admission_policy() {
  # ValidatingAdmissionPolicy, upstream's documentation example: Deployments with more
  # than 5 replicas are denied in namespaces the binding selects (ours, by a label).
  local policy=$NS-replicas.example.com binding=$NS-replicas-binding.example.com
  cat >"$MAN/policy.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: $policy
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  validations:
  - expression: "object.spec.replicas <= 5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: $binding
spec:
  policyName: $policy
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {e2e-vap: "$NS"}
YAML
  k apply -f "$MAN/policy.yaml"
  has "validatingadmissionpolicy.admissionregistration.k8s.io/$policy created"
  has "validatingadmissionpolicybinding.admissionregistration.k8s.io/$binding created"
  k get validatingadmissionpolicies "$policy"
  has "^$policy +1 +<unset> +"
  k label namespace "$NS" "e2e-vap=$NS" --overwrite
  if k -n "$NS" create deployment vap-big --image=nginx --replicas=6; then echo "expected kubectl to fail"; return 1; fi
  has "deployments.apps \"vap-big\" is forbidden: ValidatingAdmissionPolicy '$policy' with binding '$binding' denied request: failed expression: object.spec.replicas <= 5"
  k -n "$NS" create deployment vap-small --image=nginx --replicas=2
  if k -n "$NS" patch deployment vap-small -p '{"spec":{"replicas":7}}'; then echo "expected kubectl to fail"; return 1; fi
  has "denied request: failed expression: object.spec.replicas <= 5"
  # A policy whose expression does not compile is refused.
  sed -i 's/object.spec.replicas <= 5/object.spec.replicas <=/' "$MAN/policy.yaml"
  if k apply -f "$MAN/policy.yaml"; then echo "expected kubectl to fail"; return 1; fi
  has 'spec.validations\[0\].expression: Invalid value: "object.spec.replicas <=": compilation failed'
  k delete validatingadmissionpolicybinding "$binding"
  k delete validatingadmissionpolicy "$policy"
  k -n "$NS" delete deployment vap-small
  k label namespace "$NS" e2e-vap-
}

# StorageObjectInUseProtection: a new PVC carries kubernetes.io/pvc-protection, so a
# delete leaves it Terminating until the finalizer goes (no controller-manager here).
s_storage_protection() {
  cat >"$MAN/pvc.yaml" <<YAML
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: protected
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  resources:
    requests:
      storage: 1Gi
YAML
  k apply -f "$MAN/pvc.yaml"
  has "persistentvolumeclaim/protected created"
  k -n "$NS" get pvc protected -o jsonpath='{.metadata.finalizers}'
  is '["kubernetes.io/pvc-protection"]'
  k -n "$NS" delete pvc protected --wait=false
  k -n "$NS" get pvc protected
  has "^protected +Terminating "
  k -n "$NS" patch pvc protected --type merge -p '{"metadata":{"finalizers":null}}'
  k -n "$NS" get pvc --ignore-not-found
  lacks protected
}

# RuntimeClass: the resource through kubectl (create -f, get's NAME/HANDLER/AGE table,
# explain, 422 on a bad handler) and the admission plugin (a pod naming the class gets
# its overhead and node selector; an unknown class is 403).
s_flow_control() {
  k get flowschemas
  has '^NAME +PRIORITYLEVEL +MATCHINGPRECEDENCE +DISTINGUISHERMETHOD +AGE +MISSINGPL'
  has '^exempt +exempt +1 +<none> +[0-9]+[sm] +False'
  has '^catch-all +catch-all +10000 +ByUser +[0-9]+[sm] +False'
  k get prioritylevelconfigurations
  has '^NAME +TYPE +NOMINALCONCURRENCYSHARES +QUEUES +HANDSIZE +QUEUELENGTHLIMIT +AGE'
  has '^workload-low +Limited +100 +128 +6 +50 +'
  k get --raw /api -v=8
  has 'X-Kubernetes-Pf-Flowschema-Uid'
}

s_service_cidrs() {
  k get servicecidrs
  has '^NAME +CIDRS +AGE'
  has '^kubernetes +10\.96\.0\.0/12 +[0-9]+[sm]'
  k get servicecidr kubernetes -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'
  has '^True$'
  k create service clusterip "ips-$NS" -n "$NS" --tcp=80:8080
  local ip
  k get service "ips-$NS" -n "$NS" -o 'jsonpath={.spec.clusterIP}'
  ip=$(cat "$TMP/out")
  k get ipaddresses
  has '^NAME +PARENTREF'
  has '^10\.96\.0\.1 +services/default/kubernetes$'
  has "^${ip//./\\.} +services/$NS/ips-$NS\$"
  k get ipaddress "$ip" -o 'jsonpath={.metadata.labels.ipaddress\.kubernetes\.io/managed-by}'
  has '^ipallocator\.k8s\.io$'
  # An address someone else recorded is taken.
  cat >"$MAN/ipaddress.yaml" <<YAML
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 10.96.200.7
spec:
  parentRef:
    group: gateway.networking.k8s.io
    resource: gateways
    namespace: $NS
    name: gw
YAML
  k create -f "$MAN/ipaddress.yaml"
  has 'ipaddress.networking.k8s.io/10.96.200.7 created'
  if k create service clusterip "taken-$NS" -n "$NS" --tcp=80 --clusterip=10.96.200.7; then return 1; fi
  has 'failed to allocate IP 10.96.200.7: provided IP is already allocated'
  k delete ipaddress 10.96.200.7
  k delete service "ips-$NS" -n "$NS"
  k get ipaddresses
  lacks "services/$NS/ips-$NS"
}

# A second kube-apiserver on the run's etcd (advertising 127.0.0.2): both are the
# kubernetes Service's endpoints; Services created through both at once get distinct
# cluster IPs and node ports; stopped, it leaves the endpoints at once.
s_two_apiservers() {
  local port pid i n=8 second
  port=$(free_port)
  launch_apiserver "$RUN_DIR" "$port" 127.0.0.2 --etcd-servers "$ETCD_URL" "${ETCD_TLS[@]}" \
    --encryption-provider-config "$RUN_DIR/encryption.yaml"
  pid=$LAUNCHED_PID
  # The step runs in a subshell: stop it there whatever happens.
  SECOND_APISERVER_PID=$pid
  trap 'stop_pid "$SECOND_APISERVER_PID"' EXIT
  second=(--server "https://127.0.0.1:$port")
  k get endpoints kubernetes -n default -o 'jsonpath={.subsets[0].addresses[*].ip}'
  is "127.0.0.1 127.0.0.2"
  k "${second[@]}" get endpointslice kubernetes -n default -o 'jsonpath={.endpoints[*].addresses[0]}'
  is "127.0.0.1 127.0.0.2"
  local creates=() rc=0
  for ((i = 0; i < n; i++)); do
    if ((i % 2)); then
      timeout "$CMD_TIMEOUT" "$KUBECTL" "${second[@]}" create service nodeport "ha-$i" -n "$NS" --tcp=80 >"$TMP/ha-$i.out" 2>&1 &
    else
      timeout "$CMD_TIMEOUT" "$KUBECTL" create service nodeport "ha-$i" -n "$NS" --tcp=80 >"$TMP/ha-$i.out" 2>&1 &
    fi
    creates+=($!)
  done
  # Only the creates: the second apiserver is a job of this shell too.
  for i in "${creates[@]}"; do wait "$i" || rc=1; done
  cat "$TMP"/ha-*.out
  [ "$rc" -eq 0 ]
  k get services -n "$NS" -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.clusterIP} {.spec.ports[0].nodePort}{"\n"}{end}'
  grep '^ha-' "$TMP/out" >"$TMP/ha.txt"
  [ "$(wc -l <"$TMP/ha.txt")" -eq "$n" ] || { echo "expected $n ha-* Services"; return 1; }
  [ "$(cut -d' ' -f2 "$TMP/ha.txt" | sort -u | wc -l)" -eq "$n" ] || { echo "a cluster IP was handed out twice"; return 1; }
  [ "$(cut -d' ' -f3 "$TMP/ha.txt" | sort -u | wc -l)" -eq "$n" ] || { echo "a node port was handed out twice"; return 1; }
  k get ipaddresses
  for ip in $(cut -d' ' -f2 "$TMP/ha.txt"); do has "^${ip//./\\.} +services/$NS/ha-"; done
  stop_pid "$pid"
  k get endpoints kubernetes -n default -o 'jsonpath={.subsets[0].addresses[*].ip}'
  is "127.0.0.1"
  for ((i = 0; i < n; i++)); do k delete service "ha-$i" -n "$NS"; done
}

s_runtime_class() {
  local rc=sandbox-$NS
  cat >"$MAN/runtimeclass.yaml" <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: $rc
handler: runc
overhead:
  podFixed:
    cpu: 250m
    memory: 120Mi
scheduling:
  nodeSelector:
    runtime: sandbox
YAML
  k create -f "$MAN/runtimeclass.yaml"
  has "runtimeclass.node.k8s.io/$rc created"
  k get runtimeclass "$rc"
  has "^NAME +HANDLER +AGE"
  has "^$rc +runc +[0-9]+s"
  k explain runtimeclass.overhead
  has "podFixed"
  cat >"$MAN/runtimeclass-pod.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: sandboxed
  namespace: $NS
spec:
  runtimeClassName: $rc
  containers:
  - name: c
    image: busybox
YAML
  # No controllers here: the ServiceAccount plugin needs the account made by hand.
  k -n "$NS" get serviceaccount default || k -n "$NS" create serviceaccount default
  k create -f "$MAN/runtimeclass-pod.yaml"
  has "pod/sandboxed created"
  k -n "$NS" get pod sandboxed -o jsonpath='{.spec.overhead.cpu}/{.spec.overhead.memory}/{.spec.nodeSelector.runtime}'
  is "250m/120Mi/sandbox"
  sed -i "s/name: sandboxed/name: lost/; s/runtimeClassName: .*/runtimeClassName: missing/" "$MAN/runtimeclass-pod.yaml"
  if k create -f "$MAN/runtimeclass-pod.yaml"; then
    echo "a pod naming a missing RuntimeClass was admitted"
    return 1
  fi
  has 'pods "lost" is forbidden: pod rejected: RuntimeClass "missing" not found'
  sed -i "s/^handler: runc/handler: Not_A_Label/; s/name: $rc/name: bad-$rc/" "$MAN/runtimeclass.yaml"
  if k create -f "$MAN/runtimeclass.yaml"; then
    echo "a RuntimeClass with an invalid handler was created"
    return 1
  fi
  has "is invalid: handler: Invalid value: \"Not_A_Label\""
  k -n "$NS" delete pod sandboxed --wait=false
  k delete runtimeclass "$rc"
  has "runtimeclass.node.k8s.io \"$rc\" deleted"
  # apply, then apply a change (the 3-way merge over the stored class).
  cat >"$MAN/runtimeclass-apply.yaml" <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: applied-$rc
handler: runc
overhead:
  podFixed:
    cpu: 100m
YAML
  k apply -f "$MAN/runtimeclass-apply.yaml"
  has "runtimeclass.node.k8s.io/applied-$rc created"
  sed -i "s/cpu: 100m/cpu: 200m/" "$MAN/runtimeclass-apply.yaml"
  printf '    memory: 64Mi\nscheduling:\n  tolerations:\n  - key: sandbox\n    operator: Exists\n' >>"$MAN/runtimeclass-apply.yaml"
  k apply -f "$MAN/runtimeclass-apply.yaml"
  has "runtimeclass.node.k8s.io/applied-$rc configured"
  k get runtimeclass "applied-$rc" -o jsonpath='{.overhead.podFixed.cpu}/{.overhead.podFixed.memory}/{.scheduling.tolerations[0].key}'
  is "200m/64Mi/sandbox"
  k delete -f "$MAN/runtimeclass-apply.yaml"
}

# suite NAME KUBECTL: every step against the running apiserver.
suite() {
  CURRENT_RUN=$1
  KUBECTL=$2
  NS=e2e-$(printf '%s' "$1" | tr -c 'a-z0-9' '-' | sed 's/-*$//')
  MAN=$TMP/manifests
  write_manifests
  echo
  echo "=== $CURRENT_RUN ($KUBECTL, namespace $NS)"
  step "kubectl version" s_version
  step "create namespace" s_create_namespace
  step "apply -f multi-document YAML" s_apply_v1
  step "apply again with changes (3-way strategic merge)" s_apply_v2
  step "get -o wide" s_get_wide
  step "get -o yaml" s_get_yaml
  step "get -o json" s_get_json
  step "get -o jsonpath" s_get_jsonpath
  step "get -l" s_get_selector
  step "get --show-labels" s_get_show_labels
  step "get -A" s_get_all_namespaces
  step "get -w across an update" s_get_watch
  step "patch --type strategic" s_patch_strategic
  step "patch --type merge" s_patch_merge
  step "patch --type json" s_patch_json
  step "edit (scripted EDITOR)" s_edit
  step "label" s_label
  step "annotate" s_annotate
  step "scale" s_scale
  step "apply --server-side: ownership, conflicts, --force-conflicts, from client-side apply" s_server_side_apply
  step "explain pod.spec.containers" s_explain
  step "api-resources" s_api_resources
  step "custom resources: CRD apply, wait established, explain, columns, defaults, validation, scale, delete" s_custom_resources
  step "api-versions" s_api_versions
  step "autoscaling/v1 HPA applied, seen through v2" s_hpa_versions
  step "apiservices: local ones, a remote one without its Service (ServiceNotFound, 503), delete" s_apiservices
  step "create -f of reviews and a Binding (no PATCH: kubectl lists CRDs)" s_reviews_from_files
  step "create secret generic" s_secret_generic
  step "create secret tls" s_secret_tls
  step "create secret docker-registry" s_secret_docker_registry
  step "create configmap --from-literal" s_configmap_literal
  step "delete with a finalizer, then finalizer removed" s_delete_finalizer
  step "delete -l" s_delete
  step "auth whoami (--as, --as-group)" s_auth_whoami
  step "auth can-i (--list, --as a service account, after a RoleBinding)" s_auth_can_i
  step "create token default (a bound JWT that authenticates, RBAC applies)" s_create_token
  step "encryption at rest: a Secret is aescbc ciphertext in the store and plain through kubectl; a ConfigMap plain" s_encryption_at_rest
  step "bootstrap token: a kube-system token Secret authenticates as system:bootstrap:<id>, not after its deletion" s_bootstrap_token
  step "certificate approve (the CSR approval subresource), signed by kube-controller-manager, the certificate logs in" s_certificate_approve
  step "anonymous: version yes, pods 403, a bad token 401" s_anonymous
  step "PodSecurity: enforce, warn, relabel warnings, invalid label" s_pod_security
  step "webhook configuration: apply, get, a failing webhook, delete" s_webhook_configuration
  step "ValidatingAdmissionPolicy: the replicas example denies, compile errors 422" s_admission_policy
  step "StorageObjectInUseProtection: a new PVC gets its finalizer, delete waits on it" s_storage_protection
  step "RuntimeClass: create, get, explain, 422, apply twice; a pod gets overhead and nodeSelector, unknown class 403" s_runtime_class
  step "flow control: the bootstrap FlowSchemas and priority levels, classified responses" s_flow_control
  step "ServiceCIDRs and IPAddresses: the default range, a Service's address recorded and given back" s_service_cidrs
  step "audit log: configmap create in full, secret at Metadata, no secret value" s_audit_log
}

# ---------------------------------------------------------------------------- runs

for backend in ${BACKENDS//,/ }; do
  case $backend in
  sqlite)
    RUN_DIR=$TMP/sqlite
    if start_apiserver "$RUN_DIR"; then
      suite "sqlite" "$KUBECTL_DEFAULT"
      if [ -x "$KUBECTL_132" ]; then
        suite "sqlite kubectl.1.32" "$KUBECTL_132"
      else
        FAILED+=("sqlite kubectl.1.32: $KUBECTL_132 not found")
      fi
    else
      FAILED+=("sqlite: kube-apiserver start")
    fi
    if [ -n "$APISERVER_PID" ]; then stop_pid "$APISERVER_PID"; fi
    ;;
  etcd)
    RUN_DIR=$TMP/etcd-run
    # etcd over TLS with client certificates, from the same PKI tool as the cluster's
    # (start_apiserver's init reuses these files and only rewrites the kubeconfigs).
    "$BIN/ferrokube-pki" init --dir "$RUN_DIR/pki" >/dev/null
    ETCD_TLS=(--etcd-cafile "$RUN_DIR/pki/etcd-ca.crt"
      --etcd-certfile "$RUN_DIR/pki/apiserver-etcd-client.crt"
      --etcd-keyfile "$RUN_DIR/pki/apiserver-etcd-client.key")
    if start_etcd "$RUN_DIR/pki" &&
      start_apiserver "$RUN_DIR" --etcd-servers "$ETCD_URL" "${ETCD_TLS[@]}"; then
      suite "etcd" "$KUBECTL_DEFAULT"
      step "two apiservers on one etcd: both endpoints, distinct cluster IPs and node ports from concurrent creates, a stopped one leaves" s_two_apiservers
    else
      FAILED+=("etcd: etcd or kube-apiserver start")
    fi
    if [ -n "$APISERVER_PID" ]; then stop_pid "$APISERVER_PID"; fi
    if [ -n "$ETCD_PID" ]; then stop_pid "$ETCD_PID"; fi
    ;;
  *)
    echo "unknown backend $backend" >&2
    exit 2
    ;;
  esac
  APISERVER_PID=
done

echo
echo "=== summary: ${#PASSED[@]} passed, ${#FAILED[@]} failed"
for name in "${FAILED[@]}"; do echo "FAILED: $name"; done
[ "${#FAILED[@]}" -eq 0 ]
