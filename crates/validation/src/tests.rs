//! Table-driven tests: every case is a defaulted object (from JSON), optionally an
//! old object for updates, and the exact list of errors expected, each written as
//! `"<field>: <message>"` (the upstream rendering) or as `"<field>: <kind text>"`
//! when only the field and kind matter.

use ferrokube_api::defaults::ApplyDefaults;
use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::{
    autoscaling::v2 as autoscaling, certificates::v1 as certificates,
    coordination::v1 as coordination, discovery::v1 as discovery, events::v1 as events,
    networking::v1 as networking, node::v1 as node, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{FieldError, Validate};

fn object<T: Resource + DeserializeOwned + ApplyDefaults>(mut v: Value) -> T {
    let o = v.as_object_mut().expect("object");
    o.insert("apiVersion".into(), T::API_VERSION.into());
    o.insert("kind".into(), T::KIND.into());
    o.entry("metadata")
        .or_insert(json!({"name": "x", "namespace": "ns"}));
    let mut obj: T = serde_json::from_value(v).expect("fixture deserializes");
    obj.apply_defaults();
    obj
}

/// Whether `err` matches `want`: the whole rendering, or `field: kind-text` prefix.
fn matches(err: &FieldError, want: &str) -> bool {
    let full = err.to_string();
    full == want || format!("{}: {}", err.field, err.kind.text()) == want
}

fn assert_errors(case: &str, errs: &[FieldError], want: &[&str]) {
    let rendered: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(errs.len(), want.len(), "case {case}: got {rendered:#?}");
    for w in want {
        assert!(
            errs.iter().any(|e| matches(e, w)),
            "case {case}: missing {w:?} in {rendered:#?}"
        );
    }
}

fn check_create<T: Resource + DeserializeOwned + ApplyDefaults + Validate>(
    cases: Vec<(&str, Value, Vec<&str>)>,
) {
    for (name, input, want) in cases {
        let obj: T = object(input);
        assert_errors(name, &obj.validate_create(), &want);
    }
}

fn check_update<T: Resource + DeserializeOwned + ApplyDefaults + Validate>(
    cases: Vec<(&str, Value, Value, Vec<&str>)>,
) {
    for (name, new, old, want) in cases {
        let new: T = object(new);
        let old: T = object(old);
        assert_errors(name, &new.validate_update(&old), &want);
    }
}

fn pod_spec() -> Value {
    json!({"containers": [{"name": "c", "image": "nginx"}]})
}

fn with(mut base: Value, path: &[&str], value: Value) -> Value {
    let mut cur = &mut base;
    for (i, key) in path.iter().enumerate() {
        if i + 1 == path.len() {
            cur[*key] = value;
            break;
        }
        cur = &mut cur[*key];
    }
    base
}

#[test]
fn pod_create() {
    let containers = |c: Value| json!({"spec": {"containers": c}});
    check_create::<core::Pod>(vec![
        ("valid", json!({"spec": pod_spec()}), vec![]),
        (
            "resize policies",
            json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i",
                "resizePolicy": [
                    {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                    {"resourceName": "memory", "restartPolicy": "RestartContainer"},
                    {"resourceName": "cpu", "restartPolicy": "Sometimes"}]}]}}),
            vec![
                "spec.containers[0].resizePolicy: Invalid value: \"RestartContainer\": must be 'NotRequired' when `restartPolicy` is 'Never'",
                "spec.containers[0].resizePolicy[2]: Duplicate value: \"cpu\"",
                "spec.containers[0].resizePolicy: Unsupported value: \"Sometimes\": supported values: \"NotRequired\", \"RestartContainer\"",
                "spec.containers[0].resizePolicy: Invalid value: \"Sometimes\": must be 'NotRequired' when `restartPolicy` is 'Never'",
            ],
        ),
        (
            "no containers",
            json!({"spec": {"containers": []}}),
            vec!["spec.containers: Required value"],
        ),
        (
            "name and image required",
            containers(json!([{"name": ""}])),
            vec![
                "spec.containers[0].name: Required value",
                "spec.containers[0].image: Required value",
            ],
        ),
        (
            "duplicate names across init and regular containers",
            json!({"spec": {"initContainers": [{"name": "a", "image": "i"}], "containers": [{"name": "a", "image": "i"}]}}),
            vec!["spec.containers[0].name: Duplicate value: \"a\""],
        ),
        (
            "bad name",
            containers(json!([{"name": "Bad_Name", "image": "i"}])),
            vec!["spec.containers[0].name: Invalid value"],
        ),
        (
            "ports",
            containers(json!([{"name": "c", "image": "i", "ports": [
                {"containerPort": 70000}, {"containerPort": 80, "protocol": "ICMP"},
                {"containerPort": 81, "name": "web"}, {"containerPort": 82, "name": "web"}]}])),
            vec![
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[0].ports[3].name: Duplicate value: \"web\"",
            ],
        ),
        (
            "env",
            containers(json!([{"name": "c", "image": "i", "env": [
                {"name": ""}, {"name": "A=B"}, {"name": "X", "valueFrom": {}},
                {"name": "Y", "value": "v", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}])),
            vec![
                "spec.containers[0].env[0].name: Required value",
                "spec.containers[0].env[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
                "spec.containers[0].env[2].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                "spec.containers[0].env[3].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
            ],
        ),
        (
            "volumes and mounts",
            json!({"spec": {
                "volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}},
                            {"name": "b", "emptyDir": {}, "hostPath": {"path": "/x"}},
                            {"name": "c", "configMap": {"name": ""}}],
                "containers": [{"name": "c", "image": "i", "volumeMounts": [
                    {"name": "missing", "mountPath": "/m"}, {"name": "a", "mountPath": "/m"}, {"name": "a", "mountPath": ""}]}]}}),
            vec![
                "spec.volumes[1].name: Duplicate value: \"a\"",
                "spec.volumes[2].emptyDir: Forbidden: may not specify more than 1 volume type",
                "spec.volumes[3].configMap.name: Required value",
                "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/m\": must be unique",
                "spec.containers[0].volumeMounts[2].mountPath: Required value",
            ],
        ),
        (
            "mount options, at upstream's unindexed paths",
            json!({"spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "i", "volumeMounts": [
                    {"name": "a", "mountPath": "/1", "subPath": "/abs"},
                    {"name": "a", "mountPath": "/2", "subPath": "x", "subPathExpr": "../$(P)"},
                    {"name": "a", "mountPath": "/3", "mountPropagation": "Sideways"},
                    {"name": "a", "mountPath": "/4", "mountPropagation": "Bidirectional"},
                    {"name": "a", "mountPath": "/5", "recursiveReadOnly": "Enabled",
                     "mountPropagation": "HostToContainer"},
                    {"name": "a", "mountPath": "/6", "recursiveReadOnly": "Always"},
                    {"name": "a", "mountPath": "/7", "readOnly": true, "recursiveReadOnly": "IfPossible"}]}]}}),
            vec![
                "spec.containers[0].volumeMounts.subPath: Invalid value: \"/abs\": must be a relative path",
                "spec.containers[0].volumeMounts[1].subPathExpr: Invalid value: \"../$(P)\": subPathExpr and subPath are mutually exclusive",
                "spec.containers[0].volumeMounts.subPathExpr: Invalid value: \"../$(P)\": must not contain '..'",
                "spec.containers[0].volumeMounts.mountPropagation: Unsupported value: \"Sideways\": supported values: \"Bidirectional\", \"HostToContainer\", \"None\"",
                "spec.containers[0].volumeMounts.mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers",
                "spec.containers[0].volumeMounts.recursiveReadOnly: Forbidden: may only be specified when readOnly is true",
                "spec.containers[0].volumeMounts.recursiveReadOnly: Forbidden: may only be specified when mountPropagation is None or not specified",
                "spec.containers[0].volumeMounts.recursiveReadOnly: Unsupported value: \"Always\": supported values: \"Disabled\", \"Enabled\", \"IfPossible\"",
            ],
        ),
        (
            "enums",
            json!({"spec": {"restartPolicy": "Sometimes", "dnsPolicy": "Bogus",
                "containers": [{"name": "c", "image": "i", "imagePullPolicy": "Maybe"}]}}),
            vec![
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
                "spec.dnsPolicy: Unsupported value: \"Bogus\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Maybe\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            ],
        ),
        (
            "resources",
            containers(json!([{"name": "c", "image": "i", "resources": {
                "limits": {"cpu": "1", "memory": "-1Gi"}, "requests": {"cpu": "2", "gpu": "1"}}}])),
            vec![
                "spec.containers[0].resources.limits[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0",
                // requests default to limits on a Pod
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
                "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
            ],
        ),
        (
            "probes",
            containers(json!([{"name": "c", "image": "i",
                "livenessProbe": {"successThreshold": 2, "exec": {"command": ["true"]}},
                "readinessProbe": {},
                "startupProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 80}}}])),
            vec![
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                "spec.containers[0].readinessProbe: Required value: must specify a handler type",
                "spec.containers[0].startupProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
            ],
        ),
        (
            "tolerations and deadline",
            json!({"spec": {"activeDeadlineSeconds": 0, "containers": [{"name": "c", "image": "i"}],
                "tolerations": [{"operator": "Equal", "value": "v"}, {"key": "k", "operator": "Exists", "value": "v"},
                                {"key": "k", "effect": "Sometimes"}]}}),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
                "spec.tolerations[0].operator: Invalid value",
                "spec.tolerations[1].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'",
                "spec.tolerations[2].effect: Unsupported value",
            ],
        ),
        (
            "runtime class name and overhead",
            json!({"spec": {"containers": [{"name": "c", "image": "i"}],
                "runtimeClassName": "Not_A_Name", "overhead": {"cpu": "-1", "memory": "1Gi"}}}),
            vec![
                "spec.runtimeClassName: Invalid value",
                "spec.overhead.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            ],
        ),
        (
            "valid runtime class name and overhead",
            json!({"spec": {"containers": [{"name": "c", "image": "i"}],
                "runtimeClassName": "kata", "overhead": {"cpu": "250m"}}}),
            vec![],
        ),
    ]);
}

#[test]
fn pod_update() {
    let pod = |image: &str, extra: Value| {
        let mut spec = json!({"containers": [{"name": "c", "image": image}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1"}, "spec": spec})
    };
    check_update::<core::Pod>(vec![
        (
            "image change allowed",
            pod("nginx:2", json!({})),
            pod("nginx:1", json!({})),
            vec![],
        ),
        (
            "toleration addition allowed",
            pod(
                "i",
                json!({"tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]}),
            ),
            pod(
                "i",
                json!({"tolerations": [{"key": "a", "operator": "Exists"}]}),
            ),
            vec![],
        ),
        (
            "toleration removal forbidden",
            pod("i", json!({})),
            pod(
                "i",
                json!({"tolerations": [{"key": "a", "operator": "Exists"}]}),
            ),
            vec!["spec.tolerations[0]: Forbidden"],
        ),
        (
            "other change forbidden",
            pod("i", json!({"nodeName": "n2"})),
            pod("i", json!({"nodeName": "n1"})),
            vec!["spec: Forbidden"],
        ),
        (
            "deadline may only shrink",
            pod("i", json!({"activeDeadlineSeconds": 20})),
            pod("i", json!({"activeDeadlineSeconds": 10})),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 20: must be less than or equal to previous value",
            ],
        ),
    ]);
    let new: core::Pod = object(pod("i", json!({"restartPolicy": "Never"})));
    let old: core::Pod = object(pod("i", json!({})));
    let errs = new.validate_update(&old);
    assert!(errs[0].detail.starts_with(
        "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    ));
    assert!(
        errs[0].detail.contains("spec.restartPolicy"),
        "{}",
        errs[0].detail
    );
}

#[test]
fn service() {
    let svc = |spec: Value| json!({"spec": spec});
    check_create::<core::Service>(vec![
        (
            "valid",
            svc(json!({"selector": {"app": "a"}, "ports": [{"port": 80}]})),
            vec![],
        ),
        (
            "ports required",
            svc(json!({"selector": {"app": "a"}})),
            vec!["spec.ports: Required value"],
        ),
        (
            "headless needs no ports",
            svc(json!({"clusterIP": "None", "selector": {"a": "b"}})),
            vec![],
        ),
        (
            "external name",
            svc(
                json!({"type": "ExternalName", "externalName": "Not_A_Name", "clusterIP": "10.0.0.1"}),
            ),
            vec![
                "spec.clusterIP: Forbidden",
                "spec.externalName: Invalid value",
            ],
        ),
        (
            "external name required",
            svc(json!({"type": "ExternalName"})),
            vec!["spec.externalName: Required value"],
        ),
        (
            "bad type",
            svc(json!({"type": "Magic", "ports": [{"port": 80}]})),
            vec![
                "spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            ],
        ),
        (
            "ports",
            svc(
                json!({"ports": [{"port": 0, "name": "a"}, {"port": 80}, {"port": 81, "name": "a", "protocol": "IP", "targetPort": "Bad_Name"}]}),
            ),
            vec![
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                // defaulted from port, like upstream
                "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[1].name: Required value",
                "spec.ports[2].name: Duplicate value: \"a\"",
                "spec.ports[2].protocol: Unsupported value",
                "spec.ports[2].targetPort: Invalid value",
            ],
        ),
        (
            "duplicate port and protocol",
            svc(json!({"ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]})),
            vec!["spec.ports[1]: Duplicate value"],
        ),
        (
            "node port on cluster ip",
            svc(json!({"ports": [{"port": 80, "nodePort": 30000}]})),
            vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"],
        ),
        (
            "node port ok",
            svc(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30000}]})),
            vec![],
        ),
        (
            "headless load balancer",
            svc(json!({"type": "LoadBalancer", "clusterIP": "None", "ports": [{"port": 80}]})),
            vec![
                "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for LoadBalancer services",
            ],
        ),
        (
            "bad selector and cluster ip",
            svc(
                json!({"selector": {"a": "b c"}, "clusterIP": "10.0.0.300", "ports": [{"port": 80}]}),
            ),
            vec![
                "spec.selector: Invalid value",
                "spec.clusterIPs[0]: Invalid value",
            ],
        ),
    ]);
    check_update::<core::Service>(vec![
        (
            "cluster ip immutable",
            svc(json!({"clusterIP": "10.0.0.2", "ports": [{"port": 80}]})),
            svc(json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]})),
            vec!["spec.clusterIP: Invalid value: \"10.0.0.2\": field is immutable"],
        ),
        (
            "ports may change",
            svc(json!({"clusterIP": "10.0.0.1", "ports": [{"port": 81}]})),
            svc(json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]})),
            vec![],
        ),
    ]);
}

fn workload(kind_spec: Value) -> Value {
    json!({"spec": kind_spec})
}

fn template(labels: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": pod_spec()})
}

#[test]
fn deployment() {
    let sel = json!({"matchLabels": {"app": "a"}});
    check_create::<apps::Deployment>(vec![
        (
            "valid",
            workload(json!({"selector": sel, "template": template(json!({"app": "a"}))})),
            vec![],
        ),
        (
            "selector mismatch",
            workload(json!({"selector": sel, "template": template(json!({"app": "b"}))})),
            vec![
                "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`",
            ],
        ),
        (
            "empty selector",
            workload(json!({"selector": {}, "template": template(json!({"app": "a"}))})),
            vec!["spec.selector: Invalid value"],
        ),
        (
            "negative replicas, bad strategy",
            workload(
                json!({"replicas": -1, "selector": sel, "template": template(json!({"app": "a"})),
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}),
            ),
            vec![
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0",
            ],
        ),
        (
            "recreate with rolling update",
            workload(
                json!({"selector": sel, "template": template(json!({"app": "a"})),
                "strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}),
            ),
            vec![
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
            ],
        ),
        (
            "percent over 100 and template restart policy",
            workload(json!({"selector": sel,
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "150%"}}})),
            vec![
                "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"150%\": must not be greater than 100%",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ],
        ),
        (
            "bad match expression",
            workload(
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}, "template": template(json!({"app": "a"}))}),
            ),
            vec![
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ],
        ),
    ]);
    check_update::<apps::Deployment>(vec![
        (
            "selector immutable",
            workload(
                json!({"selector": {"matchLabels": {"app": "a", "v": "2"}}, "template": template(json!({"app": "a", "v": "2"}))}),
            ),
            workload(json!({"selector": sel, "template": template(json!({"app": "a", "v": "2"}))})),
            vec![
                "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"a\",\"v\":\"2\"}}: field is immutable",
            ],
        ),
        (
            "template may change",
            workload(json!({"selector": sel, "template": template(json!({"app": "a", "v": "2"}))})),
            workload(json!({"selector": sel, "template": template(json!({"app": "a"}))})),
            vec![],
        ),
    ]);
}

