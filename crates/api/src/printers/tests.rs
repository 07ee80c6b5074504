use super::*;

fn now() -> Timestamp {
    "2025-01-01T12:00:00Z".parse().unwrap()
}

/// A pod created 10 minutes before [`now`], with the given spec and status.
fn pod(spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2025-01-01T11:50:00Z"},
        "spec": spec,
        "status": status,
    })
}

fn one_container() -> Value {
    json!({"containers": [{"name": "c", "image": "nginx"}]})
}

fn cells(group: &str, kind: &str, obj: &Value) -> Vec<Value> {
    let row = table_row(group, kind, obj, now());
    assert_eq!(
        row.len(),
        table_columns(group, kind).len(),
        "{kind}: one cell per column"
    );
    row
}

#[test]
fn human_duration_matches_upstream_tables() {
    let s = SignedDuration::from_secs;
    let ms = SignedDuration::from_millis;
    let h = |n: i64| s(n * 3600);
    let cases: &[(SignedDuration, &str)] = &[
        // TestHumanDuration
        (s(1), "1s"),
        (s(70), "70s"),
        (s(190), "3m10s"),
        (s(70 * 60), "70m"),
        (h(47), "47h"),
        (h(49), "2d1h"),
        (h(8 * 24 + 2), "8d"),
        (h(367 * 24), "367d"),
        (h(365 * 2 * 24 + 25), "2y1d"),
        (h(365 * 8 * 24 + 2), "8y"),
        // TestHumanDurationBoundaries
        (s(-2), "<invalid>"),
        (s(-2) + SignedDuration::from_nanos(1), "0s"),
        (s(0), "0s"),
        (s(1) - ms(1), "0s"),
        (s(120) - ms(1), "119s"),
        (s(120), "2m"),
        (s(121), "2m1s"),
        (s(600) - ms(1), "9m59s"),
        (s(600), "10m"),
        (s(601), "10m"),
        (h(3) - ms(1), "179m"),
        (h(3), "3h"),
        (h(3) + s(60), "3h1m"),
        (h(8) - ms(1), "7h59m"),
        (h(8), "8h"),
        (h(8) + s(59 * 60), "8h"),
        (h(48) - ms(1), "47h"),
        (h(48), "2d"),
        (h(49), "2d1h"),
        (h(8 * 24) - ms(1), "7d23h"),
        (h(8 * 24), "8d"),
        (h(8 * 24 + 23), "8d"),
        (h(2 * 365 * 24) - ms(1), "729d"),
        (h(2 * 365 * 24), "2y"),
        (h(2 * 365 * 24 + 23), "2y"),
        (h(2 * 365 * 24 + 23) + s(59 * 60), "2y"),
        (h(2 * 365 * 24 + 24) - ms(1), "2y"),
        (h(2 * 365 * 24 + 24), "2y1d"),
        (h(3 * 365 * 24), "3y"),
        (h(7 * 365 * 24), "7y"),
        (h(8 * 365 * 24) - ms(1), "7y364d"),
        (h(8 * 365 * 24), "8y"),
        (h(8 * 365 * 24 + 364 * 24), "8y"),
        (h(9 * 365 * 24), "9y"),
    ];
    for (d, want) in cases {
        assert_eq!(human_duration(*d), *want, "{d:?}");
    }
}

#[test]
fn translate_timestamp_since_unknown_when_missing() {
    assert_eq!(translate_timestamp_since(None, now()), "<unknown>");
    assert_eq!(
        translate_timestamp_since(Some("garbage"), now()),
        "<unknown>"
    );
    assert_eq!(
        translate_timestamp_since(Some("2025-01-01T11:54:50Z"), now()),
        "5m10s"
    );
}

