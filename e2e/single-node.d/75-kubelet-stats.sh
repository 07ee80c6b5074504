# shellcheck shell=bash
# The kubelet's stats and metrics through the apiserver's nodes/proxy, with the real
# kubectl: /stats/summary (upstream's stats/v1alpha1 Summary shape: the node, and the
# nginx pod with its container's CPU and memory and its ephemeral storage), /metrics
# (kubelet_running_pods, runtime operation counters; what the kubernetes-mixin Kubelet
# dashboard and alerts read of the volume manager, storage operations, cgroup manager and
# certificate managers, around a pod with an emptyDir made and deleted here; the pod
# workers' counts, the startup SLI of that pod and the status sync durations; the
# kubelet API's request counts, durations and in-flight requests) and
# /metrics/cadvisor (container CPU and working set labelled with the pod). Sourced by
# e2e/single-node.sh with the nginx pod Running; uses its step/ok/fail/k helpers and NODE.

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

# The value of the sample whose name and labels are exactly $1 on the page $2 ('' if none).
ks_sample() { awk -v s="$1" '$1 == s { print $2; exit }' <<<"$2"; }
# Whether the sample $1 on the page $2 is there and at least $3.
ks_at_least() { awk -v s="$1" -v min="$3" '$1 == s { found = 1; ok = ($2 + 0 >= min) } END { exit !(found && ok) }' <<<"$2"; }
ks_op() { # operation plugin status
  printf 'storage_operation_duration_seconds_count{migrated="false",operation_name="%s",status="%s",volume_plugin="%s"}' "$1" "$3" "$2"
}
ks_volumes() { # plugin state
  printf 'volume_manager_total_volumes{plugin_name="%s",state="%s"}' "$1" "$2"
}

step "/metrics: the kubelet API's own requests (kubelet_http_*)"
# nodes/proxy reaches the authenticated port: server_type readwrite. The summary read
# above is counted and timed; this scrape is in flight while its page is made.
ks_http() { # family path
  printf '%s{long_running="false",method="GET",path="%s",server_type="readwrite"}' "$1" "$2"
}
for ks_line in "$(ks_http kubelet_http_requests_total stats)" "$(ks_http kubelet_http_requests_total metrics)" \
  "$(ks_http kubelet_http_requests_duration_seconds_count stats)" "$(ks_http kubelet_http_inflight_requests metrics)"; do
  ks_at_least "$ks_line" "$ks_metrics" 1 ||
    fail "$ks_line is not at least 1: $(grep '^kubelet_http_' <<<"$ks_metrics" | head -20)"
done
for ks_family in 'kubelet_http_requests_total counter' 'kubelet_http_requests_duration_seconds histogram' \
  'kubelet_http_inflight_requests gauge'; do
  grep -qF "# TYPE $ks_family" <<<"$ks_metrics" || fail "no '# TYPE $ks_family' in /metrics"
done
grep -qE '^kubelet_http_requests_duration_seconds_bucket\{long_running="false",method="GET",path="stats",server_type="readwrite",le="10"\} [1-9]' <<<"$ks_metrics" ||
  fail "kubelet_http_requests_duration_seconds lacks upstream's le=\"10\" bucket for the summary"
ok "kubelet_http_requests_total: stats $(ks_sample "$(ks_http kubelet_http_requests_total stats)" "$ks_metrics"), metrics $(ks_sample "$(ks_http kubelet_http_requests_total metrics)" "$ks_metrics"); this scrape in flight"

step "/metrics: the volume manager, storage operations and cgroup manager around a pod with an emptyDir"
k delete pod ks-volumes --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: ks-volumes}
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - {name: scratch, emptyDir: {}}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
EOF
) || fail "create pod ks-volumes: $out"
k wait --for=condition=Ready pod/ks-volumes --timeout=60s >/dev/null || fail "ks-volumes not Ready in 60 s"
ks_metrics=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics") || fail "metrics: $ks_metrics"
# Its emptyDir and its service account volume are wanted and mounted (so is nginx's).
for ks_plugin in kubernetes.io/empty-dir kubernetes.io/projected; do
  for ks_state in desired_state_of_world actual_state_of_world; do
    ks_at_least "$(ks_volumes "$ks_plugin" "$ks_state")" "$ks_metrics" 1 ||
      fail "no $ks_plugin volume in $ks_state: $(grep '^volume_manager_total_volumes' <<<"$ks_metrics")"
  done
