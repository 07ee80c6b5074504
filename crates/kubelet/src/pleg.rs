//! Pod lifecycle events by relisting the CRI (upstream `pleg/generic.go`): containerd 1.6
//! has no container events, so the runtime is listed every period (~1 s) and the states
//! of sandboxes and containers are compared with the previous listing.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_cri::v1 as cri;
use tokio::sync::mpsc;

use crate::cri::{CriClient, CriError};
use crate::sandbox::POD_UID_LABEL;

/// What happened to a container (or sandbox) of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
}

/// One lifecycle event: the pod's UID, what happened, and the container (or sandbox) ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub pod_uid: String,
    pub kind: EventType,
    pub id: String,
}

/// The state PLEG tracks per container or sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Exited,
    Unknown,
    Created,
}

/// Pod UID → container/sandbox ID → state.
pub type Snapshot = BTreeMap<String, BTreeMap<String, State>>;

fn events_for(
    pod: &str,
    id: &str,
    old: Option<State>,
    new: Option<State>,
    out: &mut Vec<PodLifecycleEvent>,
) {
    if old == new {
        return;
    }
    let mut push = |kind| {
        out.push(PodLifecycleEvent {
            pod_uid: pod.to_owned(),
            kind,
            id: id.to_owned(),
        })
    };
    match new {
        Some(State::Running) => push(EventType::ContainerStarted),
        Some(State::Exited) => push(EventType::ContainerDied),
        Some(State::Unknown) => push(EventType::ContainerChanged),
        // Created containers produce no event (upstream's generateEvents).
        Some(State::Created) => {}
        None => {
            if old != Some(State::Exited) {
                push(EventType::ContainerDied);
            }
            push(EventType::ContainerRemoved);
        }
    }
}

/// The events that turn `old` into `new` (pure).
pub fn compute_events(old: &Snapshot, new: &Snapshot) -> Vec<PodLifecycleEvent> {
    let mut out = vec![];
    let empty = BTreeMap::new();
    let pods: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for pod in pods {
        let o = old.get(pod).unwrap_or(&empty);
        let n = new.get(pod).unwrap_or(&empty);
        let ids: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
        for id in ids {
            events_for(pod, id, o.get(id).copied(), n.get(id).copied(), &mut out);
        }
    }
    out
}

/// One listing of the runtime as a [`Snapshot`] (sandboxes count as containers: ready is
/// running, not ready is exited).
pub async fn snapshot(cri: &CriClient) -> Result<Snapshot, CriError> {
    let mut snap: Snapshot = BTreeMap::new();
    for s in cri.list_pod_sandboxes(None).await? {
        let Some(uid) = pod_uid(&s.labels, s.metadata.as_ref().map(|m| m.uid.as_str())) else {
            continue;
        };
        let state = if s.state == cri::PodSandboxState::SandboxReady as i32 {
            State::Running
        } else {
            State::Exited
        };
        snap.entry(uid).or_default().insert(s.id, state);
    }
    for c in cri.list_containers(None).await? {
        let Some(uid) = pod_uid(&c.labels, None) else {
            continue;
        };
        let state = match cri::ContainerState::try_from(c.state) {
            Ok(cri::ContainerState::ContainerRunning) => State::Running,
            Ok(cri::ContainerState::ContainerExited) => State::Exited,
            Ok(cri::ContainerState::ContainerCreated) => State::Created,
            _ => State::Unknown,
        };
        snap.entry(uid).or_default().insert(c.id, state);
    }
    Ok(snap)
}

fn pod_uid(labels: &HashMap<String, String>, fallback: Option<&str>) -> Option<String> {
    labels
        .get(POD_UID_LABEL)
        .cloned()
        .or_else(|| fallback.filter(|u| !u.is_empty()).map(str::to_owned))
}

/// The relisting PLEG.
#[derive(Debug)]
pub struct GenericPleg {
    cri: CriClient,
    last: Option<Snapshot>,
}

impl GenericPleg {
    pub fn new(cri: CriClient) -> Self {
        GenericPleg { cri, last: None }
    }

    /// Lists the runtime once and returns the events since the previous relist (the first
    /// relist reports everything as new).
    pub async fn relist(&mut self) -> Result<Vec<PodLifecycleEvent>, CriError> {
        let now = snapshot(&self.cri).await?;
        let events = compute_events(self.last.as_ref().unwrap_or(&BTreeMap::new()), &now);
        self.last = Some(now);
        Ok(events)
    }

    /// Relists every `period` and sends the events until the receiver is dropped. Errors
    /// are logged and the relist retried next period.
    pub async fn run(mut self, period: Duration, tx: mpsc::Sender<PodLifecycleEvent>) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let started = std::time::Instant::now();
            let relisted = self.relist().await;
            self.cri
                .metrics()
                .observe_relist(started, started.elapsed());
            match relisted {
                Ok(events) => {
                    for e in events {
                        if tx.send(e).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "PLEG relist failed"),
            }
            if tx.is_closed() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(entries: &[(&str, &str, State)]) -> Snapshot {
        let mut s: Snapshot = BTreeMap::new();
        for (pod, id, st) in entries {
            s.entry((*pod).into())
                .or_default()
                .insert((*id).into(), *st);
        }
        s
    }

    fn ev(pod: &str, kind: EventType, id: &str) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: pod.into(),
            kind,
            id: id.into(),
        }
    }

    #[test]
    fn transitions() {
        use EventType::*;
        use State::*;
        let cases: Vec<(&str, Snapshot, Snapshot, Vec<PodLifecycleEvent>)> = vec![
            (
                "no change",
                snap(&[("p", "c", Running)]),
                snap(&[("p", "c", Running)]),
                vec![],
            ),
            (
                "started",
                snap(&[]),
                snap(&[("p", "c", Running)]),
                vec![ev("p", ContainerStarted, "c")],
            ),
            (
                "created only",
                snap(&[]),
                snap(&[("p", "c", Created)]),
                vec![],
            ),
            (
                "created then running",
                snap(&[("p", "c", Created)]),
                snap(&[("p", "c", Running)]),
                vec![ev("p", ContainerStarted, "c")],
            ),
            (
                "died",
                snap(&[("p", "c", Running)]),
                snap(&[("p", "c", Exited)]),
                vec![ev("p", ContainerDied, "c")],
            ),
            (
                "unknown",
                snap(&[("p", "c", Running)]),
                snap(&[("p", "c", Unknown)]),
                vec![ev("p", ContainerChanged, "c")],
            ),
            (
                "removed after exit",
                snap(&[("p", "c", Exited)]),
                snap(&[]),
                vec![ev("p", ContainerRemoved, "c")],
            ),
            (
                "removed while running",
                snap(&[("p", "c", Running)]),
                snap(&[]),
                vec![ev("p", ContainerDied, "c"), ev("p", ContainerRemoved, "c")],
            ),
            (
                "restart: old died, new started",
                snap(&[("p", "c1", Running)]),
                snap(&[("p", "c1", Exited), ("p", "c2", Running)]),
                vec![
                    ev("p", ContainerDied, "c1"),
                    ev("p", ContainerStarted, "c2"),
                ],
            ),
            (
                "two pods",
                snap(&[("a", "x", Running)]),
                snap(&[("a", "x", Running), ("b", "y", Running)]),
                vec![ev("b", ContainerStarted, "y")],
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(compute_events(&old, &new), want, "{name}");
        }
    }
}
