//! The `endpoints.kubernetes.io/last-change-trigger-time` annotation (upstream's
//! `TriggerTimeTracker`, `pkg/controller/util/endpoint/trigger_time_tracker.go` and
//! `staging/src/k8s.io/endpointslice/util/trigger_time_tracker.go`, v1.33), which the
//! Endpoints and EndpointSlice controllers put on what they write, and which kube-proxy
//! measures its network programming latency from.
//!
//! Per Service the tracker remembers the trigger times it saw at the last sync: the
//! Service's (its creation) and each selected pod's (the last transition of its
//! `Ready` condition). A sync's trigger time is the earliest of those that moved
//! forward since the last sync of that Service; none moved (a resync, a pod gone): no
//! trigger time, and the controllers remove the annotation from what they write. The
//! first sync of a Service (unknown to the tracker) is triggered by its creation.
//! As upstream, two changes of one object between two syncs count as one.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use parking_lot::Mutex;

use crate::util::pod_condition;

/// The annotation's key (upstream `v1.EndpointsLastChangeTriggerTime`).
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// What the tracker saw at a Service's last sync.
#[derive(Debug, Default, Clone)]
struct ServiceState {
    service: Option<Timestamp>,
    /// Pod name -> its trigger time.
    pods: HashMap<String, Timestamp>,
}

/// Upstream's `TriggerTimeTracker`: shared by a controller's workers; one Service is
/// never computed by two workers at once (the work queue's guarantee).
#[derive(Debug, Default)]
pub struct TriggerTimeTracker {
    /// `namespace/name` -> state.
    states: Mutex<HashMap<String, ServiceState>>,
}

impl TriggerTimeTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Upstream `ComputeEndpointLastChangeTriggerTime`: records the trigger times of
    /// `svc` and its selected `pods` and returns the time to annotate, if any.
    pub fn compute(&self, svc: &Service, pods: &[&Pod]) -> Option<Timestamp> {
        let key = service_key(svc);
        let previous = self.states.lock().get(&key).cloned();
        let known = previous.is_some();
        let previous = previous.unwrap_or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut changed = |t: Timestamp| {
            earliest = Some(earliest.map_or(t, |e| e.min(t)));
        };
        let mut pod_times = HashMap::new();
        for pod in pods {
            let Some(t) = pod_trigger_time(pod) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if previous.pods.get(&name).is_none_or(|last| t > *last) {
                changed(t);
            }
            pod_times.insert(name, t);
        }
        let service_time = service_trigger_time(svc);
        if let Some(t) = service_time
            && previous.service.is_none_or(|last| t > last)
        {
            changed(t);
        }
        self.states.lock().insert(
            key,
            ServiceState {
                service: service_time,
                pods: pod_times,
            },
        );
        if !known {
            // A new Service: its creation triggered this sync.
            return service_time;
        }
        earliest
    }

    /// Forgets a deleted Service (upstream `DeleteService`).
    pub fn delete_service(&self, key: &str) {
        self.states.lock().remove(key);
    }
}

