//! The EndpointSlice mirroring controller (upstream
//! `pkg/controller/endpointslicemirroring`): custom Endpoints of Services without a
//! selector are mirrored into EndpointSlices labelled
//! `endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io`
//! and `kubernetes.io/service-name`, owned by the Endpoints. At most 1000 addresses of
//! each subset are mirrored (`--mirroring-max-endpoints-per-subset`); Endpoints
//! labelled `endpointslice.kubernetes.io/skip-mirror: "true"` are not; the slices go
//! when the Endpoints or the Service go, or when the Service gets a selector.
//!
//! Pure part: [`desired_slices`] (Endpoints -> slices, one per address family and port
//! set). The reconcile matches them to the existing mirrored slices by that key.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::endpointslice::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
use crate::replicaset::is_not_found;
use crate::{Action, Controller, Error, Result, split_key};

/// The managed-by value of mirrored slices.
pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
/// Endpoints carrying this label set to "true" are not mirrored.
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Upstream's `--mirroring-max-endpoints-per-subset` default.
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;
/// Annotations of the Endpoints that are not copied (upstream `cloneAndRemoveKeys`).
const NOT_COPIED_ANNOTATIONS: &[&str] = &[
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// The slices mirroring `ep` (of the Service `service`), without names: one per
/// address type and port set, each of at most `max` endpoints; at most `max`
/// addresses of each subset (ready ones first, as upstream). Invalid IPs are skipped.
pub fn desired_slices(ep: &Endpoints, max: usize) -> Vec<EndpointSlice> {
    let name = ep.metadata.name.clone().unwrap_or_default();
    // (address type, ports as JSON) -> endpoints, in subset order.
    let mut groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)> =
        BTreeMap::new();
    for subset in ep.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: p.name.clone(),
                port: Some(p.port),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ports_key = serde_json::to_string(&ports).unwrap_or_default();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        for (addr, is_ready) in ready.chain(not_ready).take(max) {
            let Some(family) = address_type(&addr.ip) else {
                continue;
            };
            groups
                .entry((family.to_string(), ports_key.clone()))
                .or_insert_with(|| (ports.clone(), Vec::new()))
                .1
                .push(endpoint(addr, is_ready));
        }
    }
    let mut labels: BTreeMap<String, String> = ep.metadata.labels.clone().unwrap_or_default();
    labels.remove(LABEL_SKIP_MIRROR);
    labels.insert(LABEL_SERVICE_NAME.into(), name.clone());
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    let mut annotations = ep.metadata.annotations.clone().unwrap_or_default();
    for a in NOT_COPIED_ANNOTATIONS {
        annotations.remove(*a);
    }
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: name.clone(),
        uid: ep.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let mut out = Vec::new();
    for ((family, _), (ports, endpoints)) in groups {
        for chunk in endpoints.chunks(max.max(1)) {
            out.push(EndpointSlice {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{name}-")),
                    namespace: ep.metadata.namespace.clone(),
                    labels: Some(labels.clone()),
                    annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                    owner_references: Some(vec![owner.clone()]),
                    ..Default::default()
                },
                address_type: family.clone(),
                endpoints: chunk.to_vec(),
                ports: Some(ports.clone()),
            });
        }
    }
    out
}

fn address_type(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

fn endpoint(a: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![a.ip.clone()],
        hostname: a.hostname.clone(),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What identifies a slice across reconciles: address type and ports.
fn slice_key(s: &EndpointSlice) -> (String, String) {
    (
        s.address_type.clone(),
        serde_json::to_string(&s.ports.clone().unwrap_or_default()).unwrap_or_default(),
    )
}

/// The Service key a mirrored slice belongs to.
fn mirrored_slice_of(s: &EndpointSlice) -> Option<String> {
    let l = s.metadata.labels.as_ref()?;
    if l.get(LABEL_MANAGED_BY).map(String::as_str) != Some(CONTROLLER_NAME) {
        return None;
    }
    Some(key_of(
        s.metadata.namespace.as_deref(),
        l.get(LABEL_SERVICE_NAME)?,
    ))
}

/// The EndpointSlice mirroring controller.
pub struct EndpointSliceMirroringController {
    client: kube::Client,
    services: Store<Service>,
    endpoints: Store<Endpoints>,
    slices: Store<EndpointSlice>,
    max_per_subset: usize,
}

impl EndpointSliceMirroringController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(EndpointSliceMirroringController {
            client,
            services: factory.informer::<Service>().store(),
            endpoints: factory.informer::<Endpoints>().store(),
            slices: factory.informer::<EndpointSlice>().store(),
            max_per_subset: MAX_ENDPOINTS_PER_SUBSET,
        })
    }
}

