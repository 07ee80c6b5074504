//! Table tests of the record index: one fixture cluster, every query shape of the
//! Kubernetes DNS specification, and the index following adds, updates and deletes.

use std::net::IpAddr;

use ferrokube_dns::index::{DnsConfig, DnsIndex, dashed_ip, parse_dashed_ip};
use ferrokube_dns::model::{
    EndpointModel, PortModel, ServiceKey, ServiceKind, ServiceModel, SliceModel, service_model,
    slice_model,
};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

fn port(name: &str, protocol: &str, port: u16) -> PortModel {
    PortModel {
        name: name.into(),
        protocol: protocol.into(),
        port,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("valid ip")
}

fn endpoint(addr: &str, ready: bool, hostname: Option<&str>) -> EndpointModel {
    EndpointModel {
        addresses: vec![ip(addr)],
        ready,
        hostname: hostname.map(str::to_string),
    }
}

fn cluster_ip(ips: &[&str], ports: Vec<PortModel>) -> Option<ServiceModel> {
    Some(ServiceModel {
        kind: ServiceKind::ClusterIp(ips.iter().map(|i| ip(i)).collect()),
        ports,
    })
}

fn slice(
    ns: &str,
    svc: &str,
    ports: Vec<PortModel>,
    endpoints: Vec<EndpointModel>,
) -> Option<SliceModel> {
    Some(SliceModel {
        service: ServiceKey::new(ns, svc),
        ports,
        endpoints,
    })
}

fn fixture() -> DnsIndex {
    let mut cfg = DnsConfig::new("cluster.local").expect("zone");
    cfg.own_ips = vec![ip("10.244.0.2")];
    cfg.serial = 100;
    let mut idx = DnsIndex::new(cfg);
    idx.set_service(
        "default",
        "web",
        cluster_ip(
            &["10.96.0.50"],
            vec![
                port("http", "tcp", 80),
                port("", "tcp", 8080),
                port("dns", "udp", 53),
            ],
        ),
    );
    idx.set_slice(
        "default",
        "web-abc",
        slice(
            "default",
            "web",
            vec![port("http", "tcp", 8000)],
            vec![endpoint("10.244.0.9", true, None)],
        ),
    );
    idx.set_service(
        "default",
        "db",
        Some(ServiceModel {
            kind: ServiceKind::Headless,
            ports: vec![port("pg", "tcp", 5432)],
        }),
    );
    idx.set_slice(
        "default",
        "db-1",
        slice(
            "default",
            "db",
            vec![port("pg", "tcp", 5433)],
            vec![
                endpoint("10.244.0.5", true, Some("db-0")),
                endpoint("10.244.0.6", true, None),
                endpoint("10.244.0.7", false, Some("db-2")),
            ],
        ),
    );
    idx.set_service(
        "default",
        "ext",
        Some(ServiceModel {
            kind: ServiceKind::ExternalName("example.com".into()),
            ports: vec![],
        }),
    );
    idx.set_service(
        "default",
        "alias",
        Some(ServiceModel {
            kind: ServiceKind::ExternalName("web.default.svc.cluster.local".into()),
            ports: vec![],
        }),
    );
    idx.set_service(
        "other",
        "v6",
        cluster_ip(&["fd00::10", "10.96.0.60"], vec![port("http", "tcp", 80)]),
    );
    idx.set_service(
        "kube-system",
        "kube-dns",
        cluster_ip(
            &["10.96.0.10"],
            vec![port("dns", "udp", 53), port("dns-tcp", "tcp", 53)],
        ),
    );
    idx.set_slice(
        "kube-system",
        "kube-dns-x",
        slice(
            "kube-system",
            "kube-dns",
            vec![port("dns", "udp", 53)],
            vec![endpoint("10.244.0.2", true, None)],
        ),
    );
    idx
}

fn name(s: &str) -> Name {
    Name::from_ascii(s).expect("valid name")
}

/// `TYPE rdata` per record, in answer order.
fn show(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{} {}", r.record_type(), r.data))
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// (question, type, rcode, answers, additionals); records compared sorted.
type Case = (
    &'static str,
    RecordType,
    ResponseCode,
    &'static [&'static str],
    &'static [&'static str],
);

