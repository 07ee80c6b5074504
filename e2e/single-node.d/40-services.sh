# Services through kube-proxy (nftables): a Deployment of 3 nginx replicas becomes
# Available behind a ClusterIP that answers from the host, a NodePort answers on the node's
# IP, a rolling update to another image completes and the Service still serves, scaling
# to 0 makes the ClusterIP refuse at once (reject, not a hang), and deleting the Services
# removes their rules; kube-proxy's start shows as an event on the node. Sourced by
# e2e/single-node.sh (uses step/ok/fail/k, NODE).

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

# Until `url` serves nginx's page (30 tries, 1 s apart), else fails naming `what`.
svc_expect_nginx() { # url what
  local i
  for ((i = 0; i < 30; i++)); do
    svc_curl "$1"
    [ "$SVC_RC" = 0 ] && grep -q "Welcome to nginx" <<<"$SVC_BODY" && return 0
    sleep 1
  done
  fail "$2: $1 (curl exit $SVC_RC after $SVC_SECS s): ${SVC_BODY:-nothing}"
}

svc_cleanup() {
  k delete service web web-np web-lb --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete deployment web --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

step "kube-proxy's start on the node: a Normal Starting event (events.k8s.io, StartKubeProxy)"
out=$(k get events.v1.events.k8s.io -n default -o \
  'jsonpath={range .items[*]}{.reportingController}|{.reason}|{.action}|{.regarding.kind}|{.regarding.name}{"\n"}{end}' 2>&1) ||
  fail "kubectl get events: $out"
grep -qx "kube-proxy|Starting|StartKubeProxy|Node|$NODE" <<<"$out" ||
  fail "no Starting event from kube-proxy about node $NODE; events: $out"
ok "kube-proxy's Starting event is on node $NODE"

step "services: kubectl create deployment web --image=nginx --replicas=3 -> Available"
svc_cleanup
out=$(k create deployment web --image=nginx --replicas=3 2>&1) || fail "create deployment: $out"
[ "$out" = "deployment.apps/web created" ] || fail "unexpected output: $out"
readyn=""
available=""
for ((i = 0; i < 240; i++)); do
  readyn=$(k get deployment web -o 'jsonpath={.status.availableReplicas}' 2>/dev/null || true)
  available=$(k get deployment web -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null || true)
  [ "$readyn" = 3 ] && [ "$available" = True ] && break
  sleep 0.5
done
k get pods -l app=web -o wide || true
[ "$readyn" = 3 ] || fail "deployment web has ${readyn:-0}/3 available replicas after 120 s"
[ "$available" = True ] || fail "deployment web's Available condition is '${available:-missing}'"
ok "3 web pods available; condition Available=True"

step "services: kubectl expose deployment web --port=80; curl the ClusterIP from the host"
out=$(k expose deployment web --port=80 2>&1) || fail "expose: $out"
[ "$out" = "service/web exposed" ] || fail "unexpected output: $out"
cip=$(k get service web -o 'jsonpath={.spec.clusterIP}')
case $cip in 10.9[6-9].* | 10.10[0-9].* | 10.11[01].*) ;; *) fail "ClusterIP '$cip' outside $RT_SERVICE_CIDR" ;; esac
svc_expect_nginx "http://$cip/" "the ClusterIP from the host"
ok "http://$cip/ serves nginx from the host"

