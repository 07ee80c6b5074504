//! The EndpointSlice controller (upstream `pkg/controller/endpointslice` and
//! `staging/.../endpointslice` reconciler).
//!
//! Pure part: [`pod_endpoint`] (addresses, readiness/serving/terminating conditions,
//! `publishNotReadyAddresses`), [`pod_ports`] (target ports resolved by name),
//! [`plan_slices`] (packing at most [`MAX_ENDPOINTS_PER_SLICE`] endpoints per slice,
//! reusing existing slices, placeholder slice). IO part: [`EndpointSliceController`].
//! [`watch_services_and_pods`] is shared with the Endpoints controller, and so is
//! [`trigger_time`] (the `endpoints.kubernetes.io/last-change-trigger-time` annotation
//! put on every slice a sync creates or updates). [`own_writes`] holds a sync back while
//! the informer cache has not shown the controller's last writes (upstream's stale-slices
//! check).

pub mod own_writes;
pub mod trigger_time;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::is_not_found;
use crate::util::{
    controller_of, is_pod_ready, labels, map_selector_matches, new_controller_ref, pod_node,
};
use crate::{Action, Controller, Error, Result, split_key};
use own_writes::OwnWrites;
use trigger_time::{TriggerTimeTracker, set_trigger_time};

/// Upstream's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The selector of a Service that endpoints are managed for (`None`: no selector, or an
/// ExternalName Service, which upstream's controllers give no endpoints either).
pub fn service_selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

/// Whether the Service selects the pod.
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    svc.metadata.namespace == pod.metadata.namespace
        && service_selector(svc).is_some_and(|s| map_selector_matches(s, &labels(&pod.metadata)))
}

fn publish_not_ready(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Upstream `ShouldPodBeInEndpoints`: has an IP, not terminal (per restartPolicy), and
/// (unless `include_terminating`) not being deleted.
pub fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .unwrap_or("");
    if ip.is_empty() {
        return false;
    }
    if !include_terminating && pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = crate::util::pod_phase(pod);
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => phase != "Failed" && phase != "Succeeded",
        Some("OnFailure") => phase != "Succeeded",
        _ => phase != "Failed" && phase != "Succeeded",
    }
}

/// Upstream `FindPort`: the pod's port for a service port (named target ports are
/// looked up in the pod's containers by name and protocol).
pub fn find_port(pod: &Pod, port: &k8s_openapi::api::core::v1::ServicePort) -> Option<i32> {
    let proto = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| {
                p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == proto
            })
            .map(|p| p.container_port),
        Some(IntOrString::Int(i)) if *i != 0 => Some(*i),
        _ => Some(port.port),
    }
}

/// The endpoint ports of a pod for a Service (ports that do not resolve are left out).
pub fn pod_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let mut out: Vec<EndpointPort> = svc
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|sp| {
            find_port(pod, sp).map(|port| EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
    out
}

/// The pod's reference as endpoints carry it.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The pod's hostname for a headless-style service: set when the pod's
/// `spec.hostname` is set and its `spec.subdomain` is the Service's name.
pub fn pod_hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let s = pod.spec.as_ref()?;
    let h = s.hostname.as_ref().filter(|h| !h.is_empty())?;
    (s.subdomain.as_deref() == svc.metadata.name.as_deref()).then(|| h.clone())
}

/// The endpoint of a pod (upstream `podToEndpoint`).
pub fn pod_endpoint(svc: &Service, pod: &Pod, zone: Option<String>) -> Endpoint {
    let ready = is_pod_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = publish_not_ready(svc);
    let ips: Vec<String> = pod
        .status
        .as_ref()
        .map(|s| {
            let mut v: Vec<String> = s.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect();
            if v.is_empty() {
                v.extend(s.pod_ip.clone());
            }
            v
        })
        .unwrap_or_default();
    Endpoint {
        addresses: ips.into_iter().take(1).collect(),
        conditions: Some(EndpointConditions {
            ready: Some(publish || (ready && !terminating)),
            serving: Some(publish || ready),
            terminating: Some(terminating),
        }),
        hostname: pod_hostname(svc, pod),
        node_name: pod_node(pod).map(String::from),
        zone,
        target_ref: Some(pod_ref(pod)),
        deprecated_topology: None,
        hints: None,
    }
}