#[test]
fn replicaset_statefulset_daemonset() {
    let sel = json!({"matchLabels": {"app": "a"}});
    check_create::<apps::ReplicaSet>(vec![
        (
            "valid",
            workload(json!({"selector": sel, "template": template(json!({"app": "a"}))})),
            vec![],
        ),
        (
            "mismatch",
            workload(json!({"selector": sel, "template": template(json!({}))})),
            vec!["spec.template.metadata.labels: Invalid value"],
        ),
    ]);
    check_update::<apps::ReplicaSet>(vec![(
        "selector immutable",
        workload(
            json!({"selector": {"matchLabels": {"b": "1"}}, "template": template(json!({"b": "1"}))}),
        ),
        workload(json!({"selector": sel, "template": template(json!({"b": "1"}))})),
        vec!["spec.selector: Invalid value"],
    )]);
    check_create::<apps::StatefulSet>(vec![
        (
            "valid",
            workload(
                json!({"selector": sel, "serviceName": "s", "template": template(json!({"app": "a"}))}),
            ),
            vec![],
        ),
        (
            "bad policy",
            workload(
                json!({"selector": sel, "podManagementPolicy": "Random", "template": template(json!({"app": "a"}))}),
            ),
            vec![
                "spec.podManagementPolicy: Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'",
            ],
        ),
        (
            "claim template without storage",
            workload(
                json!({"selector": sel, "template": template(json!({"app": "a"})),
                "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}),
            ),
            vec!["spec.volumeClaimTemplates[0].spec.resources[storage]: Required value"],
        ),
        (
            "a container mounts a claim template",
            workload(json!({"selector": sel,
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": {
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "Always",
                        "terminationMessagePolicy": "File",
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]})),
            vec![],
        ),
        (
            "a mount of neither a volume nor a claim template",
            workload(json!({"selector": sel,
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": {
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "Always",
                        "terminationMessagePolicy": "File",
                        "volumeMounts": [{"name": "other", "mountPath": "/www"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]})),
            vec!["spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"other\""],
        ),
    ]);
    check_update::<apps::StatefulSet>(vec![
        (
            "replicas may change",
            workload(
                json!({"replicas": 3, "selector": sel, "template": template(json!({"app": "a"}))}),
            ),
            workload(
                json!({"replicas": 1, "selector": sel, "template": template(json!({"app": "a"}))}),
            ),
            vec![],
        ),
        (
            "service name may not",
            workload(
                json!({"serviceName": "b", "selector": sel, "template": template(json!({"app": "a"}))}),
            ),
            workload(
                json!({"serviceName": "a", "selector": sel, "template": template(json!({"app": "a"}))}),
            ),
            vec!["spec: Forbidden"],
        ),
    ]);
    check_create::<apps::DaemonSet>(vec![
        (
            "valid",
            workload(json!({"selector": sel, "template": template(json!({"app": "a"}))})),
            vec![],
        ),
        (
            "bad strategy",
            workload(
                json!({"selector": sel, "template": template(json!({"app": "a"})), "updateStrategy": {"type": "Sometimes"}}),
            ),
            vec!["spec.updateStrategy.type: Unsupported value"],
        ),
    ]);
    check_update::<apps::ControllerRevision>(vec![(
        "data immutable",
        json!({"revision": 1, "data": {"a": 2}}),
        json!({"revision": 1, "data": {"a": 1}}),
        vec!["data: Invalid value"],
    )]);
}

#[test]
fn jobs() {
    let job_template = |rp: &str| json!({"metadata": {"labels": {"j": "1"}}, "spec": {"restartPolicy": rp, "containers": [{"name": "c", "image": "i"}]}});
    let sel = json!({"matchLabels": {"j": "1"}});
    check_create::<batch::Job>(vec![
        (
            "valid",
            workload(json!({"selector": sel, "template": job_template("Never")})),
            vec![],
        ),
        (
            "restart always",
            workload(json!({"selector": sel, "template": job_template("Always")})),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            ],
        ),
        (
            "selector required",
            workload(json!({"template": job_template("OnFailure")})),
            vec!["spec.selector: Required value"],
        ),
        (
            "indexed needs completions, negatives",
            workload(
                json!({"selector": sel, "template": job_template("Never"), "completionMode": "Indexed", "parallelism": 2, "backoffLimit": -1}),
            ),
            vec![
                "spec.completions: Required value: when completion mode is Indexed",
                "spec.backoffLimit: Invalid value",
            ],
        ),
        (
            "success policy",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [
                    {"succeededIndexes": "0,2-4", "succeededCount": 4}]}})),
            vec![],
        ),
        (
            "success policy rules checked",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [
                    {"succeededIndexes": "3,1"},
                    {"succeededIndexes": "0-5"},
                    {"succeededIndexes": "1-2", "succeededCount": 3},
                    {"succeededCount": 6},
                    {}]}})),
            vec![
                "spec.successPolicy.rules[0].succeededIndexes: Invalid value: \"3,1\": error parsing succeededIndexes: non-increasing order, previous: 3, current: 1",
                "spec.successPolicy.rules[1].succeededIndexes: Invalid value: \"0-5\": error parsing succeededIndexes: too large index: \"5\"",
                "spec.successPolicy.rules[2].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)",
                "spec.successPolicy.rules[3].succeededCount: Invalid value: 6: must be less than or equal to 5 (the number of specified completions)",
                "spec.successPolicy.rules[4]: Required value: at least one of succeededCount or succeededIndexes must be specified",
            ],
        ),
        (
            "backoff limit per index",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 4, "backoffLimitPerIndex": 1,
                "maxFailedIndexes": 2, "podFailurePolicy": {"rules": [
                    {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]}})),
            vec![],
        ),
        (
            "per-index limits need an indexed job",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completions": 4, "backoffLimitPerIndex": 1, "maxFailedIndexes": 2})),
            vec![
                "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
                "spec.maxFailedIndexes: Invalid value: 2: requires indexed completion mode",
            ],
        ),
        (
            "max failed indexes bounds",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 4, "maxFailedIndexes": 5,
                "podFailurePolicy": {"rules": [
                    {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]}})),
            vec![
                "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified",
                "spec.maxFailedIndexes: Invalid value: 5: must be less than or equal to completions",
                "spec.podFailurePolicy.rules[0].action: Invalid value: \"FailIndex\": requires the backoffLimitPerIndex to be set",
            ],
        ),
        (
            "many completions with per-index limits",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 200000, "parallelism": 20000,
                "backoffLimitPerIndex": 1})),
            vec![
                "spec.maxFailedIndexes: Required value: must be specified when completions is above 100000",
                "spec.parallelism: Invalid value: 20000: must be less than or equal to 10000 when completions are above 100000 and used with backoff limit per index",
            ],
        ),
        (
            "managed by another controller",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "managedBy": "kueue.x-k8s.io/multikueue"})),
            vec![],
        ),
        (
            "managed by must be a domain-prefixed path",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "managedBy": "kueue"})),
            vec![
                "spec.managedBy: Invalid value: \"kueue\": must be a domain-prefixed path (such as \"acme.io/foo\")",
            ],
        ),
        (
            "success policy needs an indexed job and rules",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completions": 5, "successPolicy": {"rules": []}})),
            vec![
                "spec.successPolicy: Invalid value",
                "spec.successPolicy.rules: Required value: at least one rules must be specified when the successPolicy is specified",
            ],
        ),
    ]);
    let indexed = |rules: Value| {
        workload(json!({"selector": sel, "template": job_template("Never"),
            "completionMode": "Indexed", "completions": 3, "successPolicy": {"rules": rules}}))
    };
    check_update::<batch::Job>(vec![
        (
            "template immutable",
            workload(json!({"selector": sel, "template": job_template("OnFailure")})),
            workload(json!({"selector": sel, "template": job_template("Never")})),
            vec!["spec.template: Invalid value"],
        ),
        (
            "backoff limit per index immutable, max failed indexes not",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 2,
                "maxFailedIndexes": 2})),
            workload(json!({"selector": sel, "template": job_template("Never"),
                "completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1,
                "maxFailedIndexes": 1})),
            vec!["spec.backoffLimitPerIndex: Invalid value: 2: field is immutable"],
        ),
        (
            "managed by immutable",
            workload(json!({"selector": sel, "template": job_template("Never"),
                "managedBy": "example.com/b"})),
            workload(json!({"selector": sel, "template": job_template("Never"),
                "managedBy": "example.com/a"})),
            vec!["spec.managedBy: Invalid value: \"example.com/b\": field is immutable"],
        ),
        (
            "success policy immutable",
            indexed(json!([{"succeededCount": 1}])),
            indexed(json!([{"succeededCount": 2}])),
            vec!["spec.successPolicy: Invalid value"],
        ),
    ]);
    let cron = |schedule: &str| json!({"spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": job_template("OnFailure")}}}});
    check_create::<batch::CronJob>(vec![
        ("valid", cron("*/5 * * * *"), vec![]),
        ("hourly", cron("@hourly"), vec![]),
        ("required", cron(""), vec!["spec.schedule: Required value"]),
        (
            "bad",
            cron("61 * * * *"),
            vec![
                "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61",
            ],
        ),
        (
            "tz",
            cron("TZ=UTC * * * * *"),
            vec![
                "spec.schedule: Invalid value: \"TZ=UTC * * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ],
        ),
        (
            "template restart policy",
            json!({"spec": {"schedule": "@daily", "concurrencyPolicy": "Sometimes", "jobTemplate": {"spec": {"template": job_template("Always")}}}}),
            vec![
                "spec.concurrencyPolicy: Unsupported value",
                "spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value",
            ],
        ),
    ]);
}

