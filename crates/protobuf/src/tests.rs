use prost::Message as _;
use serde_json::{Value, json};

use super::*;

/// JSON -> protobuf -> JSON is the identity (for JSON as the apiserver writes it:
/// no zero values of Go non-pointer fields).
fn round_trip(obj: Value) -> Vec<u8> {
    let bytes = encode_object(&obj).expect("encode");
    let (tm, back) = decode(&bytes).expect("decode");
    assert_eq!(tm.api_version, obj["apiVersion"].as_str().unwrap());
    assert_eq!(tm.kind, obj["kind"].as_str().unwrap());
    assert_eq!(back, obj, "round trip of {}", obj["kind"]);
    bytes
}

/// The message bytes inside the envelope.
fn raw(bytes: &[u8]) -> &[u8] {
    decode_envelope(bytes).unwrap().1
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "uid": "0b6ee6c2-7b8b-4f8a-9d4e-2f9c8f1a1a11",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-05-06T07:08:09Z",
            "deletionTimestamp": "2024-05-06T07:09:09Z",
            "deletionGracePeriodSeconds": 0,
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "ünïcode ✓"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                "uid": "1b6ee6c2-7b8b-4f8a-9d4e-2f9c8f1a1a11", "controller": true,
                "blockOwnerDeletion": false
            }],
            "finalizers": ["example.com/keep"],
            "managedFields": [{
                "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2024-05-06T07:08:09Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
            }]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "nginx:1.27",
                "command": ["nginx", "-g", "daemon off;"],
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"},
                          {"containerPort": 53, "hostPort": 5353, "protocol": "UDP"}],
                "env": [
                    {"name": "A", "value": "b"},
                    {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}
                ],
                "envFrom": [{"secretRef": {"name": "s"}}],
                "resources": {
                    "limits": {"cpu": "500m", "memory": "128Mi"},
                    "requests": {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"}
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP",
                                "httpHeaders": [{"name": "X-A", "value": "1"}]},
                    "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3
                },
                "readinessProbe": {"tcpSocket": {"port": "http"}, "timeoutSeconds": 2},
                "startupProbe": {"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 0},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
                "securityContext": {"runAsUser": 0, "runAsNonRoot": false, "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "volumes": [
                {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420,
                    "items": [{"key": "a", "path": "a.txt", "mode": 0}]}},
                {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0}},
                {"name": "proj", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "serviceAccountName": "default",
            "automountServiceAccountToken": false,
            "nodeName": "node-1",
            "securityContext": {"fsGroup": 2000, "supplementalGroups": [1, 2, 3], "sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": true,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}}],
            "overhead": {"cpu": "10m"}
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-06T07:08:19Z"}],
            "hostIP": "10.0.0.1",
            "podIP": "10.244.0.5",
            "podIPs": [{"ip": "10.244.0.5"}],
            "startTime": "2024-05-06T07:08:10Z",
            "qosClass": "Burstable",
            "containerStatuses": [{
                "name": "web", "ready": true, "restartCount": 2, "image": "nginx:1.27", "imageID": "sha256:abc",
                "containerID": "containerd://123", "started": true,
                "state": {"running": {"startedAt": "2024-05-06T07:08:12Z"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "startedAt": "2024-05-06T07:00:00Z", "finishedAt": "2024-05-06T07:08:11Z"}}
            }]
        }
    })
}

