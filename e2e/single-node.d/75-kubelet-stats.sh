# shellcheck shell=bash
# The kubelet's stats and metrics through the apiserver's nodes/proxy, with the real
# kubectl: /stats/summary (upstream's stats/v1alpha1 Summary shape: the node, and the
# nginx pod with its container's CPU and memory and its ephemeral storage), /metrics
# (kubelet_running_pods, runtime operation counters) and /metrics/cadvisor (container CPU
# and working set labelled with the pod). Sourced by e2e/single-node.sh with the nginx pod
# Running; uses its step/ok/fail/k helpers and NODE.

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/stats/summary"
ks_summary=$(k get --raw "/api/v1/nodes/$NODE/proxy/stats/summary") || fail "stats/summary: $ks_summary"
ks_check=$(jq -r --arg node "$NODE" '
  [ (.node.nodeName == $node),
    (.node.memory.workingSetBytes > 0),
    (.node.cpu.usageCoreNanoSeconds > 0),
    (.node.fs.capacityBytes > 0),
    (.node.runtime.imageFs.usedBytes > 0),
    ([.pods[] | select(.podRef.namespace == "default" and .podRef.name == "nginx")] | length == 1),
    ([.pods[] | select(.podRef.name == "nginx") | .containers[] | select(.name == "nginx")
      | (.memory.workingSetBytes > 0 and .cpu.usageCoreNanoSeconds > 0 and .rootfs != null and .logs != null)] == [true]),
    ([.pods[] | select(.podRef.name == "nginx") | .["ephemeral-storage"].usedBytes > 0] == [true])
  ] | map(tostring) | join(" ")' <<<"$ks_summary") || fail "stats/summary is not JSON: ${ks_summary:0:300}"
[ "$ks_check" = "true true true true true true true true" ] \
  || fail "stats/summary checks (nodeName, node memory, cpu, fs, imageFs, nginx pod, its container's cpu/memory/rootfs/logs, ephemeral-storage): $ks_check; ${ks_summary:0:600}"
ok "summary: node $NODE with cpu, memory, fs and imageFs; pod nginx with its container's cpu, memory, rootfs, logs and ephemeral-storage"

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/metrics"
ks_metrics=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics") || fail "metrics: $ks_metrics"
ks_running=$(awk '$1 == "kubelet_running_pods" { print $2 }' <<<"$ks_metrics")
[ -n "$ks_running" ] && [ "$ks_running" -ge 1 ] || fail "kubelet_running_pods is '$ks_running'"
for ks_line in 'kubelet_running_containers{container_state="running"}' \
  'kubelet_runtime_operations_total{operation_type="list_containers"}' \
  'kubelet_pleg_relist_duration_seconds_count' \
  'kubelet_pod_start_duration_seconds_count' \
  '# TYPE kubelet_runtime_operations_duration_seconds histogram' \
  "kubelet_node_name{node=\"$NODE\"} 1" \
  'kubelet_pod_worker_duration_seconds_count{operation_type="create"}' \
  'kubelet_pleg_relist_interval_seconds_count' \
  '# TYPE kubelet_pleg_last_seen_seconds gauge'; do
  grep -qF "$ks_line" <<<"$ks_metrics" || fail "no '$ks_line' in /metrics"
done
# Counted since the kubelet's restart in 70-kubelet-restart.sh (which adopted the running
# pods: their first syncs are "create"), so possibly 0.
ks_started=$(awk '$1 == "kubelet_started_pods_total" { print $2 }' <<<"$ks_metrics")
[ -n "$ks_started" ] || fail "no kubelet_started_pods_total in /metrics"
ok "/metrics: kubelet_running_pods $ks_running, running containers, runtime operations, PLEG relist, pod start and pod worker histograms, $ks_started pods started"

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/metrics/cadvisor"
ks_cadvisor=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics/cadvisor") || fail "metrics/cadvisor: $ks_cadvisor"
for ks_metric in container_cpu_usage_seconds_total container_memory_working_set_bytes; do
  grep -qE "^$ks_metric\{container=\"nginx\",.*namespace=\"default\",pod=\"nginx\"\} [0-9.e+]+ [0-9]+$" <<<"$ks_cadvisor" \
    || fail "no $ks_metric sample for the nginx container in /metrics/cadvisor: $(grep -m3 "^$ks_metric" <<<"$ks_cadvisor")"
done
grep -qE '^machine_memory_bytes [0-9]+' <<<"$ks_cadvisor" || fail "no machine_memory_bytes"
ok "/metrics/cadvisor: CPU and working set of the nginx container"

step "kubectl get --raw /api/v1/nodes/$NODE/proxy/metrics/probes"
# kube-dns has a readiness and a liveness probe (httpGet /ready and /health, every 10 s).
# Polled: the kubelet restart of 70-kubelet-restart.sh started its counts again.
ks_dns=$(k -n kube-system get pod -l k8s-app=kube-dns -o 'jsonpath={.items[0].metadata.name}')
ks_counted() {
  grep -qE "^prober_probe_total\{container=\"[^\"]+\",namespace=\"kube-system\",pod=\"$ks_dns\",pod_uid=\"[^\"]+\",probe_type=\"$1\",result=\"successful\"\} [1-9][0-9]*$" <<<"$ks_probes"
}
for ((i = 0; i < 30; i++)); do
  ks_probes=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics/probes") || fail "metrics/probes: $ks_probes"
  ks_counted Readiness && ks_counted Liveness && break
  sleep 1
done
for ks_type in Readiness Liveness; do
  ks_counted $ks_type ||
    fail "no successful $ks_type probe count for $ks_dns in /metrics/probes: $(grep -m4 '^prober_probe_total' <<<"$ks_probes")"
done
grep -qF '# TYPE prober_probe_duration_seconds histogram' <<<"$ks_probes" || fail "no prober_probe_duration_seconds in /metrics/probes"
ok "/metrics/probes: kube-dns's readiness and liveness probes counted, with their durations"