#[test]
fn configmaps_and_secrets() {
    check_create::<core::ConfigMap>(vec![
        ("valid", json!({"data": {"a.b": "1", "C_D": "2"}}), vec![]),
        (
            "bad key",
            json!({"data": {"a/b": "1"}}),
            vec![
                "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ],
        ),
        (
            "duplicate in binary",
            json!({"data": {"a": "1"}, "binaryData": {"a": "AA=="}}),
            vec!["binaryData[a]: Invalid value: \"a\": duplicate of key present in data"],
        ),
        (
            "too big",
            json!({"data": {"a": "x".repeat(1024 * 1024)}}),
            vec![": Too long: may not be more than 1048576 bytes"],
        ),
    ]);
    check_update::<core::ConfigMap>(vec![
        (
            "mutable",
            json!({"data": {"a": "2"}}),
            json!({"data": {"a": "1"}}),
            vec![],
        ),
        (
            "immutable",
            json!({"data": {"a": "2"}}),
            json!({"immutable": true, "data": {"a": "1"}}),
            vec![
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set",
            ],
        ),
    ]);
    check_create::<core::Secret>(vec![
        ("opaque", json!({"data": {"k": "dg=="}}), vec![]),
        (
            "tls missing",
            json!({"type": "kubernetes.io/tls", "data": {}}),
            vec![
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value",
            ],
        ),
        (
            "tls ok via stringData",
            json!({"type": "kubernetes.io/tls", "stringData": {"tls.crt": "c", "tls.key": "k"}}),
            vec![],
        ),
        (
            "dockerconfigjson missing",
            json!({"type": "kubernetes.io/dockerconfigjson"}),
            vec!["data[.dockerconfigjson]: Required value"],
        ),
        (
            "dockerconfigjson bad json",
            json!({"type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": "{nope"}}),
            vec!["data[.dockerconfigjson]: Invalid value"],
        ),
        (
            "service account token",
            json!({"type": "kubernetes.io/service-account-token"}),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
        ),
        (
            "bad key",
            json!({"stringData": {"a b": "x"}}),
            vec!["data[a b]: Invalid value"],
        ),
    ]);
    check_update::<core::Secret>(vec![(
        "type immutable",
        json!({"type": "kubernetes.io/basic-auth", "stringData": {"username": "u"}}),
        json!({"type": "Opaque"}),
        vec!["type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable"],
    )]);
}