#[test]
fn pod_round_trips() {
    let bytes = round_trip(pod());
    // An independent decoder (prost, k8s-pb's generated messages) reads our bytes.
    let p = k8s_pb::api::core::v1::Pod::decode(raw(&bytes)).expect("prost decodes the Pod");
    let meta = p.metadata.as_ref().unwrap();
    assert_eq!(meta.name.as_deref(), Some("web-0"));
    assert_eq!(meta.labels["tier"], "front");
    assert_eq!(meta.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        meta.creation_timestamp.as_ref().unwrap().seconds,
        Some(1_714_979_289)
    );
    let spec = p.spec.as_ref().unwrap();
    let c = &spec.containers[0];
    assert_eq!(c.ports[1].host_port, Some(5353));
    assert_eq!(
        c.resources.as_ref().unwrap().limits["cpu"]
            .string
            .as_deref(),
        Some("500m")
    );
    let port = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap()
        .port
        .as_ref()
        .unwrap();
    assert_eq!((port.r#type, port.int_val), (Some(0), Some(8080)));
    let port = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap()
        .tcp_socket
        .as_ref()
        .unwrap()
        .port
        .as_ref()
        .unwrap();
    assert_eq!(
        (port.r#type, port.str_val.as_deref()),
        (Some(1), Some("http"))
    );
    assert_eq!(c.security_context.as_ref().unwrap().run_as_user, Some(0));
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(
        spec.security_context.as_ref().unwrap().supplemental_groups,
        vec![1, 2, 3]
    );
    // The inline `localObjectReference` of a ConfigMapKeySelector is its `name`.
    let cm = c.env[1]
        .value_from
        .as_ref()
        .unwrap()
        .config_map_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        cm.local_object_reference.as_ref().unwrap().name.as_deref(),
        Some("cm")
    );
    // And the inline `volumeSource` of a Volume.
    assert_eq!(
        spec.volumes[2]
            .volume_source
            .as_ref()
            .unwrap()
            .secret
            .as_ref()
            .unwrap()
            .default_mode,
        Some(0)
    );
    let fields = meta.managed_fields[0]
        .fields_v1
        .as_ref()
        .unwrap()
        .raw
        .as_ref()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(fields).unwrap(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    // And prost's encoding of what it decoded decodes to the same JSON with ours.
    let again = envelope("v1", "Pod", &p.encode_to_vec());
    assert_eq!(decode(&again).unwrap().1, pod());
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw.to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The review kinds and TokenRequest, as kubectl sends them (k8s-pb's prost encoding)
/// and as the apiserver answers them.
#[test]
fn reviews_and_token_requests_decode_and_encode() {
    use k8s_pb::api::authentication::v1 as authn;
    use k8s_pb::api::authorization::v1 as authz;
    let sar = authz::SubjectAccessReview {
        spec: Some(authz::SubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                verb: Some("list".into()),
                resource: Some("pods".into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            user: Some("alice".into()),
            groups: vec!["dev".into(), "ops".into()],
            extra: [(
                "scopes".to_string(),
                authz::ExtraValue {
                    items: vec!["a".into(), "b".into()],
                },
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (_, v) = decode(&envelope(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        &sar.encode_to_vec(),
    ))
    .unwrap();
    assert_eq!(
        v["spec"],
        json!({"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"},
               "user": "alice", "groups": ["dev", "ops"], "extra": {"scopes": ["a", "b"]}})
    );
    let tr = authn::TokenRequest {
        spec: Some(authn::TokenRequestSpec {
            audiences: vec!["a".into()],
            expiration_seconds: Some(600),
            bound_object_ref: Some(authn::BoundObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                name: Some("p".into()),
                u_id: Some("u-1".into()),
            }),
        }),
        ..Default::default()
    };
    let (_, v) = decode(&envelope(
        "authentication.k8s.io/v1",
        "TokenRequest",
        &tr.encode_to_vec(),
    ))
    .unwrap();
    assert_eq!(
        v["spec"],
        json!({"audiences": ["a"], "expirationSeconds": 600,
               "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u-1"}})
    );

    // The answers, as the apiserver writes them, read back by prost.
    let answer = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}},
        "status": {"allowed": true, "reason": "RBAC: allowed"}});
    let bytes = encode_object(&answer).unwrap();
    let ssar = authz::SelfSubjectAccessReview::decode(raw(&bytes)).unwrap();
    let status = ssar.status.unwrap();
    assert_eq!(
        (status.allowed, status.reason.as_deref()),
        (Some(true), Some("RBAC: allowed"))
    );
    let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {"name": "robot", "namespace": "default", "creationTimestamp": "2026-12-07T08:00:00Z"},
        "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600},
        "status": {"token": "eyJ", "expirationTimestamp": "2026-12-07T09:00:00Z"}});
    let bytes = encode_object(&answer).unwrap();
    let token = authn::TokenRequest::decode(raw(&bytes)).unwrap();
    let status = token.status.unwrap();
    assert_eq!(status.token.as_deref(), Some("eyJ"));
    assert_eq!(
        status.expiration_timestamp.and_then(|t| t.seconds),
        Some(1_796_634_000)
    );
    assert_eq!(decode(&bytes).unwrap().1["status"], answer["status"]);
}

#[test]
fn workloads_and_config_round_trip() {
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["y"]}]},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]}
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "paused": true
        },
        "status": {
            "observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
            "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2024-01-01T00:00:00Z",
                            "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "MinimumReplicasAvailable", "message": "ok"}]
        }
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080, "protocol": "TCP"},
                      {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}],
            "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
            "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ports": [{"port": 80, "protocol": "TCP"}]}]}}
    }));
    let secret = round_trip(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "type": "Opaque",
        "data": {"a": "Yg==", "bin": "AAH/", "empty": ""},
        "immutable": false
    }));
    let s = k8s_pb::api::core::v1::Secret::decode(raw(&secret)).unwrap();
    assert_eq!(s.data["bin"], vec![0, 1, 255]);
    assert_eq!(s.data["a"], b"b");
    round_trip(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
        "data": {"a": "b", "multi": "line1\nline2\n"},
        "binaryData": {"blob": "3q2+7w=="}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "x", "labels": {"kubernetes.io/metadata.name": "x"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"],
                 "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2024-01-01T00:00:00Z"}]},
        "status": {
            "capacity": {"cpu": "2", "memory": "4023128Ki", "pods": "110"},
            "allocatable": {"cpu": "1900m", "memory": "3920728Ki", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                            "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "KubeletReady", "message": "ready"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1",
                         "osImage": "Debian", "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.33.0",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["nginx:1.27"], "sizeBytes": 67000000}]
        }
    }));
}