/// `IPv4` or `IPv6` for an address.
pub fn address_type(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

/// The desired endpoints of a Service, grouped by (address type, port set).
pub type Desired = BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)>;

fn ports_key(ports: &[EndpointPort]) -> String {
    serde_json::to_string(ports).unwrap_or_default()
}

/// Desired endpoints of `svc` from `pods`; `zone_of` maps a node name to its zone.
pub fn desired_endpoints(
    svc: &Service,
    pods: &[&Pod],
    zone_of: &dyn Fn(&str) -> Option<String>,
) -> Desired {
    let mut out: Desired = BTreeMap::new();
    for pod in pods {
        if !selects(svc, pod) || !should_pod_be_in_endpoints(pod, true) {
            continue;
        }
        let ports = pod_ports(svc, pod);
        let ep = pod_endpoint(svc, pod, pod_node(pod).and_then(zone_of));
        let Some(ip) = ep.addresses.first() else {
            continue;
        };
        let key = (address_type(ip).to_string(), ports_key(&ports));
        out.entry(key)
            .or_insert_with(|| (ports, Vec::new()))
            .1
            .push(ep);
    }
    for (_, eps) in out.values_mut() {
        eps.sort_by(|a, b| a.addresses.cmp(&b.addresses));
    }
    out
}

/// What to write.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SlicePlan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<String>,
}

fn ep_key(e: &Endpoint) -> String {
    e.addresses.join(",")
}

/// Labels of a managed slice: the Service's own labels plus the managed-by,
/// service-name and (headless) labels.
pub fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut l = labels(&svc.metadata);
    l.remove(LABEL_HEADLESS);
    l.insert(
        LABEL_SERVICE_NAME.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    l.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    if is_headless(svc) {
        l.insert(LABEL_HEADLESS.into(), String::new());
    }
    l
}