#[test]
fn lookups_follow_the_specification() {
    let idx = fixture();
    use RecordType::*;
    let cases: &[Case] = &[
        // ClusterIP Service.
        (
            "web.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.96.0.50"],
            &[],
        ),
        (
            "WEB.Default.SVC.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.96.0.50"],
            &[],
        ),
        (
            "web.default.svc.cluster.local.",
            AAAA,
            ResponseCode::NoError,
            &[],
            &[],
        ),
        (
            "web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            &[
                "SRV 0 33 53 web.default.svc.cluster.local.",
                "SRV 0 33 80 web.default.svc.cluster.local.",
                "SRV 0 33 8080 web.default.svc.cluster.local.",
            ],
            &["A 10.96.0.50"],
        ),
        // Named ports.
        (
            "_http._tcp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            &["SRV 0 100 80 web.default.svc.cluster.local."],
            &["A 10.96.0.50"],
        ),
        (
            "_dns._udp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            &["SRV 0 100 53 web.default.svc.cluster.local."],
            &["A 10.96.0.50"],
        ),
        (
            "_http._udp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "_nope._tcp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "_tcp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            &[],
            &[],
        ),
        (
            "_sctp.web.default.svc.cluster.local.",
            SRV,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        // Endpoints of a ClusterIP Service have names too (dashed IP without hostname).
        (
            "10-244-0-9.web.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.244.0.9"],
            &[],
        ),
        // Headless Service: ready endpoints only.
        (
            "db.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.244.0.5", "A 10.244.0.6"],
            &[],
        ),
        (
            "db-0.db.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.244.0.5"],
            &[],
        ),
        (
            "10-244-0-6.db.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.244.0.6"],
            &[],
        ),
        (
            "db-2.db.default.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "_pg._tcp.db.default.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            &[
                "SRV 0 50 5433 10-244-0-6.db.default.svc.cluster.local.",
                "SRV 0 50 5433 db-0.db.default.svc.cluster.local.",
            ],
            &["A 10.244.0.5", "A 10.244.0.6"],
        ),
        // ExternalName: CNAME; followed when it points into the zone.
        (
            "ext.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["CNAME example.com."],
            &[],
        ),
        (
            "ext.default.svc.cluster.local.",
            CNAME,
            ResponseCode::NoError,
            &["CNAME example.com."],
            &[],
        ),
        (
            "alias.default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.96.0.50", "CNAME web.default.svc.cluster.local."],
            &[],
        ),
        // Dual stack.
        (
            "v6.other.svc.cluster.local.",
            AAAA,
            ResponseCode::NoError,
            &["AAAA fd00::10"],
            &[],
        ),
        (
            "v6.other.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.96.0.60"],
            &[],
        ),
        // Pods (insecure mode: the name is the address).
        (
            "10-244-0-77.default.pod.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.244.0.77"],
            &[],
        ),
        (
            "fd00--77.any.pod.cluster.local.",
            AAAA,
            ResponseCode::NoError,
            &["AAAA fd00::77"],
            &[],
        ),
        (
            "not-an-ip.default.pod.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        // Missing names inside the zone, and empty non-terminals.
        (
            "nope.default.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "web.nons.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "a.b.c.web.default.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "default.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            &[],
            &[],
        ),
        ("svc.cluster.local.", A, ResponseCode::NoError, &[], &[]),
        (
            "whatever.cluster.local.",
            A,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        // Zone apex and the schema version.
        (
            "cluster.local.",
            NS,
            ResponseCode::NoError,
            &["NS ns.dns.cluster.local."],
            &[],
        ),
        (
            "dns-version.cluster.local.",
            TXT,
            ResponseCode::NoError,
            &["TXT 1.1.0"],
            &[],
        ),
        (
            "ns.dns.cluster.local.",
            A,
            ResponseCode::NoError,
            &["A 10.96.0.10"],
            &[],
        ),
        // Reverse: cluster IPs, endpoint IPs (hostname or dashed), unknown.
        (
            "50.0.96.10.in-addr.arpa.",
            PTR,
            ResponseCode::NoError,
            &["PTR web.default.svc.cluster.local."],
            &[],
        ),
        (
            "5.0.244.10.in-addr.arpa.",
            PTR,
            ResponseCode::NoError,
            &["PTR db-0.db.default.svc.cluster.local."],
            &[],
        ),
        (
            "6.0.244.10.in-addr.arpa.",
            PTR,
            ResponseCode::NoError,
            &["PTR 10-244-0-6.db.default.svc.cluster.local."],
            &[],
        ),
        (
            "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.",
            PTR,
            ResponseCode::NoError,
            &["PTR v6.other.svc.cluster.local."],
            &[],
        ),
        (
            "7.0.244.10.in-addr.arpa.",
            PTR,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        (
            "1.1.168.192.in-addr.arpa.",
            PTR,
            ResponseCode::NXDomain,
            &[],
            &[],
        ),
        // Not ours: never forwarded.
        ("example.com.", A, ResponseCode::ServFail, &[], &[]),
        (
            "cluster.local.example.com.",
            A,
            ResponseCode::ServFail,
            &[],
            &[],
        ),
    ];
    for (q, t, rcode, answers, additionals) in cases {
        let got = idx.lookup(&name(q), *t);
        assert_eq!(got.rcode, *rcode, "{q} {t}: rcode");
        assert_eq!(
            sorted(show(&got.answers)),
            sorted(answers.iter().map(|s| s.to_string()).collect()),
            "{q} {t}: answers"
        );
        assert_eq!(
            sorted(show(&got.additionals)),
            sorted(additionals.iter().map(|s| s.to_string()).collect()),
            "{q} {t}: additionals"
        );
        for r in &got.answers {
            assert_eq!(r.ttl, 5, "{q} {t}: TTL");
        }
        // Inside the zone, negative answers carry the SOA (for negative caching).
        let in_zone = q.to_ascii_lowercase().ends_with("cluster.local.");
        if in_zone && got.answers.is_empty() {
            assert!(got.authoritative, "{q} {t}: authoritative");
            assert_eq!(show(&got.authorities).len(), 1, "{q} {t}: SOA in authority");
            assert_eq!(got.authorities[0].record_type(), RecordType::SOA);
        }
    }
}

#[test]
fn answers_are_owned_by_the_name_as_asked() {
    let idx = fixture();
    let got = idx.lookup(&name("Web.Default.svc.Cluster.Local."), RecordType::A);
    assert_eq!(
        got.answers[0].name.to_ascii(),
        "Web.Default.svc.Cluster.Local."
    );
}

#[test]
fn soa_follows_changes() {
    let mut idx = fixture();
    let soa = |idx: &DnsIndex| {
        let r = idx.lookup(&name("cluster.local."), RecordType::SOA);
        assert_eq!(r.answers.len(), 1);
        r.answers[0].data.to_string()
    };
    let before = soa(&idx);
    assert!(
        before.starts_with("ns.dns.cluster.local. hostmaster.cluster.local. "),
        "{before}"
    );
    idx.set_service("default", "new", cluster_ip(&["10.96.0.99"], vec![]));
    assert_ne!(soa(&idx), before, "serial bumps on change");
}

#[test]
fn index_follows_updates_and_deletes() {
    let mut idx = fixture();
    let a = |idx: &DnsIndex, q: &str| {
        let r = idx.lookup(&name(q), RecordType::A);
        (r.rcode, sorted(show(&r.answers)))
    };
    // An endpoint becomes ready; another slice of the same Service adds one.
    idx.set_slice(
        "default",
        "db-1",
        slice(
            "default",
            "db",
            vec![port("pg", "tcp", 5433)],
            vec![
                endpoint("10.244.0.5", true, Some("db-0")),
                endpoint("10.244.0.7", true, Some("db-2")),
            ],
        ),
    );
    idx.set_slice(
        "default",
        "db-2",
        slice(
            "default",
            "db",
            vec![],
            vec![endpoint("10.244.0.8", true, None)],
        ),
    );
    assert_eq!(
        a(&idx, "db.default.svc.cluster.local."),
        (
            ResponseCode::NoError,
            vec![
                "A 10.244.0.5".into(),
                "A 10.244.0.7".into(),
                "A 10.244.0.8".into()
            ]
        )
    );
    assert_eq!(
        a(&idx, "db-2.db.default.svc.cluster.local.").1,
        vec!["A 10.244.0.7".to_string()]
    );
    // 10.244.0.6 left: its PTR is gone.
    assert_eq!(
        idx.lookup(&name("6.0.244.10.in-addr.arpa."), RecordType::PTR)
            .rcode,
        ResponseCode::NXDomain
    );
    // A slice deleted.
    idx.set_slice("default", "db-2", None);
    assert_eq!(a(&idx, "db.default.svc.cluster.local.").1.len(), 2);
    // Slices seen before their Service count once it arrives.
    idx.set_slice(
        "late",
        "late-1",
        slice(
            "late",
            "svc",
            vec![],
            vec![endpoint("10.244.1.1", true, None)],
        ),
    );
    assert_eq!(
        a(&idx, "svc.late.svc.cluster.local.").0,
        ResponseCode::NXDomain
    );
    assert_eq!(a(&idx, "late.svc.cluster.local.").0, ResponseCode::NXDomain);
    idx.set_service(
        "late",
        "svc",
        Some(ServiceModel {
            kind: ServiceKind::Headless,
            ports: vec![],
        }),
    );
    assert_eq!(
        a(&idx, "svc.late.svc.cluster.local.").1,
        vec!["A 10.244.1.1".to_string()]
    );
    assert_eq!(a(&idx, "late.svc.cluster.local.").0, ResponseCode::NoError);
    // Headless without ready endpoints: the name exists, no data.
    idx.set_slice("late", "late-1", None);
    let r = idx.lookup(&name("svc.late.svc.cluster.local."), RecordType::A);
    assert_eq!((r.rcode, r.answers.len()), (ResponseCode::NoError, 0));
    // Service deleted: its name, its reverse entries and its namespace go.
    idx.set_service("late", "svc", None);
    assert_eq!(
        a(&idx, "svc.late.svc.cluster.local.").0,
        ResponseCode::NXDomain
    );
    assert_eq!(a(&idx, "late.svc.cluster.local.").0, ResponseCode::NXDomain);
    idx.set_service("default", "web", None);
    assert_eq!(
        idx.lookup(&name("50.0.96.10.in-addr.arpa."), RecordType::PTR)
            .rcode,
        ResponseCode::NXDomain
    );
    // A slice moving to another Service (label change) leaves the first one.
    idx.set_service("default", "web", cluster_ip(&["10.96.0.50"], vec![]));
    idx.set_slice(
        "default",
        "web-abc",
        slice(
            "default",
            "db",
            vec![],
            vec![endpoint("10.244.0.9", true, None)],
        ),
    );
    assert_eq!(
        a(&idx, "10-244-0-9.web.default.svc.cluster.local.").0,
        ResponseCode::NXDomain
    );
    assert_eq!(
        a(&idx, "10-244-0-9.db.default.svc.cluster.local.").0,
        ResponseCode::NoError
    );
    assert_eq!(idx.len(), (6, 3));
}

#[test]
fn api_objects_become_models() {
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
                 "ports": [{"name": "HTTP", "port": 80}, {"port": 53, "protocol": "UDP"}]}
    }))
    .expect("service");
    assert_eq!(
        service_model(&svc),
        Some(ServiceModel {
            kind: ServiceKind::ClusterIp(vec![ip("10.96.0.50")]),
            ports: vec![port("http", "tcp", 80), port("", "udp", 53)],
        })
    );
    let headless: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"clusterIP": "None", "clusterIPs": ["None"]}
    }))
    .expect("service");
    assert_eq!(
        service_model(&headless).map(|m| m.kind),
        Some(ServiceKind::Headless)
    );
    let ext: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ext", "namespace": "default"},
        "spec": {"type": "ExternalName", "externalName": "Example.COM."}
    }))
    .expect("service");
    assert_eq!(
        service_model(&ext).map(|m| m.kind),
        Some(ServiceKind::ExternalName("example.com".into()))
    );
    let pending: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default"}, "spec": {}
    }))
    .expect("service");
    assert_eq!(
        service_model(&pending),
        None,
        "no cluster IP yet: nothing to publish"
    );

    let es: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-1", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.244.0.6"]},
            {"addresses": ["10.244.0.7"], "conditions": {"ready": false}}
        ]
    }))
    .expect("slice");
    assert_eq!(
        slice_model(&es),
        slice(
            "default",
            "db",
            vec![port("pg", "tcp", 5432)],
            vec![
                endpoint("10.244.0.5", true, Some("db-0")),
                endpoint("10.244.0.6", true, None),
                endpoint("10.244.0.7", false, None),
            ],
        )
    );
    let mut fqdn = es.clone();
    fqdn.address_type = "FQDN".into();
    assert_eq!(slice_model(&fqdn), None);
    let mut unlabelled = es;
    unlabelled.metadata.labels = None;
    assert_eq!(slice_model(&unlabelled), None);
}

#[test]
fn dashed_ips_round_trip() {
    for s in ["10.244.0.5", "fd00::5", "2001:db8::1:0:0:1"] {
        let addr = ip(s);
        assert_eq!(parse_dashed_ip(&dashed_ip(addr)), Some(addr), "{s}");
    }
    assert_eq!(parse_dashed_ip("1-2-3"), None);
    assert_eq!(parse_dashed_ip("web"), None);
}