#[test]
fn runtime_class_round_trips() {
    let bytes = round_trip(json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "kata"},
        "handler": "kata",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
        "scheduling": {
            "nodeSelector": {"runtime": "kata"},
            "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}]
        }
    }));
    let rc = k8s_pb::api::node::v1::RuntimeClass::decode(raw(&bytes)).unwrap();
    assert_eq!(rc.handler.as_deref(), Some("kata"));
    let list = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClassList",
        "metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "runc"}, "handler": "runc"}]});
    round_trip(list);
}

#[test]
fn meta_kinds_round_trip() {
    // Events: MicroTime.
    round_trip(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e", "namespace": "default"},
        "eventTime": "2024-05-06T07:08:09.123456Z",
        "reportingController": "kubelet", "reportingInstance": "node-1",
        "action": "Pulled", "reason": "Pulled", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "web-0", "namespace": "default"},
        "series": {"count": 2, "lastObservedTime": "2024-05-06T07:08:10.000001Z"}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Status",
        "metadata": {"resourceVersion": "7"},
        "status": "Failure", "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods", "causes": [{"reason": "FieldValueInvalid", "field": "spec"}]},
        "code": 404
    }));
    // DeleteOptions of any group-version is meta/v1's.
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "DeleteOptions",
        "gracePeriodSeconds": 0, "propagationPolicy": "Foreground", "dryRun": ["All"],
        "preconditions": {"uid": "u", "resourceVersion": "1"}
    }));
    round_trip(json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 5},
        "status": {"replicas": 3, "selector": "app=web"}
    }));
    round_trip(json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "web-0", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 5}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "web-0", "namespace": "default"},
        "target": {"kind": "Node", "name": "node-1"}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "10", "continue": "abc", "remainingItemCount": 0},
        "items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
                  {"metadata": {"name": "b"}}]
    }));
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "r", "namespace": "default"},
        "data": {"spec": {"template": {"$patch": "replace"}}},
        "revision": 2
    }));
    round_trip(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "csr"},
        "spec": {"request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"], "extra": {"scopes": ["a", "b"]}, "expirationSeconds": 600}
    }));
    round_trip(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h", "namespace": "default"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                 "minReplicas": 1, "maxReplicas": 5,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    }));
}

