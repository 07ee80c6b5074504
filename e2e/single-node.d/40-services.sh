# Services through kube-proxy (nftables): a Deployment behind a ClusterIP answers from the
# host, a NodePort answers on the node's IP, scaling to 0 makes the
# ClusterIP refuse at once (reject, not a hang), and deleting the Services removes their
# rules. Sourced by e2e/single-node.sh (uses step/ok/fail/k, NODE).

# curl with a 3 s bound; sets SVC_RC (curl's exit code: 0 ok, 7 refused, 28 timed out),
# SVC_SECS and SVC_BODY.
SVC_RC=""
SVC_SECS=""
SVC_BODY=""
svc_curl() { # url
  local t0
  t0=$(date +%s.%N)
  SVC_BODY=$(curl -s --max-time 3 "$1") && SVC_RC=0 || SVC_RC=$?
  SVC_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}

svc_cleanup() {
  k delete service web web-np --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete deployment web --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

step "services: kubectl create deployment web --image=nginx --replicas=2"
svc_cleanup
out=$(k create deployment web --image=nginx --replicas=2 2>&1) || fail "create deployment: $out"
[ "$out" = "deployment.apps/web created" ] || fail "unexpected output: $out"
readyn=""
for ((i = 0; i < 240; i++)); do
  readyn=$(k get deployment web -o 'jsonpath={.status.readyReplicas}' 2>/dev/null || true)
  [ "$readyn" = 2 ] && break
  sleep 0.5
done
k get pods -l app=web -o wide || true
[ "$readyn" = 2 ] || fail "deployment web has ${readyn:-0}/2 ready replicas after 120 s"
ok "2 web pods ready"

step "services: kubectl expose deployment web --port=80; curl the ClusterIP from the host"
out=$(k expose deployment web --port=80 2>&1) || fail "expose: $out"
[ "$out" = "service/web exposed" ] || fail "unexpected output: $out"
cip=$(k get service web -o 'jsonpath={.spec.clusterIP}')
case $cip in 10.9[6-9].* | 10.10[0-9].* | 10.11[01].*) ;; *) fail "ClusterIP '$cip' outside $RT_SERVICE_CIDR" ;; esac
for ((i = 0; i < 30; i++)); do
  svc_curl "http://$cip/"
  [ "$SVC_RC" = 0 ] && grep -q "Welcome to nginx" <<<"$SVC_BODY" && break
  sleep 1
done
grep -q "Welcome to nginx" <<<"${SVC_BODY:-}" || fail "http://$cip/ (curl exit $SVC_RC after $SVC_SECS s): ${SVC_BODY:-nothing}"
ok "http://$cip/ serves nginx from the host"

step "services: a NodePort answers on the node's IP"
out=$(k expose deployment web --name=web-np --type=NodePort --port=80 2>&1) || fail "expose NodePort: $out"
nport=$(k get service web-np -o 'jsonpath={.spec.ports[0].nodePort}')
nip=$(k get node "$NODE" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')
[ -n "$nport" ] && [ -n "$nip" ] || fail "no nodePort ('$nport') or node InternalIP ('$nip')"
for ((i = 0; i < 30; i++)); do
  svc_curl "http://$nip:$nport/"
  [ "$SVC_RC" = 0 ] && grep -q "Welcome to nginx" <<<"$SVC_BODY" && break
  sleep 1
done
grep -q "Welcome to nginx" <<<"${SVC_BODY:-}" || fail "http://$nip:$nport/ (curl exit $SVC_RC after $SVC_SECS s): ${SVC_BODY:-nothing}"
ok "http://$nip:$nport/ serves nginx"

step "services: scale to 0 -> the ClusterIP refuses at once"
out=$(k scale deployment web --replicas=0 2>&1) || fail "scale: $out"
for ((i = 0; i < 60; i++)); do
  svc_curl "http://$cip/"
  [ "$SVC_RC" = 7 ] && break
  sleep 1
done
[ "$SVC_RC" = 7 ] || fail "http://$cip/ not refused 60 s after scaling to 0 (curl exit $SVC_RC after $SVC_SECS s)"
secs=$SVC_SECS
awk -v s="$secs" 'BEGIN { exit !(s < 2) }' || fail "refusal took $secs s (a hang, not a reject)"
svc_curl "http://$nip:$nport/"
[ "$SVC_RC" = 7 ] || fail "NodePort not refused without endpoints (curl exit $SVC_RC after $SVC_SECS s)"
ok "connection refused in $secs s (ClusterIP and NodePort)"

step "services: delete the Services and the Deployment; their rules go"
out=$(k delete service web web-np 2>&1) || fail "delete services: $out"
out=$(k delete deployment web 2>&1) || fail "delete deployment: $out"
gone=0
for ((i = 0; i < 40; i++)); do
  # Captured first: under pipefail, `nft | grep -q` fails when grep stops reading early.
  rules=$(nft list table ip kube-proxy 2>/dev/null || true)
  if ! grep -qF "$cip " <<<"$rules"; then gone=1; break; fi
  sleep 0.5
done
[ $gone -eq 1 ] || fail "rules for $cip still in table ip kube-proxy 20 s after the delete"
svc_curl "http://$cip/"
[ "$SVC_RC" != 0 ] || fail "http://$cip/ still answers after the Service is gone"
ok "Services, Deployment and their rules gone"
