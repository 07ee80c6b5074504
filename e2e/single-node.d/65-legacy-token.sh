# shellcheck shell=bash
# Legacy secret-based ServiceAccount tokens: the controller manager's tokens controller
# (signing with --service-account-private-key-file) fills a Secret of type
# kubernetes.io/service-account-token that names a ServiceAccount; the real kubectl then
# authenticates with that token alone (`auth whoami --token`, no client certificate),
# and gets 401 once the Secret is deleted.
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

LT_NS=legacy-token-e2e
lt_cleanup() {
  k delete namespace "$LT_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
# kubectl with only the token: an empty kubeconfig, the server and the cluster CA.
lt_whoami() { # token
  timeout 30 "$KUBECTL" --kubeconfig=/dev/null --request-timeout=20s \
    --server="https://$FK_API_ADDR:$FK_API_PORT" \
    --certificate-authority="$FK_PKI_DIR/ca.crt" --token="$1" auth whoami 2>&1
}

step "legacy token: a kubernetes.io/service-account-token Secret gets its token"
lt_cleanup
for ((i = 0; i < 120; i++)); do
  k get namespace "$LT_NS" >/dev/null 2>&1 || break
  sleep 0.5
done
out=$(k create namespace "$LT_NS" 2>&1) || fail "create namespace: $out"
out=$(k -n "$LT_NS" create serviceaccount builder 2>&1) || fail "create serviceaccount: $out"
out=$(k -n "$LT_NS" apply -f - 2>&1 <<'YAML'
apiVersion: v1
kind: Secret
metadata:
  name: builder-token
  annotations:
    kubernetes.io/service-account.name: builder
type: kubernetes.io/service-account-token
YAML
) || fail "kubectl apply: $out"
lt_token=""
for ((i = 0; i < 60; i++)); do
  lt_token=$(k -n "$LT_NS" get secret builder-token -o 'jsonpath={.data.token}' 2>/dev/null || true)
  [ -n "$lt_token" ] && break
  sleep 0.5
done
[ -n "$lt_token" ] || fail "no data.token in Secret builder-token after 30 s; is the tokens controller running?"
lt_token=$(base64 -d <<<"$lt_token")
lt_ns=$(k -n "$LT_NS" get secret builder-token -o 'jsonpath={.data.namespace}' | base64 -d)
[ "$lt_ns" = "$LT_NS" ] || fail "data.namespace is '$lt_ns', want $LT_NS"
k -n "$LT_NS" get secret builder-token -o 'jsonpath={.data.ca\.crt}' | base64 -d | cmp -s - "$FK_PKI_DIR/ca.crt" \
  || fail "data.ca.crt is not the cluster CA"
ok "a ${#lt_token}-byte token, namespace and ca.crt filled in"

step "legacy token: kubectl auth whoami --token, then 401 after the Secret is deleted"
out=$(lt_whoami "$lt_token") || fail "auth whoami with the token: $out"
printf '%s\n' "$out"
grep -Eq "^Username +system:serviceaccount:$LT_NS:builder\$" <<<"$out" || fail "not the ServiceAccount's user"
grep -Eq "^Groups +\[system:serviceaccounts system:serviceaccounts:$LT_NS system:authenticated\]\$" <<<"$out" \
  || fail "not the ServiceAccount's groups"
out=$(k -n "$LT_NS" delete secret builder-token 2>&1) || fail "delete secret: $out"
# The authenticator reads the apiserver's watch cache: allow it a moment (at most 10 s).
for ((i = 0; i < 20; i++)); do
  if ! out=$(lt_whoami "$lt_token"); then break; fi
  sleep 0.5
done
printf '%s\n' "$out"
grep -q "Unauthorized" <<<"$out" || fail "the token still works after its Secret was deleted"
lt_cleanup
ok "authenticated as system:serviceaccount:$LT_NS:builder, then Unauthorized"

step "legacy token tracking: the apiserver's ConfigMap dates it, the node carries its object TTL"
# The legacy token cleaner counts a token as unused only from this day on.
lt_since=$(k -n kube-system get configmap kube-apiserver-legacy-service-account-token-tracking \
  -o 'jsonpath={.data.since}' 2>&1) || fail "tracking ConfigMap: $lt_since"
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' <<<"$lt_since" || fail "since is '$lt_since', not a YYYY-MM-DD day"
# The ttl controller: a one-node cluster is in upstream's smallest band, 0 s.
lt_ttl=""
for ((i = 0; i < 40; i++)); do
  lt_ttl=$(k get node "$NODE" -o 'jsonpath={.metadata.annotations.node\.alpha\.kubernetes\.io/ttl}' 2>/dev/null || true)
  [ -n "$lt_ttl" ] && break
  sleep 0.5
done
[ "$lt_ttl" = "0" ] || fail "node $NODE's node.alpha.kubernetes.io/ttl is '$lt_ttl', want 0"
ok "tracked since $lt_since; node TTL ${lt_ttl}s"