#[test]
fn lists_encode_item_by_item_as_the_whole_list_would() {
    let items = [
        pod(),
        json!({"metadata": {"name": "b", "namespace": "default"}}),
    ];
    let meta = json!({"resourceVersion": "10", "continue": "abc", "remainingItemCount": 3});
    let bytes = encode_list("v1", "PodList", &meta, &items).unwrap();
    let whole = json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": items});
    assert_eq!(bytes, encode_object(&whole).unwrap());
    let (tm, back) = decode(&bytes).unwrap();
    assert_eq!(
        (tm.api_version.as_str(), tm.kind.as_str()),
        ("v1", "PodList")
    );
    // Items carry no type of their own on the wire (the list's says it).
    let mut untyped = whole.clone();
    for item in untyped["items"].as_array_mut().unwrap() {
        let item = item.as_object_mut().unwrap();
        item.remove("apiVersion");
        item.remove("kind");
    }
    assert_eq!(back, untyped);
    // prost reads it as upstream's PodList.
    let list = k8s_pb::api::core::v1::PodList::decode(raw(&bytes)).unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.metadata.unwrap().remaining_item_count, Some(3));
    // An empty list, and kinds that are not lists.
    let empty = encode_list("apps/v1", "DeploymentList", &json!({}), [] as [Value; 0]).unwrap();
    assert_eq!(decode(&empty).unwrap().1["kind"], "DeploymentList");
    assert!(matches!(
        encode_list("v1", "Pod", &json!({}), [] as [Value; 0]),
        Err(ProtobufError::UnknownKind { .. })
    ));
    assert!(matches!(
        encode_list("example.com/v1", "WidgetList", &json!({}), [] as [Value; 0]),
        Err(ProtobufError::UnknownKind { .. })
    ));
}

