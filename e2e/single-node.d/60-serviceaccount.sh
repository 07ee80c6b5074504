# shellcheck shell=bash
# In-cluster credentials: in a fresh namespace the controllers add the `default`
# ServiceAccount and the kube-root-ca.crt ConfigMap (the root CA publisher); the
# ServiceAccount admission plugin gives a busybox pod the projected kube-api-access
# volume, which the kubelet fills (TokenRequest token, ca.crt, namespace) at
# /var/run/secrets/kubernetes.io/serviceaccount. The pod's token then lists pods through
# the apiserver, verified with the pod's own ca.crt: 403 until a RoleBinding grants the
# account `view`, then 200. The request is sent from the host with curl: the test images
# have no TLS client that completes a handshake with the apiserver from inside a pod
# (busybox wget's own TLS gets handshake_failure); 80-in-cluster.sh shows a pod's
# in-cluster client (kube-dns, kube-rs) reaching the API through the kubernetes Service.
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

SA_NS=sa-e2e
SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount
sa_cleanup() {
  k delete namespace "$SA_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
# Lists pods in $SA_NS with the pod's token and CA; prints the HTTP status.
sa_list_pods() { # token cafile
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$2" \
    -H "Authorization: Bearer $1" \
    "https://$FK_API_ADDR:$FK_API_PORT/api/v1/namespaces/$SA_NS/pods" || true
}

step "serviceaccount: namespace $SA_NS gets the default ServiceAccount and kube-root-ca.crt"
# A namespace left by an interrupted run is still terminating: wait (at most 60 s).
sa_cleanup
for ((i = 0; i < 120; i++)); do
  k get namespace "$SA_NS" >/dev/null 2>&1 || break
  sleep 0.5
done
out=$(k create namespace "$SA_NS" 2>&1) || fail "create namespace: $out"
sa_ready=0
for ((i = 0; i < 60; i++)); do
  if k -n "$SA_NS" get serviceaccount default >/dev/null 2>&1 \
    && k -n "$SA_NS" get configmap kube-root-ca.crt >/dev/null 2>&1; then
    sa_ready=1
    break
  fi
  sleep 0.5
done
[ $sa_ready -eq 1 ] || fail "no default ServiceAccount or kube-root-ca.crt in $SA_NS after 30 s"
published=$(k -n "$SA_NS" get configmap kube-root-ca.crt -o 'jsonpath={.data.ca\.crt}')
[ "$published" = "$(cat "$FK_PKI_DIR/ca.crt")" ] \
  || fail "kube-root-ca.crt's ca.crt is not the cluster CA ($FK_PKI_DIR/ca.crt)"
desc=$(k -n "$SA_NS" get configmap kube-root-ca.crt -o 'jsonpath={.metadata.annotations.kubernetes\.io/description}')
[[ $desc == "Contains a CA bundle"* ]] || fail "kube-root-ca.crt lacks the description annotation (got '$desc')"
ok "default ServiceAccount and kube-root-ca.crt (the cluster CA) present"

step "serviceaccount: a pod gets the kube-api-access volume"
out=$(k -n "$SA_NS" apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: sa-client}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
EOF
) || fail "kubectl apply: $out"
vol=$(k -n "$SA_NS" get pod sa-client -o 'jsonpath={.spec.volumes[0].name} {.spec.containers[0].volumeMounts[0].mountPath}')
[[ $vol == "kube-api-access-"*" $SA_DIR" ]] \
  || fail "the admitted pod has no kube-api-access volume at $SA_DIR (got '$vol'); is the ServiceAccount admission plugin on?"
phase=""
for ((i = 0; i < 120; i++)); do
  phase=$(k -n "$SA_NS" get pod sa-client -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] && break
  sleep 0.5
done
if [ "$phase" != Running ]; then
  k -n "$SA_NS" describe pod sa-client 2>&1 | tail -n 30 || true
  fail "pod sa-client phase '${phase:-none}', not Running after 60 s"
fi
ok "$vol, pod Running"

step "serviceaccount: token, ca.crt and namespace inside the container"
sa_tmp=$(mktemp -d)
token=$(kx -n "$SA_NS" sa-client -- cat "$SA_DIR/token") || fail "reading the token: $token"
k -n "$SA_NS" exec sa-client -- cat "$SA_DIR/ca.crt" >"$sa_tmp/ca.crt" 2>"$sa_tmp/stderr" ||
  fail "reading ca.crt: $(cat "$sa_tmp/stderr")"
podns=$(kx -n "$SA_NS" sa-client -- cat "$SA_DIR/namespace") || fail "reading namespace: $podns"
[ "$podns" = "$SA_NS" ] || fail "namespace file says '$podns', want $SA_NS"
cmp -s "$sa_tmp/ca.crt" "$FK_PKI_DIR/ca.crt" || fail "the mounted ca.crt is not the cluster CA"
[[ $token =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$ ]] || fail "the token is not a JWT: '${token:0:40}...'"
ok "a ${#token}-byte JWT, the cluster CA, namespace $SA_NS"

step "serviceaccount: the pod's token lists pods: 403, then 200 after a RoleBinding to view"
code=$(sa_list_pods "$token" "$sa_tmp/ca.crt")
[ "$code" = 403 ] || fail "without a binding: want 403, got '${code:-no answer}'"
printf '  without a binding: %s\n' "$code"
out=$(k -n "$SA_NS" create rolebinding sa-view --clusterrole=view --serviceaccount="$SA_NS:default" 2>&1) \
  || fail "create rolebinding: $out"
# RBAC is judged on a watch-fed snapshot: allow it a moment (at most 10 s).
for ((i = 0; i < 20; i++)); do
  code=$(sa_list_pods "$token" "$sa_tmp/ca.crt")
  [ "$code" = 200 ] && break
  sleep 0.5
done
[ "$code" = 200 ] || fail "with the view binding: want 200, got '${code:-no answer}'"
printf '  with the view binding: %s\n' "$code"
rm -rf "$sa_tmp"
ok "403 without, 200 with the RoleBinding (TLS verified with the pod's ca.crt)"

step "serviceaccount: delete namespace $SA_NS (at most 60 s)"
sa_cleanup
gone=0
for ((i = 0; i < 120; i++)); do
  k get namespace "$SA_NS" >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.5
done
[ $gone -eq 1 ] || fail "namespace $SA_NS still exists 60 s after the delete"
ok "namespace gone"
