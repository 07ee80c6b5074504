//! What one sync of a pod must do, from its spec and the runtime's view (upstream
//! `kuberuntime_manager.go` `computePodActions`, with sidecars (restartable init
//! containers, upstream's `computeInitContainerActions`) and ephemeral containers). Pure.

use k8s_openapi::api::core::v1::Pod;

use crate::container::{ContainerType, container_hash, is_sidecar};
use crate::probe::{ProbeKind, ProbeResult, ProbeSnapshot, probe_kill_reason};
use crate::sandbox::spec;
use crate::status::{RuntimePod, RuntimeState, should_restart};

/// A container to stop, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToKill {
    pub id: String,
    pub name: String,
    pub reason: String,
    /// A grace period other than the pod's (a failed probe's
    /// `terminationGracePeriodSeconds`).
    pub grace: Option<i64>,
}

/// An ephemeral container to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralStart {
    /// Index in `spec.ephemeralContainers`.
    pub index: usize,
    /// The runtime ID of its running `targetContainerName`, whose PID namespace it joins.
    pub target_id: Option<String>,
}

/// The plan of one sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and sandbox of the pod first.
    pub kill_pod: bool,
    /// Start a new sandbox (with this attempt number).
    pub create_sandbox: bool,
    pub attempt: u32,
    /// The ready sandbox to use when none is created.
    pub sandbox_id: Option<String>,
    /// Init containers to start, in spec order: the next one, and sidecars to (re)start.
    /// Starting stops after a regular init container (it must finish first).
    pub init_containers_to_start: Vec<usize>,
    /// Indexes of regular containers to start.
    pub containers_to_start: Vec<usize>,
    /// Running containers to stop (spec changed).
    pub containers_to_kill: Vec<ToKill>,
    /// Ephemeral containers to start (in the ready sandbox, before anything else).
    pub ephemeral_containers_to_start: Vec<EphemeralStart>,
}

/// Whether the pod needs a new sandbox, the attempt it gets, and the usable sandbox.
fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32, Option<String>) {
    let Some(latest) = rt.sandboxes.first() else {
        return (true, 0, None);
    };
    let next = latest.attempt + 1;
    let ready = rt.sandboxes.iter().filter(|s| s.ready).count();
    let host_network = spec(pod).host_network.unwrap_or(false);
    if ready > 1
        || !latest.ready
        || latest.host_network != host_network
        || (!host_network && latest.ips.is_empty())
    {
        return (true, next, Some(latest.id.clone()));
    }
    (false, latest.attempt, Some(latest.id.clone()))
}

/// The plan for `pod` given what the runtime has.
/// `probes` are the current probe results: a running container that failed its liveness
/// (or startup) probe is killed, and started again unless the policy is `Never`.
/// Ephemeral containers start in a ready sandbox that stays, whatever init and regular
/// containers do; they count for nothing else.
pub fn compute_pod_actions(pod: &Pod, rt: &RuntimePod, probes: &ProbeSnapshot) -> PodActions {
    let mut actions = init_and_regular_actions(pod, rt, probes);
    if !actions.kill_pod && actions.sandbox_id.is_some() {
        actions.ephemeral_containers_to_start = ephemeral_to_start(pod, rt);
    }
    actions
}

/// The ephemeral containers to start: each one the runtime has no instance of (they
/// never restart, so one that ran, even in an older sandbox, is done), once its target
/// container, if it names one, is running.
fn ephemeral_to_start(pod: &Pod, rt: &RuntimePod) -> Vec<EphemeralStart> {
    let mut out = vec![];
    for (index, ec) in spec(pod).ephemeral_containers.iter().flatten().enumerate() {
        if rt.containers.iter().any(|c| c.name == ec.name) {
            continue;
        }
        let target_id = match ec
            .target_container_name
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            None => None,
            Some(target) => {
                let running = rt.containers.iter().find(|c| {
                    c.name == target
                        && c.kind != ContainerType::Ephemeral
                        && c.state == RuntimeState::Running
                });
                match running {
                    Some(c) => Some(c.id.clone()),
                    // Not running (yet): wait for it.
                    None => continue,
                }
            }
        };
        out.push(EphemeralStart { index, target_id });
    }
    out
}