#[test]
fn lists_transcoded_from_json_bytes_decode_as_the_encoded_ones() {
    let mut with_extras = pod();
    // Unknown members are skipped, nulls left out.
    with_extras["spec"]["futureField"] = json!({"x": [1, 2]});
    with_extras["metadata"]["deletionTimestamp"] = Value::Null;
    let items = [
        pod(),
        with_extras,
        json!({"metadata": {"name": "d"}, "spec": {"containers": [{
            "name": "c", "image": "i",
            "ports": [{"containerPort": 80}],
            "readinessProbe": {"httpGet": {"port": "http"}, "periodSeconds": 10.0},
            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
            "resources": {"limits": {"cpu": 2, "memory": "1Gi"}}}]}}),
        json!({}),
    ];
    let meta = json!({"resourceVersion": "9", "continue": "t", "remainingItemCount": 2});
    let bytes: Vec<Vec<u8>> = items
        .iter()
        .map(|i| serde_json::to_vec(i).unwrap())
        .collect();
    // The transcoder takes each of them itself (no fallback to the codec).
    let pod_message = message_for("v1", "Pod").unwrap();
    for json in &bytes {
        crate::transcode::transcode(pod_message, json, &mut Vec::new()).unwrap();
    }
    let transcoded =
        encode_list_json("v1", "PodList", &meta, bytes.iter().map(Vec::as_slice)).unwrap();
    let encoded = encode_list("v1", "PodList", &meta, &items).unwrap();
    assert_eq!(decode(&transcoded).unwrap(), decode(&encoded).unwrap());
    // prost reads it too, fields out of tag order and all.
    let list = k8s_pb::api::core::v1::PodList::decode(raw(&transcoded)).unwrap();
    assert_eq!(list.items.len(), 4);

    // Every special form, in other kinds.
    for (api_version, list_kind, item) in [
        (
            "apps/v1",
            "DeploymentList",
            json!({"metadata": {"name": "w", "creationTimestamp": "2024-05-06T07:08:09Z"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                     "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}),
        ),
        (
            "v1",
            "ConfigMapList",
            json!({"metadata": {"name": "c"}, "data": {"a": "b"},
            "binaryData": {"bin": "AAH/"}, "immutable": false}),
        ),
        (
            "events.k8s.io/v1",
            "EventList",
            json!({"metadata": {"name": "e"},
            "eventTime": "2024-05-06T07:08:09.123456Z", "reason": "R",
            "series": {"count": 2, "lastObservedTime": "2024-05-06T07:08:10.000001Z"}}),
        ),
        (
            "apps/v1",
            "ControllerRevisionList",
            json!({"metadata": {"name": "r"},
            "data": {"spec": {"template": {"$patch": "replace"}}}, "revision": 3}),
        ),
    ] {
        let json = serde_json::to_vec(&item).unwrap();
        let item_kind = list_kind.trim_end_matches("List");
        let index = message_for(api_version, item_kind).unwrap();
        crate::transcode::transcode(index, &json, &mut Vec::new()).unwrap();
        let transcoded =
            encode_list_json(api_version, list_kind, &json!({}), [json.as_slice()]).unwrap();
        let encoded = encode_list(api_version, list_kind, &json!({}), [&item]).unwrap();
        assert_eq!(
            decode(&transcoded).unwrap(),
            decode(&encoded).unwrap(),
            "{list_kind}"
        );
    }

    // Escapes in keys and strings.
    let escaped = br#"{"metadata":{"name":"e\u0073c","labels":{"caf\u00e9":"a\"b"}}}"#;
    let transcoded = encode_list_json("v1", "PodList", &json!({}), [&escaped[..]]).unwrap();
    let item = &decode(&transcoded).unwrap().1["items"][0];
    assert_eq!(item["metadata"]["name"], "esc");
    assert_eq!(item["metadata"]["labels"]["caf\u{e9}"], "a\"b");

    // What the transcoder refuses (a wrong type) is encoded the codec's way, which
    // refuses it too; JSON that does not parse is an error, never a panic.
    let wrong = serde_json::to_vec(&json!({"spec": {"containers": "x"}})).unwrap();
    assert!(encode_list_json("v1", "PodList", &json!({}), [wrong.as_slice()]).is_err());
    assert!(encode_list_json("v1", "PodList", &json!({}), [&b"{\"spec\":"[..]]).is_err());
}

#[test]
fn watch_frames_round_trip() {
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "5"}, "data": {"a": "b"}});
    let mut stream = encode_watch_frame("ADDED", &obj).unwrap();
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Expired", "code": 410});
    stream.extend(encode_watch_frame("ERROR", &status).unwrap());
    let (t, o, n) = decode_watch_frame(&stream).unwrap().unwrap();
    assert_eq!((t.as_str(), &o), ("ADDED", &obj));
    // The frame is the length and a bare WatchEvent, as prost reads it.
    let len = u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
    assert_eq!(n, 4 + len);
    let ev = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&stream[4..n]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert!(ev.object.unwrap().raw.unwrap().starts_with(&MAGIC));
    let (t, o, m) = decode_watch_frame(&stream[n..]).unwrap().unwrap();
    assert_eq!((t.as_str(), &o), ("ERROR", &status));
    assert_eq!(n + m, stream.len());
    // A partial frame is not an error: more bytes are needed.
    assert_eq!(decode_watch_frame(&stream[..n - 1]).unwrap(), None);
    assert_eq!(decode_watch_frame(&stream[..3]).unwrap(), None);

    // From the object's JSON bytes: the same event, read the same way.
    let json = serde_json::to_vec(&obj).unwrap();
    let transcoded = encode_watch_frame_json("ADDED", "v1", "ConfigMap", &json).unwrap();
    let (t, o, m) = decode_watch_frame(&transcoded).unwrap().unwrap();
    assert_eq!((t.as_str(), &o, m), ("ADDED", &obj, transcoded.len()));
    // What the transcoder refuses goes through the codec, which refuses it too.
    let wrong = serde_json::to_vec(&json!({"data": "x"})).unwrap();
    assert!(encode_watch_frame_json("ADDED", "v1", "ConfigMap", &wrong).is_err());
    assert!(encode_watch_frame_json("ADDED", "v1", "ConfigMap", b"{").is_err());
}

/// A Namespace `{metadata: {name: "x"}}` byte by byte from the wire-format spec.
#[test]
fn golden_namespace_bytes() {
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
    #[rustfmt::skip]
    let want: &[u8] = &[
        b'k', b'8', b's', 0,
        // runtime.Unknown.typeMeta (1, LEN): {apiVersion (1) "v1", kind (2) "Namespace"}
        0x0a, 15, 0x0a, 2, b'v', b'1', 0x12, 9, b'N', b'a', b'm', b'e', b's', b'p', b'a', b'c', b'e',
        // raw (2, LEN): Namespace {metadata (1, LEN): ObjectMeta {name (1) "x"}}
        0x12, 5, 0x0a, 3, 0x0a, 1, b'x',
        // contentEncoding (3) "", contentType (4) ""
        0x1a, 0, 0x22, 0,
    ];
    assert_eq!(encode_object(&obj).unwrap(), want);
    assert_eq!(decode(want).unwrap().1, obj);
}