fn service_key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Upstream `getPodTriggerTime`: the last transition of the pod's Ready condition.
pub fn pod_trigger_time(pod: &Pod) -> Option<Timestamp> {
    pod_condition(pod, "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// Upstream `getServiceTriggerTime`: the Service's creation.
pub fn service_trigger_time(svc: &Service) -> Option<Timestamp> {
    svc.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// `t` as Go's `t.UTC().Format(time.RFC3339Nano)`: UTC, `Z`, the fraction of a second
/// without trailing zeros and left out when zero.
pub fn format_rfc3339_nano(t: Timestamp) -> String {
    let dt = TimeZone::UTC.to_datetime(t);
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    let nanos = dt.subsec_nanosecond();
    if nanos != 0 {
        let digits = format!("{nanos:09}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Sets the annotation to `trigger`, or removes it when there is none (upstream's
/// `addTriggerTimeAnnotation` and the Endpoints controller's equivalent).
pub fn set_trigger_time(
    annotations: &mut std::collections::BTreeMap<String, String>,
    trigger: Option<Timestamp>,
) {
    match trigger {
        Some(t) => {
            annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), format_rfc3339_nano(t));
        }
        None => {
            annotations.remove(LAST_CHANGE_TRIGGER_TIME);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Upstream's trigger_time_tracker_test.go cases.
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn t(i: i64) -> Timestamp {
        // t0 = 2019-01-01T00:00:00Z, one second apart.
        Timestamp::from_second(1_546_300_800 + i).unwrap()
    }

    fn service(created: Timestamp) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ttNamespace1".into()),
                name: Some("my-service".into()),
                creation_timestamp: Some(Time(created)),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn pod(name: &str, ready: Timestamp) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ttNamespace1".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(ready)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn new_service_no_pods() {
        let tr = TriggerTimeTracker::new();
        assert_eq!(tr.compute(&service(t(2)), &[]), Some(t(2)));
    }

    #[test]
    fn new_service_existing_pods() {
        let tr = TriggerTimeTracker::new();
        let (p1, p2, p3) = (pod("pod1", t(0)), pod("pod2", t(1)), pod("pod3", t(5)));
        // Pods older (and newer) than the Service: its creation triggered the sync.
        assert_eq!(tr.compute(&service(t(3)), &[&p1, &p2, &p3]), Some(t(3)));
    }

    #[test]
    fn pods_added() {
        let tr = TriggerTimeTracker::new();
        let s = service(t(0));
        assert_eq!(tr.compute(&s, &[]), Some(t(0)));
        let (p1, p2) = (pod("pod1", t(2)), pod("pod2", t(1)));
        assert_eq!(tr.compute(&s, &[&p1, &p2]), Some(t(1)));
    }

    #[test]
    fn pods_updated() {
        let tr = TriggerTimeTracker::new();
        let s = service(t(0));
        let (p1, p2, p3) = (pod("pod1", t(1)), pod("pod2", t(2)), pod("pod3", t(3)));
        assert_eq!(tr.compute(&s, &[&p1, &p2, &p3]), Some(t(0)));
        let (p1, p2) = (pod("pod1", t(5)), pod("pod2", t(4)));
        // pod3 does not change.
        assert_eq!(tr.compute(&s, &[&p1, &p2, &p3]), Some(t(4)));
    }

    #[test]
    fn pods_updated_no_op() {
        let tr = TriggerTimeTracker::new();
        let s = service(t(0));
        let (p1, p2, p3) = (pod("pod1", t(1)), pod("pod2", t(2)), pod("pod3", t(3)));
        assert_eq!(tr.compute(&s, &[&p1, &p2, &p3]), Some(t(0)));
        // Nothing changed (a resync).
        assert_eq!(tr.compute(&s, &[&p1, &p2, &p3]), None);
    }

    #[test]
    fn pod_deleted_then_added() {
        let tr = TriggerTimeTracker::new();
        let s = service(t(0));
        let (p1, p2) = (pod("pod1", t(1)), pod("pod2", t(2)));
        assert_eq!(tr.compute(&s, &[&p1, &p2]), Some(t(0)));
        assert_eq!(tr.compute(&s, &[&p1]), None);
        let p2 = pod("pod2", t(4));
        assert_eq!(tr.compute(&s, &[&p1, &p2]), Some(t(4)));
    }

    #[test]
    fn service_deleted_then_added() {
        let tr = TriggerTimeTracker::new();
        let (p1, p2) = (pod("pod1", t(1)), pod("pod2", t(2)));
        assert_eq!(tr.compute(&service(t(0)), &[&p1, &p2]), Some(t(0)));
        tr.delete_service("ttNamespace1/my-service");
        assert_eq!(tr.compute(&service(t(3)), &[&p1, &p2]), Some(t(3)));
    }

    #[test]
    fn service_updated_no_pod_change() {
        let tr = TriggerTimeTracker::new();
        let mut s = service(t(0));
        let (p1, p2) = (pod("pod1", t(1)), pod("pod2", t(2)));
        assert_eq!(tr.compute(&s, &[&p1, &p2]), Some(t(0)));
        // A change of the Service's spec has no trigger time (as upstream).
        s.spec = Some(Default::default());
        assert_eq!(tr.compute(&s, &[&p1, &p2]), None);
    }

    #[test]
    fn pods_without_ready_condition_trigger_nothing() {
        let tr = TriggerTimeTracker::new();
        let s = service(t(0));
        assert_eq!(tr.compute(&s, &[]), Some(t(0)));
        let mut p = pod("pod1", t(1));
        p.status = None;
        assert_eq!(tr.compute(&s, &[&p]), None);
    }

    #[test]
    fn services_are_tracked_apart() {
        let tr = TriggerTimeTracker::new();
        let a = service(t(0));
        let mut b = service(t(1));
        b.metadata.name = Some("other".into());
        let p = pod("pod1", t(2));
        assert_eq!(tr.compute(&a, &[&p]), Some(t(0)));
        assert_eq!(tr.compute(&b, &[&p]), Some(t(1)));
        assert_eq!(tr.compute(&a, &[&p]), None);
    }

    #[test]
    fn rfc3339_nano_as_go_formats_it() {
        assert_eq!(format_rfc3339_nano(t(0)), "2019-01-01T00:00:00Z");
        let ns = |n: i32| Timestamp::new(1_546_300_800, n).unwrap();
        assert_eq!(
            format_rfc3339_nano(ns(100_000_000)),
            "2019-01-01T00:00:00.1Z"
        );
        assert_eq!(
            format_rfc3339_nano(ns(123_456_789)),
            "2019-01-01T00:00:00.123456789Z"
        );
        assert_eq!(
            format_rfc3339_nano(ns(1_000)),
            "2019-01-01T00:00:00.000001Z"
        );
        let mut a = std::collections::BTreeMap::new();
        set_trigger_time(&mut a, Some(t(61)));
        assert_eq!(a[LAST_CHANGE_TRIGGER_TIME], "2019-01-01T00:01:01Z");
        set_trigger_time(&mut a, None);
        assert!(a.is_empty());
    }
}