step "services: a NodePort answers on the node's IP"
out=$(k expose deployment web --name=web-np --type=NodePort --port=80 2>&1) || fail "expose NodePort: $out"
nport=$(k get service web-np -o 'jsonpath={.spec.ports[0].nodePort}')
nip=$(k get node "$NODE" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')
[ -n "$nport" ] && [ -n "$nip" ] || fail "no nodePort ('$nport') or node InternalIP ('$nip')"
svc_expect_nginx "http://$nip:$nport/" "the NodePort"
ok "http://$nip:$nport/ serves nginx"

step "services: a LoadBalancer with externalTrafficPolicy Local: kube-proxy serves its healthCheckNodePort"
out=$(k expose deployment web --name=web-lb --type=LoadBalancer --port=80 \
  --overrides='{"spec":{"externalTrafficPolicy":"Local"}}' 2>&1) || fail "expose LoadBalancer: $out"
hcport=$(k get service web-lb -o 'jsonpath={.spec.healthCheckNodePort}')
[ -n "$hcport" ] && [ "$hcport" -ge 30000 ] && [ "$hcport" -le 32767 ] ||
  fail "no healthCheckNodePort in the NodePort range: '$hcport'"
# curl's status and body once kube-proxy has opened the port (bounded wait).
hc_answer() {
  local want=$1 got=""
  for ((i = 0; i < 40; i++)); do
    got=$(curl -s --max-time 2 -w ' %{http_code}' "http://$nip:$hcport/" 2>/dev/null) || got=""
    [[ $got == *" $want" ]] && break
    sleep 0.5
  done
  printf '%s' "$got"
}
hc=$(hc_answer 200)
[[ $hc == *" 200" ]] || fail "http://$nip:$hcport/ did not answer 200: '$hc'"
grep -q '"localEndpoints": 3' <<<"$hc" || fail "not the 3 local endpoints: $hc"
grep -q '"name": "web-lb"' <<<"$hc" || fail "not the Service's name: $hc"
ok "healthCheckNodePort $hcport answers 200 with localEndpoints 3"

step "services: kubectl set image deployment/web nginx=nginx:1.22.1; the rollout completes"
old_image_id=$(k get pods -l app=web -o 'jsonpath={.items[0].status.containerStatuses[0].imageID}')
[ -n "$old_image_id" ] || fail "the web pods report no imageID"
out=$(k set image deployment/web nginx=nginx:1.22.1 2>&1) || fail "set image: $out"
[ "$out" = "deployment.apps/web image updated" ] || fail "unexpected output: $out"
out=$(timeout 150 "$KUBECTL" rollout status deployment/web --timeout=120s 2>&1) ||
  { k get pods -l app=web -o wide || true; fail "rollout status: $out"; }
printf '%s\n' "$out"
grep -q 'successfully rolled out' <<<"$out" || fail "rollout status did not report success: $out"
# The old ReplicaSet's pods terminate after the rollout is reported; wait for them to go.
images=""
for ((i = 0; i < 120; i++)); do
  images=$(k get pods -l app=web -o 'jsonpath={range .items[*]}{.spec.containers[0].image} {.status.containerStatuses[0].imageID}{"\n"}{end}')
  [ "$(grep -c . <<<"$images")" = 3 ] && ! grep -qv '^nginx:1.22.1 ' <<<"$images" && break
  sleep 0.5
done
printf '%s\n' "$images"
[ "$(grep -c . <<<"$images")" = 3 ] || fail "expected 3 web pods after the rollout, got: $images"
! grep -qv '^nginx:1.22.1 ' <<<"$images" || fail "pods still run another image: $images"
! grep -qF "$old_image_id" <<<"$images" || fail "new pods report the old imageID $old_image_id"
[ "$(k get replicasets -l app=web -o 'jsonpath={range .items[*]}{.status.replicas}{" "}{end}' | tr ' ' '\n' | grep -c '^[1-9]')" = 1 ] ||
  fail "more than one ReplicaSet still has replicas: $(k get replicasets -l app=web 2>&1)"
svc_expect_nginx "http://$cip/" "the ClusterIP after the rollout"
ok "3 pods on nginx:1.22.1 (a new imageID), one ReplicaSet with replicas, the Service serves"

step "services: scale to 0 -> the ClusterIP refuses at once"
out=$(k scale deployment web --replicas=0 2>&1) || fail "scale: $out"
# Wait (bounded) until kube-proxy has put the ClusterIP in its no-endpoint-services map
# (reject); then one request must be refused at once. Before that a request may still be
# sent to a pod whose sandbox is gone: the SYN's ARP fails and curl also exits 7 ("no
# route to host"), but only after seconds, which is not what this step checks.
# (Captured first: under pipefail, `nft | grep -q` fails when grep stops reading early.)
rejected() {
  local map
  map=$(nft list map ip kube-proxy no-endpoint-services 2>/dev/null) || return 1
  grep -qF "$cip . tcp . 80 " <<<"$map"
}
for ((i = 0; i < 120; i++)); do
  rejected && break
  sleep 0.5
done
rejected || fail "kube-proxy did not put $cip in no-endpoint-services within 60 s: $(nft list map ip kube-proxy no-endpoint-services 2>&1 | tail -n 5)"
svc_curl "http://$cip/"
[ "$SVC_RC" = 7 ] || fail "http://$cip/ with no endpoints: curl exit $SVC_RC after $SVC_SECS s, want 7 (refused)"
secs=$SVC_SECS
awk -v s="$secs" 'BEGIN { exit !(s < 2) }' || fail "refusal took $secs s (a hang, not a reject)"
svc_curl "http://$nip:$nport/"
[ "$SVC_RC" = 7 ] || fail "NodePort not refused without endpoints (curl exit $SVC_RC after $SVC_SECS s)"
hc=$(hc_answer 503)
[[ $hc == *" 503" ]] && grep -q '"localEndpoints": 0' <<<"$hc" ||
  fail "the health check port with no local endpoint: '$hc', want 503 and localEndpoints 0"
ok "connection refused in $secs s (ClusterIP and NodePort); the health check port answers 503"

step "services: delete the Services and the Deployment; their rules go"
out=$(k delete service web web-np web-lb 2>&1) || fail "delete services: $out"
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
for ((i = 0; i < 40; i++)); do
  curl -s --max-time 2 -o /dev/null "http://$nip:$hcport/" || break
  sleep 0.5
done
! curl -s --max-time 2 -o /dev/null "http://$nip:$hcport/" || fail "the health check port $hcport still answers"
ok "Services, Deployment, their rules and the health check port gone"