#[test]
fn pod_status_column_follows_upstream() {
    let running = json!({"running": {"startedAt": "2025-01-01T11:51:00Z"}});
    let ready_running = json!({"name": "c", "ready": true, "restartCount": 0, "state": running});
    let init_spec = json!({
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [{"name": "c", "image": "nginx"}],
    });
    // (what, spec, status, deletionTimestamp, READY, STATUS)
    type Case<'a> = (&'a str, Value, Value, Option<&'a str>, &'a str, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "pending, nothing reported",
            one_container(),
            json!({"phase": "Pending"}),
            None,
            "0/1",
            "Pending",
        ),
        (
            "running and ready",
            one_container(),
            json!({"phase": "Running", "containerStatuses": [ready_running]}),
            None,
            "1/1",
            "Running",
        ),
        (
            "container creating",
            one_container(),
            json!({"phase": "Pending", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
            ]}),
            None,
            "0/1",
            "ContainerCreating",
        ),
        (
            "crash loop",
            one_container(),
            json!({"phase": "Running", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T11:55:00Z"}}}
            ]}),
            None,
            "0/1",
            "CrashLoopBackOff",
        ),
        (
            "completed",
            one_container(),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]}),
            None,
            "0/1",
            "Completed",
        ),
        (
            "terminated without reason: exit code",
            one_container(),
            json!({"phase": "Failed", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
            ]}),
            None,
            "0/1",
            "ExitCode:2",
        ),
        (
            "terminated without reason: signal",
            one_container(),
            json!({"phase": "Failed", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}
            ]}),
            None,
            "0/1",
            "Signal:9",
        ),
        (
            "init waiting to start",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
            ]}),
            None,
            "0/1",
            "Init:0/1",
        ),
        (
            "init running",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "state": running.clone()}
            ]}),
            None,
            "0/1",
            "Init:0/1",
        ),
        (
            "init crash loop",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}),
            None,
            "0/1",
            "Init:CrashLoopBackOff",
        ),
        (
            "init failed with reason",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
            ]}),
            None,
            "0/1",
            "Init:Error",
        ),
        (
            "init failed without reason",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}
            ]}),
            None,
            "0/1",
            "Init:ExitCode:3",
        ),
        (
            "init killed by signal",
            init_spec.clone(),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "signal": 9, "reason": ""}}}
            ]}),
            None,
            // exit code 0 counts as done, whatever the signal.
            "0/1",
            "Pending",
        ),
        (
            "init done, main container creating",
            init_spec.clone(),
            json!({"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "init", "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
            None,
            "0/1",
            "ContainerCreating",
        ),
        (
            "sidecar started and ready counts",
            json!({
                "initContainers": [{"name": "side", "image": "envoy", "restartPolicy": "Always"}],
                "containers": [{"name": "c", "image": "nginx"}],
            }),
            json!({"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
                "initContainerStatuses": [
                    {"name": "side", "ready": true, "started": true, "restartCount": 0, "state": running.clone()}],
                "containerStatuses": [ready_running.clone()]}),
            None,
            "2/2",
            "Running",
        ),
        (
            "terminating",
            one_container(),
            json!({"phase": "Running", "containerStatuses": [ready_running.clone()]}),
            Some("2025-01-01T11:59:00Z"),
            "1/1",
            "Terminating",
        ),
        (
            "terminal pods are not terminating",
            one_container(),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]}),
            Some("2025-01-01T11:59:00Z"),
            "0/1",
            "Completed",
        ),
        (
            "node lost",
            one_container(),
            json!({"phase": "Running", "reason": "NodeLost", "containerStatuses": [ready_running.clone()]}),
            Some("2025-01-01T11:59:00Z"),
            "1/1",
            "Unknown",
        ),
        (
            "evicted",
            one_container(),
            json!({"phase": "Failed", "reason": "Evicted"}),
            None,
            "0/1",
            "Evicted",
        ),
        (
            "scheduling gated",
            one_container(),
            json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
            ]}),
            None,
            "0/1",
            "SchedulingGated",
        ),
        (
            "completed container but another still running and pod ready",
            json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
            json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "b", "ready": true, "restartCount": 0, "state": running.clone()}]}),
            None,
            "1/2",
            "Running",
        ),
        (
            "completed container but another still running, pod not ready",
            json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
            json!({"phase": "Running",
                "containerStatuses": [
                    {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "b", "ready": true, "restartCount": 0, "state": running.clone()}]}),
            None,
            "1/2",
            "NotReady",
        ),
    ];
    for (what, spec, status, deletion, ready, want) in cases {
        let mut obj = pod(spec, status);
        if let Some(ts) = deletion {
            obj["metadata"]["deletionTimestamp"] = json!(ts);
        }
        let row = cells("", "Pod", &obj);
        assert_eq!(row[1], json!(ready), "{what}: ready");
        assert_eq!(row[2], json!(want), "{what}: status");
    }
}