fn init_and_regular_actions(pod: &Pod, rt: &RuntimePod, probes: &ProbeSnapshot) -> PodActions {
    let s = spec(pod);
    let policy = s.restart_policy.as_deref().unwrap_or("Always");
    let (create, attempt, sandbox_id) = sandbox_changed(pod, rt);
    let mut actions = PodActions {
        kill_pod: create,
        create_sandbox: create,
        attempt,
        sandbox_id: if create { None } else { sandbox_id },
        ..Default::default()
    };
    let inits = s.init_containers.as_deref().unwrap_or_default();
    if create {
        if policy != "Always" && attempt != 0 && !rt.containers.is_empty() {
            // A pod that must not restart lost its sandbox: leave it as it is.
            actions.create_sandbox = false;
            return actions;
        }
        let to_start: Vec<usize> = s
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(policy == "OnFailure"
                    && rt
                        .latest(&c.name, ContainerType::Regular)
                        .is_some_and(|l| l.state == RuntimeState::Exited && l.exit_code == 0))
            })
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() {
            actions.create_sandbox = false;
            return actions;
        }
        if !inits.is_empty() {
            actions.init_containers_to_start = vec![0];
        } else {
            actions.containers_to_start = to_start;
        }
        return actions;
    }

    if !init_actions(pod, rt, probes, &mut actions) || actions.kill_pod {
        // Initialization failed or still in progress: regular containers wait.
        return actions;
    }

    let mut keep = 0;
    for (i, c) in s.containers.iter().enumerate() {
        let latest = rt.latest(&c.name, ContainerType::Regular);
        match latest {
            Some(l) if l.state == RuntimeState::Running => {
                if !l.hash.is_empty() && l.hash != container_hash(c) {
                    actions.containers_to_kill.push(ToKill {
                        id: l.id.clone(),
                        name: c.name.clone(),
                        reason: format!(
                            "Container {} definition changed, will be restarted",
                            c.name
                        ),
                        grace: None,
                    });
                    actions.containers_to_start.push(i);
                } else if let Some((why, grace)) = probe_kill_reason(c, &l.id, probes) {
                    let restart = policy != "Never";
                    actions.containers_to_kill.push(ToKill {
                        id: l.id.clone(),
                        name: c.name.clone(),
                        reason: if restart {
                            format!("{why}, will be restarted")
                        } else {
                            why
                        },
                        grace,
                    });
                    if restart {
                        actions.containers_to_start.push(i);
                    }
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_restart(policy, latest) {
                    actions.containers_to_start.push(i);
                }
            }
        }
    }
    if keep == 0 && actions.containers_to_start.is_empty() {
        // Every container is done and none restarts: stop the sandbox. Sidecars do not
        // keep a pod alive, so they are not restarted either.
        actions.kill_pod = true;
        actions.init_containers_to_start.clear();
    }
    actions
}

