//! The probe workers (upstream `prober_manager.go` + `worker.go`): one task per container
//! and probe kind, fed with the pod's latest status, writing into the shared
//! [`ProbeResults`] and telling the pod worker (by UID) when a result changed, so the next
//! sync kills a container that failed liveness or writes the new readiness. The decisions
//! are [`crate::probe::ProbeWorker`]'s; this module only schedules and probes.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use ferrokube_client::events::{EventRecorder, EventType};

use crate::container::is_sidecar;
use crate::cri::CriClient;
use crate::metrics::{ProbeLabels, ProberMetrics};
use crate::probe::{
    ContainerView, PodView, ProbeKind, ProbeResult, ProbeResults, ProbeTiming, ProbeWorker,
};
use crate::prober::run_probe;
use crate::sandbox::{name, namespace, spec, uid};

/// The pod and its last status as the workers see them.
#[derive(Debug, Clone)]
struct PodState {
    pod: Arc<Pod>,
    status: Option<PodStatus>,
}

struct PodProbes {
    state: watch::Sender<PodState>,
    cancel: CancellationToken,
}

/// Runs the probes of every pod on the node.
pub struct ProbeManager {
    cri: CriClient,
    results: Arc<ProbeResults>,
    pods: Mutex<HashMap<String, PodProbes>>,
    changed: mpsc::UnboundedSender<String>,
    events: Arc<OnceLock<EventRecorder>>,
    metrics: Arc<ProberMetrics>,
}

impl std::fmt::Debug for ProbeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeManager")
            .field("pods", &self.pods.lock().len())
            .finish()
    }
}

/// A reference to a container of `pod` for events: `spec.containers{name}`, or
/// `spec.initContainers{name}` / `spec.ephemeralContainers{name}` for those (upstream's
/// `fieldPath`).
pub fn container_ref(pod: &Pod, container: &str) -> ObjectReference {
    let spec = pod.spec.as_ref();
    let list = if spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.name == container))
    {
        "initContainers"
    } else if spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.name == container))
    {
        "ephemeralContainers"
    } else {
        "containers"
    };
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name(pod).to_owned()),
        namespace: Some(namespace(pod).to_owned()),
        uid: Some(uid(pod).to_owned()),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: Some(format!("spec.{list}{{{container}}}")),
    }
}

impl ProbeManager {
    /// `changed` receives a pod UID whenever one of its probe results changed.
    pub fn new(
        cri: CriClient,
        results: Arc<ProbeResults>,
        changed: mpsc::UnboundedSender<String>,
        events: Arc<OnceLock<EventRecorder>>,
    ) -> Self {
        ProbeManager {
            cri,
            results,
            pods: Mutex::new(HashMap::new()),
            changed,
            events,
            metrics: Arc::default(),
        }
    }

    pub fn results(&self) -> &Arc<ProbeResults> {
        &self.results
    }

    /// What `/metrics/probes` serves.
    pub fn metrics(&self) -> &ProberMetrics {
        &self.metrics
    }

    /// Starts the workers of a new pod, or hands the workers the newer pod object.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        let mut pods = self.pods.lock();
        if let Some(p) = pods.get(uid(pod)) {
            p.state.send_modify(|s| s.pod = pod.clone());
            return;
        }
        let (tx, _) = watch::channel(PodState {
            pod: pod.clone(),
            status: pod.status.clone(),
        });
        let cancel = CancellationToken::new();
        let s = spec(pod);
        // Sidecars are probed like regular containers.
        let sidecars = s.init_containers.iter().flatten().filter(|c| is_sidecar(c));
        for c in s.containers.iter().chain(sidecars) {
            for kind in ProbeKind::ALL {
                let Some(p) = kind.of(c) else { continue };
                let worker = ProbeWorker::new(kind, ProbeTiming::of(kind, p));
                let labels = ProbeLabels {
                    probe_type: kind.as_str(),
                    container: c.name.clone(),
                    pod: name(pod).to_owned(),
                    namespace: namespace(pod).to_owned(),
                    pod_uid: uid(pod).to_owned(),
                };
                tokio::spawn(run_worker(
                    worker,
                    c.clone(),
                    tx.subscribe(),
                    cancel.clone(),
                    self.cri.clone(),
                    self.results.clone(),
                    self.changed.clone(),
                    self.events.clone(),
                    MetricsGuard {
                        metrics: self.metrics.clone(),
                        labels,
                    },
                ));
            }
        }
        pods.insert(uid(pod).to_owned(), PodProbes { state: tx, cancel });
    }

    /// The pod's latest status (from the last sync).
    pub fn set_status(&self, pod_uid: &str, status: &PodStatus) {
        if let Some(p) = self.pods.lock().get(pod_uid) {
            p.state.send_modify(|s| s.status = Some(status.clone()));
        }
    }

    /// Stops the pod's workers and forgets its results.
    pub fn remove_pod(&self, pod_uid: &str, container_ids: &[String]) {
        if let Some(p) = self.pods.lock().remove(pod_uid) {
            p.cancel.cancel();
        }
        self.results.forget(container_ids);
    }
}