#[test]
fn cluster_scoped_core() {
    check_create::<core::Namespace>(vec![
        (
            "valid",
            json!({"metadata": {"name": "n"}, "spec": {"finalizers": ["kubernetes"]}}),
            vec![],
        ),
        (
            "bad finalizer",
            json!({"metadata": {"name": "n"}, "spec": {"finalizers": ["bad"]}}),
            vec!["spec.finalizers[0]: Invalid value"],
        ),
    ]);
    check_create::<core::Node>(vec![
        (
            "valid",
            json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            vec![],
        ),
        (
            "taints",
            json!({"spec": {"podCIDR": "10.0.0.0", "taints": [{"key": "k", "effect": "Sometimes"}, {"key": "", "effect": "NoSchedule"},
                {"key": "k", "effect": "NoExecute"}, {"key": "k", "effect": "NoExecute"}]}}),
            vec![
                "spec.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "spec.taints[1].key: Required value",
                "spec.taints[3]: Duplicate value",
                "spec.podCIDR: Invalid value",
            ],
        ),
    ]);
    check_create::<core::PersistentVolume>(vec![
        (
            "valid",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}}),
            vec![],
        ),
        (
            "missing everything",
            json!({"spec": {}}),
            vec![
                "spec.accessModes: Required value",
                "spec.capacity: Required value",
                "spec: Required value: must specify a volume type",
            ],
        ),
    ]);
    check_update::<core::PersistentVolume>(vec![(
        "source immutable",
        json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/e"}}}),
        json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}}),
        vec![
            "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation",
        ],
    )]);
}