fn new_slice(
    svc: &Service,
    address_type: &str,
    ports: Option<Vec<EndpointPort>>,
    eps: Vec<Endpoint>,
) -> EndpointSlice {
    let name = svc.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(slice_labels(svc)),
            owner_references: Some(vec![new_controller_ref(
                "v1",
                "Service",
                &name,
                svc.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints: eps,
        ports,
    }
}

/// Upstream's reconcile by port mapping: existing slices keep the endpoints that are
/// still desired (updated in place), lose the others, and are deleted when empty;
/// remaining endpoints fill slices already being updated, then one unchanged slice
/// with room for all of them, then new slices of at most `max` endpoints. With no
/// endpoints at all, one placeholder slice (no ports, no endpoints) remains.
pub fn plan_slices(
    svc: &Service,
    desired: &Desired,
    existing: &[EndpointSlice],
    max: usize,
) -> SlicePlan {
    let mut plan = SlicePlan::default();
    let want_labels = slice_labels(svc);
    let mut by_key: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    let mut placeholders: Vec<&EndpointSlice> = Vec::new();
    for s in existing {
        if s.ports.is_none() && s.endpoints.is_empty() {
            placeholders.push(s);
            continue;
        }
        let key = (
            s.address_type.clone(),
            ports_key(s.ports.as_deref().unwrap_or_default()),
        );
        by_key.entry(key).or_default().push(s);
    }
    let mut keys: BTreeSet<(String, String)> = desired.keys().cloned().collect();
    keys.extend(by_key.keys().cloned());
    for key in keys {
        let (ports, want) = desired
            .get(&key)
            .map(|(p, e)| (Some(p.clone()), e.clone()))
            .unwrap_or((None, Vec::new()));
        let mut remaining: BTreeMap<String, Endpoint> =
            want.into_iter().map(|e| (ep_key(&e), e)).collect();
        let mut to_update: Vec<EndpointSlice> = Vec::new();
        let mut unchanged: Vec<EndpointSlice> = Vec::new();
        for s in by_key.get(&key).into_iter().flatten() {
            let mut changed = false;
            let mut kept = Vec::new();
            for e in &s.endpoints {
                match remaining.remove(&ep_key(e)) {
                    Some(w) => {
                        if &w != e {
                            changed = true;
                        }
                        kept.push(w);
                    }
                    None => changed = true,
                }
            }
            let name = s.metadata.name.clone().unwrap_or_default();
            if kept.is_empty() {
                plan.delete.push(name);
                continue;
            }
            let mut ns = (*s).clone();
            ns.endpoints = kept;
            if ns.metadata.labels.as_ref() != Some(&want_labels) {
                ns.metadata.labels = Some(want_labels.clone());
                changed = true;
            }
            if changed {
                to_update.push(ns);
            } else {
                unchanged.push(ns);
            }
        }
        let mut left: Vec<Endpoint> = remaining.into_values().collect();
        // 1. Fill slices that are being updated anyway, fullest first.
        to_update.sort_by_key(|s| std::cmp::Reverse(s.endpoints.len()));
        for s in to_update.iter_mut() {
            while s.endpoints.len() < max && !left.is_empty() {
                s.endpoints.push(left.remove(0));
            }
        }
        // 2. One unchanged slice with room for everything left.
        if !left.is_empty() {
            unchanged.sort_by_key(|s| std::cmp::Reverse(s.endpoints.len()));
            if let Some(pos) = unchanged
                .iter()
                .position(|s| s.endpoints.len() + left.len() <= max)
            {
                let mut s = unchanged.remove(pos);
                s.endpoints.append(&mut left);
                to_update.push(s);
            }
        }
        // 3. New slices.
        while !left.is_empty() {
            let n = left.len().min(max);
            let chunk: Vec<Endpoint> = left.drain(..n).collect();
            plan.create
                .push(new_slice(svc, &key.0, ports.clone(), chunk));
        }
        plan.update.extend(to_update);
    }
    // Placeholder: exactly one when nothing else will exist.
    let will_exist = plan.create.len()
        + plan.update.len()
        + existing
            .iter()
            .filter(|s| !(s.ports.is_none() && s.endpoints.is_empty()))
            .count()
        - plan.delete.len();
    if will_exist == 0 {
        match placeholders.split_first() {
            Some((keep, rest)) => {
                if keep.metadata.labels.as_ref() != Some(&want_labels) {
                    let mut k = (*keep).clone();
                    k.metadata.labels = Some(want_labels.clone());
                    plan.update.push(k);
                }
                plan.delete.extend(
                    rest.iter()
                        .map(|s| s.metadata.name.clone().unwrap_or_default()),
                );
            }
            None => plan.create.push(new_slice(svc, "IPv4", None, Vec::new())),
        }
    } else {
        plan.delete.extend(
            placeholders
                .iter()
                .map(|s| s.metadata.name.clone().unwrap_or_default()),
        );
    }
    reuse_deleted_slices(svc, existing, &mut plan);
    plan
}

/// Upstream's `finalize`: a slice to delete takes the content of a slice to create (same
/// address type, owned by this Service) and is updated instead, so that watchers
/// (kube-proxy, the aggregator) never see the Service without a slice in between, as
/// they would with a delete before a create.
fn reuse_deleted_slices(svc: &Service, existing: &[EndpointSlice], plan: &mut SlicePlan) {
    let mut deleted: Vec<EndpointSlice> = plan
        .delete
        .iter()
        .filter_map(|n| {
            existing
                .iter()
                .find(|s| s.metadata.name.as_ref() == Some(n))
        })
        .cloned()
        .collect();
    reuse_for_creates(&mut deleted, &mut plan.create, &mut plan.update, |s| {
        owned_by(s, "v1", "Service", svc.metadata.uid.as_deref())
    });
    plan.delete = deleted
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
}

/// Whether `slice` has an owner reference to the `kind` of `uid`.
pub(crate) fn owned_by(
    slice: &EndpointSlice,
    api_version: &str,
    kind: &str,
    uid: Option<&str>,
) -> bool {
    slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == kind && r.api_version == api_version && Some(r.uid.as_str()) == uid)
}

/// Both slice controllers' share of upstream's `finalize`: while slices are to be
/// deleted and created, a slice to delete of the same address type that `owned` accepts
/// takes the content of the last one to create (keeping its name, uid and
/// resourceVersion, so the update is conditional) and moves to `update`.
pub(crate) fn reuse_for_creates(
    delete: &mut Vec<EndpointSlice>,
    create: &mut Vec<EndpointSlice>,
    update: &mut Vec<EndpointSlice>,
    owned: impl Fn(&EndpointSlice) -> bool,
) {
    let mut i = 0;
    while i < delete.len() {
        let Some(to_create) = create.last() else {
            break;
        };
        if delete[i].address_type == to_create.address_type && owned(&delete[i]) {
            let old = delete.remove(i);
            let Some(mut slice) = create.pop() else {
                break;
            };
            slice.metadata = ObjectMeta {
                labels: slice.metadata.labels.take(),
                owner_references: slice.metadata.owner_references.take(),
                annotations: slice.metadata.annotations.take(),
                ..old.metadata
            };
            update.push(slice);
        } else {
            i += 1;
        }
    }
}

// ---------------------------------------------------------------------------------
// IO
// ---------------------------------------------------------------------------------

/// Enqueues the Service keys affected by Service and pod events (shared by the
/// Endpoints and EndpointSlice controllers).
pub fn watch_services_and_pods(factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
    let q = queue.clone();
    factory.informer::<Service>().add_event_handler(
        move |n: Notification<Service>| q.add(object_key(&**n.object())),
        None,
    );
    let q = queue.clone();
    let services = factory.informer::<Service>().store();
    factory.informer::<Pod>().add_event_handler(
        move |n: Notification<Pod>| {
            let mut keys = BTreeSet::new();
            let mut add = |pod: &Pod| {
                for s in
                    services.list_namespace(pod.metadata.namespace.as_deref().unwrap_or_default())
                {
                    if selects(&s, pod) {
                        keys.insert(object_key(&*s));
                    }
                }
            };
            match &n {
                Notification::Updated { old, new } => {
                    if old.metadata.resource_version == new.metadata.resource_version {
                        return;
                    }
                    add(old);
                    add(new);
                }
                other => add(other.object()),
            }
            for k in keys {
                q.add(k);
            }
        },
        None,
    );
}

/// The EndpointSlice controller.
pub struct EndpointSliceController {
    client: kube::Client,
    services: Store<Service>,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    nodes: Store<Node>,
    max_per_slice: usize,
    trigger_times: TriggerTimeTracker,
    own_writes: OwnWrites,
}

impl EndpointSliceController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(EndpointSliceController {
            client,
            services: factory.informer::<Service>().store(),
            pods: factory.informer::<Pod>().store(),
            slices: factory.informer::<EndpointSlice>().store(),
            nodes: factory.informer::<Node>().store(),
            max_per_slice: MAX_ENDPOINTS_PER_SLICE,
            trigger_times: TriggerTimeTracker::new(),
            own_writes: OwnWrites::default(),
        })
    }
}

