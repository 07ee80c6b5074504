//! The pod counts upstream's `HandlePodCleanups` records every housekeeping pass:
//! `kubelet_desired_pods`, `kubelet_active_pods`, `kubelet_mirror_pods` and
//! `kubelet_working_pods`. Pure: the pod loop hands in what its config and its pod
//! workers hold, and the metrics take the counts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::static_pods::{is_mirror_pod, is_static_pod};

/// Where a pod worker is in a pod's lifecycle (upstream's `PodWorkerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lifecycle {
    /// The pod should be running: its worker syncs it.
    Sync,
    /// Its containers are being stopped (deletion, or a pod gone from the config).
    Terminating,
    /// Nothing of it runs any more; the worker waits for the pod to leave the config.
    Terminated,
}

impl Lifecycle {
    /// The `lifecycle` label (upstream's `PodWorkerState.String()`).
    pub fn label(self) -> &'static str {
        match self {
            Lifecycle::Sync => "sync",
            Lifecycle::Terminating => "terminating",
            Lifecycle::Terminated => "terminated",
        }
    }

    /// For an atomic shared between a worker and the pod loop.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    pub fn from_u8(v: u8) -> Lifecycle {
        match v {
            0 => Lifecycle::Sync,
            1 => Lifecycle::Terminating,
            _ => Lifecycle::Terminated,
        }
    }

    const ALL: [Lifecycle; 3] = [
        Lifecycle::Sync,
        Lifecycle::Terminating,
        Lifecycle::Terminated,
    ];
}

/// Whether a worked pod is in the config (`desired`), was removed from it while its
/// worker still holds it (`orphan`: deleted in the API, a static manifest gone), or was
/// only found in the runtime (`runtime_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigState {
    Desired,
    Orphan,
    RuntimeOnly,
}

impl ConfigState {
    pub fn label(self) -> &'static str {
        match self {
            ConfigState::Desired => "desired",
            ConfigState::Orphan => "orphan",
            ConfigState::RuntimeOnly => "runtime_only",
        }
    }
}

/// Upstream's `static` label: `true` for a pod from a manifest, empty for an API pod,
/// `unknown` for a runtime-only pod (no config says which it is).
pub fn static_label(is_static: Option<bool>) -> &'static str {
    match is_static {
        Some(true) => "true",
        Some(false) => "",
        None => "unknown",
    }
}

/// The counts of one housekeeping pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods in the config by whether they are static: `(regular, static)`.
    pub desired: (u64, u64),
    /// The desired pods the kubelet counts as active (admitted, not terminated).
    pub active: (u64, u64),
    /// Mirror pods of this node in the API.
    pub mirrors: u64,
    /// `(lifecycle, config, static)` label values and their counts; every combination
    /// upstream reports is present, at 0 when nothing is in it.
    pub working: BTreeMap<(&'static str, &'static str, &'static str), u64>,
}

/// What the pod loop knows of one pod in its config.
#[derive(Debug, Clone, Copy)]
pub struct ConfigPod<'a> {
    pub pod: &'a Pod,
    /// Its worker's lifecycle (`Terminated` for a pod whose worker finished while the
    /// pod stays in the config), `None` while it has no worker.
    pub lifecycle: Option<Lifecycle>,
}

/// A worker whose pod left the config.
#[derive(Debug, Clone, Copy)]
pub struct OrphanWorker {
    pub lifecycle: Lifecycle,
    pub is_static: bool,
}

