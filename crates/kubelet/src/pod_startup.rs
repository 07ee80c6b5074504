//! The pod startup SLI (upstream `pkg/kubelet/util/pod_startup_latency_tracker.go`, 1.33):
//! for each API pod this kubelet saw before it had started it, the time from the pod's
//! creation to the first watch event that shows all its containers running, less the
//! time spent pulling images (from the first pull's start to the last pull's end). Pure:
//! every time is handed in (seconds since the Unix epoch), and an observation comes
//! back for the metrics to record.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::sandbox::uid;

#[derive(Debug, Default, Clone)]
struct PodState {
    /// The pod's creation time and host networking, as the watch first showed it.
    created: Option<f64>,
    host_network: bool,
    first_started_pulling: Option<f64>,
    last_finished_pulling: Option<f64>,
    /// When the kubelet first wrote a status with every container running.
    observed_running: Option<f64>,
    /// When the watch first showed every container running while the kubelet's write
    /// of that status had not come back yet: the event can overtake the write's
    /// answer, and it may be the last event the pod has for a long time.
    watched_running: Option<f64>,
    recorded: bool,
}

/// One pod's startup, as upstream records it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartupObservation {
    /// `kubelet_pod_start_sli_duration_seconds`: creation to watched running, less
    /// image pulling.
    pub sli_seconds: f64,
    /// `kubelet_pod_start_total_duration_seconds`: creation to watched running.
    pub total_seconds: f64,
    /// The first pod off the host network to start since the kubelet did
    /// (`kubelet_first_network_pod_start_sli_duration_seconds`).
    pub first_network: bool,
}

/// Upstream's `basicPodStartupLatencyTracker`.
#[derive(Debug, Default)]
pub struct PodStartupTracker {
    pods: HashMap<String, PodState>,
    first_network_pod_seen: bool,
}

impl PodStartupTracker {
    /// An API pod as the watch delivered it at `now`. A pod is tracked from the first
    /// event that shows it without `status.startTime` (so not the pods already started
    /// when the kubelet came up); once the kubelet has written it running, the first
    /// event showing every container running gives its startup.
    pub fn observed_on_watch(&mut self, pod: &Pod, now: f64) -> Option<StartupObservation> {
        let status = pod.status.as_ref();
        let pod_uid = uid(pod);
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            self.pods.remove(pod_uid);
            return None;
        }
        let Some(state) = self.pods.get_mut(pod_uid) else {
            if status.and_then(|s| s.start_time.as_ref()).is_none() {
                let created = pod
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond() as f64 / 1000.0);
                let host_network = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.host_network)
                    .unwrap_or(false);
                self.pods.insert(
                    pod_uid.to_owned(),
                    PodState {
                        created,
                        host_network,
                        ..Default::default()
                    },
                );
            }
            return None;
        };
        if state.recorded || !all_containers_started(status) {
            return None;
        }
        if state.observed_running.is_none() {
            state.watched_running.get_or_insert(now);
            return None;
        }
        Self::record(state, &mut self.first_network_pod_seen, now)
    }

    /// The observation of a pod the watch showed running at `when`, once.
    fn record(
        state: &mut PodState,
        first_network_pod_seen: &mut bool,
        when: f64,
    ) -> Option<StartupObservation> {
        let total = when - state.created?;
        let pulling = match (state.first_started_pulling, state.last_finished_pulling) {
            (Some(start), Some(end)) => end - start,
            _ => 0.0,
        };
        state.recorded = true;
        let first_network = !state.host_network && !*first_network_pod_seen;
        if first_network {
            *first_network_pod_seen = true;
        }
        Some(StartupObservation {
            sli_seconds: total - pulling,
            total_seconds: total,
            first_network,
        })
    }

    /// An image pull for the pod starts at `now`.
    pub fn image_started_pulling(&mut self, pod_uid: &str, now: f64) {
        if let Some(state) = self.pods.get_mut(pod_uid) {
            state.first_started_pulling.get_or_insert(now);
        }
    }

    /// An image pull for the pod succeeded at `now` (a failed one is not counted, as
    /// upstream's image manager reports only a pull that ended well).
    pub fn image_finished_pulling(&mut self, pod_uid: &str, now: f64) {
        if let Some(state) = self.pods.get_mut(pod_uid)
            && state.first_started_pulling.is_some()
        {
            state.last_finished_pulling = Some(now);
        }
    }

    /// The kubelet sets the pod's status at `now`: the first one with every container
    /// running marks when the pod ran. When the watch has shown that status already,
    /// the startup is that event's, and it comes back here.
    pub fn status_updated(
        &mut self,
        pod_uid: &str,
        status: &PodStatus,
        now: f64,
    ) -> Option<StartupObservation> {
        let state = self.pods.get_mut(pod_uid)?;
        if state.recorded || state.observed_running.is_some() {
            return None;
        }
        if !all_containers_started(Some(status)) {
            return None;
        }
        state.observed_running = Some(now);
        let watched = state.watched_running?;
        Self::record(state, &mut self.first_network_pod_seen, watched)
    }

    /// The pod left the node.
    pub fn forget(&mut self, pod_uid: &str) {
        self.pods.remove(pod_uid);
    }

    /// How many pods are tracked (tests).
    pub fn tracked(&self) -> usize {
        self.pods.len()
    }
}

