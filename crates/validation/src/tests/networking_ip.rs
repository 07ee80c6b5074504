//! IPAddress and ServiceCIDR: create and update rules, after upstream's
//! `pkg/apis/networking/validation` tests (`TestValidateIPAddress`,
//! `TestValidateServiceCIDR`, `TestValidateServiceCIDRUpdate`) and apimachinery's
//! `TestIsValidIP` / `TestIsValidCIDR`.

use k8s_openapi::api::networking::v1 as networking;
use serde_json::{Value, json};

use super::{check_create, check_update};
use crate::validate_ip_address_name;

const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const INVALID_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn ip_address(parent_ref: Value) -> Value {
    json!({"metadata": {"name": "10.96.0.10"}, "spec": {"parentRef": parent_ref}})
}

fn service_ref() -> Value {
    json!({"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"})
}

fn service_cidr(cidrs: Value) -> Value {
    json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": cidrs}})
}

#[test]
fn ip_address_names() {
    let cases: &[(&str, &[&str])] = &[
        ("10.96.0.10", &[]),
        ("0.0.0.0", &[]),
        ("2001:db8::1", &[]),
        ("2001:db8:0:1::", &[]),
        ("::", &[]),
        ("10.96.0.010", &["must not have leading 0s"]),
        ("010.96.0.10", &["must not have leading 0s"]),
        (
            "2001:db8::0",
            &["must be in canonical form (\"2001:db8::\")"],
        ),
        (
            "2001:DB8::1",
            &["must be in canonical form (\"2001:db8::1\")"],
        ),
        (
            "2001:db8:0:0:0:0:0:1",
            &["must be in canonical form (\"2001:db8::1\")"],
        ),
        ("0001:db8::", &["must be in canonical form (\"1:db8::\")"]),
        ("00001:db8::", &["must not have leading 0s"]),
        ("::1.2.3.4", &["must be in canonical form (\"::102:304\")"]),
        (
            "::ffff:10.0.0.1",
            &["must not be an IPv4-mapped IPv6 address"],
        ),
        ("", &[INVALID_IP]),
        ("kubernetes", &[INVALID_IP]),
        ("10.0.0", &[INVALID_IP]),
        ("10.0.0.256", &[INVALID_IP]),
        ("10.0.0.1/32", &[INVALID_IP]),
        ("fe80::1%eth0", &[INVALID_IP]),
        (" 10.0.0.1", &[INVALID_IP]),
    ];
    for (name, want) in cases {
        assert_eq!(validate_ip_address_name(name, false), *want, "{name:?}");
        // Names are never generated: a prefix is held to the same rule.
        assert_eq!(validate_ip_address_name(name, true), *want, "{name:?}");
    }
}