/// Upstream's `computeInitContainerActions`: walks the init containers from the last,
/// starting the next one once the one before is done (a regular init container exited
/// 0, a sidecar running and past its startup probe), restarting sidecars that stopped
/// or failed a probe, and a failed regular one unless the policy is Never (then the pod
/// is killed). Returns whether the pod has initialized.
fn init_actions(
    pod: &Pod,
    rt: &RuntimePod,
    probes: &ProbeSnapshot,
    actions: &mut PodActions,
) -> bool {
    let s = spec(pod);
    let inits = s.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return true;
    }
    let restart_on_failure = s.restart_policy.as_deref().unwrap_or("Always") != "Never";
    // A regular container that runs (or was created) means initialization happened
    // before, even if the init containers are gone from the runtime now.
    let mut initialized = s.containers.iter().any(|c| {
        rt.latest(&c.name, ContainerType::Regular)
            .is_some_and(|l| matches!(l.state, RuntimeState::Running | RuntimeState::Created))
    });
    let mut previously_initialized = initialized;
    let mut to_start = vec![];
    let kill = |actions: &mut PodActions, id: &str, name: &str, reason: String| {
        actions.containers_to_kill.push(ToKill {
            id: id.to_owned(),
            name: name.to_owned(),
            reason,
            grace: None,
        });
    };
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(c);
        let Some(l) = rt.latest(&c.name, ContainerType::Init) else {
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        // After initialization only sidecars are looked after.
        if !previously_initialized || sidecar {
            match l.state {
                RuntimeState::Created => to_start.push(i),
                RuntimeState::Running if sidecar => {
                    let startup = probes.get(&(l.id.clone(), ProbeKind::Startup));
                    let started =
                        c.startup_probe.is_none() || startup == Some(&ProbeResult::Success);
                    if !started {
                        if startup == Some(&ProbeResult::Failure) {
                            kill(
                                actions,
                                &l.id,
                                &c.name,
                                format!("Init container {} failed startup probe", c.name),
                            );
                            to_start.push(i);
                        }
                    } else {
                        if i == inits.len() - 1 {
                            initialized = true;
                        } else if !previously_initialized {
                            to_start.push(i + 1);
                        }
                        if !l.hash.is_empty() && l.hash != container_hash(c) {
                            kill(
                                actions,
                                &l.id,
                                &c.name,
                                format!("Init container {} definition changed", c.name),
                            );
                            to_start.push(i);
                        } else if let Some((why, grace)) = probe_kill_reason(c, &l.id, probes) {
                            actions.containers_to_kill.push(ToKill {
                                id: l.id.clone(),
                                name: c.name.clone(),
                                reason: why.replacen("Container", "Init container", 1),
                                grace,
                            });
                            to_start.push(i);
                        }
                    }
                }
                // A regular init container still running: wait for it.
                RuntimeState::Running => {}
                RuntimeState::Exited if sidecar => to_start.push(i),
                RuntimeState::Exited if l.exit_code != 0 => {
                    if !restart_on_failure {
                        actions.kill_pod = true;
                        actions.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                }
                RuntimeState::Exited => {
                    if i == inits.len() - 1 {
                        initialized = true;
                    } else {
                        to_start.push(i + 1);
                    }
                }
                RuntimeState::Unknown => {
                    if !sidecar && !restart_on_failure {
                        actions.kill_pod = true;
                        actions.init_containers_to_start.clear();
                        return false;
                    }
                    kill(
                        actions,
                        &l.id,
                        &c.name,
                        "Init container is in \"unknown\" state, try killing it before restart"
                            .to_owned(),
                    );
                    to_start.push(i);
                }
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        to_start.push(0);
    }
    to_start.reverse();
    to_start.dedup();
    actions.init_containers_to_start = to_start;
    initialized
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{RuntimeContainer, RuntimeSandbox};
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn actions_of(pod: &Pod, rt: &RuntimePod) -> PodActions {
        compute_pod_actions(pod, rt, &ProbeSnapshot::new())
    }

    fn pod(containers: &[&str], inits: &[&str], policy: &str) -> Pod {
        let mk = |n: &&str| Container {
            name: (*n).into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: containers.iter().map(mk).collect(),
                init_containers: (!inits.is_empty()).then(|| inits.iter().map(mk).collect()),
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sb(id: &str, ready: bool, attempt: u32, created: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            ready,
            created_at: created,
            attempt,
            ips: vec!["10.244.0.2".into()],
            host_network: false,
        }
    }

    fn c(
        p: &Pod,
        name: &str,
        state: RuntimeState,
        exit: i32,
        created: i64,
        init: bool,
    ) -> RuntimeContainer {
        let spec_c = p
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .chain(p.spec.as_ref().unwrap().init_containers.iter().flatten())
            .find(|c| c.name == name)
            .unwrap();
        RuntimeContainer {
            hash: container_hash(spec_c),
            kind: if init {
                ContainerType::Init
            } else {
                ContainerType::Regular
            },
            ..instance(name, state, exit, created, "s1")
        }
    }

    /// A regular container instance in `sandbox`, with nothing else set.
    fn instance(
        name: &str,
        state: RuntimeState,
        exit: i32,
        created: i64,
        sandbox: &str,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("{name}{created}"),
            name: name.into(),
            state,
            created_at: created,
            started_at: created,
            finished_at: 0,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            restart_count: 0,
            hash: String::new(),
            kind: ContainerType::Regular,
            sandbox_id: sandbox.into(),
        }
    }

    fn rt(sandboxes: Vec<RuntimeSandbox>, containers: Vec<RuntimeContainer>) -> RuntimePod {
        let mut p = RuntimePod {
            sandboxes,
            containers,
            ..Default::default()
        };
        p.sort();
        p
    }

    use RuntimeState::*;

    #[test]
    fn new_pod() {
        let p = pod(&["a", "b"], &[], "Always");
        let a = actions_of(&p, &RuntimePod::default());
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!((a.attempt, a.containers_to_start.clone()), (0, vec![0, 1]));
        let p = pod(&["a"], &["i"], "Always");
        let a = actions_of(&p, &RuntimePod::default());
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.len()
            ),
            (vec![0], 0)
        );
    }

    #[test]
    fn steady_state_does_nothing() {
        let p = pod(&["a"], &[], "Always");
        let r = rt(
            vec![sb("s1", true, 0, 1)],
            vec![c(&p, "a", Running, 0, 5, false)],
        );
        let a = actions_of(&p, &r);
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("s1".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn restarts_per_policy() {
        for (policy, exit, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 1, true),
            ("OnFailure", 0, false),
            ("Never", 1, false),
        ] {
            let p = pod(&["a"], &[], policy);
            let r = rt(
                vec![sb("s1", true, 0, 1)],
                vec![c(&p, "a", Exited, exit, 5, false)],
            );
            let a = actions_of(&p, &r);
            assert_eq!(
                a.containers_to_start == vec![0],
                restart,
                "{policy} exit {exit}"
            );
            assert_eq!(
                a.kill_pod, !restart,
                "{policy} exit {exit}: sandbox stopped when done"
            );
        }
    }

    #[test]
    fn dead_sandbox() {
        let p = pod(&["a"], &[], "Always");
        let r = rt(
            vec![sb("s1", false, 0, 1)],
            vec![c(&p, "a", Exited, 137, 5, false)],
        );
        let a = actions_of(&p, &r);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!((a.attempt, a.containers_to_start.clone()), (1, vec![0]));
        let p = pod(&["a"], &[], "Never");
        let r = rt(
            vec![sb("s1", false, 0, 1)],
            vec![c(&p, "a", Exited, 137, 5, false)],
        );
        let a = actions_of(&p, &r);
        assert!(!a.create_sandbox && a.kill_pod, "Never: no new sandbox");
        let mut no_ip = sb("s1", true, 0, 1);
        no_ip.ips.clear();
        assert!(actions_of(&pod(&["a"], &[], "Always"), &rt(vec![no_ip], vec![])).create_sandbox);
    }

    #[test]
    fn init_containers_in_order() {
        let p = pod(&["a"], &["i1", "i2"], "Always");
        let s = || vec![sb("s1", true, 0, 1)];
        let a = actions_of(&p, &rt(s(), vec![c(&p, "i1", Running, 0, 5, true)]));
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.len()
            ),
            (vec![], 0),
            "wait for i1"
        );
        let a = actions_of(&p, &rt(s(), vec![c(&p, "i1", Exited, 0, 5, true)]));
        assert_eq!(a.init_containers_to_start, vec![1]);
        let a = actions_of(
            &p,
            &rt(
                s(),
                vec![
                    c(&p, "i1", Exited, 0, 5, true),
                    c(&p, "i2", Exited, 3, 6, true),
                ],
            ),
        );
        assert_eq!(
            a.init_containers_to_start,
            vec![1],
            "failed init container restarts"
        );
        let a = actions_of(
            &p,
            &rt(
                s(),
                vec![
                    c(&p, "i1", Exited, 0, 5, true),
                    c(&p, "i2", Exited, 0, 6, true),
                ],
            ),
        );
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.clone()
            ),
            (vec![], vec![0])
        );
        let never = pod(&["a"], &["i1"], "Never");
        let a = actions_of(&never, &rt(s(), vec![c(&never, "i1", Exited, 1, 5, true)]));
        assert!(a.kill_pod && a.init_containers_to_start.is_empty());
    }

    /// `pod(...)` whose init containers named in `sidecars` are sidecars.
    fn with_sidecars(mut p: Pod, sidecars: &[&str]) -> Pod {
        for c in p
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .iter_mut()
            .flatten()
        {
            if sidecars.contains(&c.name.as_str()) {
                c.restart_policy = Some("Always".into());
            }
        }
        p
    }

    #[test]
    fn sidecars_start_in_order_and_keep_running() {
        let p = with_sidecars(pod(&["a"], &["i1", "side", "i2"], "Never"), &["side"]);
        let s = || vec![sb("s1", true, 0, 1)];
        let i1_done = || c(&p, "i1", Exited, 0, 5, true);
        let side = |state, created| c(&p, "side", state, 0, created, true);
        // i1 done: the sidecar starts; running: i2 starts, the sidecar is left alone.
        let a = actions_of(&p, &rt(s(), vec![i1_done()]));
        assert_eq!(a.init_containers_to_start, vec![1]);
        let a = actions_of(&p, &rt(s(), vec![i1_done(), side(Running, 6)]));
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.len()
            ),
            (vec![2], 0)
        );
        // i2 done: the regular container starts beside the running sidecar.
        let i2_done = || c(&p, "i2", Exited, 0, 7, true);
        let a = actions_of(&p, &rt(s(), vec![i1_done(), side(Running, 6), i2_done()]));
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.clone()
            ),
            (vec![], vec![0])
        );
        // A sidecar that stopped restarts, whatever the pod's restart policy, and the
        // regular containers keep running.
        let running = || c(&p, "a", Running, 0, 8, false);
        let a = actions_of(
            &p,
            &rt(s(), vec![i1_done(), side(Exited, 6), i2_done(), running()]),
        );
        assert_eq!(
            (
                a.init_containers_to_start.clone(),
                a.containers_to_start.len(),
                a.kill_pod
            ),
            (vec![1], 0, false)
        );
        // Even gone from the runtime, the sidecar of an initialized pod restarts; the
        // regular init containers do not run again.
        let a = actions_of(&p, &rt(s(), vec![running()]));
        assert_eq!(a.init_containers_to_start, vec![1]);
        // The regular container finished (policy Never): the pod is done, the sidecar
        // does not keep it alive.
        let a = actions_of(
            &p,
            &rt(
                s(),
                vec![
                    i1_done(),
                    side(Running, 6),
                    i2_done(),
                    c(&p, "a", Exited, 0, 8, false),
                ],
            ),
        );
        assert!(a.kill_pod && a.init_containers_to_start.is_empty());
    }

    #[test]
    fn sidecars_wait_for_their_startup_probe_and_restart_on_failed_probes() {
        use k8s_openapi::api::core::v1::Probe;
        let mut p = with_sidecars(pod(&["a"], &["side"], "Always"), &["side"]);
        let init = &mut p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0];
        init.startup_probe = Some(Probe::default());
        init.liveness_probe = Some(Probe::default());
        let s = || vec![sb("s1", true, 0, 1)];
        let side = c(&p, "side", Running, 0, 6, true);
        let r = rt(s(), vec![side.clone()]);
        let with = |kind, result| ProbeSnapshot::from([((side.id.clone(), kind), result)]);
        let a = compute_pod_actions(&p, &r, &ProbeSnapshot::new());
        assert_eq!(
            (
                a.init_containers_to_start.len(),
                a.containers_to_start.len()
            ),
            (0, 0),
            "startup probe not run yet"
        );
        let a = compute_pod_actions(&p, &r, &with(ProbeKind::Startup, ProbeResult::Success));
        assert_eq!(
            a.containers_to_start,
            vec![0],
            "started: the pod is initialized"
        );
        let a = compute_pod_actions(&p, &r, &with(ProbeKind::Startup, ProbeResult::Failure));
        assert_eq!(
            a.containers_to_kill[0].reason,
            "Init container side failed startup probe"
        );
        assert_eq!(a.init_containers_to_start, vec![0]);
        let mut failed_liveness = with(ProbeKind::Startup, ProbeResult::Success);
        failed_liveness.insert((side.id.clone(), ProbeKind::Liveness), ProbeResult::Failure);
        let a = compute_pod_actions(&p, &r, &failed_liveness);
        assert_eq!(
            a.containers_to_kill[0].reason,
            "Init container side failed liveness probe"
        );
        assert_eq!(a.init_containers_to_start, vec![0]);
    }

    #[test]
    fn changed_spec_restarts_container() {
        let p = pod(&["a"], &[], "Always");
        let mut running = c(&p, "a", Running, 0, 5, false);
        running.hash = "different".into();
        let a = actions_of(&p, &rt(vec![sb("s1", true, 0, 1)], vec![running]));
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn failed_liveness_kills_and_restarts_unless_never() {
        use crate::probe::{ProbeKind, ProbeResult};
        for (policy, restart) in [("Always", true), ("OnFailure", true), ("Never", false)] {
            let p = pod(&["a", "b"], &[], policy);
            let a_run = c(&p, "a", Running, 0, 5, false);
            let b_run = c(&p, "b", Running, 0, 5, false);
            let probes: ProbeSnapshot = [
                (
                    (a_run.id.clone(), ProbeKind::Liveness),
                    ProbeResult::Failure,
                ),
                (
                    (b_run.id.clone(), ProbeKind::Readiness),
                    ProbeResult::Failure,
                ),
            ]
            .into();
            let r = rt(vec![sb("s1", true, 0, 1)], vec![a_run.clone(), b_run]);
            let a = compute_pod_actions(&p, &r, &probes);
            let why = if restart {
                "Container a failed liveness probe, will be restarted"
            } else {
                "Container a failed liveness probe"
            };
            assert_eq!(
                a.containers_to_kill,
                vec![ToKill {
                    id: a_run.id.clone(),
                    name: "a".into(),
                    reason: why.into(),
                    grace: None,
                }],
                "{policy}"
            );
            assert_eq!(
                a.containers_to_start,
                if restart { vec![0] } else { vec![] },
                "{policy}"
            );
            assert!(!a.kill_pod, "{policy}: b keeps running");
        }
    }

    fn with_ephemeral(mut p: Pod, names: &[(&str, Option<&str>)]) -> Pod {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        p.spec.as_mut().unwrap().ephemeral_containers = Some(
            names
                .iter()
                .map(|(n, target)| EphemeralContainer {
                    name: (*n).into(),
                    image: Some("busybox".into()),
                    target_container_name: target.map(str::to_owned),
                    ..Default::default()
                })
                .collect(),
        );
        p
    }

    fn eph(
        name: &str,
        state: RuntimeState,
        exit: i32,
        created: i64,
        sandbox: &str,
    ) -> RuntimeContainer {
        RuntimeContainer {
            kind: ContainerType::Ephemeral,
            ..instance(name, state, exit, created, sandbox)
        }
    }

    fn start(index: usize, target: Option<&str>) -> EphemeralStart {
        EphemeralStart {
            index,
            target_id: target.map(str::to_owned),
        }
    }

    #[test]
    fn ephemeral_container_starts_once_the_sandbox_is_ready() {
        let p = with_ephemeral(pod(&["a"], &[], "Always"), &[("dbg", None)]);
        // No sandbox yet: the sandbox and the regular containers come first.
        let a = actions_of(&p, &RuntimePod::default());
        assert!(a.create_sandbox && a.ephemeral_containers_to_start.is_empty());
        // A ready sandbox: started, and nothing else changes.
        let running = c(&p, "a", Running, 0, 5, false);
        let a = actions_of(&p, &rt(vec![sb("s1", true, 0, 1)], vec![running.clone()]));
        assert_eq!(a.ephemeral_containers_to_start, vec![start(0, None)]);
        assert!(!a.kill_pod && a.containers_to_start.is_empty() && a.containers_to_kill.is_empty());
        // Also while init containers still run (upstream: to debug them).
        let pi = with_ephemeral(pod(&["a"], &["i"], "Always"), &[("dbg", None)]);
        let a = actions_of(
            &pi,
            &rt(
                vec![sb("s1", true, 0, 1)],
                vec![c(&pi, "i", Running, 0, 5, true)],
            ),
        );
        assert_eq!(a.ephemeral_containers_to_start, vec![start(0, None)]);
        assert!(a.init_containers_to_start.is_empty());
    }

    #[test]
    fn ephemeral_container_is_never_restarted() {
        let p = with_ephemeral(pod(&["a"], &[], "Always"), &[("dbg", None), ("dbg2", None)]);
        let a_run = c(&p, "a", Running, 0, 5, false);
        for (state, exit) in [
            (Running, 0),
            (Exited, 0),
            (Exited, 1),
            (Created, 0),
            (Unknown, 0),
        ] {
            let r = rt(
                vec![sb("s1", true, 0, 1)],
                vec![a_run.clone(), eph("dbg", state, exit, 6, "s1")],
            );
            let a = actions_of(&p, &r);
            assert_eq!(
                a.ephemeral_containers_to_start,
                vec![start(1, None)],
                "{state:?} {exit}"
            );
        }
        // Not after a new sandbox either: it ran in the old one.
        let r = rt(
            vec![sb("s2", true, 1, 10), sb("s1", false, 0, 1)],
            vec![
                c(&p, "a", Running, 0, 11, false),
                eph("dbg", Exited, 137, 6, "s1"),
                eph("dbg2", Exited, 0, 7, "s1"),
            ],
        );
        assert!(actions_of(&p, &r).ephemeral_containers_to_start.is_empty());
    }

    #[test]
    fn ephemeral_container_waits_for_a_running_target() {
        let p = with_ephemeral(pod(&["a", "b"], &[], "Always"), &[("dbg", Some("a"))]);
        let s = || vec![sb("s1", true, 0, 1)];
        let b_run = c(&p, "b", Running, 0, 5, false);
        let a = actions_of(&p, &rt(s(), vec![b_run.clone()]));
        assert!(
            a.ephemeral_containers_to_start.is_empty(),
            "a not started yet"
        );
        let a = actions_of(
            &p,
            &rt(s(), vec![b_run.clone(), c(&p, "a", Exited, 1, 5, false)]),
        );
        assert!(a.ephemeral_containers_to_start.is_empty(), "a crashed");
        assert_eq!(a.containers_to_start, vec![0]);
        let a_run = c(&p, "a", Running, 0, 9, false);
        let a = actions_of(
            &p,
            &rt(
                s(),
                vec![b_run, c(&p, "a", Exited, 1, 5, false), a_run.clone()],
            ),
        );
        assert_eq!(
            a.ephemeral_containers_to_start,
            vec![start(0, Some(&a_run.id))],
            "the running instance's id"
        );
    }

    #[test]
    fn ephemeral_containers_count_for_nothing_else() {
        // The regular containers are done (Never): the pod is stopped, the running
        // ephemeral container with it, and a new one is not started.
        let p = with_ephemeral(pod(&["a"], &[], "Never"), &[("dbg", None), ("new", None)]);
        let r = rt(
            vec![sb("s1", true, 0, 1)],
            vec![
                c(&p, "a", Exited, 0, 5, false),
                eph("dbg", Running, 0, 6, "s1"),
            ],
        );
        let a = actions_of(&p, &r);
        assert!(a.kill_pod && !a.create_sandbox);
        assert!(a.ephemeral_containers_to_start.is_empty());
        // A running ephemeral container is not a changed regular container.
        let p = with_ephemeral(pod(&["a"], &[], "Always"), &[("dbg", None)]);
        let r = rt(
            vec![sb("s1", true, 0, 1)],
            vec![
                c(&p, "a", Running, 0, 5, false),
                eph("dbg", Running, 0, 6, "s1"),
            ],
        );
        assert_eq!(
            actions_of(&p, &r),
            PodActions {
                sandbox_id: Some("s1".into()),
                ..Default::default()
            }
        );
    }
}