/// How soon a sync that found the cache behind this controller's writes runs again
/// (the slice's own event usually brings it back first).
const STALE_CACHE_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

fn managed_slice_of(s: &EndpointSlice) -> Option<String> {
    let l = s.metadata.labels.as_ref()?;
    if l.get(LABEL_MANAGED_BY).map(String::as_str) != Some(CONTROLLER_NAME) {
        return None;
    }
    let svc = l.get(LABEL_SERVICE_NAME)?;
    Some(ferrokube_client::informer::key_of(
        s.metadata.namespace.as_deref(),
        svc,
    ))
}

#[async_trait::async_trait]
impl Controller for EndpointSliceController {
    fn name(&self) -> &'static str {
        "endpointslice"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        watch_services_and_pods(factory, queue);
        let q = queue.clone();
        factory.informer::<EndpointSlice>().add_event_handler(
            move |n: Notification<EndpointSlice>| {
                if let Some(k) = managed_slice_of(n.object()) {
                    q.add(k);
                }
            },
            None,
        );
        // Nodes only feed zones; they are read from the cache.
        let _ = factory.informer::<Node>();
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        let existing: Vec<EndpointSlice> = self
            .slices
            .list_namespace(ns)
            .iter()
            .filter(|s| managed_slice_of(s).as_deref() == Some(key))
            .map(|s| (**s).clone())
            .collect();
        let Some(svc) = self.services.get(key) else {
            self.trigger_times.delete_service(key);
            self.own_writes.forget_service(key);
            // The Service is gone: its slices go with it (the GC would too).
            for s in existing {
                let n = s.metadata.name.unwrap_or_default();
                match api.delete(&n, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Action::Done);
        };
        if service_selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let _ = name;
        // Only slices owned by this incarnation of the Service.
        let existing: Vec<EndpointSlice> = existing
            .into_iter()
            .filter(|s| {
                controller_of(&s.metadata).is_none_or(|r| Some(&r.uid) == svc.metadata.uid.as_ref())
            })
            .collect();
        // Upstream's stale-slices check: wait (the cache's own event brings the key
        // back) rather than plan from a cache without this controller's last writes.
        if self.own_writes.cache_is_stale(key, &existing) {
            return Ok(Action::RequeueAfter(STALE_CACHE_RETRY));
        }
        let pods = self.pods.list_namespace(ns);
        let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        // Computed on every sync, also one that writes nothing, so that the tracker
        // knows what this sync saw (upstream).
        let selected: Vec<&Pod> = pods.iter().copied().filter(|p| selects(&svc, p)).collect();
        let trigger = self.trigger_times.compute(&svc, &selected);
        let nodes = self.nodes.clone();
        let zone_of = move |n: &str| {
            nodes
                .get(n)
                .and_then(|node| node.metadata.labels.as_ref()?.get(ZONE_LABEL).cloned())
        };
        let desired = desired_endpoints(&svc, &pods, &zone_of);
        let mut plan = plan_slices(&svc, &desired, &existing, self.max_per_slice);
        for s in plan.update.iter_mut().chain(plan.create.iter_mut()) {
            let mut annotations = s.metadata.annotations.take().unwrap_or_default();
            set_trigger_time(&mut annotations, trigger);
            s.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
        }
        for n in &plan.delete {
            match api.delete(n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(uid) = existing
                .iter()
                .find(|s| s.metadata.name.as_ref() == Some(n))
                .and_then(|s| s.metadata.uid.as_deref())
            {
                self.own_writes.deleted(key, uid);
            }
        }
        for s in &plan.update {
            let written = api
                .replace(
                    s.metadata.name.as_deref().unwrap_or_default(),
                    &PostParams::default(),
                    s,
                )
                .await?;
            self.own_writes.wrote(key, &written);
        }
        for s in &plan.create {
            let written = api.create(&PostParams::default(), s).await?;
            self.own_writes.wrote(key, &written);
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    pub fn svc(publish: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                labels: Some([("team".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "web".to_string())].into()),
                publish_not_ready_addresses: Some(publish),
                ports: Some(vec![
                    ServicePort {
                        name: Some("http".into()),
                        port: 80,
                        target_port: Some(IntOrString::String("web".into())),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                    ServicePort {
                        name: Some("metrics".into()),
                        port: 9090,
                        target_port: Some(IntOrString::Int(9091)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            status: None,
        }
    }

    pub fn pod(name: &str, ip: &str, ready: bool, container_port: i32) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("u-{name}")),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("web".into()),
                        container_port,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(ip.into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_selecting_services_other_than_external_name_get_endpoints() {
        let s = svc(false);
        let p = pod("a", "10.0.0.1", true, 8080);
        assert!(service_selector(&s).is_some() && selects(&s, &p));
        let mut external = s.clone();
        external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(service_selector(&external).is_none() && !selects(&external, &p));
        let mut no_selector = s.clone();
        no_selector.spec.as_mut().unwrap().selector = Some(Default::default());
        assert!(service_selector(&no_selector).is_none());
    }

    #[test]
    fn endpoint_conditions() {
        let s = svc(false);
        let mut p = pod("a", "10.0.0.1", true, 8080);
        let c = |e: Endpoint| {
            let c = e.conditions.unwrap();
            (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
        };
        assert_eq!(c(pod_endpoint(&s, &p, None)), (true, true, false));
        p.metadata.deletion_timestamp =
            Some(Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap()));
        assert_eq!(c(pod_endpoint(&s, &p, None)), (false, true, true));
        let unready = pod("b", "10.0.0.2", false, 8080);
        assert_eq!(c(pod_endpoint(&s, &unready, None)), (false, false, false));
        assert_eq!(
            c(pod_endpoint(&svc(true), &unready, None)),
            (true, true, false)
        );
        let e = pod_endpoint(&s, &unready, Some("z1".into()));
        assert_eq!(e.node_name.as_deref(), Some("n1"));
        assert_eq!(e.zone.as_deref(), Some("z1"));
        assert_eq!(e.target_ref.unwrap().name.as_deref(), Some("b"));
    }

    #[test]
    fn ports_by_name() {
        let s = svc(false);
        let ports = pod_ports(&s, &pod("a", "10.0.0.1", true, 8080));
        let got: Vec<(Option<String>, Option<i32>)> =
            ports.iter().map(|p| (p.name.clone(), p.port)).collect();
        assert_eq!(
            got,
            vec![
                (Some("http".into()), Some(8080)),
                (Some("metrics".into()), Some(9091))
            ]
        );
        // A pod without the named port gets only the numeric one.
        let mut p = pod("b", "10.0.0.2", true, 8080);
        p.spec.as_mut().unwrap().containers[0].ports = None;
        assert_eq!(pod_ports(&s, &p).len(), 1);
    }

    #[test]
    fn pod_filtering() {
        let mut p = pod("a", "", true, 1);
        assert!(!should_pod_be_in_endpoints(&p, true));
        p.status.as_mut().unwrap().pod_ip = Some("10.0.0.1".into());
        assert!(should_pod_be_in_endpoints(&p, true));
        p.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!should_pod_be_in_endpoints(&p, true));
        p.status.as_mut().unwrap().phase = Some("Failed".into());
        p.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
        assert!(should_pod_be_in_endpoints(&p, true));
    }

    fn plan_for(pods: &[Pod], existing: &[EndpointSlice]) -> SlicePlan {
        let s = svc(false);
        let refs: Vec<&Pod> = pods.iter().collect();
        let d = desired_endpoints(&s, &refs, &|_| None);
        plan_slices(&s, &d, existing, MAX_ENDPOINTS_PER_SLICE)
    }

    fn named(mut s: EndpointSlice, n: &str) -> EndpointSlice {
        s.metadata.name = Some(n.into());
        s
    }

    #[test]
    fn packing_caps_slices_at_100() {
        let pods: Vec<Pod> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.0.{}.{}", i / 200, i % 200),
                    true,
                    8080,
                )
            })
            .collect();
        let plan = plan_for(&pods, &[]);
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        let l = plan.create[0].metadata.labels.as_ref().unwrap();
        assert_eq!(l[LABEL_MANAGED_BY], CONTROLLER_NAME);
        assert_eq!(l[LABEL_SERVICE_NAME], "web");
        assert_eq!(l["team"], "a");
        assert_eq!(plan.create[0].address_type, "IPv4");
        assert_eq!(
            plan.create[0].metadata.owner_references.as_ref().unwrap()[0].uid,
            "svc-uid"
        );
    }

    #[test]
    fn existing_slices_are_reused() {
        let pods: Vec<Pod> = (0..5)
            .map(|i| pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, 8080))
            .collect();
        let first = plan_for(&pods, &[]);
        assert_eq!(first.create.len(), 1);
        let existing = vec![named(first.create[0].clone(), "web-abc")];
        // Steady state: nothing to do.
        assert_eq!(plan_for(&pods, &existing), SlicePlan::default());
        // A pod turns unready: the slice is updated in place.
        let mut changed = pods.clone();
        changed[2] = pod("p2", "10.0.0.2", false, 8080);
        let p = plan_for(&changed, &existing);
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.update.len(), 1);
        let e = p.update[0]
            .endpoints
            .iter()
            .find(|e| e.addresses[0] == "10.0.0.2")
            .unwrap();
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(false));
        // A new pod fits into the existing (unchanged) slice.
        let mut more = pods.clone();
        more.push(pod("p9", "10.0.0.9", true, 8080));
        let p = plan_for(&more, &existing);
        assert!(p.create.is_empty());
        assert_eq!(p.update[0].endpoints.len(), 6);
        // Every pod replaced at once: the slice is rewritten, not deleted and created.
        let replaced: Vec<Pod> = (0..5)
            .map(|i| pod(&format!("r{i}"), &format!("10.0.1.{i}"), true, 8080))
            .collect();
        let mut existing_rv = existing.clone();
        existing_rv[0].metadata.resource_version = Some("7".into());
        let p = plan_for(&replaced, &existing_rv);
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
        assert_eq!(p.update.len(), 1);
        let meta = &p.update[0].metadata;
        assert_eq!(
            (meta.name.as_deref(), meta.resource_version.as_deref()),
            (Some("web-abc"), Some("7"))
        );
        assert_eq!(meta.labels.as_ref().unwrap()[LABEL_SERVICE_NAME], "web");
        let addresses: Vec<&str> = p.update[0]
            .endpoints
            .iter()
            .map(|e| e.addresses[0].as_str())
            .collect();
        assert_eq!(addresses.len(), 5);
        assert!(
            addresses.iter().all(|a| a.starts_with("10.0.1.")),
            "{addresses:?}"
        );
        // All pods gone: the slice becomes the placeholder.
        let p = plan_for(&[], &existing);
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
        assert_eq!(p.update.len(), 1);
        assert_eq!(p.update[0].metadata.name.as_deref(), Some("web-abc"));
        assert!(p.update[0].endpoints.is_empty() && p.update[0].ports.is_none());
        // With the placeholder existing, nothing more happens.
        let ph = vec![named(p.update[0].clone(), "web-ph")];
        assert_eq!(plan_for(&[], &ph), SlicePlan::default());
        // Pods come back: the placeholder is filled.
        let p = plan_for(&pods, &ph);
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
        assert_eq!(p.update[0].metadata.name.as_deref(), Some("web-ph"));
        assert_eq!(p.update[0].endpoints.len(), 5);
        // A slice of another owner (an earlier Service of that name) is not reused.
        let mut foreign = existing.clone();
        foreign[0].metadata.owner_references.as_mut().unwrap()[0].uid = "old-uid".into();
        let p = plan_for(&replaced, &foreign);
        assert_eq!(p.delete, vec!["web-abc".to_string()]);
        assert_eq!(p.create.len(), 1);
    }

    #[test]
    fn different_port_sets_get_different_slices() {
        let mut pods: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, 8080))
            .collect();
        pods.push(pod("q", "10.0.1.1", true, 8081));
        let plan = plan_for(&pods, &[]);
        assert_eq!(plan.create.len(), 2);
        let v: serde_json::Value = serde_json::to_value(&plan.create).unwrap();
        assert!(v.to_string().contains("8081"));
        let _ = json!(null);
    }
}