#[test]
fn ip_address_create() {
    check_create::<networking::IPAddress>(vec![
        ("service", ip_address(service_ref()), vec![]),
        (
            "other group",
            ip_address(
                json!({"group": "gateway.networking.k8s.io", "resource": "gateways",
                "name": "gw"}),
            ),
            vec![],
        ),
        (
            "no spec",
            json!({"metadata": {"name": "10.96.0.10"}}),
            vec!["spec.parentRef: Required value"],
        ),
        (
            "no parentRef",
            json!({"metadata": {"name": "10.96.0.10"}, "spec": {}}),
            vec!["spec.parentRef: Required value"],
        ),
        (
            "no resource",
            ip_address(json!({"name": "kubernetes", "namespace": "default"})),
            vec!["spec.parentRef.resource: Required value"],
        ),
        (
            "no name",
            ip_address(json!({"resource": "services", "namespace": "default"})),
            vec!["spec.parentRef.name: Required value"],
        ),
        (
            "bad group",
            ip_address(json!({"group": "Bad_Group", "resource": "services", "name": "n"})),
            vec![
                "spec.parentRef.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        ),
        (
            "path segments",
            ip_address(json!({"resource": "a/b", "namespace": "..", "name": "50%"})),
            vec![
                "spec.parentRef.resource: Invalid value: \"a/b\": may not contain '/'",
                "spec.parentRef.name: Invalid value: \"50%\": may not contain '%'",
                "spec.parentRef.namespace: Invalid value: \"..\": may not be '..'",
            ],
        ),
    ]);
}

#[test]
fn ip_address_update() {
    let other =
        json!({"group": "", "resource": "services", "namespace": "default", "name": "other"});
    check_update::<networking::IPAddress>(vec![
        (
            "unchanged",
            ip_address(service_ref()),
            ip_address(service_ref()),
            vec![],
        ),
        (
            "labels only",
            with_labels(ip_address(service_ref())),
            ip_address(service_ref()),
            vec![],
        ),
        (
            "empty group as unset",
            ip_address(
                json!({"resource": "services", "namespace": "default", "name": "kubernetes"}),
            ),
            ip_address(service_ref()),
            vec![],
        ),
        (
            "parentRef changed",
            ip_address(other),
            ip_address(service_ref()),
            vec![
                "spec.parentRef: Invalid value: {\"group\":\"\",\"name\":\"other\",\"namespace\":\"default\",\"resource\":\"services\"}: field is immutable",
            ],
        ),
        (
            "parentRef dropped",
            json!({"metadata": {"name": "10.96.0.10"}, "spec": {}}),
            ip_address(service_ref()),
            vec![
                "spec.parentRef: Required value",
                "spec.parentRef: Invalid value: \"null\": field is immutable",
            ],
        ),
        (
            "name re-validated",
            json!({"metadata": {"name": "10.96.0.010"}, "spec": {"parentRef": service_ref()}}),
            json!({"metadata": {"name": "10.96.0.010"}, "spec": {"parentRef": service_ref()}}),
            vec!["metadata.name: Invalid value: \"10.96.0.010\": must not have leading 0s"],
        ),
    ]);
}

fn with_labels(mut v: Value) -> Value {
    v["metadata"]["labels"] = json!({"a": "b"});
    v
}

#[test]
fn service_cidr_create() {
    check_create::<networking::ServiceCIDR>(vec![
        ("ipv4", service_cidr(json!(["10.96.0.0/12"])), vec![]),
        ("ipv6", service_cidr(json!(["fd00:10:96::/108"])), vec![]),
        (
            "dual stack",
            service_cidr(json!(["10.96.0.0/12", "fd00:10:96::/108"])),
            vec![],
        ),
        (
            "dual stack, IPv6 first",
            service_cidr(json!(["fd00:10:96::/108", "10.96.0.0/12"])),
            vec![],
        ),
        ("host route", service_cidr(json!(["10.0.0.1/32"])), vec![]),
        (
            "no cidrs",
            service_cidr(json!([])),
            vec!["spec.cidrs: Required value: at least one CIDR required"],
        ),
        (
            "no spec",
            json!({"metadata": {"name": "kubernetes"}}),
            vec!["spec.cidrs: Required value: at least one CIDR required"],
        ),
        (
            "three",
            service_cidr(json!(["10.96.0.0/12", "fd00::/108", "10.100.0.0/16"])),
            vec![
                "spec.cidrs: Invalid value: {\"cidrs\":[\"10.96.0.0/12\",\"fd00::/108\",\"10.100.0.0/16\"]}: may only hold up to 2 values",
            ],
        ),
        (
            "same family",
            service_cidr(json!(["10.96.0.0/12", "10.100.0.0/16"])),
            vec![
                "spec.cidrs: Invalid value: [\"10.96.0.0/12\",\"10.100.0.0/16\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ],
        ),
        (
            "same family, IPv6",
            service_cidr(json!(["fd00::/108", "fd01::/108"])),
            vec!["spec.cidrs: Invalid value"],
        ),
        (
            "not a CIDR",
            service_cidr(json!(["10.96.0.0"])),
            vec![&*format!(
                "spec.cidrs[0]: Invalid value: \"10.96.0.0\": {INVALID_CIDR}"
            )],
        ),
        (
            "bad one of two: no family check",
            service_cidr(json!(["bad", "10.96.0.0/12"])),
            vec![&*format!(
                "spec.cidrs[0]: Invalid value: \"bad\": {INVALID_CIDR}"
            )],
        ),
        (
            "prefix too long",
            service_cidr(json!(["10.96.0.0/33"])),
            vec![&*format!(
                "spec.cidrs[0]: Invalid value: \"10.96.0.0/33\": {INVALID_CIDR}"
            )],
        ),
        (
            "bits beyond the prefix",
            service_cidr(json!(["10.96.0.1/12"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"10.96.0.1/12\": must not have bits set beyond the prefix length",
            ],
        ),
        (
            "IPv6 bits beyond the prefix",
            service_cidr(json!(["fd00::1/64"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"fd00::1/64\": must not have bits set beyond the prefix length",
            ],
        ),
        (
            "leading zeros in the IP",
            service_cidr(json!(["010.96.0.0/12"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"010.96.0.0/12\": must not have leading 0s in IP or prefix length",
            ],
        ),
        (
            "leading zeros in the length",
            service_cidr(json!(["10.96.0.0/012"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"10.96.0.0/012\": must not have leading 0s in IP or prefix length",
            ],
        ),
        (
            "not canonical",
            service_cidr(json!(["FD00:0:0::/64"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"FD00:0:0::/64\": must be in canonical form (\"fd00::/64\")",
            ],
        ),
        (
            "IPv4-mapped, and so IPv4 twice",
            service_cidr(json!(["::ffff:10.0.0.0/120", "10.96.0.0/12"])),
            vec![
                "spec.cidrs[0]: Invalid value: \"::ffff:10.0.0.0/120\": must not have an IPv4-mapped IPv6 address",
                "spec.cidrs: Invalid value: [\"::ffff:10.0.0.0/120\",\"10.96.0.0/12\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ],
        ),
    ]);
}

#[test]
fn service_cidr_update() {
    let v4 = || service_cidr(json!(["10.96.0.0/12"]));
    let dual = || service_cidr(json!(["10.96.0.0/12", "fd00:10:96::/108"]));
    check_update::<networking::ServiceCIDR>(vec![
        ("unchanged", v4(), v4(), vec![]),
        ("unchanged dual", dual(), dual(), vec![]),
        ("labels only", with_labels(dual()), dual(), vec![]),
        (
            "changed",
            service_cidr(json!(["10.100.0.0/16"])),
            v4(),
            vec!["spec.cidrs[0]: Invalid value: \"10.100.0.0/16\": field is immutable"],
        ),
        (
            "swapped",
            service_cidr(json!(["fd00:10:96::/108", "10.96.0.0/12"])),
            dual(),
            vec![
                "spec.cidrs[0]: Invalid value: \"fd00:10:96::/108\": field is immutable",
                "spec.cidrs[1]: Invalid value: \"10.96.0.0/12\": field is immutable",
            ],
        ),
        ("single to dual stack", dual(), v4(), vec![]),
        (
            "single to dual stack, IPv6 first",
            service_cidr(json!(["fd00:10:96::/108", "10.96.0.0/12"])),
            service_cidr(json!(["fd00:10:96::/108"])),
            vec![],
        ),
        (
            "single to dual stack, first changed",
            service_cidr(json!(["10.100.0.0/16", "fd00:10:96::/108"])),
            v4(),
            vec!["spec.cidrs[0]: Invalid value: \"10.100.0.0/16\": field is immutable"],
        ),
        (
            "single to two of one family",
            service_cidr(json!(["10.96.0.0/12", "10.100.0.0/16"])),
            v4(),
            vec![
                "spec.cidrs: Invalid value: [\"10.96.0.0/12\",\"10.100.0.0/16\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ],
        ),
        (
            "single to dual stack, bad second",
            service_cidr(json!(["10.96.0.0/12", "fd00::1/64"])),
            v4(),
            vec![
                "spec.cidrs[1]: Invalid value: \"fd00::1/64\": must not have bits set beyond the prefix length",
            ],
        ),
        (
            "dual to single stack",
            v4(),
            dual(),
            vec!["spec.cidrs: Invalid value: [\"10.96.0.0/12\"]: field is immutable"],
        ),
        (
            "single to three",
            service_cidr(json!(["10.96.0.0/12", "fd00::/108", "10.100.0.0/16"])),
            v4(),
            vec![
                "spec.cidrs: Invalid value: [\"10.96.0.0/12\",\"fd00::/108\",\"10.100.0.0/16\"]: field is immutable",
            ],
        ),
        (
            "cleared",
            json!({"metadata": {"name": "kubernetes"}, "spec": {}}),
            v4(),
            vec!["spec.cidrs: Invalid value: \"null\": field is immutable"],
        ),
    ]);
}

/// The status subresource writes the status onto the old object (the registry keeps
/// the spec), which passes the update rules whatever the conditions say, as upstream's
/// `ValidateServiceCIDRStatusUpdate` checks metadata only.
#[test]
fn service_cidr_status_update() {
    let old = service_cidr(json!(["10.96.0.0/12"]));
    let mut new = old.clone();
    new["status"] = json!({"conditions": [{"type": "Ready", "status": "False",
        "reason": "Terminating", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]});
    check_update::<networking::ServiceCIDR>(vec![("status", new, old, vec![])]);
}