/// What a Go client sends: every non-pointer scalar on the wire, zero or not.
#[test]
fn go_zero_values_of_non_pointers_are_unset_and_pointer_zeros_are_kept() {
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    let container = core::Container {
        name: Some("nginx".into()),
        image: Some("nginx".into()),
        termination_message_path: Some(String::new()),
        image_pull_policy: Some(String::new()),
        stdin: Some(false),
        resources: Some(core::ResourceRequirements::default()),
        ..Default::default()
    };
    let d = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            generate_name: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            min_ready_seconds: Some(0),
            paused: Some(false),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta::default()),
                spec: Some(core::PodSpec {
                    containers: vec![container],
                    restart_policy: Some(String::new()),
                    automount_service_account_token: Some(false),
                    host_network: Some(false),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus::default()),
    };
    let (_, v) = decode(&envelope("apps/v1", "Deployment", &d.encode_to_vec())).unwrap();
    assert_eq!(
        v,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 0,
                "template": {
                    "metadata": {},
                    "spec": {
                        "containers": [{"name": "nginx", "image": "nginx", "resources": {}}],
                        "automountServiceAccountToken": false
                    }
                }
            },
            "status": {}
        })
    );
}

#[test]
fn unknown_fields_are_skipped() {
    let mut raw = Vec::new();
    // ObjectMeta with an unknown field 999 of each wire type around name.
    let mut meta = Vec::new();
    wire::put_key(&mut meta, 999, wire::VARINT);
    wire::put_varint(&mut meta, 7);
    wire::put_bytes(&mut meta, 1, b"x");
    wire::put_bytes(&mut meta, 998, b"junk");
    wire::put_key(&mut meta, 997, wire::I64);
    meta.extend([0; 8]);
    wire::put_key(&mut meta, 996, wire::I32);
    meta.extend([0; 4]);
    wire::put_bytes(&mut raw, 1, &meta);
    wire::put_bytes(&mut raw, 77, b"unknown");
    let (_, v) = decode(&envelope("v1", "Namespace", &raw)).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
    );
}

#[test]
fn bad_envelopes_are_errors() {
    assert_eq!(decode(b""), Err(ProtobufError::Empty));
    assert_eq!(decode(b"{\"kind\":1}"), Err(ProtobufError::MissingMagic));
    assert_eq!(decode(&MAGIC), Err(ProtobufError::Empty));
    assert!(matches!(
        decode(&envelope("v1", "NoSuchKind", b"")),
        Err(ProtobufError::UnknownKind { .. })
    ));
    assert!(matches!(
        decode(&envelope("example.com/v1", "Widget", b"")),
        Err(ProtobufError::UnknownKind { .. })
    ));
    assert_eq!(
        decode(&envelope("", "Pod", b"")),
        Err(ProtobufError::MissingKind)
    );
    // A string field holding invalid UTF-8.
    let mut raw = Vec::new();
    wire::put_nested::<ProtobufError>(&mut raw, 1, |m| {
        wire::put_bytes(m, 1, &[0xff, 0xfe]);
        Ok(())
    })
    .unwrap();
    assert!(matches!(
        decode(&envelope("v1", "Namespace", &raw)),
        Err(ProtobufError::Utf8 { .. })
    ));
    // A message field with a varint wire type.
    let mut raw = Vec::new();
    wire::put_key(&mut raw, 1, wire::VARINT);
    wire::put_varint(&mut raw, 1);
    assert!(matches!(
        decode(&envelope("v1", "Namespace", &raw)),
        Err(ProtobufError::WireType { .. })
    ));
    // Objects nested in objects (RawExtension holding an enveloped object) are bounded.
    let mut obj = envelope("apps/v1", "ControllerRevision", b"");
    for _ in 0..200 {
        let mut ext = Vec::new();
        wire::put_bytes(&mut ext, 1, &obj);
        let mut rev = Vec::new();
        wire::put_bytes(&mut rev, 2, &ext); // ControllerRevision.data
        obj = envelope("apps/v1", "ControllerRevision", &rev);
    }
    assert_eq!(decode(&obj), Err(ProtobufError::TooDeep));
}

