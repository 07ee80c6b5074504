//! The other groups: coordination, discovery, events, policy, rbac, scheduling,
//! storage, networking, autoscaling and certificates.

use std::collections::BTreeSet;

use ferrokube_api::conversion::autoscaling::hpa_v1_to_v2;
use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    is_dns1035_label, is_dns1123_subdomain, is_qualified_name, validate_path_segment_name,
};
use k8s_openapi::api::autoscaling::v2 as autoscaling;
use k8s_openapi::api::certificates::v1 as certificates;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Validate;
use crate::util::*;

// --- coordination.k8s.io ---------------------------------------------------------

impl Validate for coordination::Lease {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else { return errs };
        if let Some(d) = spec.lease_duration_seconds
            && d <= 0
        {
            errs.push(FieldError::invalid(
                &sp.child("leaseDurationSeconds"),
                d,
                "must be greater than 0",
            ));
        }
        nonnegative(
            spec.lease_transitions.map(i64::from),
            &sp.child("leaseTransitions"),
            &mut errs,
        );
        if spec
            .preferred_holder
            .as_ref()
            .is_some_and(|h| !h.is_empty())
            && spec.strategy.is_none()
        {
            errs.push(FieldError::forbidden(
                &sp.child("preferredHolder"),
                "may only be specified if `strategy` is defined",
            ));
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

// --- discovery.k8s.io ------------------------------------------------------------

const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];

impl Validate for discovery::EndpointSlice {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let at = self.address_type.as_str();
        enum_required(at, ADDRESS_TYPES, &p("addressType"), &mut errs);
        let ep = p("endpoints");
        if self.endpoints.len() > 1000 {
            errs.push(FieldError::too_many(
                &ep,
                Some(self.endpoints.len()),
                Some(1000),
            ));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            let ap = ep.index(i).child("addresses");
            if e.addresses.is_empty() {
                errs.push(FieldError::required(&ap, "must contain at least 1 address"));
            } else if e.addresses.len() > 100 {
                errs.push(FieldError::too_many(
                    &ap,
                    Some(e.addresses.len()),
                    Some(100),
                ));
            }
            for (j, a) in e.addresses.iter().enumerate() {
                let valid = match at {
                    "IPv4" => a.parse::<std::net::Ipv4Addr>().is_ok(),
                    "IPv6" => a.parse::<std::net::Ipv6Addr>().is_ok(),
                    "FQDN" => is_dns1123_subdomain(a).is_empty(),
                    _ => true,
                };
                if !valid {
                    let detail = match at {
                        "IPv4" => "must be a valid IPv4 address".to_owned(),
                        "IPv6" => "must be a valid IPv6 address".to_owned(),
                        _ => is_dns1123_subdomain(a).join("; "),
                    };
                    errs.push(FieldError::invalid(&ap.index(j), a.as_str(), detail));
                }
            }
            if let Some(h) = e.hostname.as_deref() {
                dns_label(h, &ep.index(i).child("hostname"), &mut errs);
            }
        }
        let pp = p("ports");
        let ports = self.ports.as_deref().unwrap_or(&[]);
        if ports.len() > 20000 {
            errs.push(FieldError::too_many(&pp, Some(ports.len()), Some(20000)));
        }
        let mut names = BTreeSet::new();
        for (i, port) in ports.iter().enumerate() {
            let ip = pp.index(i);
            let name = s(&port.name);
            if !name.is_empty() {
                dns_label(name, &ip.child("name"), &mut errs);
            }
            if !names.insert(name.to_owned()) {
                errs.push(FieldError::duplicate(&ip.child("name"), name));
            }
            enum_required(
                s(&port.protocol),
                PROTOCOLS,
                &ip.child("protocol"),
                &mut errs,
            );
            if let Some(n) = port.port {
                port_num(n, &ip.child("port"), &mut errs);
            }
            if let Some(app) = port.app_protocol.as_deref() {
                qualified_name(app, &ip.child("appProtocol"), &mut errs);
            }
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(
            &self.address_type,
            &old.address_type,
            &p("addressType"),
            &mut errs,
        );
        errs
    }
}

// --- events.k8s.io ---------------------------------------------------------------

impl Validate for events::Event {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.event_time.is_none() {
            errs.push(FieldError::required(&p("eventTime"), ""));
        }
        let rc = s(&self.reporting_controller);
        if rc.is_empty() {
            errs.push(FieldError::required(&p("reportingController"), ""));
        } else {
            qualified_name(rc, &p("reportingController"), &mut errs);
        }
        for (value, name, max) in [
            (s(&self.reporting_instance), "reportingInstance", 128),
            (s(&self.action), "action", 128),
            (s(&self.reason), "reason", 128),
        ] {
            if value.is_empty() {
                errs.push(FieldError::required(&p(name), ""));
            } else if value.len() > max {
                errs.push(FieldError::too_long(&p(name), Some(max)));
            }
        }
        if s(&self.note).len() > 1024 {
            errs.push(FieldError::too_long(&p("note"), Some(1024)));
        }
        let t = s(&self.type_);
        if t != "Normal" && t != "Warning" {
            errs.push(FieldError::invalid(
                &p("type"),
                "",
                format!("has invalid value: {t}"),
            ));
        }
        let ns = s(&self.metadata.namespace);
        if let Some(regarding) = &self.regarding {
            let rns = s(&regarding.namespace);
            if !rns.is_empty() && rns != ns {
                errs.push(FieldError::invalid(
                    &p("regarding").child("namespace"),
                    rns,
                    "does not match event.namespace",
                ));
            }
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(&self.regarding, &old.regarding, &p("regarding"), &mut errs);
        immutable(&self.reason, &old.reason, &p("reason"), &mut errs);
        immutable(&self.action, &old.action, &p("action"), &mut errs);
        immutable(
            &self.reporting_controller,
            &old.reporting_controller,
            &p("reportingController"),
            &mut errs,
        );
        immutable(
            &self.event_time,
            &old.event_time,
            &p("eventTime"),
            &mut errs,
        );
        errs
    }
}

// --- policy ----------------------------------------------------------------------

impl Validate for policy::PodDisruptionBudget {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else { return errs };
        if spec.min_available.is_some() && spec.max_unavailable.is_some() {
            errs.push(FieldError::invalid(
                &sp,
                json(spec),
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        if let Some(v) = &spec.min_available {
            int_or_percent(v, &sp.child("minAvailable"), &mut errs);
        }
        if let Some(v) = &spec.max_unavailable {
            int_or_percent(v, &sp.child("maxUnavailable"), &mut errs);
        }
        if let Some(sel) = &spec.selector {
            label_selector(sel, &sp.child("selector"), &mut errs);
        }
        enum_optional(
            &spec.unhealthy_pod_eviction_policy,
            &["AlwaysAllow", "IfHealthyBudget"],
            &sp.child("unhealthyPodEvictionPolicy"),
            &mut errs,
        );
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

// --- rbac.authorization.k8s.io ---------------------------------------------------

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn validate_policy_rules(
    rules: &[rbac::PolicyRule],
    namespaced: bool,
    path: &FieldPath,
    errs: &mut Errs,
) {
    for (i, rule) in rules.iter().enumerate() {
        let rp = path.index(i);
        if rule.verbs.is_empty() {
            errs.push(FieldError::required(
                &rp.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let non_resource = rule.non_resource_urls.as_deref().unwrap_or(&[]);
        let groups = rule.api_groups.as_deref().unwrap_or(&[]);
        let resources = rule.resources.as_deref().unwrap_or(&[]);
        let names = rule.resource_names.as_deref().unwrap_or(&[]);
        if !non_resource.is_empty() {
            if namespaced {
                errs.push(FieldError::invalid(
                    &rp.child("nonResourceURLs"),
                    json(&non_resource),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
                errs.push(FieldError::invalid(
                    &rp.child("nonResourceURLs"),
                    json(&non_resource),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if groups.is_empty() {
            errs.push(FieldError::required(
                &rp.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            errs.push(FieldError::required(
                &rp.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

impl Validate for rbac::Role {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_policy_rules(
            self.rules.as_deref().unwrap_or(&[]),
            true,
            &p("rules"),
            &mut errs,
        );
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

impl Validate for rbac::ClusterRole {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_policy_rules(
            self.rules.as_deref().unwrap_or(&[]),
            false,
            &p("rules"),
            &mut errs,
        );
        if let Some(agg) = &self.aggregation_rule {
            let ap = p("aggregationRule").child("clusterRoleSelectors");
            let selectors = agg.cluster_role_selectors.as_deref().unwrap_or(&[]);
            if selectors.is_empty() {
                errs.push(FieldError::required(
                    &ap,
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                ));
            }
            for (i, sel) in selectors.iter().enumerate() {
                label_selector(sel, &ap.index(i), &mut errs);
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

fn validate_role_ref(r: &rbac::RoleRef, kinds: &[&str], errs: &mut Errs) {
    let rp = p("roleRef");
    if r.api_group != RBAC_GROUP {
        errs.push(FieldError::not_supported(
            &rp.child("apiGroup"),
            r.api_group.as_str(),
            &[RBAC_GROUP],
        ));
    }
    if !kinds.contains(&r.kind.as_str()) {
        errs.push(FieldError::not_supported(
            &rp.child("kind"),
            r.kind.as_str(),
            kinds,
        ));
    }
    if r.name.is_empty() {
        errs.push(FieldError::required(&rp.child("name"), ""));
    } else {
        msgs_invalid(
            validate_path_segment_name(&r.name, false),
            &r.name,
            &rp.child("name"),
            errs,
        );
    }
}

fn validate_subjects(subjects: &[rbac::Subject], namespaced: bool, errs: &mut Errs) {
    for (i, sub) in subjects.iter().enumerate() {
        let sp = p("subjects").index(i);
        if sub.name.is_empty() {
            errs.push(FieldError::required(&sp.child("name"), ""));
        }
        let group = s(&sub.api_group);
        match sub.kind.as_str() {
            "ServiceAccount" => {
                if !sub.name.is_empty() {
                    dns_subdomain(&sub.name, &sp.child("name"), errs);
                }
                if !group.is_empty() {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        group,
                        &[""],
                    ));
                }
                if !namespaced && s(&sub.namespace).is_empty() {
                    errs.push(FieldError::required(&sp.child("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if group != RBAC_GROUP {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        group,
                        &[RBAC_GROUP],
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &sp.child("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

fn role_ref_update(new: &rbac::RoleRef, old: &rbac::RoleRef, errs: &mut Errs) {
    if new != old {
        errs.push(FieldError::invalid(
            &p("roleRef"),
            json(new),
            "cannot change roleRef",
        ));
    }
}

impl Validate for rbac::RoleBinding {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_role_ref(&self.role_ref, &["Role", "ClusterRole"], &mut errs);
        validate_subjects(self.subjects.as_deref().unwrap_or(&[]), true, &mut errs);
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        role_ref_update(&self.role_ref, &old.role_ref, &mut errs);
        errs
    }
}

impl Validate for rbac::ClusterRoleBinding {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_role_ref(&self.role_ref, &["ClusterRole"], &mut errs);
        validate_subjects(self.subjects.as_deref().unwrap_or(&[]), false, &mut errs);
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        role_ref_update(&self.role_ref, &old.role_ref, &mut errs);
        errs
    }
}

// --- scheduling.k8s.io -----------------------------------------------------------

/// `scheduling.HighestUserDefinablePriority`.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;

impl Validate for scheduling::PriorityClass {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = s(&self.metadata.name);
        if name.starts_with("system-") {
            let known = match name {
                "system-cluster-critical" => Some(2_000_000_000),
                "system-node-critical" => Some(2_000_001_000),
                _ => None,
            };
            let problem = match known {
                None => Some(format!("{name} is not a known system priority class")),
                Some(v) if v != self.value => {
                    Some(format!("value of {name} PriorityClass must be {v}"))
                }
                Some(_) if self.global_default == Some(true) => Some(format!(
                    "globalDefault of {name} PriorityClass must be false"
                )),
                Some(_) => None,
            };
            if let Some(problem) = problem {
                errs.push(FieldError::forbidden(
                    &p("metadata").child("name"),
                    format!("priority class names with 'system-' prefix are reserved for system use only. error: {problem}"),
                ));
            }
        } else if self.value > HIGHEST_USER_DEFINABLE_PRIORITY {
            errs.push(FieldError::forbidden(
                &p("value"),
                format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"),
            ));
        }
        enum_optional(
            &self.preemption_policy,
            &["Never", "PreemptLowerPriority"],
            &p("preemptionPolicy"),
            &mut errs,
        );
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        if self.value != old.value {
            errs.push(FieldError::forbidden(
                &p("value"),
                "may not be changed in an update.",
            ));
        }
        immutable(
            &self.preemption_policy,
            &old.preemption_policy,
            &p("preemptionPolicy"),
            &mut errs,
        );
        errs
    }
}

// --- storage.k8s.io --------------------------------------------------------------

impl Validate for storage::StorageClass {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let prov = self.provisioner.as_str();
        if prov.is_empty() {
            errs.push(FieldError::required(&p("provisioner"), ""));
        } else if prov.len() > 63 {
            errs.push(FieldError::too_long(&p("provisioner"), Some(63)));
        } else {
            msgs_invalid(
                is_qualified_name(&prov.to_ascii_lowercase()),
                prov,
                &p("provisioner"),
                &mut errs,
            );
        }
        let params = self.parameters.clone().unwrap_or_default();
        if params.len() > 512 {
            errs.push(FieldError::too_long(&p("parameters"), Some(512)));
        }
        let size: usize = params.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > 256 * 1024 {
            errs.push(FieldError::too_long(&p("parameters"), Some(256 * 1024)));
        }
        for k in params.keys() {
            if k.is_empty() {
                errs.push(FieldError::invalid(
                    &p("parameters"),
                    json(&params),
                    "parameter name must not be empty",
                ));
            }
        }
        enum_optional(
            &self.reclaim_policy,
            &["Delete", "Retain"],
            &p("reclaimPolicy"),
            &mut errs,
        );
        match self.volume_binding_mode.as_deref() {
            None => errs.push(FieldError::required(&p("volumeBindingMode"), "")),
            Some("Immediate" | "WaitForFirstConsumer") => {}
            Some(m) => errs.push(FieldError::not_supported(
                &p("volumeBindingMode"),
                m,
                &["Immediate", "WaitForFirstConsumer"],
            )),
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        if self.parameters != old.parameters {
            errs.push(FieldError::forbidden(
                &p("parameters"),
                "updates to parameters are forbidden.",
            ));
        }
        if self.provisioner != old.provisioner {
            errs.push(FieldError::forbidden(
                &p("provisioner"),
                "updates to provisioner are forbidden.",
            ));
        }
        if self.reclaim_policy != old.reclaim_policy {
            errs.push(FieldError::forbidden(
                &p("reclaimPolicy"),
                "updates to reclaimPolicy are forbidden.",
            ));
        }
        immutable(
            &self.volume_binding_mode,
            &old.volume_binding_mode,
            &p("volumeBindingMode"),
            &mut errs,
        );
        errs
    }
}

// --- networking.k8s.io -----------------------------------------------------------

fn validate_np_port(port: &networking::NetworkPolicyPort, path: &FieldPath, errs: &mut Errs) {
    enum_optional(&port.protocol, PROTOCOLS, &path.child("protocol"), errs);
    if let Some(pn) = &port.port {
        port_num_or_name(pn, &path.child("port"), errs);
    }
    if let Some(end) = port.end_port {
        match &port.port {
            None => errs.push(FieldError::required(
                &path.child("port"),
                "must be specified when `endPort` is specified",
            )),
            Some(IntOrString::String(_)) => errs.push(FieldError::invalid(
                &path.child("endPort"),
                end,
                "may not be specified when `port` is non-numeric",
            )),
            Some(IntOrString::Int(start)) => {
                if end < *start {
                    errs.push(FieldError::invalid(
                        &path.child("endPort"),
                        end,
                        "must be greater than or equal to `port`",
                    ));
                }
                port_num(end, &path.child("endPort"), errs);
            }
        }
    }
}

fn validate_np_peer(peer: &networking::NetworkPolicyPeer, path: &FieldPath, errs: &mut Errs) {
    let mut count = 0;
    if let Some(sel) = &peer.pod_selector {
        count += 1;
        label_selector(sel, &path.child("podSelector"), errs);
    }
    if let Some(sel) = &peer.namespace_selector {
        count += 1;
        label_selector(sel, &path.child("namespaceSelector"), errs);
    }
    if let Some(block) = &peer.ip_block {
        count += 1;
        cidr(&block.cidr, &path.child("ipBlock").child("cidr"), errs);
        for (i, e) in block.except.iter().flatten().enumerate() {
            cidr(e, &path.child("ipBlock").child("except").index(i), errs);
        }
        if peer.pod_selector.is_some() || peer.namespace_selector.is_some() {
            errs.push(FieldError::forbidden(
                path,
                "may not specify both ipBlock and another peer",
            ));
        }
    }
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    }
}

impl Validate for networking::NetworkPolicy {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else { return errs };
        if let Some(sel) = &spec.pod_selector {
            label_selector(sel, &sp.child("podSelector"), &mut errs);
        }
        for (i, rule) in spec.ingress.iter().flatten().enumerate() {
            let rp = sp.child("ingress").index(i);
            for (j, port) in rule.ports.iter().flatten().enumerate() {
                validate_np_port(port, &rp.child("ports").index(j), &mut errs);
            }
            for (j, peer) in rule.from.iter().flatten().enumerate() {
                validate_np_peer(peer, &rp.child("from").index(j), &mut errs);
            }
        }
        for (i, rule) in spec.egress.iter().flatten().enumerate() {
            let rp = sp.child("egress").index(i);
            for (j, port) in rule.ports.iter().flatten().enumerate() {
                validate_np_port(port, &rp.child("ports").index(j), &mut errs);
            }
            for (j, peer) in rule.to.iter().flatten().enumerate() {
                validate_np_peer(peer, &rp.child("to").index(j), &mut errs);
            }
        }
        let types = spec.policy_types.as_deref().unwrap_or(&[]);
        for (i, t) in types.iter().enumerate() {
            if t != "Ingress" && t != "Egress" {
                errs.push(FieldError::not_supported(
                    &sp.child("policyTypes").index(i),
                    t.as_str(),
                    &["Egress", "Ingress"],
                ));
            }
        }
        if types.len() > 2 {
            errs.push(FieldError::invalid(
                &sp.child("policyTypes"),
                json(&types),
                "may not specify more than two policyTypes",
            ));
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

fn validate_ingress_backend(b: &networking::IngressBackend, path: &FieldPath, errs: &mut Errs) {
    match (&b.service, &b.resource) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path,
            "",
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            path,
            "",
            "resource or service backend is required",
        )),
        _ => {}
    }
    if let Some(svc) = &b.service {
        let sp = path.child("service");
        if svc.name.is_empty() {
            errs.push(FieldError::required(&sp.child("name"), ""));
        } else {
            msgs_invalid(
                is_dns1035_label(&svc.name),
                &svc.name,
                &sp.child("name"),
                errs,
            );
        }
        let pp = sp.child("port");
        match &svc.port {
            None => errs.push(FieldError::required(&pp, "port name or number is required")),
            Some(port) => {
                let name = s(&port.name);
                match (name.is_empty(), port.number) {
                    (false, Some(_)) => errs.push(FieldError::invalid(
                        &pp,
                        json(port),
                        "cannot set both port name & port number",
                    )),
                    (true, None) => {
                        errs.push(FieldError::required(&pp, "port name or number is required"))
                    }
                    (false, None) => msgs_invalid(
                        ferrokube_apimachinery::validation::is_valid_port_name(name),
                        name,
                        &pp.child("name"),
                        errs,
                    ),
                    (true, Some(n)) => port_num(n, &pp.child("number"), errs),
                }
            }
        }
    }
    if let Some(r) = &b.resource {
        if r.kind.is_empty() {
            errs.push(FieldError::required(
                &path.child("resource").child("kind"),
                "",
            ));
        }
        if r.name.is_empty() {
            errs.push(FieldError::required(
                &path.child("resource").child("name"),
                "",
            ));
        }
    }
}

fn validate_ingress_host(host: &str, path: &FieldPath, errs: &mut Errs) {
    if host.parse::<std::net::IpAddr>().is_ok() {
        errs.push(FieldError::invalid(
            path,
            host,
            "must be a DNS name, not an IP address",
        ));
        return;
    }
    let check = host.strip_prefix("*.").unwrap_or(host);
    if host.contains('*') && !host.starts_with("*.") || check.contains('*') {
        errs.push(FieldError::invalid(
            path,
            host,
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
        ));
        return;
    }
    msgs_invalid(is_dns1123_subdomain(check), host, path, errs);
}

impl Validate for networking::Ingress {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = networking::IngressSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        let rules = spec.rules.as_deref().unwrap_or(&[]);
        if spec.default_backend.is_none() && rules.is_empty() {
            errs.push(FieldError::invalid(
                &sp,
                json(&spec.rules),
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if let Some(b) = &spec.default_backend {
            validate_ingress_backend(b, &sp.child("defaultBackend"), &mut errs);
        }
        if let Some(class) = spec.ingress_class_name.as_deref() {
            dns_subdomain(class, &sp.child("ingressClassName"), &mut errs);
        }
        for (i, rule) in rules.iter().enumerate() {
            let rp = sp.child("rules").index(i);
            if let Some(host) = rule.host.as_deref().filter(|h| !h.is_empty()) {
                validate_ingress_host(host, &rp.child("host"), &mut errs);
            }
            let Some(http) = &rule.http else { continue };
            let hp = rp.child("http").child("paths");
            if http.paths.is_empty() {
                errs.push(FieldError::required(&hp, ""));
            }
            for (j, path) in http.paths.iter().enumerate() {
                let pp = hp.index(j);
                let path_value = s(&path.path);
                match path.path_type.as_str() {
                    "Exact" | "Prefix" => {
                        if !path_value.starts_with('/') {
                            errs.push(FieldError::invalid(
                                &pp.child("path"),
                                path_value,
                                "must be an absolute path",
                            ));
                        } else if path_value.contains("//") {
                            errs.push(FieldError::invalid(
                                &pp.child("path"),
                                path_value,
                                "must not contain '//'",
                            ));
                        }
                    }
                    "ImplementationSpecific" => {
                        if !path_value.is_empty() && !path_value.starts_with('/') {
                            errs.push(FieldError::invalid(
                                &pp.child("path"),
                                path_value,
                                "must be an absolute path",
                            ));
                        }
                    }
                    "" => errs.push(FieldError::required(
                        &pp.child("pathType"),
                        "pathType must be specified",
                    )),
                    other => errs.push(FieldError::not_supported(
                        &pp.child("pathType"),
                        other,
                        &["Exact", "ImplementationSpecific", "Prefix"],
                    )),
                }
                validate_ingress_backend(&path.backend, &pp.child("backend"), &mut errs);
            }
        }
        for (i, tls) in spec.tls.iter().flatten().enumerate() {
            for (j, host) in tls.hosts.iter().flatten().enumerate() {
                validate_ingress_host(
                    host,
                    &sp.child("tls").index(i).child("hosts").index(j),
                    &mut errs,
                );
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

impl Validate for networking::IngressClass {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = networking::IngressClassSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        let controller = s(&spec.controller);
        let cp = sp.child("controller");
        if controller.is_empty() {
            errs.push(FieldError::required(&cp, ""));
        } else if controller.len() > 250 {
            errs.push(FieldError::too_long(&cp, Some(250)));
        } else {
            domain_prefixed_path(controller, &cp, &mut errs);
        }
        if let Some(params) = &spec.parameters {
            let pp = sp.child("parameters");
            if params.kind.is_empty() {
                errs.push(FieldError::required(&pp.child("kind"), ""));
            }
            if params.name.is_empty() {
                errs.push(FieldError::required(&pp.child("name"), ""));
            }
            match s(&params.scope) {
                "Cluster" => {
                    if params.namespace.is_some() {
                        errs.push(FieldError::forbidden(
                            &pp.child("namespace"),
                            "`parameters.scope` is set to 'Cluster'",
                        ));
                    }
                }
                "Namespace" => {
                    if s(&params.namespace).is_empty() {
                        errs.push(FieldError::required(
                            &pp.child("namespace"),
                            "`parameters.scope` is set to 'Namespace'",
                        ));
                    }
                }
                "" => errs.push(FieldError::required(&pp.child("scope"), "")),
                other => errs.push(FieldError::not_supported(
                    &pp.child("scope"),
                    other,
                    &["Cluster", "Namespace"],
                )),
            }
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let c = |o: &networking::IngressClass| o.spec.as_ref().and_then(|s| s.controller.clone());
        immutable(&c(self), &c(old), &p("spec").child("controller"), &mut errs);
        errs
    }
}

// --- autoscaling -----------------------------------------------------------------

const METRIC_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];

fn validate_hpa_rules(rules: &autoscaling::HPAScalingRules, path: &FieldPath, errs: &mut Errs) {
    if let Some(w) = rules.stabilization_window_seconds
        && !(0..=3600).contains(&w)
    {
        errs.push(FieldError::invalid(
            &path.child("stabilizationWindowSeconds"),
            w,
            "must be less than or equal to 3600",
        ));
    }
    enum_optional(
        &rules.select_policy,
        &["Disabled", "Max", "Min"],
        &path.child("selectPolicy"),
        errs,
    );
    let policies = rules.policies.as_deref().unwrap_or(&[]);
    if policies.is_empty() && s(&rules.select_policy) != "Disabled" {
        errs.push(FieldError::required(
            &path.child("policies"),
            "must specify at least one Policy",
        ));
    }
    for (i, pol) in policies.iter().enumerate() {
        let pp = path.child("policies").index(i);
        if pol.type_ != "Pods" && pol.type_ != "Percent" {
            errs.push(FieldError::not_supported(
                &pp.child("type"),
                pol.type_.as_str(),
                &["Percent", "Pods"],
            ));
        }
        if pol.value <= 0 {
            errs.push(FieldError::invalid(
                &pp.child("value"),
                pol.value,
                "must be greater than zero",
            ));
        }
        if pol.period_seconds <= 0 {
            errs.push(FieldError::invalid(
                &pp.child("periodSeconds"),
                pol.period_seconds,
                "must be greater than zero",
            ));
        } else if pol.period_seconds > 1800 {
            errs.push(FieldError::invalid(
                &pp.child("periodSeconds"),
                pol.period_seconds,
                "must be less than or equal to 1800",
            ));
        }
    }
}

impl Validate for autoscaling::HorizontalPodAutoscaler {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return errs;
        };
        if let Some(min) = spec.min_replicas
            && min < 1
        {
            errs.push(FieldError::invalid(
                &sp.child("minReplicas"),
                min,
                "must be greater than or equal to 1",
            ));
        }
        if spec.max_replicas < 1 {
            errs.push(FieldError::invalid(
                &sp.child("maxReplicas"),
                spec.max_replicas,
                "must be greater than 0",
            ));
        }
        if let Some(min) = spec.min_replicas
            && spec.max_replicas < min
        {
            errs.push(FieldError::invalid(
                &sp.child("maxReplicas"),
                spec.max_replicas,
                "must be greater than or equal to `minReplicas`",
            ));
        }
        let tp = sp.child("scaleTargetRef");
        let target = &spec.scale_target_ref;
        if target.kind.is_empty() {
            errs.push(FieldError::required(&tp.child("kind"), ""));
        } else {
            msgs_invalid(
                validate_path_segment_name(&target.kind, false),
                &target.kind,
                &tp.child("kind"),
                &mut errs,
            );
        }
        if target.name.is_empty() {
            errs.push(FieldError::required(&tp.child("name"), ""));
        } else {
            msgs_invalid(
                validate_path_segment_name(&target.name, false),
                &target.name,
                &tp.child("name"),
                &mut errs,
            );
        }
        for (i, m) in spec.metrics.iter().flatten().enumerate() {
            let mp = sp.child("metrics").index(i);
            let set: Vec<&str> = [
                (m.container_resource.is_some(), "containerResource"),
                (m.external.is_some(), "external"),
                (m.object.is_some(), "object"),
                (m.pods.is_some(), "pods"),
                (m.resource.is_some(), "resource"),
            ]
            .into_iter()
            .filter_map(|(b, n)| b.then_some(n))
            .collect();
            if !METRIC_TYPES.contains(&m.type_.as_str()) {
                errs.push(FieldError::not_supported(
                    &mp.child("type"),
                    m.type_.as_str(),
                    METRIC_TYPES,
                ));
                continue;
            }
            let mut expected = m.type_.clone();
            if let Some(first) = expected.get_mut(0..1) {
                first.make_ascii_lowercase();
            }
            if !set.contains(&expected.as_str()) {
                errs.push(FieldError::required(
                    &mp.child(&expected),
                    "must populate information for the given metric source",
                ));
            }
            if set.len() > 1 || (set.len() == 1 && set[0] != expected) {
                errs.push(FieldError::forbidden(
                    &mp,
                    "must populate the given metric source only",
                ));
            }
        }
        if let Some(b) = &spec.behavior {
            if let Some(up) = &b.scale_up {
                validate_hpa_rules(up, &sp.child("behavior").child("scaleUp"), &mut errs);
            }
            if let Some(down) = &b.scale_down {
                validate_hpa_rules(down, &sp.child("behavior").child("scaleDown"), &mut errs);
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

/// Upstream validates the internal object, which has v2's shape: a v1 HPA is held to
/// the same rules, with the same field paths, once converted (the other metrics and
/// the behavior its annotations carry included).
impl Validate for k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler {
    fn validate_create(&self) -> Vec<FieldError> {
        hpa_v1_to_v2(self.clone()).validate_create()
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        hpa_v1_to_v2(self.clone()).validate_update(&hpa_v1_to_v2(old.clone()))
    }
}

// --- certificates.k8s.io ---------------------------------------------------------

const KEY_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// Upstream's check of `spec.request` (ParseCSR, then CheckSignature): a PEM
/// `CERTIFICATE REQUEST` block whose DER parses and whose self-signature verifies, so a
/// request the signers could never use is refused at create.
fn check_certificate_request(pem: &[u8]) -> Result<(), String> {
    use x509_parser::prelude::FromDer as _;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, request) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    request
        .verify_signature()
        .map_err(|_| "x509: certificate request signature does not verify".to_string())
}

impl Validate for certificates::CertificateSigningRequest {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let spec = &self.spec;
        if let Err(message) = check_certificate_request(&spec.request.0) {
            errs.push(FieldError::invalid(
                &sp.child("request"),
                serde_json::Value::Array(Vec::new()),
                &message,
            ));
        }
        let signer = spec.signer_name.as_str();
        let np = sp.child("signerName");
        if signer.is_empty() {
            errs.push(FieldError::required(&np, ""));
        } else {
            match signer.split_once('/') {
                None => errs.push(FieldError::invalid(&np, signer, "must be a fully qualified domain and path of the form 'example.com/signer-name'")),
                Some((domain, path)) => {
                    msgs_invalid(is_dns1123_subdomain(domain), signer, &np, &mut errs);
                    if path.is_empty() {
                        errs.push(FieldError::invalid(&np, signer, "validating path: path may not be empty"));
                    }
                }
            }
        }
        let usages = spec.usages.as_deref().unwrap_or(&[]);
        if usages.is_empty() {
            errs.push(FieldError::required(&sp.child("usages"), ""));
        }
        let mut seen = BTreeSet::new();
        for (i, u) in usages.iter().enumerate() {
            let up = sp.child("usages").index(i);
            if !KEY_USAGES.contains(&u.as_str()) {
                errs.push(FieldError::not_supported(&up, u.as_str(), KEY_USAGES));
            } else if !seen.insert(u.clone()) {
                errs.push(FieldError::duplicate(&up, u.as_str()));
            }
        }
        if let Some(e) = spec.expiration_seconds
            && e < 600
        {
            errs.push(FieldError::invalid(
                &sp.child("expirationSeconds"),
                e,
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(&self.spec, &old.spec, &p("spec"), &mut errs);
        errs
    }
}