done
grep -qF '# TYPE volume_manager_total_volumes gauge' <<<"$ks_metrics" || fail "volume_manager_total_volumes is not a gauge"
ks_total() { awk -v s="state=\"$1\"}" 'index($1, "volume_manager_total_volumes{") == 1 && index($1, s) { n += $2 } END { print n + 0 }' <<<"$ks_metrics"; }
ks_desired=$(ks_total desired_state_of_world)
ks_actual=$(ks_total actual_state_of_world)
# Each volume's SetUp is timed; nginx's projected volume was set up again after the
# restart of 70-kubelet-restart.sh, as upstream's reconstruction does.
for ks_plugin in kubernetes.io/empty-dir kubernetes.io/projected; do
  ks_at_least "$(ks_op volume_mount "$ks_plugin" success)" "$ks_metrics" 1 ||
    fail "no successful volume_mount of a $ks_plugin volume: $(grep '^storage_operation_duration_seconds_count' <<<"$ks_metrics")"
done
grep -qF '# TYPE storage_operation_duration_seconds histogram' <<<"$ks_metrics" || fail "storage_operation_duration_seconds is not a histogram"
grep -qE '^storage_operation_duration_seconds_bucket\{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes\.io/empty-dir",le="600"\} [1-9]' <<<"$ks_metrics" ||
  fail "storage_operation_duration_seconds lacks upstream's le=\"600\" bucket for the emptyDir's volume_mount"
# The new pod's cgroup was created; every pod's is updated as it syncs.
for ks_op_type in create update; do
  ks_at_least "kubelet_cgroup_manager_duration_seconds_count{operation_type=\"$ks_op_type\"}" "$ks_metrics" 1 ||
    fail "no cgroup $ks_op_type timed: $(grep '^kubelet_cgroup_manager_duration_seconds_count' <<<"$ks_metrics")"
done
if grep -q 'kubelet_node_config_error' <<<"$ks_metrics"; then
  fail "kubelet_node_config_error is served (1.33 has none since dynamic kubelet config went)"
fi
ok "volume_manager_total_volumes: $ks_desired desired, $ks_actual actual (emptyDir and projected in both); volume_mount timed; cgroup create and update timed"

step "/metrics: the pod workers' counts and the startup SLI of the pod made here"
# Set every housekeeping pass (2 s): the config's pods, the active ones and the workers
# by lifecycle, config state and static, every combination upstream reports.
ks_working() { # lifecycle config static
  printf 'kubelet_working_pods{config="%s",lifecycle="%s",static="%s"}' "$2" "$1" "$3"
}
# ks-volumes was created after the kubelet restart of 70-kubelet-restart.sh, without a
# status: its startup is recorded once the kubelet's watch shows it running, a moment
# after the Ready condition this step waited for.
for ((i = 0; i < 20; i++)); do
  ks_at_least kubelet_pod_start_sli_duration_seconds_count "$ks_metrics" 1 &&
    ks_at_least kubelet_pod_start_total_duration_seconds_count "$ks_metrics" 1 && break
  sleep 0.5
  ks_metrics=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics") || fail "metrics: $ks_metrics"
done
for ks_line in 'kubelet_desired_pods{static=""}' 'kubelet_active_pods{static=""}' \
  "$(ks_working sync desired '')"; do
  ks_at_least "$ks_line" "$ks_metrics" 2 ||
    fail "$ks_line is '$(ks_sample "$ks_line" "$ks_metrics")' with nginx and ks-volumes running"
done
for ks_line in 'kubelet_desired_pods{static="true"}' 'kubelet_active_pods{static="true"}' \
  kubelet_mirror_pods kubelet_orphaned_runtime_pods_total \
  'kubelet_restarted_pods_total{static=""}' 'kubelet_restarted_pods_total{static="true"}' \
  "$(ks_working terminating runtime_only unknown)" "$(ks_working terminated orphan true)"; do
  [ -n "$(ks_sample "$ks_line" "$ks_metrics")" ] || fail "no $ks_line in /metrics"
done
ks_combos=$(grep -c '^kubelet_working_pods{' <<<"$ks_metrics")
[ "$ks_combos" = 15 ] || fail "kubelet_working_pods has $ks_combos series, upstream reports 15: $(grep '^kubelet_working_pods' <<<"$ks_metrics")"
for ks_family in kubelet_pod_start_sli_duration_seconds kubelet_pod_start_total_duration_seconds \
  kubelet_pod_status_sync_duration_seconds; do
  grep -qF "# TYPE $ks_family histogram" <<<"$ks_metrics" || fail "$ks_family is not a histogram"
done
ks_at_least kubelet_pod_start_sli_duration_seconds_count "$ks_metrics" 1 ||
  fail "ks-volumes' startup is not in kubelet_pod_start_sli_duration_seconds: $(grep '^kubelet_pod_start_' <<<"$ks_metrics")"