#[test]
fn pod_row_restarts_age_and_wide_cells() {
    let obj = pod(
        json!({"containers": [{"name": "c", "image": "nginx"}], "nodeName": "n1",
               "readinessGates": [{"conditionType": "example.com/gate"}, {"conditionType": "other"}]}),
        json!({"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
               "conditions": [{"type": "example.com/gate", "status": "True"}, {"type": "other", "status": "False"}],
               "containerStatuses": [
                {"name": "c", "ready": true, "restartCount": 3,
                 "state": {"running": {"startedAt": "2025-01-01T11:55:00Z"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T11:54:50Z"}}}]}),
    );
    assert_eq!(
        cells("", "Pod", &obj),
        vec![
            json!("p"),
            json!("1/1"),
            json!("Running"),
            json!("3 (5m10s ago)"),
            json!("10m"),
            json!("10.0.0.5"),
            json!("n1"),
            json!("<none>"),
            json!("1/2"),
        ]
    );
    let bare = pod(one_container(), json!({"phase": "Pending"}));
    let row = cells("", "Pod", &bare);
    assert_eq!(row[3], json!("0"));
    assert_eq!(
        &row[5..],
        &[
            json!("<none>"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>")
        ]
    );

    assert_eq!(
        table_row_conditions(
            "",
            "Pod",
            &pod(one_container(), json!({"phase": "Succeeded"}))
        )
        .unwrap()[0]["reason"],
        json!("Succeeded")
    );
    assert!(table_row_conditions("", "Pod", &bare).is_none());
}

#[test]
fn pod_columns_are_upstreams() {
    let cols = table_columns("", "Pod");
    let names: Vec<(&str, i32)> = cols.iter().map(|c| (c.name.as_str(), c.priority)).collect();
    assert_eq!(
        names,
        vec![
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1),
        ]
    );
    assert_eq!(cols[0].format, "name");
    let wire = serde_json::to_value(&cols[4]).unwrap();
    let keys: Vec<&String> = wire.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["description", "format", "name", "priority", "type"]);
    assert_eq!(wire["type"], "string");
    assert_eq!(wire["format"], "");
}

#[test]
fn every_resource_has_matching_columns_and_cells() {
    let empty = json!({"metadata": {"name": "x", "creationTimestamp": "2025-01-01T11:00:00Z"}});
    for r in crate::resources::RESOURCES {
        let cols = table_columns(r.group, r.kind);
        assert!(!cols.is_empty());
        // Upstream marks VolumeAttachment's Attacher column as a name too.
        let names = if r.kind == "VolumeAttachment" { 2 } else { 1 };
        assert_eq!(
            cols.iter().filter(|c| c.format == "name").count(),
            names,
            "{}",
            r.kind
        );
        let row = table_row(r.group, r.kind, &empty, now());
        // Upstream's IPAddress rows carry an Age cell its columns do not name.
        let extra = usize::from(r.kind == "IPAddress");
        assert_eq!(row.len(), cols.len() + extra, "{}", r.kind);
    }
}

#[test]
fn ip_address_and_service_cidr_rows() {
    let names = |group: &str, kind: &str| -> Vec<String> {
        table_columns(group, kind)
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    assert_eq!(
        names("networking.k8s.io", "IPAddress"),
        ["Name", "ParentRef"]
    );
    assert_eq!(
        names("networking.k8s.io", "ServiceCIDR"),
        ["Name", "CIDRs", "Age"]
    );
    let meta = json!({"name": "10.96.0.10", "creationTimestamp": "2025-01-01T11:00:00Z"});
    let ip = |parent: Value| json!({"metadata": meta, "spec": {"parentRef": parent}});
    let cases = [
        (
            json!({"group": "", "resource": "services", "namespace": "kube-system", "name": "kube-dns"}),
            "services/kube-system/kube-dns",
        ),
        (
            json!({"group": "Gateway.Networking.K8s.io", "resource": "Gateways", "name": "GW"}),
            "gateways.gateway.networking.k8s.io/GW",
        ),
        (Value::Null, "<none>"),
    ];
    for (parent, want) in cases {
        assert_eq!(
            table_row("networking.k8s.io", "IPAddress", &ip(parent), now()),
            vec![json!("10.96.0.10"), json!(want), json!("60m")],
            "{want}"
        );
    }
    let cidr = json!({"metadata": {"name": "kubernetes", "creationTimestamp": "2025-01-01T11:00:00Z"},
        "spec": {"cidrs": ["10.96.0.0/12", "fd00:10:96::/108"]}});
    assert_eq!(
        table_row("networking.k8s.io", "ServiceCIDR", &cidr, now()),
        vec![
            json!("kubernetes"),
            json!("10.96.0.0/12,fd00:10:96::/108"),
            json!("60m")
        ]
    );
    let empty = json!({"metadata": {"name": "e", "creationTimestamp": "2025-01-01T11:00:00Z"}});
    assert_eq!(
        table_row("networking.k8s.io", "ServiceCIDR", &empty, now())[1],
        json!("")
    );
}

#[test]
fn unknown_kind_gets_default_convertor_columns() {
    let cols = table_columns("example.com", "Widget");
    assert_eq!(cols[0].name, "Name");
    assert_eq!(cols[1].name, "Created At");
    assert_eq!(cols[1].type_, "date");
    assert_eq!(cols[1].description, CREATION_DOC);
    let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2024-03-04T05:06:07Z"}});
    assert_eq!(
        table_row("example.com", "Widget", &obj, now()),
        vec![json!("w"), json!("2024-03-04T05:06:07Z")]
    );
}

#[test]
fn service_rows() {
    let svc = |spec: Value, status: Value| json!({"metadata": {"name": "s", "creationTimestamp": "2025-01-01T11:00:00Z"}, "spec": spec, "status": status});
    let cases: Vec<(Value, Value, [&str; 4])> = vec![
        (
            json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                   "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "web", "tier": "fe"}}),
            json!({}),
            ["ClusterIP", "10.96.0.10", "<none>", "80/TCP"],
        ),
        (
            json!({"type": "NodePort", "clusterIPs": ["10.96.0.11"], "externalIPs": ["1.2.3.4", "5.6.7.8"],
                   "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]}),
            json!({}),
            [
                "NodePort",
                "10.96.0.11",
                "1.2.3.4,5.6.7.8",
                "80/TCP,443:30443/TCP",
            ],
        ),
        (
            json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.12"], "ports": [{"port": 53, "nodePort": 31000, "protocol": "UDP"}]}),
            json!({}),
            ["LoadBalancer", "10.96.0.12", "<pending>", "53:31000/UDP"],
        ),
        (
            json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.12"], "externalIPs": ["9.9.9.9"]}),
            json!({"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}, {"hostname": "lb.example.com"}]}}),
            [
                "LoadBalancer",
                "10.96.0.12",
                "1.1.1.1,lb.example.com,9.9.9.9",
                "<none>",
            ],
        ),
        (
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            json!({}),
            ["ExternalName", "<none>", "db.example.com", "<none>"],
        ),
        (
            json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}),
            json!({}),
            ["ClusterIP", "None", "<none>", "<none>"],
        ),
    ];
    for (spec, status, [ty, ip, ext, ports]) in cases {
        let row = cells("", "Service", &svc(spec, status));
        assert_eq!(row[1], json!(ty));
        assert_eq!(row[2], json!(ip));
        assert_eq!(row[3], json!(ext), "{ty}");
        assert_eq!(row[4], json!(ports));
        assert_eq!(row[5], json!("60m"));
    }
    let first = svc(
        json!({"type": "ClusterIP", "clusterIPs": ["10.0.0.1"], "selector": {"tier": "fe", "app": "web"}}),
        json!({}),
    );
    assert_eq!(cells("", "Service", &first)[6], json!("app=web,tier=fe"));
    assert_eq!(
        make_port_string(&[
            json!({"port": 80, "protocol": "TCP"}),
            json!({"port": 443, "nodePort": 30443, "protocol": "TCP"})
        ]),
        "80/TCP,443:30443/TCP"
    );
}

#[test]
fn node_rows() {
    let node = json!({
        "metadata": {"name": "n1", "creationTimestamp": "2024-12-29T12:00:00Z", "labels": {
            "node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "x",
            "kubernetes.io/role": "master", "kubernetes.io/hostname": "n1"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "n1"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://2.0.0"},
        },
    });
    assert_eq!(
        cells("", "Node", &node),
        vec![
            json!("n1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane,master"),
            json!("3d"),
            json!("v1.33.0"),
            json!("192.168.1.10"),
            json!("<none>"),
            json!("Debian GNU/Linux 12 (bookworm)"),
            json!("6.1.0"),
            json!("containerd://2.0.0"),
        ]
    );
    let bare = json!({"metadata": {"name": "n2"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    let row = cells("", "Node", &bare);
    assert_eq!(row[1], json!("NotReady"));
    assert_eq!(row[2], json!("<none>"));
    assert_eq!(row[3], json!("<unknown>"));
    assert_eq!(row[7], json!("<unknown>"));
    let no_conditions = json!({"metadata": {"name": "n3"}});
    assert_eq!(cells("", "Node", &no_conditions)[1], json!("Unknown"));
}

#[test]
fn workload_rows() {
    let template = json!({"spec": {"containers": [{"name": "a", "image": "nginx:1"}, {"name": "b", "image": "redis"}]}});
    let meta = json!({"name": "w", "creationTimestamp": "2025-01-01T11:58:00Z"});
    let deploy = json!({"metadata": meta, "spec": {"replicas": 3, "template": template,
        "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]}},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
    assert_eq!(
        cells("apps", "Deployment", &deploy),
        vec![
            json!("w"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("2m"),
            json!("a,b"),
            json!("nginx:1,redis"),
            json!("app=web,env in (dev,prod)"),
        ]
    );
    let rs = json!({"metadata": meta, "spec": {"replicas": 2, "template": template, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": 2, "readyReplicas": 1}});
    assert_eq!(
        &cells("apps", "ReplicaSet", &rs)[..5],
        &[json!("w"), json!(2), json!(2), json!(1), json!("2m")]
    );
    let rc = json!({"apiVersion": "v1", "metadata": meta, "spec": {"replicas": 1, "selector": {"app": "old"}, "template": template}});
    assert_eq!(cells("", "ReplicationController", &rc)[7], json!("app=old"));
    let ds = json!({"metadata": meta, "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}},
        "selector": {"matchExpressions": [{"key": "k", "operator": "Exists"}, {"key": "a", "operator": "DoesNotExist"}]}},
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}});
    assert_eq!(
        cells("apps", "DaemonSet", &ds),
        vec![
            json!("w"),
            json!(3),
            json!(3),
            json!(2),
            json!(3),
            json!(2),
            json!("kubernetes.io/os=linux"),
            json!("2m"),
            json!(""),
            json!(""),
            json!("!a,k"),
        ]
    );
    let sts = json!({"metadata": meta, "spec": {"replicas": 3, "template": template}, "status": {"readyReplicas": 3}});
    assert_eq!(
        &cells("apps", "StatefulSet", &sts)[..3],
        &[json!("w"), json!("3/3"), json!("2m")]
    );
}

#[test]
fn job_and_cronjob_rows() {
    let meta = json!({"name": "j", "creationTimestamp": "2025-01-01T11:00:00Z"});
    let cases: Vec<(Value, Value, Option<&str>, [&str; 3])> = vec![
        (
            json!({"completions": 1}),
            json!({"succeeded": 1, "startTime": "2025-01-01T11:00:00Z", "completionTime": "2025-01-01T11:00:12Z",
                   "conditions": [{"type": "Complete", "status": "True"}]}),
            None,
            ["Complete", "1/1", "12s"],
        ),
        (
            json!({"completions": 5, "parallelism": 2}),
            json!({"succeeded": 2, "startTime": "2025-01-01T11:55:00Z"}),
            None,
            ["Running", "2/5", "5m"],
        ),
        (
            json!({"parallelism": 3}),
            json!({"conditions": [{"type": "Failed", "status": "True"}]}),
            None,
            ["Failed", "0/1 of 3", ""],
        ),
        (
            json!({}),
            json!({}),
            Some("2025-01-01T11:59:00Z"),
            ["Terminating", "0/1", ""],
        ),
        (
            json!({}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
            None,
            ["Suspended", "0/1", ""],
        ),
        (
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "False"}, {"type": "FailureTarget", "status": "True"}]}),
            None,
            ["FailureTarget", "0/1", ""],
        ),
        (
            json!({}),
            json!({"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}),
            None,
            ["SuccessCriteriaMet", "0/1", ""],
        ),
    ];
    for (spec, status, deletion, [st, completions, duration]) in cases {
        let mut job = json!({"metadata": meta, "spec": spec, "status": status});
        if let Some(ts) = deletion {
            job["metadata"]["deletionTimestamp"] = json!(ts);
        }
        let row = cells("batch", "Job", &job);
        assert_eq!(row[1], json!(st));
        assert_eq!(row[2], json!(completions), "{st}");
        assert_eq!(row[3], json!(duration), "{st}");
        assert_eq!(row[4], json!("60m"));
    }
    let cj = json!({"metadata": meta, "spec": {"schedule": "*/5 * * * *", "suspend": false,
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}},
        "status": {"active": [{"name": "j-1"}], "lastScheduleTime": "2025-01-01T11:55:00Z"}});
    assert_eq!(
        cells("batch", "CronJob", &cj),
        vec![
            json!("j"),
            json!("*/5 * * * *"),
            json!("<none>"),
            json!("false"),
            json!(1),
            json!("5m"),
            json!("60m"),
            json!("c"),
            json!("busybox"),
            json!("<none>"),
        ]
    );
}

#[test]
fn config_and_small_kinds() {
    let meta = json!({"name": "o", "creationTimestamp": "2025-01-01T11:59:30Z"});
    let cm = json!({"metadata": meta, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(
        cells("", "ConfigMap", &cm),
        vec![json!("o"), json!(3), json!("30s")]
    );
    let secret = json!({"metadata": meta, "type": "Opaque", "data": {"a": "MQ=="}});
    assert_eq!(
        cells("", "Secret", &secret),
        vec![json!("o"), json!("Opaque"), json!(1), json!("30s")]
    );
    let ns = json!({"metadata": meta, "status": {"phase": "Active"}});
    assert_eq!(
        cells("", "Namespace", &ns),
        vec![json!("o"), json!("Active"), json!("30s")]
    );
    let sa = json!({"metadata": meta});
    assert_eq!(
        cells("", "ServiceAccount", &sa),
        vec![json!("o"), json!(0), json!("30s")]
    );
    let lease = json!({"metadata": meta, "spec": {"holderIdentity": "node-1"}});
    assert_eq!(
        cells("coordination.k8s.io", "Lease", &lease),
        vec![json!("o"), json!("node-1"), json!("30s")]
    );
    let rc = json!({"metadata": meta, "handler": "runc", "overhead": {"podFixed": {"cpu": "1"}}});
    assert_eq!(
        cells("node.k8s.io", "RuntimeClass", &rc),
        vec![json!("o"), json!("runc"), json!("30s")]
    );
    let pc = json!({"metadata": meta, "value": 2000000000, "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority"});
    assert_eq!(
        cells("scheduling.k8s.io", "PriorityClass", &pc),
        vec![
            json!("o"),
            json!(2000000000),
            json!(false),
            json!("PreemptLowerPriority"),
            json!("30s")
        ]
    );
    let sc = json!({"metadata": {"name": "standard", "creationTimestamp": "2025-01-01T11:59:30Z",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "rancher.io/local-path"});
    assert_eq!(
        cells("storage.k8s.io", "StorageClass", &sc),
        vec![
            json!("standard (default)"),
            json!("rancher.io/local-path"),
            json!("Delete"),
            json!("Immediate"),
            json!(false),
            json!("30s")
        ]
    );
    let rb = json!({"metadata": meta, "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                     {"kind": "Group", "name": "devs"}, {"kind": "ServiceAccount", "namespace": "kube-system", "name": "sa"}]});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "RoleBinding", &rb),
        vec![
            json!("o"),
            json!("ClusterRole/view"),
            json!("30s"),
            json!("alice, bob"),
            json!("devs"),
            json!("kube-system:sa")
        ]
    );
    let role = json!({"metadata": meta});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "Role", &role),
        vec![json!("o"), json!("2025-01-01T11:59:30Z")]
    );
    let pdb = json!({"metadata": meta, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        cells("policy", "PodDisruptionBudget", &pdb),
        vec![
            json!("o"),
            json!("50%"),
            json!("N/A"),
            json!(1),
            json!("30s")
        ]
    );
    let cr = json!({"metadata": {"name": "o", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": true}]}, "revision": 4});
    assert_eq!(
        cells("apps", "ControllerRevision", &cr)[1..3],
        [json!("daemonset.apps/ds"), json!(4)]
    );
}

#[test]
fn event_rows() {
    let ev = json!({
        "metadata": {"name": "p.17a", "creationTimestamp": "2025-01-01T11:00:00Z"},
        "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
        "reason": "Pulled", "type": "Normal", "message": "  Pulled image  \n",
        "firstTimestamp": "2025-01-01T11:00:00Z", "lastTimestamp": "2025-01-01T11:58:00Z", "count": 4,
        "source": {"component": "kubelet", "host": "n1"},
    });
    assert_eq!(
        cells("", "Event", &ev),
        vec![
            json!("2m"),
            json!("Normal"),
            json!("Pulled"),
            json!("pod/p"),
            json!("spec.containers{c}"),
            json!("kubelet, n1"),
            json!("Pulled image"),
            json!("60m"),
            json!(4),
            json!("p.17a"),
        ]
    );
    let new_style = json!({
        "metadata": {"name": "e"},
        "eventTime": "2025-01-01T11:59:00.000000Z",
        "regarding": {"kind": "Node", "name": ""},
        "reason": "Starting", "type": "Normal", "note": "Starting kubelet.",
        "reportingController": "kubelet", "reportingInstance": "n1",
        "series": {"count": 7, "lastObservedTime": "2025-01-01T11:59:50.000000Z"},
    });
    let row = cells("events.k8s.io", "Event", &new_style);
    assert_eq!(row[0], json!("10s"));
    assert_eq!(row[3], json!("node"));
    assert_eq!(row[5], json!("kubelet, n1"));
    assert_eq!(row[6], json!("Starting kubelet."));
    assert_eq!(row[7], json!("60s"));
    assert_eq!(row[8], json!(7));
    // An events.k8s.io event read as core/v1: no source, the reporter in
    // reportingComponent (upstream prints "default-scheduler, default-scheduler-n1").
    let scheduled = json!({
        "metadata": {"name": "s"}, "involvedObject": {"kind": "Pod", "name": "p"},
        "eventTime": "2025-01-01T11:59:00.000000Z", "reason": "Scheduled",
        "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-n1",
    });
    let row = cells("", "Event", &scheduled);
    assert_eq!(row[5], json!("default-scheduler, default-scheduler-n1"));
    let singleton = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"}});
    let row = cells("", "Event", &singleton);
    assert_eq!(row[0], json!("<unknown>"));
    assert_eq!(row[8], json!(1));
}

#[test]
fn endpoint_rows() {
    let ep = json!({"metadata": {"name": "kubernetes"}, "subsets": [
        {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 6443}, {"port": 80}]},
    ]});
    assert_eq!(
        cells("", "Endpoints", &ep)[1],
        json!("10.0.0.1:6443,10.0.0.2:6443,10.0.0.1:80 + 1 more...")
    );
    let v6 = json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 443}]}]});
    assert_eq!(cells("", "Endpoints", &v6)[1], json!("[fd00::1]:443"));
    let headless =
        json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}]});
    assert_eq!(cells("", "Endpoints", &headless)[1], json!("10.0.0.9"));
    let none = json!({"metadata": {"name": "e"}});
    assert_eq!(cells("", "Endpoints", &none)[1], json!("<none>"));

    let slice = json!({"metadata": {"name": "s"}, "addressType": "IPv4",
        "ports": [{"port": 80}, {"name": "https"}, {}, {"port": 8080}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
    assert_eq!(
        cells("discovery.k8s.io", "EndpointSlice", &slice)[1..4],
        [
            json!("IPv4"),
            json!("80,https,* + 1 more..."),
            json!("10.0.0.1,10.0.0.2")
        ]
    );
    let empty = json!({"metadata": {"name": "s"}, "addressType": "IPv4"});
    assert_eq!(
        cells("discovery.k8s.io", "EndpointSlice", &empty)[2..4],
        [json!("<unset>"), json!("<unset>")]
    );
}

#[test]
fn storage_network_and_autoscaling_rows() {
    let pv = json!({"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteMany", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"namespace": "default", "name": "data"}, "storageClassName": "standard", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound"}});
    assert_eq!(
        cells("", "PersistentVolume", &pv),
        vec![
            json!("pv1"),
            json!("10Gi"),
            json!("RWO,RWX"),
            json!("Retain"),
            json!("Bound"),
            json!("default/data"),
            json!("standard"),
            json!("<unset>"),
            json!(""),
            json!("<unknown>"),
            json!("Filesystem"),
        ]
    );
    let pvc = json!({"metadata": {"name": "data"}, "spec": {"volumeName": "pv1", "storageClassName": "standard"},
        "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}});
    assert_eq!(
        cells("", "PersistentVolumeClaim", &pvc)[..6],
        [
            json!("data"),
            json!("Bound"),
            json!("pv1"),
            json!("10Gi"),
            json!("RWO"),
            json!("standard")
        ]
    );
    let ing = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.com"}, {"host": "b.com"}, {}, {"host": "d.com"}, {"host": "e.com"}],
        "tls": [{"hosts": ["a.com"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    assert_eq!(
        cells("networking.k8s.io", "Ingress", &ing)[1..5],
        [
            json!("nginx"),
            json!("a.com,b.com,d.com + 2 more..."),
            json!("1.2.3.4"),
            json!("80, 443")
        ]
    );
    let ing_any = json!({"metadata": {"name": "i"}, "spec": {"rules": [{}]}});
    assert_eq!(
        cells("networking.k8s.io", "Ingress", &ing_any)[1..5],
        [json!("<none>"), json!("*"), json!(""), json!("80")]
    );
    let np = json!({"metadata": {"name": "np"}, "spec": {"podSelector": {}}});
    assert_eq!(
        cells("networking.k8s.io", "NetworkPolicy", &np)[1],
        json!("<none>")
    );
    let hpa = json!({"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "minReplicas": 1, "maxReplicas": 10, "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
            {"type": "Pods", "pods": {"target": {"averageValue": "1k"}}}]},
        "status": {"currentReplicas": 3, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 45}}}]}});
    assert_eq!(
        cells("autoscaling", "HorizontalPodAutoscaler", &hpa)[1..6],
        [
            json!("Deployment/web"),
            json!("cpu: 45%/80%, memory: <unknown>/100Mi + 1 more..."),
            json!("1"),
            json!(10),
            json!(3)
        ]
    );
    let csr = json!({"metadata": {"name": "c"}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client",
        "username": "alice", "expirationSeconds": 86400},
        "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}});
    assert_eq!(
        cells("certificates.k8s.io", "CertificateSigningRequest", &csr)[2..6],
        [
            json!("kubernetes.io/kube-apiserver-client"),
            json!("alice"),
            json!("24h"),
            json!("Approved,Issued")
        ]
    );
}

#[test]
fn label_selector_formatting() {
    let cases: Vec<(Option<Value>, &str)> = vec![
        (None, "<none>"),
        (Some(json!({})), "<none>"),
        (
            Some(json!({"matchLabels": {"b": "2", "a": "1"}})),
            "a=1,b=2",
        ),
        (
            Some(
                json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["b", "a"]}]}),
            ),
            "x notin (a,b)",
        ),
        (
            Some(json!({"matchExpressions": [{"key": "x", "operator": "In", "values": []}]})),
            "<error>",
        ),
        (
            Some(json!({"matchExpressions": [{"key": "x", "operator": "Bogus"}]})),
            "<error>",
        ),
    ];
    for (sel, want) in cases {
        assert_eq!(format_label_selector(sel.as_ref()), want, "{sel:?}");
    }
}

#[test]
fn webhook_configurations_print_their_webhook_count() {
    let obj = json!({"metadata": {"name": "checks", "creationTimestamp": "2025-01-01T11:00:00Z"},
        "webhooks": [{"name": "a.example.com"}, {"name": "b.example.com"}]});
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let names: Vec<String> = table_columns("admissionregistration.k8s.io", kind)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["Name", "Webhooks", "Age"]);
        assert_eq!(
            cells("admissionregistration.k8s.io", kind, &obj),
            vec![json!("checks"), json!(2), json!("60m")]
        );
    }
}

#[test]
fn admission_policies_print_upstreams_columns() {
    const AR: &str = "admissionregistration.k8s.io";
    let names = |kind| -> Vec<String> {
        table_columns(AR, kind)
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    assert_eq!(
        names("ValidatingAdmissionPolicy"),
        ["Name", "Validations", "ParamKind", "Age"]
    );
    assert_eq!(
        names("ValidatingAdmissionPolicyBinding"),
        ["Name", "PolicyName", "ParamRef", "Age"]
    );
    let meta = json!({"name": "p", "creationTimestamp": "2025-01-01T11:00:00Z"});
    let policy = json!({"metadata": meta, "spec": {"validations": [{"expression": "true"}],
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}});
    assert_eq!(
        cells(AR, "ValidatingAdmissionPolicy", &policy),
        vec![json!("p"), json!(1), json!("v1/ConfigMap"), json!("60m")]
    );
    for (param_ref, want) in [
        (json!(null), "<unset>"),
        (json!({"name": "limits"}), "*/limits"),
        (json!({"name": "limits", "namespace": "ns"}), "ns/limits"),
        (json!({"selector": {"matchLabels": {"a": "b"}}}), "a=b"),
    ] {
        let binding = json!({"metadata": meta, "spec": {"policyName": "p", "paramRef": param_ref}});
        assert_eq!(
            cells(AR, "ValidatingAdmissionPolicyBinding", &binding),
            vec![json!("p"), json!("p"), json!(want), json!("60m")]
        );
    }
}

#[test]
fn api_service_columns_follow_kube_aggregator() {
    let names: Vec<String> = table_columns("apiregistration.k8s.io", "APIService")
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["Name", "Service", "Available", "Age"]);
    let svc = |spec: Value, status: Value| {
        json!({"metadata": {"name": "v1.example.com", "creationTimestamp": "2025-01-01T11:00:00Z"},
            "spec": spec, "status": status})
    };
    let row = |spec: Value, status: Value| {
        cells("apiregistration.k8s.io", "APIService", &svc(spec, status))
    };
    let available = |status: &str, reason: Option<&str>| {
        let mut c = json!({"type": "Available", "status": status});
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        json!({"conditions": [{"type": "Other", "status": "False", "reason": "X"}, c]})
    };
    assert_eq!(
        row(json!({}), available("True", Some("Local"))),
        [
            json!("v1.example.com"),
            json!("Local"),
            json!("True"),
            json!("60m")
        ]
    );
    let remote = json!({"service": {"namespace": "ns", "name": "api", "port": 443}});
    assert_eq!(
        row(remote.clone(), available("False", Some("MissingEndpoints")))[1..3],
        [json!("ns/api"), json!("False (MissingEndpoints)")]
    );
    assert_eq!(
        row(remote.clone(), available("False", None))[2],
        json!("False")
    );
    assert_eq!(
        row(remote.clone(), available("Unknown", Some("Pending")))[2],
        json!("Unknown (Pending)")
    );
    assert_eq!(row(remote, json!({}))[2], json!("Unknown"));
}

#[test]
fn flow_control_kinds_print_upstreams_columns() {
    const G: &str = "flowcontrol.apiserver.k8s.io";
    let names = |kind: &str| -> Vec<String> {
        table_columns(G, kind)
            .into_iter()
            .map(|c| {
                // Upstream types every column but Name's format as a plain string.
                assert_eq!(c.type_, "string", "{kind} {}", c.name);
                assert_eq!(c.priority, 0);
                c.name
            })
            .collect()
    };
    assert_eq!(
        names("FlowSchema"),
        [
            "Name",
            "PriorityLevel",
            "MatchingPrecedence",
            "DistinguisherMethod",
            "Age",
            "MissingPL"
        ]
    );
    assert_eq!(
        names("PriorityLevelConfiguration"),
        [
            "Name",
            "Type",
            "NominalConcurrencyShares",
            "Queues",
            "HandSize",
            "QueueLengthLimit",
            "Age"
        ]
    );
    let meta = json!({"name": "o", "creationTimestamp": "2025-01-01T11:00:00Z"});

    let fs = |spec: Value, status: Value| {
        cells(
            G,
            "FlowSchema",
            &json!({"metadata": meta, "spec": spec, "status": status}),
        )
    };
    let spec = json!({"priorityLevelConfiguration": {"name": "workload-low"},
        "matchingPrecedence": 9000, "distinguisherMethod": {"type": "ByUser"}});
    assert_eq!(
        fs(spec.clone(), json!({})),
        [
            json!("o"),
            json!("workload-low"),
            json!(9000),
            json!("ByUser"),
            json!("60m"),
            json!("?")
        ]
    );
    // No distinguisher; the Dangling condition's status, the first one found.
    let dangling = json!({"conditions": [
        {"type": "Other", "status": "True"},
        {"type": "Dangling", "status": "False"},
        {"type": "Dangling", "status": "True"}]});
    let row = fs(
        json!({"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1000}),
        dangling,
    );
    assert_eq!(row[3], json!("<none>"));
    assert_eq!(row[5], json!("False"));

    let pl = |spec: Value| {
        cells(
            G,
            "PriorityLevelConfiguration",
            &json!({"metadata": meta, "spec": spec}),
        )
    };
    assert_eq!(
        pl(
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30,
            "limitResponse": {"type": "Queue",
                "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}})
        ),
        [
            json!("o"),
            json!("Limited"),
            json!(30),
            json!(64),
            json!(6),
            json!(50),
            json!("60m")
        ]
    );
    let none = json!("<none>");
    assert_eq!(
        pl(
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
            "limitResponse": {"type": "Reject"}}})
        )[2..6],
        [json!(5), none.clone(), none.clone(), none.clone()]
    );
    assert_eq!(
        pl(json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0}}))[1..6],
        [
            json!("Exempt"),
            none.clone(),
            none.clone(),
            none.clone(),
            none
        ]
    );
}

#[test]
fn flow_schema_rows_sort_by_precedence_then_name() {
    let fs = |name: &str, precedence: i64| json!({"metadata": {"name": name}, "spec": {"matchingPrecedence": precedence}});
    let mut items = [
        fs("service-accounts", 9000),
        fs("kube-scheduler", 800),
        fs("exempt", 1),
        fs("kube-controller-manager", 800),
    ];
    let order = table_row_order("flowcontrol.apiserver.k8s.io", "FlowSchema").unwrap();
    items.sort_by(order);
    let names: Vec<&str> = items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "exempt",
            "kube-controller-manager",
            "kube-scheduler",
            "service-accounts"
        ]
    );
    assert!(
        table_row_order("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration").is_none()
    );
    assert!(table_row_order("", "Pod").is_none());
}