/// Upstream's `hasPodStartedSLO`: every container status shows a running container
/// with its start time (a status without container statuses passes, as upstream's).
fn all_containers_started(status: Option<&PodStatus>) -> bool {
    status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .all(|cs| {
            cs.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .is_some_and(|r| r.started_at.is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodSpec,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    const CREATED: i64 = 1_700_000_000;

    fn pod(uid: &str, containers: &[bool], started: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                creation_timestamp: Some(t(CREATED)),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                start_time: started.then(|| t(CREATED + 1)),
                container_statuses: Some(
                    containers
                        .iter()
                        .map(|running| ContainerStatus {
                            name: "c".into(),
                            state: Some(if *running {
                                ContainerState {
                                    running: Some(ContainerStateRunning {
                                        started_at: Some(t(CREATED + 5)),
                                    }),
                                    ..Default::default()
                                }
                            } else {
                                ContainerState {
                                    waiting: Some(ContainerStateWaiting::default()),
                                    ..Default::default()
                                }
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    fn updated(tr: &mut PodStartupTracker, pod: &Pod, now: f64) -> Option<StartupObservation> {
        tr.status_updated(uid(pod), pod.status.as_ref().unwrap(), now)
    }

    fn at(secs: f64) -> f64 {
        CREATED as f64 + secs
    }

    #[test]
    fn startup_less_image_pulls_once_the_watch_shows_it_running() {
        let mut tr = PodStartupTracker::default();
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[false, false], false), at(0.5)),
            None
        );
        tr.image_started_pulling("u", at(1.0));
        tr.image_finished_pulling("u", at(3.0));
        tr.image_started_pulling("u", at(3.5));
        tr.image_finished_pulling("u", at(7.0));
        // One container running is not a started pod.
        updated(&mut tr, &pod("u", &[true, false], true), at(8.0));
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[true, false], true), at(8.1)),
            None
        );
        updated(&mut tr, &pod("u", &[true, true], true), at(9.0));
        // The kubelet wrote it running, but the watch has not shown it yet.
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[true, false], true), at(9.1)),
            None
        );
        let seen = tr.observed_on_watch(&pod("u", &[true, true], true), at(10.0));
        assert_eq!(
            seen,
            Some(StartupObservation {
                sli_seconds: 4.0,
                total_seconds: 10.0,
                first_network: true,
            })
        );
        // Recorded once.
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[true, true], true), at(11.0)),
            None
        );
        tr.forget("u");
        assert_eq!(tr.tracked(), 0);
    }

    #[test]
    fn pods_started_before_the_kubelet_saw_them_are_not_tracked() {
        let mut tr = PodStartupTracker::default();
        let started = pod("old", &[true], true);
        assert_eq!(tr.observed_on_watch(&started, at(1.0)), None);
        updated(&mut tr, &started, at(2.0));
        assert_eq!(tr.observed_on_watch(&started, at(3.0)), None);
        assert_eq!(tr.tracked(), 0);
    }

    #[test]
    fn terminal_pods_stop_being_tracked() {
        let mut tr = PodStartupTracker::default();
        let mut p = pod("u", &[false], false);
        tr.observed_on_watch(&p, at(1.0));
        assert_eq!(tr.tracked(), 1);
        if let Some(s) = p.status.as_mut() {
            s.phase = Some("Failed".into());
        }
        assert_eq!(tr.observed_on_watch(&p, at(2.0)), None);
        assert_eq!(tr.tracked(), 0);
    }

    #[test]
    fn only_the_first_pod_off_the_host_network_is_the_first_network_pod() {
        let mut tr = PodStartupTracker::default();
        let mut host = pod("h", &[false], false);
        if let Some(s) = host.spec.as_mut() {
            s.host_network = Some(true);
        }
        for p in ["h", "a", "b"] {
            let mut waiting = pod(p, &[false], false);
            waiting.spec = host.spec.clone().filter(|_| p == "h");
            tr.observed_on_watch(&waiting, at(0.0));
        }
        let running = |p: &str| {
            let mut r = pod(p, &[true], true);
            r.spec = host.spec.clone().filter(|_| p == "h");
            r
        };
        let mut first = vec![];
        for p in ["h", "a", "b"] {
            updated(&mut tr, &running(p), at(1.0));
            let seen = tr.observed_on_watch(&running(p), at(2.0));
            first.push(seen.map(|s| s.first_network));
        }
        assert_eq!(first, [Some(false), Some(true), Some(false)]);
    }

    #[test]
    fn a_pull_without_a_start_or_a_failed_one_subtracts_nothing() {
        let mut tr = PodStartupTracker::default();
        tr.observed_on_watch(&pod("u", &[false], false), at(0.0));
        tr.image_finished_pulling("u", at(1.0));
        tr.image_started_pulling("u", at(2.0));
        updated(&mut tr, &pod("u", &[true], true), at(5.0));
        let seen = tr.observed_on_watch(&pod("u", &[true], true), at(6.0));
        assert_eq!(seen.map(|s| s.sli_seconds), Some(6.0));
    }

    #[test]
    fn a_watch_event_that_overtakes_the_status_write_still_counts() {
        let mut tr = PodStartupTracker::default();
        tr.observed_on_watch(&pod("u", &[false], false), at(0.0));
        // The event with the written status arrives before the write's answer...
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[true], true), at(4.0)),
            None
        );
        // ...which then records the startup at the event's time, once.
        let seen = updated(&mut tr, &pod("u", &[true], true), at(4.2));
        assert_eq!(seen.map(|s| s.total_seconds), Some(4.0));
        assert_eq!(
            tr.observed_on_watch(&pod("u", &[true], true), at(5.0)),
            None
        );
        assert_eq!(updated(&mut tr, &pod("u", &[true], true), at(6.0)), None);
    }
}
