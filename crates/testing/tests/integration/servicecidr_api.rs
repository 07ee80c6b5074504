//! `networking.k8s.io/v1` IPAddress and ServiceCIDR as built-in resources through
//! kube-rs: create/get/list/update/delete, upstream's validation (an IPAddress's name
//! is its address in canonical form; its parentRef is required and immutable; a
//! ServiceCIDR holds one or two CIDRs of different families, immutable but for the
//! single- to dual-stack upgrade), ServiceCIDR's status subresource, the Table columns
//! `kubectl get` prints, protobuf request bodies and discovery.
//!
//! The apiserver may make objects of its own (the default `kubernetes` ServiceCIDR,
//! IPAddresses of Services' cluster IPs), so lists are filtered to this test's names.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// The code and message of a refused request.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Asserts a 422 whose message contains every one of `parts`.
fn invalid<T: std::fmt::Debug>(r: Result<T, kube::Error>, parts: &[&str]) {
    let (code, msg) = refusal(r);
    assert_eq!(code, 422, "{msg}");
    for part in parts {
        assert!(msg.contains(part), "{part:?} not in {msg:?}");
    }
}

async fn table(client: &kube::Client, path: &str) -> Value {
    let req = http::Request::get(path)
        .header("Accept", TABLE)
        .body(Vec::new())
        .unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

fn column_names(t: &Value) -> Vec<&str> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

/// The row of the object named `name` in a Table.
fn row<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == name)
        .unwrap_or_else(|| panic!("no row for {name} in {t}"))
}