ks_at_least 'kubelet_pod_start_sli_duration_seconds_bucket{le="3600"}' "$ks_metrics" 1 ||
  fail "kubelet_pod_start_sli_duration_seconds lacks upstream's le=\"3600\" bucket"
ks_at_least kubelet_pod_status_sync_duration_seconds_count "$ks_metrics" 1 ||
  fail "no pod status write timed in kubelet_pod_status_sync_duration_seconds"
ks_at_least 'kubelet_pod_status_sync_duration_seconds_bucket{le="60"}' "$ks_metrics" 1 ||
  fail "kubelet_pod_status_sync_duration_seconds lacks upstream's le=\"60\" bucket"
ok "desired $(ks_sample 'kubelet_desired_pods{static=""}' "$ks_metrics"), active $(ks_sample 'kubelet_active_pods{static=""}' "$ks_metrics"), $(ks_sample "$(ks_working sync desired '')" "$ks_metrics") workers syncing; startup SLI of $(ks_sample kubelet_pod_start_sli_duration_seconds_count "$ks_metrics") pod(s), $(ks_sample kubelet_pod_status_sync_duration_seconds_count "$ks_metrics") status writes timed"

step "/metrics: deleting the pod tears its emptyDir down and destroys its cgroup"
ks_unmounts() { ks_sample "$(ks_op volume_unmount kubernetes.io/empty-dir success)" "$1"; }
ks_destroys() { ks_sample 'kubelet_cgroup_manager_duration_seconds_count{operation_type="destroy"}' "$1"; }
ks_unmount_before=$(ks_unmounts "$ks_metrics")
ks_destroy_before=$(ks_destroys "$ks_metrics")
ks_grew() { # page
  [ "$(ks_unmounts "$1")" -gt "${ks_unmount_before:-0}" ] 2>/dev/null &&
    [ "$(ks_destroys "$1")" -gt "${ks_destroy_before:-0}" ] 2>/dev/null
}
k delete pod ks-volumes --wait=true >/dev/null 2>&1 || fail "delete pod ks-volumes"
for ((i = 0; i < 20; i++)); do
  ks_metrics=$(k get --raw "/api/v1/nodes/$NODE/proxy/metrics") || fail "metrics: $ks_metrics"
  ks_grew "$ks_metrics" && break
  sleep 0.5
done
ks_grew "$ks_metrics" ||
  fail "after the delete: emptyDir volume_unmount ${ks_unmount_before:-none} -> $(ks_unmounts "$ks_metrics"), cgroup destroy ${ks_destroy_before:-none} -> $(ks_destroys "$ks_metrics")"
ok "emptyDir volume_unmount $(ks_unmounts "$ks_metrics"), cgroup destroy $(ks_destroys "$ks_metrics")"

step "/metrics: certificate manager metrics as the kubelet's configuration asks"
ks_configz=$(k get --raw "/api/v1/nodes/$NODE/proxy/configz") || fail "configz: $ks_configz"
ks_rotate=$(jq -r '.kubeletconfig.rotateCertificates // false' <<<"$ks_configz")
ks_serving=$(jq -r '.kubeletconfig.serverTLSBootstrap // false' <<<"$ks_configz")
if [ "$ks_rotate" = true ]; then
  ks_at_least kubelet_certificate_manager_client_ttl_seconds "$ks_metrics" 1 ||
    fail "client certificate TTL is '$(ks_sample kubelet_certificate_manager_client_ttl_seconds "$ks_metrics")'"
  [ -n "$(ks_sample kubelet_certificate_manager_client_expiration_renew_errors "$ks_metrics")" ] ||
    fail "no kubelet_certificate_manager_client_expiration_renew_errors with rotateCertificates"
  ks_certs="client certificate TTL $(ks_sample kubelet_certificate_manager_client_ttl_seconds "$ks_metrics") s"
else
  # Upstream registers them only when it rotates the client certificate.
  if grep -q '^kubelet_certificate_manager_client_' <<<"$ks_metrics"; then
    fail "client certificate metrics without rotateCertificates"
  fi
  ks_certs="no client certificate metrics (rotateCertificates is off)"
fi
if [ "$ks_serving" = true ]; then
  grep -q '^kubelet_certificate_manager_server_ttl_seconds ' <<<"$ks_metrics" || fail "no serving certificate TTL with serverTLSBootstrap"
  ks_certs+=", serving certificate TTL $(ks_sample kubelet_certificate_manager_server_ttl_seconds "$ks_metrics")"
else
  if grep -qE '^kubelet_(certificate_manager_server_|server_expiration_renew_errors)' <<<"$ks_metrics"; then
    fail "serving certificate metrics without serverTLSBootstrap"
  fi
  ks_certs+=", no serving certificate metrics (serverTLSBootstrap is off)"
fi
ok "$ks_certs"

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
