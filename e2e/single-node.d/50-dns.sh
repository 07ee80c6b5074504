# Cluster DNS (deploy/addons/dns.yaml, cmd/kube-dns): the kube-dns Service and Deployment
# that hack/up.sh applies; answers asked from the host (dig, UDP and TCP) at the DNS pod
# and at the Service IP; then, from a busybox pod, the ClusterIP 10.96.0.10 resolves the
# kubernetes Service by full name and by short name through the pod's search path, and a
# headless Service to the nginx pod's IP. Sourced by e2e/single-node.sh (uses
# step/ok/fail/k, ip = the nginx pod IP).
# shellcheck disable=SC2154 # ip is set by e2e/single-node.sh

DNS_IP=10.96.0.10
dns_cleanup() {
  k delete service dns-headless --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete pod dns-client --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
# dig with bounded time; prints "<status> <answers...>" (answers space-separated).
dns_dig() { # server name type [+tcp]
  local out status
  out=$(dig +time=2 +tries=2 ${4:+"$4"} @"$1" "$2" "$3" 2>&1) || true
  status=$(sed -n 's/.*status: \([A-Z]*\),.*/\1/p' <<<"$out" | head -n 1)
  printf '%s %s\n' "${status:-NOANSWER}" \
    "$(awk '/^;; ANSWER SECTION:/ {a=1; next} /^$/ {a=0} a && !/^;/ {print $NF}' <<<"$out" | sort | tr '\n' ' ' | sed 's/ $//')"
}
expect_dig() { # server name type want [+tcp]
  local got
  got=$(dns_dig "$1" "$2" "$3" "${5:-}")
  [ "$got" = "$4" ] || fail "dig ${5:-} @$1 $2 $3: want '$4', got '$got'"
  printf '  dig %s@%s %s %s -> %s\n' "${5:+$5 }" "$1" "$2" "$3" "$got"
}

step "dns: kube-dns Service ($DNS_IP) and Deployment ready in kube-system"
dns_cleanup
svc=$(k -n kube-system get service kube-dns \
  -o 'jsonpath={.spec.clusterIP} {range .spec.ports[*]}{.name}/{.port}/{.protocol} {end}' 2>&1) ||
  fail "no kube-dns Service (hack/up.sh applies deploy/addons/dns.yaml): $svc"
[ "$svc" = "$DNS_IP dns/53/UDP dns-tcp/53/TCP metrics/9153/TCP " ] || fail "kube-dns Service: $svc"
readyn=""
for ((i = 0; i < 240; i++)); do
  readyn=$(k -n kube-system get deployment kube-dns -o 'jsonpath={.status.readyReplicas}' 2>/dev/null || true)
  [ "$readyn" = 1 ] && break
  sleep 0.5
done
k -n kube-system get pods -l k8s-app=kube-dns -o wide || true
[ "$readyn" = 1 ] || fail "deployment kube-dns has ${readyn:-0}/1 ready replicas after 120 s"
dns_pod_ip=$(k -n kube-system get pods -l k8s-app=kube-dns -o 'jsonpath={.items[0].status.podIP}')
[ -n "$dns_pod_ip" ] || fail "the kube-dns pod has no IP"
ok "kube-dns ready, pod IP $dns_pod_ip"

step "dns: the host asks the DNS pod directly ($dns_pod_ip:53, UDP and TCP)"
kip=$(k get service kubernetes -o 'jsonpath={.spec.clusterIP}')
expect_dig "$dns_pod_ip" kubernetes.default.svc.cluster.local A "NOERROR $kip"
expect_dig "$dns_pod_ip" kubernetes.default.svc.cluster.local A "NOERROR $kip" +tcp
expect_dig "$dns_pod_ip" _dns._udp.kube-dns.kube-system.svc.cluster.local SRV \
  "NOERROR kube-dns.kube-system.svc.cluster.local."
expect_dig "$dns_pod_ip" "$(awk -F. '{print $4"."$3"."$2"."$1}' <<<"$kip").in-addr.arpa" PTR \
  "NOERROR kubernetes.default.svc.cluster.local."
expect_dig "$dns_pod_ip" "${ip//./-}.default.pod.cluster.local" A "NOERROR $ip"
expect_dig "$dns_pod_ip" missing.default.svc.cluster.local A "NXDOMAIN "
expect_dig "$dns_pod_ip" example.com A "SERVFAIL "
ok "A (UDP, TCP), SRV, PTR, pod A, NXDOMAIN inside the zone, SERVFAIL outside it"

step "dns: a headless Service resolves to the nginx pod's IP"
out=$(k apply -f - 2>&1 <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: dns-headless
spec:
  clusterIP: None
  selector:
    run: nginx
  ports:
    - name: http
      port: 80
YAML
) || fail "create service dns-headless: $out"
got=""
for ((i = 0; i < 60; i++)); do
  got=$(dns_dig "$dns_pod_ip" dns-headless.default.svc.cluster.local A)
  [ "$got" = "NOERROR $ip" ] && break
  sleep 0.5
done
[ "$got" = "NOERROR $ip" ] || fail "dns-headless: want 'NOERROR $ip', got '$got' after 30 s"
expect_dig "$dns_pod_ip" _http._tcp.dns-headless.default.svc.cluster.local SRV \
  "NOERROR ${ip//./-}.dns-headless.default.svc.cluster.local."
ok "dns-headless.default.svc.cluster.local -> $ip (and its SRV record names the endpoint)"

if nft list table ip kube-proxy >/dev/null 2>&1; then
  step "dns: the host asks the Service IP $DNS_IP (kube-proxy's DNAT to the DNS pod)"
  got=""
  for ((i = 0; i < 30; i++)); do
    got=$(dns_dig "$DNS_IP" kubernetes.default.svc.cluster.local A)
    [ "$got" = "NOERROR $kip" ] && break
    sleep 0.5
  done
  [ "$got" = "NOERROR $kip" ] || fail "dig @$DNS_IP: want 'NOERROR $kip', got '$got'"
  expect_dig "$DNS_IP" kubernetes.default.svc.cluster.local A "NOERROR $kip" +tcp
  ok "$DNS_IP answers over UDP and TCP"

  step "dns: a busybox pod resolves through $DNS_IP (full name, short name via search path, headless)"
  # busybox's nslookup applies the search path to dotless names only (no ndots), so the
  # short name is `kubernetes` (-> kubernetes.default.svc.cluster.local); its exit status
  # also counts the search domains that do not have the name, so the output is checked.
  script="nslookup kubernetes.default.svc.cluster.local $DNS_IP
nslookup kubernetes
nslookup dns-headless
grep '^nameserver' /etc/resolv.conf
echo DNS-DONE"
  out=$(k run dns-client --image=busybox --restart=Never -- sh -c "$script" 2>&1) ||
    fail "kubectl run: $out"
  phase=""
  for ((i = 0; i < 120; i++)); do
    phase=$(k get pod dns-client -o 'jsonpath={.status.phase}' 2>/dev/null || true)
    case $phase in Succeeded | Failed) break ;; esac
    sleep 0.5
  done
  logs=$(k logs dns-client 2>&1 || true)
  printf '%s\n' "$logs" | sed 's/^/  | /'
  [ "$phase" = Succeeded ] || fail "pod dns-client ended '${phase:-nowhere}'"
  grep -q DNS-DONE <<<"$logs" || fail "pod dns-client did not finish its script"
  grep -q "^nameserver $DNS_IP\$" <<<"$logs" || fail "the pod's resolv.conf does not name $DNS_IP"
  # "Name: kubernetes.default.svc.cluster.local" + its address, once per lookup.
  n=$(grep -A1 -c "^Name:[[:space:]]*kubernetes.default.svc.cluster.local\$" <<<"$logs" || true)
  [ "$(grep -A1 "^Name:[[:space:]]*kubernetes.default.svc.cluster.local\$" <<<"$logs" |
    grep -c "^Address: $kip\$")" -ge 2 ] ||
    fail "kubernetes.default.svc.cluster.local -> $kip not found for both the full and the short name ($n names)"
  grep -A1 "^Name:[[:space:]]*dns-headless.default.svc.cluster.local\$" <<<"$logs" |
    grep -q "^Address: $ip\$" || fail "dns-headless did not resolve to $ip through the search path"
  ok "the pod resolved kubernetes.default.svc.cluster.local, kubernetes and dns-headless (search path)"
else
  step "dns: no kube-proxy (no nftables table ip kube-proxy): $DNS_IP checks skipped"
  ok "skipped: the Service IP needs kube-proxy's DNAT"
fi

step "dns: clean up"
dns_cleanup
ok "dns-headless and dns-client deleted"