/// POSTs `obj` to `path` as a protobuf body (what kubectl sends); the answer, in
/// protobuf as kubectl asks first.
async fn protobuf_create<T: k8s_openapi::serde::de::DeserializeOwned>(
    client: &kube::Client,
    path: &str,
    obj: Value,
) -> T {
    let pb = ferrokube_protobuf::MEDIA_TYPE;
    let (code, content_type, body) = TestApiServer::send_decoded(
        client,
        "POST",
        path,
        &[("content-type", pb), ("accept", &format!("{pb}, */*"))],
        ferrokube_protobuf::encode_object(&obj).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!((code, content_type.as_str()), (201, pb), "{body}");
    serde_json::from_value(body).unwrap()
}

fn names<K: kube::Resource>(items: &[K], ours: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = items
        .iter()
        .filter_map(|i| i.meta().name.clone())
        .filter(|n| ours.contains(&n.as_str()))
        .collect();
    names.sort();
    names
}

fn ip_address(name: &str, parent_ref: Value) -> IPAddress {
    from(json!({"metadata": {"name": name}, "spec": {"parentRef": parent_ref}}))
}

#[tokio::test]
async fn ip_addresses_are_served_validated_and_printed() {
    let srv = TestApiServer::start().await.unwrap();
    let ips: Api<IPAddress> = Api::all(srv.client.clone());
    let web = json!({"group": "", "resource": "services", "namespace": "default", "name": "web"});

    let created = ips
        .create(
            &PostParams::default(),
            &ip_address("192.0.2.10", web.clone()),
        )
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.namespace, None);
    let parent = &created.spec.as_ref().unwrap().parent_ref;
    assert_eq!(
        (parent.resource.as_str(), parent.name.as_str()),
        ("services", "web")
    );
    ips.create(
        &PostParams::default(),
        &ip_address(
            "2001:db8::a",
            json!({"group": "gateway.networking.k8s.io", "resource": "Gateways", "name": "gw"}),
        ),
    )
    .await
    .unwrap();

    let got = ips.get("192.0.2.10").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let ours = ["192.0.2.10", "2001:db8::a"];
    let listed = ips.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&listed.items, &ours), ["192.0.2.10", "2001:db8::a"]);

    // An update that keeps the parentRef.
    let mut labelled = got.clone();
    labelled.metadata.labels = Some([("owner".to_owned(), "test".to_owned())].into());
    let updated = ips
        .replace("192.0.2.10", &PostParams::default(), &labelled)
        .await
        .unwrap();
    assert_eq!(updated.metadata.labels.unwrap()["owner"], "test");

    // The parentRef is immutable.
    invalid(
        ips.patch(
            "192.0.2.10",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parentRef": {"name": "other"}}})),
        )
        .await,
        &["spec.parentRef: Invalid value: ", ": field is immutable"],
    );

    // The name is the address in canonical form.
    let (code, msg) = refusal(
        ips.create(
            &PostParams::default(),
            &ip_address("10.96.0.010", web.clone()),
        )
        .await,
    );
    assert_eq!(code, 422);
    assert_eq!(
        msg,
        "IPAddress.networking.k8s.io \"10.96.0.010\" is invalid: metadata.name: Invalid value: \"10.96.0.010\": must not have leading 0s"
    );
    invalid(
        ips.create(
            &PostParams::default(),
            &ip_address("2001:db8::0", web.clone()),
        )
        .await,
        &[
            "metadata.name: Invalid value: \"2001:db8::0\": must be in canonical form (\"2001:db8::\")",
        ],
    );
    invalid(
        ips.create(
            &PostParams::default(),
            &ip_address("2001:DB8::1", web.clone()),
        )
        .await,
        &[
            "metadata.name: Invalid value: \"2001:DB8::1\": must be in canonical form (\"2001:db8::1\")",
        ],
    );
    invalid(
        ips.create(
            &PostParams::default(),
            &ip_address("::ffff:192.0.2.1", web.clone()),
        )
        .await,
        &[
            "metadata.name: Invalid value: \"::ffff:192.0.2.1\": must not be an IPv4-mapped IPv6 address",
        ],
    );
    invalid(
        ips.create(&PostParams::default(), &ip_address("web", web.clone()))
            .await,
        &[
            "metadata.name: Invalid value: \"web\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ],
    );
    // A parentRef is required, with a resource and a name.
    invalid(
        ips.create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "192.0.2.11"}, "spec": {}})),
        )
        .await,
        &["spec.parentRef: Required value"],
    );
    invalid(
        ips.create(
            &PostParams::default(),
            &ip_address("192.0.2.11", json!({"resource": "services"})),
        )
        .await,
        &["spec.parentRef.name: Required value"],
    );
    invalid(
        ips.create(
            &PostParams::default(),
            &ip_address("192.0.2.11", json!({"name": "web", "namespace": "a/b"})),
        )
        .await,
        &[
            "spec.parentRef.resource: Required value",
            "spec.parentRef.namespace: Invalid value: \"a/b\": may not contain '/'",
        ],
    );

    // `kubectl get ipaddresses`: Name and ParentRef (upstream's row has the age too).
    let t = table(&srv.client, "/apis/networking.k8s.io/v1/ipaddresses").await;
    assert_eq!(column_names(&t), ["Name", "ParentRef"]);
    let cells = row(&t, "192.0.2.10")["cells"].as_array().unwrap();
    assert_eq!(
        cells[..2],
        [json!("192.0.2.10"), json!("services/default/web")]
    );
    assert_eq!(cells.len(), 3);
    let t = table(
        &srv.client,
        "/apis/networking.k8s.io/v1/ipaddresses/2001:db8::a",
    )
    .await;
    assert_eq!(
        t["rows"][0]["cells"][1],
        "gateways.gateway.networking.k8s.io/gw"
    );

    // A protobuf body, as kubectl sends it.
    let pb: IPAddress = protobuf_create(
        &srv.client,
        "/apis/networking.k8s.io/v1/ipaddresses",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
            "metadata": {"name": "192.0.2.12"},
            "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "pb"}}}),
    )
    .await;
    assert_eq!(pb.spec.unwrap().parent_ref.name, "pb");
    ips.delete("192.0.2.12", &DeleteParams::default())
        .await
        .unwrap();

    for name in ours {
        ips.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let (code, _) = refusal(ips.get("192.0.2.10").await);
    assert_eq!(code, 404);
    let listed = ips.list(&ListParams::default()).await.unwrap();
    assert!(names(&listed.items, &ours).is_empty());
}

fn service_cidr(name: &str, cidrs: Value) -> ServiceCIDR {
    from(json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}}))
}