fn view(state: &PodState, container: &str) -> PodView {
    let status = state.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    let s = spec(&state.pod);
    let sidecar = s
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == container && is_sidecar(c));
    PodView {
        terminal: matches!(phase, Some("Succeeded") | Some("Failed")),
        deleting: state.pod.metadata.deletion_timestamp.is_some(),
        // Sidecars restart whatever the pod's policy.
        restart_never: !sidecar && s.restart_policy.as_deref() == Some("Never"),
        container: status
            .and_then(|s| {
                let list = if sidecar {
                    &s.init_container_statuses
                } else {
                    &s.container_statuses
                };
                list.iter().flatten().find(|c| c.name == container)
            })
            .and_then(ContainerView::from_status),
    }
}

/// A worker's place in the prober metrics; its series go with the worker, however it
/// ends.
struct MetricsGuard {
    metrics: Arc<ProberMetrics>,
    labels: ProbeLabels,
}

impl MetricsGuard {
    fn observe(&self, result: ProbeResult, took: std::time::Duration) {
        let result = match result {
            ProbeResult::Success => "successful",
            ProbeResult::Failure => "failed",
            ProbeResult::Unknown => "unknown",
        };
        self.metrics.observe(&self.labels, result, took);
    }
}

impl Drop for MetricsGuard {
    fn drop(&mut self) {
        self.metrics.forget(&self.labels);
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_worker(
    mut worker: ProbeWorker,
    container: Container,
    mut state: watch::Receiver<PodState>,
    cancel: CancellationToken,
    cri: CriClient,
    results: Arc<ProbeResults>,
    changed: mpsc::UnboundedSender<String>,
    events: Arc<OnceLock<EventRecorder>>,
    metrics: MetricsGuard,
) {
    let kind = worker.kind;
    let Some(probe) = kind.of(&container).cloned() else {
        return;
    };
    // Probe commands see the container's literal environment values.
    let env: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v)))
        .collect();
    loop {
        let snapshot = state.borrow_and_update().clone();
        let pod_uid = uid(&snapshot.pod).to_owned();
        let tick = worker.tick(&view(&snapshot, &container.name), Timestamp::now());
        let mut any_change = false;
        for u in &tick.updates {
            any_change |= results.apply(kind, u);
        }
        let probe_id = tick
            .probe
            .then(|| worker.container_id().map(str::to_owned))
            .flatten();
        if let Some(id) = probe_id {
            {
                let pod_ip = snapshot.status.as_ref().and_then(|s| s.pod_ip.clone());
                let started = std::time::Instant::now();
                let outcome = tokio::select! {
                    _ = cancel.cancelled() => return,
                    o = run_probe(&cri, &probe, &container, &id, pod_ip.as_deref(), &env, worker.timing.timeout) => o,
                };
                if let Some(outcome) = outcome {
                    metrics.observe(outcome.result, started.elapsed());
                    if outcome.result == ProbeResult::Failure {
                        tracing::info!(pod = name(&snapshot.pod), container = %container.name, probe = kind.as_str(), output = %outcome.output, "probe failed");
                        if let Some(rec) = events.get() {
                            rec.event(
                                &container_ref(&snapshot.pod, &container.name),
                                None,
                                EventType::Warning,
                                "Unhealthy",
                                "Probe",
                                &format!("{} probe failed: {}", kind.as_str(), outcome.output),
                            );
                        }
                    }
                    if let Some(u) = worker.record(outcome.result) {
                        any_change |= results.apply(kind, &u);
                    }
                }
            }
        }
        if any_change {
            let _ = changed.send(pod_uid);
        }
        if !tick.keep {
            return;
        }
        // Wait for the period; a new container instance in the status wakes the worker early.
        let deadline = tokio::time::Instant::now() + worker.timing.period;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => break,
                r = state.changed() => {
                    if r.is_err() {
                        return;
                    }
                    let s = state.borrow().clone();
                    let v = view(&s, &container.name);
                    let new_id = v.container.as_ref().map(|c| c.id.as_str());
                    if new_id.is_some() && new_id != worker.container_id() || v.terminal {
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_list_a_container_is_in() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "initContainers": [{"name": "setup"}],
                "containers": [{"name": "app"}],
                "ephemeralContainers": [{"name": "debugger"}]
            }
        }))
        .unwrap();
        let path = |c: &str| container_ref(&pod, c).field_path.unwrap();
        assert_eq!(path("app"), "spec.containers{app}");
        assert_eq!(path("setup"), "spec.initContainers{setup}");
        assert_eq!(path("debugger"), "spec.ephemeralContainers{debugger}");
    }
}