/// Upstream's counts: desired are the config's pods (mirror pods are no config source),
/// active those not known terminated and, when their phase is terminal, still being
/// terminated (`filterOutInactivePods`); working pods are the workers by lifecycle,
/// config state and static, the runtime-only ones being the orphaned runtime pods
/// handed to termination this pass.
pub fn count_pods<'a>(
    config: impl IntoIterator<Item = ConfigPod<'a>>,
    orphans: impl IntoIterator<Item = OrphanWorker>,
    runtime_only: u64,
    mirrors: u64,
) -> PodCounts {
    let mut counts = PodCounts {
        mirrors,
        ..Default::default()
    };
    let combos = [
        (ConfigState::Desired, Some(true)),
        (ConfigState::Desired, Some(false)),
        (ConfigState::Orphan, Some(true)),
        (ConfigState::Orphan, Some(false)),
        (ConfigState::RuntimeOnly, None),
    ];
    for (config_state, is_static) in combos {
        for lifecycle in Lifecycle::ALL {
            counts.working.insert(
                (
                    lifecycle.label(),
                    config_state.label(),
                    static_label(is_static),
                ),
                0,
            );
        }
    }
    let mut work = |lifecycle: Lifecycle, config_state: ConfigState, is_static: Option<bool>| {
        *counts
            .working
            .entry((
                lifecycle.label(),
                config_state.label(),
                static_label(is_static),
            ))
            .or_default() += 1;
    };
    let bump = |pair: &mut (u64, u64), is_static: bool| {
        if is_static {
            pair.1 += 1;
        } else {
            pair.0 += 1;
        }
    };
    let mut desired = (0, 0);
    let mut active = (0, 0);
    for ConfigPod { pod, lifecycle } in config {
        if is_mirror_pod(pod) {
            continue;
        }
        let is_static = is_static_pod(pod);
        bump(&mut desired, is_static);
        let is_active = match lifecycle {
            Some(Lifecycle::Terminated) => false,
            Some(Lifecycle::Terminating) => true,
            Some(Lifecycle::Sync) | None => !terminal_phase(pod),
        };
        if is_active {
            bump(&mut active, is_static);
        }
        if let Some(lifecycle) = lifecycle {
            work(lifecycle, ConfigState::Desired, Some(is_static));
        }
    }
    for o in orphans {
        work(o.lifecycle, ConfigState::Orphan, Some(o.is_static));
    }
    for _ in 0..runtime_only {
        work(Lifecycle::Terminating, ConfigState::RuntimeOnly, None);
    }
    counts.desired = desired;
    counts.active = active;
    counts
}

fn terminal_phase(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str, annotation: Option<(&str, &str)>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: annotation.map(|(k, v)| [(k.to_owned(), v.to_owned())].into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const SOURCE: &str = "kubernetes.io/config.source";

    #[test]
    fn desired_active_and_working_as_upstream_counts_them() {
        let running = pod("a", "Running", None);
        let pending = pod("b", "Pending", None);
        let succeeded = pod("c", "Succeeded", None);
        let deleting_done = pod("d", "Failed", None);
        let static_pod = pod("s", "Running", Some((SOURCE, "file")));
        let finished_static = pod("t", "Succeeded", Some((SOURCE, "file")));
        let mirror = pod("m", "Running", Some(("kubernetes.io/config.mirror", "x")));
        let config = [
            (&running, Some(Lifecycle::Sync)),
            // Not yet handed to a worker: active while not terminal.
            (&pending, None),
            (&succeeded, Some(Lifecycle::Terminated)),
            // Terminal, but its containers are still being stopped: still active.
            (&deleting_done, Some(Lifecycle::Terminating)),
            (&static_pod, Some(Lifecycle::Sync)),
            (&finished_static, Some(Lifecycle::Terminated)),
            (&mirror, Some(Lifecycle::Sync)),
        ];
        let counts = count_pods(
            config.map(|(pod, lifecycle)| ConfigPod { pod, lifecycle }),
            [
                OrphanWorker {
                    lifecycle: Lifecycle::Terminating,
                    is_static: false,
                },
                OrphanWorker {
                    lifecycle: Lifecycle::Terminating,
                    is_static: true,
                },
            ],
            2,
            3,
        );
        assert_eq!(counts.desired, (4, 2), "the mirror pod is no config pod");
        assert_eq!(counts.active, (3, 1));
        assert_eq!(counts.mirrors, 3);
        let working = |l, c, s| counts.working.get(&(l, c, s)).copied();
        assert_eq!(working("sync", "desired", ""), Some(1));
        assert_eq!(working("terminated", "desired", ""), Some(1));
        assert_eq!(working("terminating", "desired", ""), Some(1));
        assert_eq!(working("sync", "desired", "true"), Some(1));
        assert_eq!(working("terminated", "desired", "true"), Some(1));
        assert_eq!(working("terminating", "orphan", ""), Some(1));
        assert_eq!(working("terminating", "orphan", "true"), Some(1));
        assert_eq!(working("terminating", "runtime_only", "unknown"), Some(2));
        assert_eq!(working("sync", "runtime_only", "unknown"), Some(0));
        assert_eq!(working("sync", "orphan", "true"), Some(0));
        // Upstream sets all fifteen combinations, and no other.
        assert_eq!(counts.working.len(), 15, "{:?}", counts.working);
        assert_eq!(counts.working.values().sum::<u64>(), 9);
    }

    #[test]
    fn nothing_to_count_still_reports_every_combination() {
        let counts = count_pods([], [], 0, 0);
        assert_eq!(counts.desired, (0, 0));
        assert_eq!(counts.working.len(), 15);
        assert!(counts.working.values().all(|n| *n == 0));
    }

    #[test]
    fn lifecycle_round_trips_through_its_byte() {
        for l in Lifecycle::ALL {
            assert_eq!(Lifecycle::from_u8(l.as_u8()), l);
        }
        assert_eq!(Lifecycle::from_u8(200), Lifecycle::Terminated);
    }
}