#[tokio::test]
async fn service_cidrs_are_served_with_a_status_subresource() {
    let srv = TestApiServer::start().await.unwrap();
    let cidrs: Api<ServiceCIDR> = Api::all(srv.client.clone());
    let ready = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "",
        "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]});

    // A status sent with the object is not written by the main resource.
    let mut new = service_cidr("test-v4", json!(["10.200.0.0/16"]));
    new.status = Some(from(ready.clone()));
    let created = cidrs.create(&PostParams::default(), &new).await.unwrap();
    assert_eq!(
        serde_json::to_value(&created.status).unwrap(),
        json!({}),
        "{created:?}"
    );
    cidrs
        .create(
            &PostParams::default(),
            &service_cidr("test-dual", json!(["10.201.0.0/16", "fd00:201::/108"])),
        )
        .await
        .unwrap();
    let ours = ["test-dual", "test-v4"];
    let listed = cidrs.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&listed.items, &ours), ours);

    // The status subresource writes only the status.
    let written = cidrs
        .patch_status(
            "test-v4",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cidrs": ["10.99.0.0/16"]}, "status": ready})),
        )
        .await
        .unwrap();
    let status = written.status.as_ref().unwrap();
    assert_eq!(status.conditions.as_ref().unwrap()[0].type_, "Ready");
    assert_eq!(
        written.spec.as_ref().unwrap().cidrs.as_deref(),
        Some(&["10.200.0.0/16".to_owned()][..])
    );
    // ... and the main resource keeps it.
    let labelled = cidrs
        .patch(
            "test-v4",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": "b"}}, "status": {"conditions": []}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(labelled.status, written.status);

    // The CIDRs are immutable, but a single-stack ServiceCIDR may become dual-stack.
    invalid(
        cidrs
            .patch(
                "test-v4",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cidrs": ["10.202.0.0/16"]}})),
            )
            .await,
        &["spec.cidrs[0]: Invalid value: \"10.202.0.0/16\": field is immutable"],
    );
    invalid(
        cidrs
            .patch(
                "test-v4",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cidrs": ["10.200.0.0/16", "10.203.0.0/16"]}})),
            )
            .await,
        &[
            "spec.cidrs: Invalid value: [\"10.200.0.0/16\",\"10.203.0.0/16\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
        ],
    );
    let dual = cidrs
        .patch(
            "test-v4",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cidrs": ["10.200.0.0/16", "fd00:200::/108"]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        dual.spec.unwrap().cidrs.unwrap(),
        ["10.200.0.0/16", "fd00:200::/108"]
    );
    invalid(
        cidrs
            .patch(
                "test-v4",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cidrs": ["10.200.0.0/16"]}})),
            )
            .await,
        &["spec.cidrs: Invalid value: [\"10.200.0.0/16\"]: field is immutable"],
    );

    // Create rules: one or two valid CIDRs in canonical form, of different families.
    for (cidr_list, want) in [
        (
            json!([]),
            "spec.cidrs: Required value: at least one CIDR required",
        ),
        (
            json!(["10.204.0.1/16"]),
            "spec.cidrs[0]: Invalid value: \"10.204.0.1/16\": must not have bits set beyond the prefix length",
        ),
        (
            json!(["10.204.0.0/016"]),
            "spec.cidrs[0]: Invalid value: \"10.204.0.0/016\": must not have leading 0s in IP or prefix length",
        ),
        (
            json!(["fd00:204:0::/108"]),
            "spec.cidrs[0]: Invalid value: \"fd00:204:0::/108\": must be in canonical form (\"fd00:204::/108\")",
        ),
        (
            json!(["10.204.0.0"]),
            "spec.cidrs[0]: Invalid value: \"10.204.0.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        ),
    ] {
        invalid(
            cidrs
                .create(&PostParams::default(), &service_cidr("test-bad", cidr_list))
                .await,
            &[want],
        );
    }
    invalid(
        cidrs
            .create(
                &PostParams::default(),
                &service_cidr(
                    "test-bad",
                    json!(["10.204.0.0/16", "fd00:204::/108", "10.205.0.0/16"]),
                ),
            )
            .await,
        &["may only hold up to 2 values"],
    );

    // `kubectl get servicecidrs`.
    let t = table(&srv.client, "/apis/networking.k8s.io/v1/servicecidrs").await;
    assert_eq!(column_names(&t), ["Name", "CIDRs", "Age"]);
    assert_eq!(
        row(&t, "test-v4")["cells"][1],
        "10.200.0.0/16,fd00:200::/108"
    );
    assert_eq!(
        row(&t, "test-dual")["cells"][1],
        "10.201.0.0/16,fd00:201::/108"
    );

    let pb: ServiceCIDR = protobuf_create(
        &srv.client,
        "/apis/networking.k8s.io/v1/servicecidrs",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": "test-pb"}, "spec": {"cidrs": ["fd00:206::/108"]}}),
    )
    .await;
    assert_eq!(pb.spec.unwrap().cidrs.unwrap(), ["fd00:206::/108"]);
    cidrs
        .delete("test-pb", &DeleteParams::default())
        .await
        .unwrap();

    // Discovery: both cluster-scoped, ServiceCIDR with its status.
    let req = http::Request::get("/apis/networking.k8s.io/v1")
        .body(Vec::new())
        .unwrap();
    let list: Value = serde_json::from_str(&srv.client.request_text(req).await.unwrap()).unwrap();
    let resources = list["resources"].as_array().unwrap();
    for (name, kind) in [
        ("ipaddresses", "IPAddress"),
        ("servicecidrs", "ServiceCIDR"),
        ("servicecidrs/status", "ServiceCIDR"),
    ] {
        let r = resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {list}"));
        assert_eq!(r["kind"], kind);
        assert_eq!(r["namespaced"], false);
    }

    for name in ours {
        cidrs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let listed = cidrs.list(&ListParams::default()).await.unwrap();
    assert!(names(&listed.items, &ours).is_empty());
}