#[test]
fn json_type_errors_are_reported_with_a_path() {
    let err = encode("v1", "Pod", &json!({"spec": {"containers": [{"name": 5}]}})).unwrap_err();
    assert_eq!(
        err,
        ProtobufError::Json {
            path: "Pod.spec.containers[0].name".into(),
            reason: "expected a string".into()
        }
    );
    assert!(encode("v1", "Secret", &json!({"data": {"a": "not base64!"}})).is_err());
    assert!(
        encode(
            "v1",
            "Pod",
            &json!({"metadata": {"creationTimestamp": "yesterday"}})
        )
        .is_err()
    );
    assert!(encode("apps/v1", "Deployment", &json!({"spec": {"replicas": 1.5}})).is_err());
    assert!(
        encode(
            "apps/v1",
            "Deployment",
            &json!({"spec": {"replicas": 4_294_967_296u64}})
        )
        .is_err()
    );
    assert!(encode("v1", "Pod", &json!([])).is_err());
}

/// Random and truncated input never panics (deterministic, bounded).
#[test]
fn malformed_input_never_panics() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let valid = encode_object(&pod()).unwrap();
    let mut decoded_ok = 0;
    for i in 0..3000 {
        let mut bytes = valid.clone();
        match i % 3 {
            0 => bytes.truncate((next() as usize) % valid.len()),
            1 => {
                for _ in 0..1 + next() % 8 {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] = next() as u8;
                }
            }
            _ => {
                let n = (next() % 200) as usize;
                bytes = MAGIC.to_vec();
                bytes.extend((0..n).map(|_| next() as u8));
            }
        }
        if decode(&bytes).is_ok() {
            decoded_ok += 1;
        }
        let _ = decode_watch_frame(&bytes);
    }
    // Some corruptions hit string contents and still decode; most do not.
    assert!(decoded_ok < 3000);
}

/// Every served kind, its List, and every subresource kind has a message, but
/// CustomResourceDefinitions and APIServices: their messages live in
/// apiextensions-apiserver and kube-aggregator, whose Go struct tags the generator
/// does not read yet, so their bodies are JSON or YAML only (what client-go's
/// apiextensions clientset and kubectl send).
#[test]
fn every_served_kind_has_a_schema() {
    const NOT_GENERATED: &[&str] = &["apiextensions.k8s.io", "apiregistration.k8s.io"];
    for r in ferrokube_api::resources::RESOURCES
        .iter()
        .filter(|r| !NOT_GENERATED.contains(&r.group))
    {
        let av = if r.group.is_empty() {
            r.version.to_owned()
        } else {
            format!("{}/{}", r.group, r.version)
        };
        assert!(message_for(&av, r.kind).is_some(), "{av} {}", r.kind);
        assert!(
            message_for(&av, &format!("{}List", r.kind)).is_some(),
            "{av} {}List",
            r.kind
        );
        for s in r.subresources {
            let sav = match (s.group, s.version) {
                (Some(g), Some(v)) => format!("{g}/{v}"),
                _ => av.clone(),
            };
            assert!(message_for(&sav, s.kind).is_some(), "{sav} {}", s.kind);
        }
        for meta in ["Status", "DeleteOptions", "WatchEvent"] {
            assert!(message_for(&av, meta).is_some(), "{av} {meta}");
        }
    }
    assert_eq!(message_for("v1", "Table"), None);
    assert_eq!(message_for("v1", "../Pod"), None);
}

/// Bodies the real kubectl 1.33 sent (captured from `kubectl create namespace x`,
/// `kubectl create deployment web -n x --image=nginx` and `kubectl create secret
/// generic s -n x --from-literal=a=b`): Go writes every non-pointer field, zero or not.
#[test]
fn kubectl_bodies_decode_to_the_json_go_would_write() {
    let (tm, ns) = decode(include_bytes!("../testdata/kubectl-1.33/namespace.pb")).unwrap();
    assert_eq!(
        tm,
        TypeMeta {
            api_version: "v1".into(),
            kind: "Namespace".into()
        }
    );
    assert_eq!(
        ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}, "spec": {}, "status": {}})
    );
    let (_, d) = decode(include_bytes!("../testdata/kubectl-1.33/deployment.pb")).unwrap();
    // Exactly `kubectl create deployment web -n x --image=nginx --dry-run=client -o json`
    // (less the `creationTimestamp: null` Go writes for a zero Time).
    assert_eq!(
        d,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "x", "labels": {"app": "web"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]}
                },
                "strategy": {}
            },
            "status": {}
        })
    );
    let (_, s) = decode(include_bytes!("../testdata/kubectl-1.33/secret.pb")).unwrap();
    assert_eq!(
        s,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}, "data": {"a": "Yg=="}})
    );
}