#[test]
fn claims_limits_quotas_events() {
    let pvc = |storage: &str| json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}});
    check_create::<core::PersistentVolumeClaim>(vec![
        ("valid", pvc("1Gi"), vec![]),
        (
            "zero",
            pvc("0"),
            vec!["spec.resources[storage]: Invalid value: \"0\": must be greater than zero"],
        ),
        (
            "no modes",
            json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
            vec!["spec.accessModes: Required value: at least 1 access mode is required"],
        ),
    ]);
    let bound = |storage: &str| with(pvc(storage), &["status"], json!({"phase": "Bound"}));
    check_update::<core::PersistentVolumeClaim>(vec![
        ("expand bound", pvc("2Gi"), bound("1Gi"), vec![]),
        (
            "expand unbound",
            pvc("2Gi"),
            pvc("1Gi"),
            vec!["spec: Forbidden"],
        ),
        (
            "shrink",
            pvc("1Gi"),
            bound("2Gi"),
            vec!["spec.resources.requests.storage: Forbidden"],
        ),
    ]);
    check_create::<core::LimitRange>(vec![
        (
            "valid",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "1"}}]}}),
            vec![],
        ),
        (
            "min over max",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "2"}, "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1"}}]}}),
            vec![
                "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
                "spec.limits[0].defaultRequest[cpu]: Invalid value: \"1\": min value 2 is greater than default request value 1",
            ],
        ),
        (
            "pod default",
            json!({"spec": {"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}}),
            vec!["spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"],
        ),
    ]);
    check_create::<core::ResourceQuota>(vec![
        (
            "valid",
            json!({"spec": {"hard": {"pods": "10", "requests.cpu": "4"}, "scopes": ["BestEffort"]}}),
            vec![],
        ),
        (
            "bad",
            json!({"spec": {"hard": {"pods": "ten"}, "scopes": ["Sometimes"]}}),
            vec![
                "spec.hard[pods]: Invalid value",
                "spec.scopes[0]: Unsupported value",
            ],
        ),
    ]);
    check_create::<core::Event>(vec![
        (
            "valid",
            json!({"involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p"}}),
            vec![],
        ),
        (
            "namespace mismatch",
            json!({"involvedObject": {"kind": "Pod", "namespace": "other", "name": "p"}}),
            vec![
                "involvedObject.namespace: Invalid value: \"other\": does not match event.namespace",
            ],
        ),
    ]);
    check_create::<core::ReplicationController>(vec![
        (
            "valid",
            json!({"spec": {"template": template(json!({"a": "b"}))}}),
            vec![],
        ),
        (
            "mismatch",
            json!({"spec": {"selector": {"a": "c"}, "template": template(json!({"a": "b"}))}}),
            vec![
                "spec.template.metadata.labels: Invalid value: {\"a\":\"b\"}: `selector` does not match template `labels`",
            ],
        ),
    ]);
    check_create::<core::PodTemplate>(vec![(
        "valid",
        json!({"template": {"spec": pod_spec()}}),
        vec![],
    )]);
    check_create::<core::Endpoints>(vec![
        (
            "valid",
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
            vec![],
        ),
        (
            "bad ip",
            json!({"subsets": [{"addresses": [{"ip": "x"}]}]}),
            vec!["subsets[0].addresses[0].ip: Invalid value"],
        ),
    ]);
}

