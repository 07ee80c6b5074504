//! The Endpoints controller (upstream `pkg/controller/endpoint`).
//!
//! Pure part: [`desired_subsets`] (ready pods in `addresses`, unready ones in
//! `notReadyAddresses`, `publishNotReadyAddresses`, repacked by port set as
//! upstream's `RepackSubsets`, truncated at 1000 addresses). IO part:
//! [`EndpointsController`], keyed by Service; each write carries the
//! `endpoints.kubernetes.io/last-change-trigger-time` of the change that caused it
//! ([`crate::endpointslice::trigger_time`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::endpointslice::trigger_time::{TriggerTimeTracker, set_trigger_time};
use crate::endpointslice::{
    LABEL_HEADLESS, find_port, pod_hostname, pod_ref, selects, service_selector,
    should_pod_be_in_endpoints, watch_services_and_pods,
};
use crate::replicaset::is_not_found;
use crate::util::{is_pod_ready, labels, pod_node};
use crate::{Action, Controller, Error, Result, split_key};

/// Upstream `maxCapacity`.
pub const MAX_CAPACITY: usize = 1000;
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

fn publish(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// Ports, ready and not-ready addresses of one port set.
type Group = (
    Vec<EndpointPort>,
    Vec<EndpointAddress>,
    Vec<EndpointAddress>,
);

/// The subsets of a Service's Endpoints from its pods, and whether they were truncated.
pub fn desired_subsets(svc: &Service, pods: &[&Pod]) -> (Vec<EndpointSubset>, bool) {
    let tolerate = publish(svc);
    // port set -> (ready, not ready)
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for pod in pods {
        if !selects(svc, pod) || !should_pod_be_in_endpoints(pod, tolerate) {
            continue;
        }
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let addr = EndpointAddress {
            ip,
            hostname: pod_hostname(svc, pod),
            node_name: pod_node(pod).map(String::from),
            target_ref: Some(pod_ref(pod)),
        };
        let mut ports: Vec<EndpointPort> = svc
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter_map(|sp| {
                find_port(pod, sp).map(|port| EndpointPort {
                    name: sp.name.clone(),
                    port,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let g = groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if tolerate || is_pod_ready(pod) {
            g.1.push(addr);
        } else {
            g.2.push(addr);
        }
    }
    let mut total = 0usize;
    let mut truncated = false;
    let mut out = Vec::new();
    for (_, (ports, mut ready, mut not_ready)) in groups {
        ready.sort_by(|a, b| a.ip.cmp(&b.ip));
        not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
        // Ready addresses first, then not-ready ones, up to the capacity.
        let room = MAX_CAPACITY.saturating_sub(total);
        if ready.len() > room {
            ready.truncate(room);
            truncated = true;
        }
        total += ready.len();
        let room = MAX_CAPACITY.saturating_sub(total);
        if not_ready.len() > room {
            not_ready.truncate(room);
            truncated = true;
        }
        total += not_ready.len();
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        out.push(EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then_some(ports),
        });
    }
    (out, truncated)
}

/// The labels of a Service's Endpoints.
pub fn endpoints_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut l = labels(&svc.metadata);
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        l.insert(LABEL_HEADLESS.into(), String::new());
    } else {
        l.remove(LABEL_HEADLESS);
    }
    l
}

/// The Endpoints controller.
pub struct EndpointsController {
    client: kube::Client,
    services: Store<Service>,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    trigger_times: TriggerTimeTracker,
}

impl EndpointsController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(EndpointsController {
            client,
            services: factory.informer::<Service>().store(),
            pods: factory.informer::<Pod>().store(),
            endpoints: factory.informer::<Endpoints>().store(),
            trigger_times: TriggerTimeTracker::new(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for EndpointsController {
    fn name(&self) -> &'static str {
        "endpoints"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        watch_services_and_pods(factory, queue);
        // Endpoints changed (or deleted) by someone else are put back.
        let q = queue.clone();
        let services = self.services.clone();
        factory.informer::<Endpoints>().add_event_handler(
            move |n: Notification<Endpoints>| {
                if let Notification::Deleted { obj, .. } = &n {
                    let k = ferrokube_client::informer::object_key(&**obj);
                    if services.get(&k).is_some() {
                        q.add(k);
                    }
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let Some(svc) = self.services.get(key) else {
            self.trigger_times.delete_service(key);
            // Upstream deletes the Endpoints of a deleted Service.
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::Done);
        };
        if service_selector(&svc).is_none() {
            return Ok(Action::Done);
        }
        let pods = self.pods.list_namespace(ns);
        let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        // Computed on every sync, also one that writes nothing, so that the tracker
        // knows what this sync saw (upstream).
        let selected: Vec<&Pod> = pods.iter().copied().filter(|p| selects(&svc, p)).collect();
        let trigger = self.trigger_times.compute(&svc, &selected);
        let (subsets, truncated) = desired_subsets(&svc, &pods);
        let want_labels = endpoints_labels(&svc);
        let current = self.endpoints.get(key);
        let mut ann: BTreeMap<String, String> = current
            .as_ref()
            .and_then(|e| e.metadata.annotations.clone())
            .unwrap_or_default();
        if truncated {
            ann.insert(OVER_CAPACITY.into(), "truncated".into());
        } else {
            ann.remove(OVER_CAPACITY);
        }
        if let Some(cur) = &current {
            // The trigger time alone never causes a write (upstream compares the
            // subsets, the labels and the over-capacity annotation).
            let same = cur.subsets.as_deref().unwrap_or_default() == subsets.as_slice()
                && cur.metadata.labels.clone().unwrap_or_default() == want_labels
                && cur.metadata.annotations.clone().unwrap_or_default() == ann;
            if same {
                return Ok(Action::Done);
            }
        }
        set_trigger_time(&mut ann, trigger);
        let mut ep = Endpoints {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                labels: Some(want_labels),
                annotations: (!ann.is_empty()).then_some(ann),
                ..Default::default()
            },
            subsets: (!subsets.is_empty()).then_some(subsets),
        };
        match current {
            Some(cur) => {
                ep.metadata.resource_version = cur.metadata.resource_version.clone();
                api.replace(name, &PostParams::default(), &ep).await?;
            }
            None => match api.create(&PostParams::default(), &ep).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Exists but not cached yet: overwrite with the fresh version.
                    if let Some(fresh) = api.get_opt(name).await? {
                        ep.metadata.resource_version = fresh.metadata.resource_version;
                        api.replace(name, &PostParams::default(), &ep).await?;
                    }
                }
                Err(e) => return Err(e.into()),
            },
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpointslice::tests::{pod, svc};

    #[test]
    fn ready_and_not_ready_addresses() {
        let a = pod("a", "10.0.0.1", true, 8080);
        let b = pod("b", "10.0.0.2", false, 8080);
        let (subsets, truncated) = desired_subsets(&svc(false), &[&b, &a]);
        assert!(!truncated);
        assert_eq!(subsets.len(), 1);
        let s = &subsets[0];
        assert_eq!(
            s.addresses
                .as_ref()
                .unwrap()
                .iter()
                .map(|a| a.ip.as_str())
                .collect::<Vec<_>>(),
            vec!["10.0.0.1"]
        );
        assert_eq!(s.not_ready_addresses.as_ref().unwrap()[0].ip, "10.0.0.2");
        let ports: Vec<(Option<&str>, i32)> = s
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.name.as_deref(), p.port))
            .collect();
        assert_eq!(ports, vec![(Some("http"), 8080), (Some("metrics"), 9091)]);
        // publishNotReadyAddresses puts everyone in addresses.
        let (subsets, _) = desired_subsets(&svc(true), &[&b, &a]);
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), 2);
        assert!(subsets[0].not_ready_addresses.is_none());
        // Terminating pods are dropped unless publishNotReadyAddresses.
        let mut t = pod("t", "10.0.0.3", true, 8080);
        t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
        ));
        assert!(desired_subsets(&svc(false), &[&t]).0.is_empty());
        assert_eq!(desired_subsets(&svc(true), &[&t]).0.len(), 1);
    }

    #[test]
    fn repack_by_port_set_and_truncate() {
        let a = pod("a", "10.0.0.1", true, 8080);
        let c = pod("c", "10.0.0.3", true, 8081);
        assert_eq!(desired_subsets(&svc(false), &[&a, &c]).0.len(), 2);
        let many: Vec<Pod> = (0..1005)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.{}.{}.1", i / 250, i % 250),
                    true,
                    8080,
                )
            })
            .collect();
        let refs: Vec<&Pod> = many.iter().collect();
        let (subsets, truncated) = desired_subsets(&svc(false), &refs);
        assert!(truncated);
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), MAX_CAPACITY);
    }
}