#[test]
fn go_omitempty_zeros_are_left_out_at_any_depth() {
    let mut deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "", "generation": 0},
        "spec": {
            // A pointer: its zero was set and stays.
            "replicas": 0,
            "minReadySeconds": 0,
            "paused": false,
            "template": {"spec": {"containers": [{
                "name": "c", "image": "", "stdin": false,
                "ports": [{"containerPort": 80, "hostPort": 0, "name": ""}],
                // Inline: LocalObjectReference's name inside ConfigMapKeySelector.
                "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "", "key": "k"}}}],
                "futureField": 0,
            }]}},
        },
        "status": {"replicas": 0, "readyReplicas": 2, "unavailableReplicas": 0,
                   "collisionCount": 0, "observedGeneration": 0},
    });
    assert!(to_go_json_form("apps/v1", "Deployment", &mut deployment));
    assert_eq!(
        deployment,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "creationTimestamp": null},
            "spec": {
                "replicas": 0,
                // Unset non-pointer structs: their zero values, as Go writes them.
                "strategy": {},
                "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": [{
                    "name": "c",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"key": "k"}}}],
                    "resources": {},
                    "futureField": 0,
                }]}},
            },
            "status": {"readyReplicas": 2, "collisionCount": 0},
        })
    );
    // `containerPort` and `name` of a container have no omitempty: zeros stay.
    let mut pod = json!({"spec": {"containers": [{"name": "", "ports": [{"containerPort": 0}],
        "resources": {}}]}, "metadata": {"creationTimestamp": null}, "status": {}});
    let before = pod.clone();
    assert!(to_go_json_form("v1", "Pod", &mut pod));
    assert_eq!(pod, before);
    // Unset non-pointer times are null, where their struct is there; set ones and
    // pointers are left as they are.
    let mut pod = json!({"metadata": {"name": "p", "creationTimestamp": "2026-12-07T08:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "2026-12-07T08:00:01Z"}],
                   "containerStatuses": [{"name": "c", "state": {"running": {}},
                                          "ready": true, "restartCount": 0,
                                          "image": "i", "imageID": ""}]}});
    assert!(to_go_json_form("v1", "Pod", &mut pod));
    assert_eq!(
        pod,
        json!({"metadata": {"name": "p", "creationTimestamp": "2026-12-07T08:00:00Z"},
            // A list k8s-openapi's type requires is there empty.
            "spec": {"containers": []},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                                       "lastTransitionTime": "2026-12-07T08:00:01Z"}],
                       "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": null}},
                                              "lastState": {}, "ready": true, "restartCount": 0,
                                              "image": "i", "imageID": ""}]}})
    );
    // A struct's zero value has its scalars without omitempty as zeros: a node's
    // kubelet endpoint port, its system info.
    let mut node = json!({"metadata": {"name": "n", "creationTimestamp": "2026-12-07T08:00:00Z"},
                          "status": {"phase": "Running"}});
    assert!(to_go_json_form("v1", "Node", &mut node));
    assert_eq!(node["spec"], json!({}));
    assert_eq!(
        node["status"]["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 0}})
    );
    assert_eq!(node["status"]["nodeInfo"]["machineID"], "");
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "");
    let mut event = json!({"metadata": {"name": "e"}, "series": {"count": 2}});
    assert!(to_go_json_form("v1", "Event", &mut event));
    assert_eq!(
        event,
        json!({"metadata": {"name": "e", "creationTimestamp": null},
            "series": {"count": 2, "lastObservedTime": null},
            "involvedObject": {}, "source": {},
            "firstTimestamp": null, "lastTimestamp": null, "eventTime": null})
    );
    // A kind without a message is left alone.
    let mut custom = json!({"spec": {"x": 0}});
    assert!(!to_go_json_form("example.com/v1", "Widget", &mut custom));
    assert_eq!(custom, json!({"spec": {"x": 0}}));
}
