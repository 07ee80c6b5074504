# shellcheck shell=bash
# The kubelet's debugging handlers through the apiserver's nodes/proxy, as an admin reads
# them with the real kubectl: /configz (the effective KubeletConfiguration, its logging
# included), /runningpods/ (what the runtime runs: nginx), /logs/ (the node's /var/log);
# and the node's CSINode, owned by its Node. Sourced by e2e/single-node.sh with the nginx
# pod Running; uses its step/ok/fail/k helpers and NODE.

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/configz"
out=$(k get --raw "/api/v1/nodes/$NODE/proxy/configz" 2>&1) || fail "configz: $out"
python3 - "$out" <<'PY' || fail "configz is not the kubelet's configuration: ${out:0:400}"
import json, sys
c = json.loads(sys.argv[1])["kubeletconfig"]
assert c["port"] == 10250, c.get("port")
assert c["cgroupDriver"] == "cgroupfs", c.get("cgroupDriver")
assert c["syncFrequency"] == "1m0s", c.get("syncFrequency")
assert c["clusterDNS"], c.get("clusterDNS")
assert c["authentication"]["webhook"]["enabled"] is True, c["authentication"]
assert c["authorization"]["mode"] == "Webhook", c["authorization"]
assert "kind" not in c and "apiVersion" not in c
l = c["logging"]
assert l["format"] == "text" and l["flushFrequency"] == "5s", l
assert isinstance(l["verbosity"], int) and l["options"]["json"]["infoBufferSize"] == "0", l
PY
ok "kubeletconfig with the running port, cgroup driver, cadence, DNS, auth modes and logging"

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/runningpods/"
out=$(k get --raw "/api/v1/nodes/$NODE/proxy/runningpods/" 2>&1) || fail "runningpods: $out"
python3 - "$out" <<'PY' || fail "runningpods does not list nginx as upstream would: ${out:0:400}"
import json, sys
l = json.loads(sys.argv[1])
assert l["kind"] == "PodList", l.get("kind")
nginx = [p for p in l["items"] if p["metadata"]["name"] == "nginx"]
assert len(nginx) == 1, [p["metadata"]["name"] for p in l["items"]]
p = nginx[0]
assert p["metadata"]["namespace"] == "default" and p["metadata"]["uid"], p["metadata"]
assert [c["name"] for c in p["spec"]["containers"]] == ["nginx"], p["spec"]
PY
ok "nginx with its uid and running container"

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/logs/"
out=$(k get --raw "/api/v1/nodes/$NODE/proxy/logs/" 2>&1) || fail "logs/: $out"
grep -q '<a href="pods/">pods/</a>' <<<"$out" || fail "/var/log listing without pods/: ${out:0:400}"
ok "/var/log listed"

step "kubectl get csinode $NODE"
csinode=""
for ((i = 0; i < 40; i++)); do
  csinode=$(k get csinode "$NODE" -o json 2>/dev/null) && break
  sleep 0.5
done
[ -n "$csinode" ] || fail "no CSINode $NODE within 20 s"
python3 - "$csinode" "$(k get node "$NODE" -o 'jsonpath={.metadata.uid}')" <<'PY' ||
import json, sys
c, uid = json.loads(sys.argv[1]), sys.argv[2]
refs = c["metadata"]["ownerReferences"]
assert refs == [{"apiVersion": "v1", "kind": "Node", "name": c["metadata"]["name"], "uid": uid}], refs
assert "kubernetes.io/gce-pd" in c["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"]
assert not c["spec"].get("drivers"), c["spec"]
PY
  fail "CSINode is not the kubelet's: ${csinode:0:400}"
out=$(k get csinode "$NODE" 2>&1) || fail "kubectl get csinode: $out"
grep -Eq "^$NODE +0 +" <<<"$out" || fail "kubectl get csinode columns: $out"
ok "CSINode owned by the Node, no drivers"