#[test]
fn other_groups() {
    check_create::<coordination::Lease>(vec![
        (
            "valid",
            json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
            vec![],
        ),
        (
            "zero",
            json!({"spec": {"leaseDurationSeconds": 0}}),
            vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"],
        ),
    ]);
    check_create::<discovery::EndpointSlice>(vec![
        (
            "valid",
            json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]}),
            vec![],
        ),
        (
            "bad",
            json!({"addressType": "IPv5", "endpoints": [{"addresses": []}]}),
            vec![
                "addressType: Unsupported value",
                "endpoints[0].addresses: Required value: must contain at least 1 address",
            ],
        ),
        (
            "wrong family",
            json!({"addressType": "IPv4", "endpoints": [{"addresses": ["fd00::1"]}]}),
            vec![
                "endpoints[0].addresses[0]: Invalid value: \"fd00::1\": must be a valid IPv4 address",
            ],
        ),
    ]);
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"addresses": ["10.0.0.1"]}))
        .collect();
    check_create::<discovery::EndpointSlice>(vec![(
        "too many",
        json!({"addressType": "IPv4", "endpoints": many}),
        vec!["endpoints: Too many: 1001: must have at most 1000 items"],
    )]);
    check_update::<discovery::EndpointSlice>(vec![(
        "address type immutable",
        json!({"addressType": "IPv6", "endpoints": []}),
        json!({"addressType": "IPv4", "endpoints": []}),
        vec!["addressType: Invalid value: \"IPv6\": field is immutable"],
    )]);
    check_create::<policy::PodDisruptionBudget>(vec![
        (
            "valid",
            json!({"spec": {"minAvailable": "50%", "selector": {"matchLabels": {"a": "b"}}}}),
            vec![],
        ),
        (
            "both",
            json!({"spec": {"minAvailable": 1, "maxUnavailable": 1}}),
            vec!["spec: Invalid value"],
        ),
    ]);
    check_create::<rbac::Role>(vec![
        (
            "valid",
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            vec![],
        ),
        (
            "no verbs, no groups",
            json!({"rules": [{"resources": ["pods"], "verbs": []}, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
            vec![
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].nonResourceURLs: Invalid value: [\"/healthz\"]: namespaced rules cannot apply to non-resource URLs",
            ],
        ),
    ]);
    check_create::<rbac::ClusterRole>(vec![(
        "non resource ok",
        json!({"rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
        vec![],
    )]);
    let rb = |kind: &str, subjects: Value| json!({"roleRef": {"apiGroup": "", "kind": kind, "name": "r"}, "subjects": subjects});
    check_create::<rbac::RoleBinding>(vec![
        (
            "valid",
            rb(
                "Role",
                json!([{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s"}]),
            ),
            vec![],
        ),
        (
            "bad",
            rb(
                "Thing",
                json!([{"kind": "Robot", "name": "r"}, {"kind": "ServiceAccount", "name": ""}]),
            ),
            vec![
                "roleRef.kind: Unsupported value",
                "subjects[0].kind: Unsupported value",
                "subjects[1].name: Required value",
            ],
        ),
    ]);
    check_create::<rbac::ClusterRoleBinding>(vec![
        (
            "sa needs namespace",
            rb(
                "ClusterRole",
                json!([{"kind": "ServiceAccount", "name": "s"}]),
            ),
            vec!["subjects[0].namespace: Required value"],
        ),
        (
            "role kind",
            rb("Role", json!([])),
            vec!["roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""],
        ),
    ]);
    check_update::<rbac::RoleBinding>(vec![(
        "roleRef immutable",
        json!({"roleRef": {"apiGroup": "", "kind": "Role", "name": "r2"}}),
        json!({"roleRef": {"apiGroup": "", "kind": "Role", "name": "r"}}),
        vec!["roleRef: Invalid value"],
    )]);
    check_create::<scheduling::PriorityClass>(vec![
        (
            "valid",
            json!({"metadata": {"name": "high"}, "value": 1000}),
            vec![],
        ),
        (
            "too high",
            json!({"metadata": {"name": "high"}, "value": 1_000_000_001}),
            vec![
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
            ],
        ),
        (
            "reserved",
            json!({"metadata": {"name": "system-mine"}, "value": 1}),
            vec!["metadata.name: Forbidden"],
        ),
        (
            "known system",
            json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000}),
            vec![],
        ),
    ]);
    check_update::<scheduling::PriorityClass>(vec![(
        "value immutable",
        json!({"metadata": {"name": "a"}, "value": 2}),
        json!({"metadata": {"name": "a"}, "value": 1}),
        vec!["value: Forbidden: may not be changed in an update."],
    )]);
    check_create::<storage::StorageClass>(vec![
        (
            "valid",
            json!({"provisioner": "kubernetes.io/no-provisioner"}),
            vec![],
        ),
        (
            "missing",
            json!({"provisioner": ""}),
            vec!["provisioner: Required value"],
        ),
    ]);
    check_update::<storage::StorageClass>(vec![(
        "parameters",
        json!({"provisioner": "p", "parameters": {"a": "2"}}),
        json!({"provisioner": "p", "parameters": {"a": "1"}}),
        vec!["parameters: Forbidden: updates to parameters are forbidden."],
    )]);
    check_create::<networking::NetworkPolicy>(vec![
        (
            "valid",
            json!({"spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 80}]}]}}),
            vec![],
        ),
        (
            "bad",
            json!({"spec": {"podSelector": {}, "ingress": [{"from": [{}], "ports": [{"port": 80, "endPort": 70}]}]}}),
            vec![
                "spec.ingress[0].ports[0].endPort: Invalid value: 70: must be greater than or equal to `port`",
                "spec.ingress[0].from[0]: Required value: must specify a peer",
            ],
        ),
    ]);
    let backend = json!({"service": {"name": "s", "port": {"number": 80}}});
    check_create::<networking::Ingress>(vec![
        (
            "valid",
            json!({"spec": {"rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]}}),
            vec![],
        ),
        ("empty", json!({"spec": {}}), vec!["spec: Invalid value"]),
        (
            "paths",
            json!({"spec": {"rules": [{"http": {"paths": [{"path": "x", "pathType": "Exact", "backend": backend},
                {"path": "/", "pathType": "Prefix", "backend": {}}]}}]}}),
            vec![
                "spec.rules[0].http.paths[0].path: Invalid value: \"x\": must be an absolute path",
                "spec.rules[0].http.paths[1].backend: Invalid value: \"\": resource or service backend is required",
            ],
        ),
    ]);
    check_create::<networking::IngressClass>(vec![
        (
            "valid",
            json!({"spec": {"controller": "example.com/ingress"}}),
            vec![],
        ),
        (
            "bad",
            json!({"spec": {"controller": "nginx"}}),
            vec!["spec.controller: Invalid value"],
        ),
    ]);
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"});
    check_create::<autoscaling::HorizontalPodAutoscaler>(vec![
        (
            "valid",
            json!({"spec": {"maxReplicas": 3, "scaleTargetRef": target}}),
            vec![],
        ),
        (
            "min over max",
            json!({"spec": {"minReplicas": 5, "maxReplicas": 3, "scaleTargetRef": target}}),
            vec![
                "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`",
            ],
        ),
        (
            "metric source",
            json!({"spec": {"maxReplicas": 3, "scaleTargetRef": target, "metrics": [{"type": "Pods"}]}}),
            vec![
                "spec.metrics[0].pods: Required value: must populate information for the given metric source",
            ],
        ),
    ]);
    // `openssl req -new -subj "/O=system:masters/O=dev/CN=alice"` (P-256), base64 of the
    // PEM; TAMPERED is the same request with the CN changed to "alicf" after signing.
    const REQUEST: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIeU1JR1pBZ0VBTURjeEZ6QVZCZ05WQkFvTURuTjVjM1JsYlRwdFlYTjBaWEp6TVF3d0NnWURWUVFLREFOawpaWFl4RGpBTUJnTlZCQU1NQldGc2FXTmxNRmt3RXdZSEtvWkl6ajBDQVFZSUtvWkl6ajBEQVFjRFFnQUVmdjBWCndUVGpwTGpOeUpYL0VVUlVJSlhyOHJabWYvb3NNWlJDNXB0MGUzMFc1d2JMdzNzT1M0ZWRXNFlVUWtzdEk1aGoKN2dKcHo1elUrQ2FIRkpJbzNhQUFNQW9HQ0NxR1NNNDlCQU1DQTBnQU1FVUNJRHRDY09DdloxWWthUUdQRFhpNwoyRzQ4RS9JdXlsclJ5VGNlRmpiS042MFJBaUVBMXRXdjNSZ0ZSYWcwKzlPa0tmV3F2cXRoeURYUGE0ZWxuTDZzCm9RMFVOejQ9Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";
    const TAMPERED: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIeU1JR1pBZ0VBTURjeEZ6QVZCZ05WQkFvTURuTjVjM1JsYlRwdFlYTjBaWEp6TVF3d0NnWURWUVFLREFOawpaWFl4RGpBTUJnTlZCQU1NQldGc2FXTm1NRmt3RXdZSEtvWkl6ajBDQVFZSUtvWkl6ajBEQVFjRFFnQUVmdjBWCndUVGpwTGpOeUpYL0VVUlVJSlhyOHJabWYvb3NNWlJDNXB0MGUzMFc1d2JMdzNzT1M0ZWRXNFlVUWtzdEk1aGoKN2dKcHo1elUrQ2FIRkpJbzNhQUFNQW9HQ0NxR1NNNDlCQU1DQTBnQU1FVUNJRHRDY09DdloxWWthUUdQRFhpNwoyRzQ4RS9JdXlsclJ5VGNlRmpiS042MFJBaUVBMXRXdjNSZ0ZSYWcwKzlPa0tmV3F2cXRoeURYUGE0ZWxuTDZzCm9RMFVOejQ9Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";
    // An empty PEM CERTIFICATE REQUEST block.
    const EMPTY_BLOCK: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==";
    let csr = json!({"spec": {"request": REQUEST,
        "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}});
    let with_request = |request: &str| {
        let mut c = csr.clone();
        c["spec"]["request"] = json!(request);
        c
    };
    check_create::<certificates::CertificateSigningRequest>(vec![
        ("valid", csr.clone(), vec![]),
        (
            "signature does not verify",
            with_request(TAMPERED),
            vec![
                "spec.request: Invalid value: []: x509: certificate request signature does not verify",
            ],
        ),
        (
            "empty block",
            with_request(EMPTY_BLOCK),
            vec!["spec.request: Invalid value"],
        ),
        (
            "bad",
            json!({"spec": {"request": "", "signerName": "nope", "usages": ["flying"], "expirationSeconds": 60}}),
            vec![
                "spec.request: Invalid value",
                "spec.signerName: Invalid value",
                "spec.usages[0]: Unsupported value",
                "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)",
            ],
        ),
    ]);
    check_create::<events::Event>(vec![
        (
            "valid",
            json!({"eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "example.com/c", "reportingInstance": "i",
                "action": "a", "reason": "r", "type": "Normal"}),
            vec![],
        ),
        (
            "missing",
            json!({}),
            vec![
                "eventTime: Required value",
                "reportingController: Required value",
                "reportingInstance: Required value",
                "action: Required value",
                "reason: Required value",
                "type: Invalid value: \"\": has invalid value: ",
            ],
        ),
    ]);
}

#[test]
fn runtime_class() {
    check_create::<node::RuntimeClass>(vec![
        (
            "valid",
            json!({"handler": "runc", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                "scheduling": {"nodeSelector": {"runtime": "runc"},
                    "tolerations": [{"key": "runtime", "operator": "Exists", "effect": "NoSchedule"}]}}),
            vec![],
        ),
        (
            "handler not a DNS label",
            json!({"handler": "Run_C"}),
            vec![
                "handler: Invalid value: \"Run_C\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            ],
        ),
        (
            "empty handler",
            json!({"handler": ""}),
            vec!["handler: Invalid value"],
        ),
        (
            "overhead checked as limits",
            json!({"handler": "runc", "overhead": {"podFixed": {"cpu": "-1", "gpu": "1", "memory": "x"}}}),
            vec![
                "overhead.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "overhead.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
                "overhead.limits[memory]: Invalid value",
            ],
        ),
        (
            "scheduling",
            json!({"handler": "runc", "scheduling": {"nodeSelector": {"bad key!": "v"},
                "tolerations": [{"operator": "Equal", "value": "v"}, {"key": "k", "operator": "Near"}]}}),
            vec![
                "scheduling.nodeSelector: Invalid value",
                "scheduling.tolerations[0].operator: Invalid value",
                "scheduling.tolerations[1].operator: Unsupported value",
            ],
        ),
    ]);
    check_update::<node::RuntimeClass>(vec![
        (
            "overhead may change",
            json!({"handler": "runc", "overhead": {"podFixed": {"cpu": "1"}}}),
            json!({"handler": "runc"}),
            vec![],
        ),
        (
            "handler is immutable",
            json!({"handler": "kata"}),
            json!({"handler": "runc"}),
            vec!["handler: Invalid value: \"kata\": field is immutable"],
        ),
    ]);
}

/// Random-ish garbage never panics: every kind survives its fields being nulled or
/// wrong-but-deserializable.
#[test]
fn no_panics_on_odd_input() {
    let pod: core::Pod = object(
        json!({"spec": {"containers": [{"name": "", "image": " ", "ports": [{"containerPort": -5, "hostPort": 99999}],
        "resources": {"limits": {"": "", "cpu": "1e999999"}, "requests": {"cpu": "."}},
        "livenessProbe": {"httpGet": {"port": "", "path": ""}}}],
        "volumes": [{"name": "", "projected": {"defaultMode": -1}}], "hostNetwork": true}}),
    );
    assert!(!pod.validate_create().is_empty());
    let svc: core::Service = object(
        json!({"spec": {"type": "", "ports": [{"port": -1, "targetPort": -1, "nodePort": -1}]}}),
    );
    assert!(!svc.validate_create().is_empty());
    let cj: batch::CronJob = object(
        json!({"spec": {"schedule": "*/99999999999999999999 - , / * *", "jobTemplate": {}}}),
    );
    assert!(!cj.validate_create().is_empty());
}

mod flowcontrol;
mod networking_ip;
mod storage_csi;