#[async_trait::async_trait]
impl Controller for EndpointSliceMirroringController {
    fn name(&self) -> &'static str {
        "endpointslice_mirroring"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<Service>().add_event_handler(
            move |n: Notification<Service>| q.add(object_key(&**n.object())),
            None,
        );
        let q = queue.clone();
        factory.informer::<Endpoints>().add_event_handler(
            move |n: Notification<Endpoints>| q.add(object_key(&**n.object())),
            None,
        );
        let q = queue.clone();
        factory.informer::<EndpointSlice>().add_event_handler(
            move |n: Notification<EndpointSlice>| {
                if let Some(k) = mirrored_slice_of(n.object()) {
                    q.add(k);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, _) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        let existing: Vec<EndpointSlice> = self
            .slices
            .list_namespace(ns)
            .iter()
            .filter(|s| mirrored_slice_of(s).as_deref() == Some(key))
            .map(|s| (**s).clone())
            .collect();
        let svc = self.services.get(key);
        let ep = self.endpoints.get(key);
        let mirror = match (&svc, &ep) {
            (Some(svc), Some(ep)) => {
                let has_selector = svc
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|s| !s.is_empty());
                let skip = ep
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_SKIP_MIRROR))
                    .is_some_and(|v| v == "true");
                (!has_selector && !skip && ep.metadata.deletion_timestamp.is_none())
                    .then(|| desired_slices(ep, self.max_per_subset))
            }
            _ => None,
        };
        let desired = mirror.unwrap_or_default();
        // Pair desired slices with existing ones of the same key (and owner).
        let uid = ep.as_ref().and_then(|e| e.metadata.uid.clone());
        let mut pool: HashMap<(String, String), Vec<EndpointSlice>> = HashMap::new();
        let mut delete = Vec::new();
        for s in existing {
            let owned_by_current = s
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.kind == "Endpoints" && Some(&r.uid) == uid.as_ref());
            if owned_by_current {
                pool.entry(slice_key(&s)).or_default().push(s);
            } else {
                delete.push(s);
            }
        }
        let mut create = Vec::new();
        let mut update = Vec::new();
        for want in desired {
            match pool.get_mut(&slice_key(&want)).and_then(|v| v.pop()) {
                Some(have) => {
                    if have.endpoints != want.endpoints
                        || have.metadata.labels != want.metadata.labels
                        || have.metadata.annotations != want.metadata.annotations
                    {
                        let mut s = want;
                        s.metadata.name = have.metadata.name.clone();
                        s.metadata.generate_name = None;
                        s.metadata.resource_version = have.metadata.resource_version.clone();
                        update.push(s);
                    }
                }
                None => create.push(want),
            }
        }
        delete.extend(pool.into_values().flatten());
        crate::endpointslice::reuse_for_creates(&mut delete, &mut create, &mut update, |s| {
            crate::endpointslice::owned_by(s, "v1", "Endpoints", uid.as_deref())
        });
        for s in &delete {
            let n = s.metadata.name.as_deref().unwrap_or_default();
            match api.delete(n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for s in &update {
            api.replace(
                s.metadata.name.as_deref().unwrap_or_default(),
                &PostParams::default(),
                s,
            )
            .await?;
        }
        for s in &create {
            api.create(&PostParams::default(), s).await?;
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoints(v: serde_json::Value) -> Endpoints {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn subsets_become_slices_per_family_and_ports() {
        let ep = endpoints(json!({
            "metadata": {"name": "ext", "namespace": "default", "uid": "u1",
                         "labels": {"team": "a", LABEL_SKIP_MIRROR: "false"},
                         "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "x", "note": "y"}},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1", "hostname": "h1"}, {"ip": "fd00::1"}, {"ip": "not-an-ip"}],
                 "notReadyAddresses": [{"ip": "10.0.0.2", "nodeName": "n1"}],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                {"addresses": [{"ip": "10.0.0.3"}],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                {"addresses": [{"ip": "10.0.0.4"}],
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
            ]
        }));
        let slices = desired_slices(&ep, MAX_ENDPOINTS_PER_SUBSET);
        assert_eq!(slices.len(), 3);
        let v4_http = slices
            .iter()
            .find(|s| s.address_type == "IPv4" && s.ports.as_ref().unwrap()[0].port == Some(80))
            .unwrap();
        let ips: Vec<(&str, Option<bool>)> = v4_http
            .endpoints
            .iter()
            .map(|e| {
                (
                    e.addresses[0].as_str(),
                    e.conditions.as_ref().unwrap().ready,
                )
            })
            .collect();
        assert_eq!(
            ips,
            vec![
                ("10.0.0.1", Some(true)),
                ("10.0.0.2", Some(false)),
                ("10.0.0.3", Some(true))
            ]
        );
        assert_eq!(v4_http.endpoints[0].hostname.as_deref(), Some("h1"));
        assert_eq!(v4_http.endpoints[1].node_name.as_deref(), Some("n1"));
        let labels = v4_http.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_SERVICE_NAME], "ext");
        assert_eq!(labels[LABEL_MANAGED_BY], CONTROLLER_NAME);
        assert_eq!(labels["team"], "a");
        assert!(!labels.contains_key(LABEL_SKIP_MIRROR));
        let ann = v4_http.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann.len(), 1);
        assert_eq!(ann["note"], "y");
        let owner = &v4_http.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Endpoints", "u1")
        );
        assert_eq!(v4_http.metadata.generate_name.as_deref(), Some("ext-"));
        assert!(slices.iter().any(|s| s.address_type == "IPv6"));
    }

    #[test]
    fn at_most_max_addresses_per_subset() {
        let addrs: Vec<_> = (0..1200)
            .map(|i| json!({"ip": format!("10.1.{}.{}", i / 250, i % 250)}))
            .collect();
        let ep = endpoints(json!({
            "metadata": {"name": "big", "namespace": "default"},
            "subsets": [{"addresses": addrs, "notReadyAddresses": [{"ip": "10.9.9.9"}],
                         "ports": [{"port": 80}]}]
        }));
        let slices = desired_slices(&ep, MAX_ENDPOINTS_PER_SUBSET);
        let total: usize = slices.iter().map(|s| s.endpoints.len()).sum();
        assert_eq!(total, 1000);
        // Ready addresses are kept first.
        assert!(
            slices
                .iter()
                .flat_map(|s| &s.endpoints)
                .all(|e| e.addresses[0] != "10.9.9.9")
        );
        assert!(desired_slices(&endpoints(json!({"metadata": {"name": "e"}})), 1000).is_empty());
    }
}
