//! Container probes, the pure part (upstream `pkg/kubelet/prober`): probe timing with the
//! API defaults, the per-worker decision of upstream `worker.doProbe` (when to probe, when a
//! run of results becomes the container's result, when to hold), the shared results store,
//! how results make a container `started`/`ready`, and the probe targets (httpGet URL,
//! named ports). The probing itself is in [`crate::prober`], the workers in
//! [`crate::probe_manager`].

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, HTTPGetAction, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ];

    /// As upstream writes it in events ("Liveness probe failed: ...").
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe of this kind.
    pub fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => c.liveness_probe.as_ref(),
            ProbeKind::Readiness => c.readiness_probe.as_ref(),
            ProbeKind::Startup => c.startup_probe.as_ref(),
        }
    }

    /// The result a container has before its first conclusive run: not ready, alive,
    /// not yet started (upstream `newWorker`).
    pub fn initial_result(self) -> ProbeResult {
        match self {
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

/// The outcome of one probe, or a container's current result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// A probe's timing fields with the API's defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeTiming {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: i32, min: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(min) as u64)
}

impl ProbeTiming {
    /// Defaults: initialDelay 0, period 10 s, timeout 1 s, thresholds 1 and 3. Liveness and
    /// startup probes succeed on one success whatever the spec says (validation insists).
    pub fn of(kind: ProbeKind, p: &Probe) -> Self {
        let success = if kind == ProbeKind::Readiness {
            p.success_threshold.unwrap_or(1).max(1) as u32
        } else {
            1
        };
        ProbeTiming {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: success,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// The container as a probe worker sees it in the pod's last status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    /// The runtime ID (without the `containerd://` scheme).
    pub id: String,
    /// When the running instance started; `None` when it is not running.
    pub running_since: Option<Timestamp>,
    pub terminated: bool,
    /// `status.started` as last written.
    pub started: bool,
}

impl ContainerView {
    /// From the container's API status; `None` while it has no container ID.
    pub fn from_status(st: &ContainerStatus) -> Option<Self> {
        let id = st.container_id.as_deref().filter(|s| !s.is_empty())?;
        let id = id.split_once("://").map_or(id, |(_, id)| id).to_owned();
        let state = st.state.as_ref();
        Some(ContainerView {
            id,
            running_since: state
                .and_then(|s| s.running.as_ref())
                .map(|r| r.started_at.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0)),
            terminated: state.is_some_and(|s| s.terminated.is_some()),
            started: st.started.unwrap_or(false),
        })
    }
}

/// What the pod looks like to a probe worker.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    pub terminal: bool,
    pub deleting: bool,
    pub restart_never: bool,
    pub container: Option<ContainerView>,
}

/// A change a worker makes to the results store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultUpdate {
    Set(String, ProbeResult),
    Remove(String),
}

/// What a worker does this period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// Run the probe now.
    pub probe: bool,
    /// Keep the worker (false: the container will not run again, or the pod is going).
    pub keep: bool,
    pub updates: Vec<ResultUpdate>,
}

/// One probe worker's memory (upstream `worker`): the container it follows, the current run
/// of equal results and whether it waits for a restart after a failure.
#[derive(Debug, Clone)]
pub struct ProbeWorker {
    pub kind: ProbeKind,
    pub timing: ProbeTiming,
    container_id: Option<String>,
    last_result: ProbeResult,
    result_run: u32,
    on_hold: bool,
}

impl ProbeWorker {
    pub fn new(kind: ProbeKind, timing: ProbeTiming) -> Self {
        ProbeWorker {
            kind,
            timing,
            container_id: None,
            last_result: ProbeResult::Unknown,
            result_run: 0,
            on_hold: false,
        }
    }

    /// The container this worker follows, once seen.
    pub fn container_id(&self) -> Option<&str> {
        self.container_id.as_deref()
    }

    /// Everything of upstream `doProbe` before the probe itself.
    pub fn tick(&mut self, pod: &PodView, now: Timestamp) -> Tick {
        let mut t = Tick {
            probe: false,
            keep: true,
            updates: vec![],
        };
        if pod.terminal {
            t.keep = false;
            return t;
        }
        let Some(c) = &pod.container else {
            return t;
        };
        if self.container_id.as_deref() != Some(&c.id) {
            if let Some(old) = self.container_id.take() {
                t.updates.push(ResultUpdate::Remove(old));
            }
            self.container_id = Some(c.id.clone());
            t.updates
                .push(ResultUpdate::Set(c.id.clone(), self.kind.initial_result()));
            self.on_hold = false;
            // A new instance starts a new run of results.
            self.last_result = ProbeResult::Unknown;
            self.result_run = 0;
        }
        if self.on_hold {
            return t;
        }
        let Some(since) = c.running_since else {
            t.updates
                .push(ResultUpdate::Set(c.id.clone(), ProbeResult::Failure));
            // A terminated container of a Never pod will not run again.
            t.keep = !(c.terminated && pod.restart_never);
            return t;
        };
        if pod.deleting && self.kind != ProbeKind::Readiness {
            // A pod shutting down is not restarted for failing liveness.
            t.updates
                .push(ResultUpdate::Set(c.id.clone(), ProbeResult::Success));
            t.keep = false;
            return t;
        }
        let running_for = now.duration_since(since).as_secs();
        if running_for < self.timing.initial_delay.as_secs() as i64 {
            return t;
        }
        // Startup probes run until the container has started; the others only after.
        if c.started == (self.kind == ProbeKind::Startup) {
            return t;
        }
        t.probe = true;
        t
    }

    /// Records a probe's outcome; returns the update once the run reaches its threshold
    /// (upstream: `failureThreshold` failures or `successThreshold` successes in a row).
    /// A liveness or startup failure holds the worker until the container restarts.
    pub fn record(&mut self, result: ProbeResult) -> Option<ResultUpdate> {
        let id = self.container_id.clone()?;
        if self.last_result == result {
            self.result_run = self.result_run.saturating_add(1);
        } else {
            self.last_result = result;
            self.result_run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.timing.failure_threshold,
            ProbeResult::Success => self.timing.success_threshold,
            ProbeResult::Unknown => return None,
        };
        if self.result_run < threshold {
            return None;
        }
        if self.kind != ProbeKind::Readiness && result == ProbeResult::Failure {
            self.on_hold = true;
            self.result_run = 0;
        }
        Some(ResultUpdate::Set(id, result))
    }
}

/// Probe results by container ID and kind, shared by the workers (writers), the sync
/// (liveness/startup kills) and status (started/ready).
#[derive(Debug, Default)]
pub struct ProbeResults {
    inner: Mutex<HashMap<(String, ProbeKind), ProbeResult>>,
}

/// A copy of the results at one moment.
pub type ProbeSnapshot = HashMap<(String, ProbeKind), ProbeResult>;

impl ProbeResults {
    /// Applies an update; returns whether the stored result changed.
    pub fn apply(&self, kind: ProbeKind, u: &ResultUpdate) -> bool {
        let mut m = self.inner.lock();
        match u {
            ResultUpdate::Set(id, r) => m.insert((id.clone(), kind), *r) != Some(*r),
            ResultUpdate::Remove(id) => m.remove(&(id.clone(), kind)).is_some(),
        }
    }

    pub fn get(&self, id: &str, kind: ProbeKind) -> Option<ProbeResult> {
        self.inner.lock().get(&(id.to_owned(), kind)).copied()
    }

    /// Forgets every result of these containers.
    pub fn forget(&self, ids: &[String]) {
        self.inner.lock().retain(|(id, _), _| !ids.contains(id));
    }

    pub fn snapshot(&self) -> ProbeSnapshot {
        self.inner.lock().clone()
    }
}

/// `started` and `ready` of a running container from its probes (upstream
/// `prober_manager.UpdatePodStatus`): without a startup probe a running container has
/// started; without a readiness probe a started one is ready.
pub fn started_and_ready(
    c: &Container,
    container_id: &str,
    running: bool,
    probes: &ProbeSnapshot,
) -> (bool, bool) {
    if !running {
        return (false, false);
    }
    let result = |k| probes.get(&(container_id.to_owned(), k)).copied();
    let started =
        c.startup_probe.is_none() || result(ProbeKind::Startup) == Some(ProbeResult::Success);
    let ready = started
        && (c.readiness_probe.is_none()
            || result(ProbeKind::Readiness) == Some(ProbeResult::Success));
    (started, ready)
}

/// Why a running container must be killed for its probes, if it must (upstream
/// `computePodActions`): a liveness failure, or a startup probe that gave up; with the
/// grace the failed probe asks for (`probe.terminationGracePeriodSeconds`).
pub fn probe_kill_reason(
    c: &Container,
    container_id: &str,
    probes: &ProbeSnapshot,
) -> Option<(String, Option<i64>)> {
    let failed = |k| probes.get(&(container_id.to_owned(), k)) == Some(&ProbeResult::Failure);
    let kind = [ProbeKind::Liveness, ProbeKind::Startup]
        .into_iter()
        .find(|k| failed(*k))?;
    let grace = kind.of(c).and_then(|p| p.termination_grace_period_seconds);
    let what = if kind == ProbeKind::Liveness {
        "liveness"
    } else {
        "startup"
    };
    Some((format!("Container {} failed {what} probe", c.name), grace))
}

/// Why a probe's target cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("couldn't find port: {0}")]
    NoSuchPort(String),
    #[error("invalid port number: {0}")]
    BadPort(i32),
    #[error("no pod IP to probe")]
    NoHost,
}

/// A probe port: a number, or the name of one of the container's ports (upstream
/// `findPortByName`; a numeric string is a number).
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, TargetError> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => match s.parse::<i32>() {
            Ok(n) => n,
            Err(_) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| TargetError::NoSuchPort(s.clone()))?,
        },
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(TargetError::BadPort(n))
}

/// An httpGet probe's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Headers in order; upstream's defaults (`User-Agent: kube-probe/1.33`, `Accept: */*`)
    /// unless the probe sets them. A `Host` header names the virtual host.
    pub headers: Vec<(String, String)>,
}

impl HttpTarget {
    /// The URL as events show it.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}{}", self.port, self.path)
    }
}

/// The user agent upstream's kubelet probes with.
pub const PROBE_USER_AGENT: &str = "kube-probe/1.33";

pub fn http_target(
    a: &HTTPGetAction,
    c: &Container,
    pod_ip: Option<&str>,
) -> Result<HttpTarget, TargetError> {
    let host = a
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .or_else(|| pod_ip.map(str::to_owned))
        .ok_or(TargetError::NoHost)?;
    let port = resolve_port(&a.port, c)?;
    let path = a.path.clone().unwrap_or_default();
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let mut headers: Vec<(String, String)> = a
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    let has = |hs: &[(String, String)], n: &str| hs.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has(&headers, "User-Agent") {
        headers.push(("User-Agent".into(), PROBE_USER_AGENT.into()));
    }
    if !has(&headers, "Accept") {
        headers.push(("Accept".into(), "*/*".into()));
    }
    Ok(HttpTarget {
        https: a
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
        host,
        port,
        path,
        headers,
    })
}

/// A tcpSocket probe's address.
pub fn tcp_target(
    a: &TCPSocketAction,
    c: &Container,
    pod_ip: Option<&str>,
) -> Result<(String, u16), TargetError> {
    let host = a
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .or_else(|| pod_ip.map(str::to_owned))
        .ok_or(TargetError::NoHost)?;
    Ok((host, resolve_port(&a.port, c)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};

    fn timing(success: u32, failure: u32, delay: u64) -> ProbeTiming {
        ProbeTiming {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn running(id: &str, since: i64, started: bool) -> PodView {
        PodView {
            container: Some(ContainerView {
                id: id.into(),
                running_since: Some(ts(since)),
                terminated: false,
                started,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn timing_defaults() {
        let t = ProbeTiming::of(ProbeKind::Liveness, &Probe::default());
        assert_eq!(
            t,
            ProbeTiming {
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
        let p = Probe {
            success_threshold: Some(4),
            period_seconds: Some(0),
            ..Default::default()
        };
        assert_eq!(
            ProbeTiming::of(ProbeKind::Readiness, &p).success_threshold,
            4
        );
        assert_eq!(ProbeTiming::of(ProbeKind::Startup, &p).success_threshold, 1);
        assert_eq!(
            ProbeTiming::of(ProbeKind::Readiness, &p).period,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn first_sight_sets_the_initial_result_and_waits_for_the_initial_delay() {
        for (kind, initial) in [
            (ProbeKind::Liveness, ProbeResult::Success),
            (ProbeKind::Readiness, ProbeResult::Failure),
            (ProbeKind::Startup, ProbeResult::Unknown),
        ] {
            let mut w = ProbeWorker::new(kind, timing(1, 3, 5));
            let started = kind != ProbeKind::Startup;
            let t = w.tick(&running("c1", 100, started), ts(102));
            assert_eq!(
                t.updates,
                vec![ResultUpdate::Set("c1".into(), initial)],
                "{kind:?}"
            );
            assert!(!t.probe, "{kind:?}: within initialDelaySeconds");
            let t = w.tick(&running("c1", 100, started), ts(105));
            assert!(t.probe && t.updates.is_empty(), "{kind:?}: after the delay");
        }
    }

    #[test]
    fn startup_gates_the_others() {
        let mut live = ProbeWorker::new(ProbeKind::Liveness, timing(1, 3, 0));
        let mut start = ProbeWorker::new(ProbeKind::Startup, timing(1, 3, 0));
        assert!(!live.tick(&running("c", 0, false), ts(1)).probe);
        assert!(start.tick(&running("c", 0, false), ts(1)).probe);
        assert!(live.tick(&running("c", 0, true), ts(2)).probe);
        assert!(
            !start.tick(&running("c", 0, true), ts(2)).probe,
            "started: startup stops"
        );
    }

    #[test]
    fn thresholds() {
        // (kind, success, failure, outcomes, the updates after each outcome)
        use ProbeResult::{Failure as F, Success as S};
        type Case = (
            ProbeKind,
            u32,
            u32,
            Vec<ProbeResult>,
            Vec<Option<ProbeResult>>,
        );
        let cases: Vec<Case> = vec![
            (
                ProbeKind::Liveness,
                1,
                3,
                vec![F, F, F],
                vec![None, None, Some(F)],
            ),
            (
                ProbeKind::Liveness,
                1,
                3,
                vec![F, F, S, F, F],
                vec![None, None, Some(S), None, None],
            ),
            (
                ProbeKind::Readiness,
                2,
                1,
                vec![S, S, F, S],
                vec![None, Some(S), Some(F), None],
            ),
            (
                ProbeKind::Readiness,
                1,
                2,
                vec![F, F, F, F],
                vec![None, Some(F), Some(F), Some(F)],
            ),
        ];
        for (kind, s, f, outcomes, want) in cases {
            let mut w = ProbeWorker::new(kind, timing(s, f, 0));
            w.tick(&running("c", 0, true), ts(1));
            let got: Vec<_> = outcomes
                .iter()
                .map(|r| match w.record(*r) {
                    Some(ResultUpdate::Set(_, r)) => Some(r),
                    _ => None,
                })
                .collect();
            assert_eq!(got, want, "{kind:?} s={s} f={f} {outcomes:?}");
        }
    }

    #[test]
    fn liveness_failure_holds_until_a_new_container() {
        let mut w = ProbeWorker::new(ProbeKind::Liveness, timing(1, 1, 0));
        w.tick(&running("c1", 0, true), ts(1));
        assert_eq!(
            w.record(ProbeResult::Failure),
            Some(ResultUpdate::Set("c1".into(), ProbeResult::Failure))
        );
        assert!(!w.tick(&running("c1", 0, true), ts(2)).probe, "on hold");
        let t = w.tick(&running("c2", 3, true), ts(4));
        assert!(t.probe);
        assert_eq!(
            t.updates,
            vec![
                ResultUpdate::Remove("c1".into()),
                ResultUpdate::Set("c2".into(), ProbeResult::Success),
            ]
        );
    }

    #[test]
    fn not_running_terminal_and_deleting() {
        let mut w = ProbeWorker::new(ProbeKind::Readiness, timing(1, 1, 0));
        let exited = |never| PodView {
            restart_never: never,
            container: Some(ContainerView {
                id: "c".into(),
                running_since: None,
                terminated: true,
                started: false,
            }),
            ..Default::default()
        };
        let t = w.tick(&exited(false), ts(1));
        assert!(!t.probe && t.keep);
        assert_eq!(
            t.updates.last(),
            Some(&ResultUpdate::Set("c".into(), ProbeResult::Failure))
        );
        assert!(
            !w.tick(&exited(true), ts(1)).keep,
            "Never: it will not run again"
        );
        let terminal = PodView {
            terminal: true,
            ..Default::default()
        };
        assert!(!w.tick(&terminal, ts(1)).keep);
        let mut live = ProbeWorker::new(ProbeKind::Liveness, timing(1, 1, 0));
        let mut deleting = running("c", 0, true);
        deleting.deleting = true;
        let t = live.tick(&deleting, ts(1));
        assert!(!t.probe && !t.keep);
        assert_eq!(
            t.updates.last(),
            Some(&ResultUpdate::Set("c".into(), ProbeResult::Success))
        );
        let none = PodView::default();
        let t = live.tick(&none, ts(1));
        assert!(!t.probe && t.keep, "not created yet");
    }

    #[test]
    fn started_ready_and_kill_reason() {
        let c = |startup: bool, readiness: bool| Container {
            name: "c".into(),
            startup_probe: startup.then(Probe::default),
            readiness_probe: readiness.then(Probe::default),
            ..Default::default()
        };
        let snap = |pairs: &[(ProbeKind, ProbeResult)]| -> ProbeSnapshot {
            pairs
                .iter()
                .map(|(k, r)| (("id".to_owned(), *k), *r))
                .collect()
        };
        use ProbeKind::*;
        use ProbeResult::*;
        let cases = [
            (c(false, false), true, snap(&[]), (true, true)),
            (c(false, false), false, snap(&[]), (false, false)),
            (c(false, true), true, snap(&[]), (true, false)),
            (
                c(false, true),
                true,
                snap(&[(Readiness, Success)]),
                (true, true),
            ),
            (
                c(true, true),
                true,
                snap(&[(Readiness, Success)]),
                (false, false),
            ),
            (
                c(true, false),
                true,
                snap(&[(Startup, Unknown)]),
                (false, false),
            ),
            (
                c(true, false),
                true,
                snap(&[(Startup, Success)]),
                (true, true),
            ),
        ];
        for (i, (c, running, probes, want)) in cases.iter().enumerate() {
            assert_eq!(
                started_and_ready(c, "id", *running, probes),
                *want,
                "case {i}"
            );
        }
        let web = Container {
            name: "web".into(),
            liveness_probe: Some(Probe {
                termination_grace_period_seconds: Some(7),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            probe_kill_reason(&web, "id", &snap(&[(Liveness, Failure)])),
            Some(("Container web failed liveness probe".to_owned(), Some(7)))
        );
        assert_eq!(
            probe_kill_reason(&web, "id", &snap(&[(Startup, Failure)])),
            Some(("Container web failed startup probe".to_owned(), None))
        );
        assert_eq!(
            probe_kill_reason(&web, "id", &snap(&[(Readiness, Failure)])),
            None
        );
    }

    #[test]
    fn targets() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let a = HTTPGetAction {
            port: IntOrString::String("http".into()),
            path: Some("healthz?x=1".into()),
            http_headers: Some(vec![HTTPHeader {
                name: "Host".into(),
                value: "example".into(),
            }]),
            ..Default::default()
        };
        let t = http_target(&a, &c, Some("10.244.0.5")).unwrap();
        assert_eq!(t.url(), "http://10.244.0.5:8080/healthz?x=1");
        assert_eq!(
            t.headers,
            vec![
                ("Host".to_owned(), "example".to_owned()),
                ("User-Agent".to_owned(), PROBE_USER_AGENT.to_owned()),
                ("Accept".to_owned(), "*/*".to_owned()),
            ]
        );
        let a = HTTPGetAction {
            port: IntOrString::Int(443),
            host: Some("fd00::1".into()),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        };
        assert_eq!(
            http_target(&a, &c, None).unwrap().url(),
            "https://[fd00::1]:443/"
        );
        let bad = |p: IntOrString| resolve_port(&p, &c);
        assert_eq!(
            bad(IntOrString::String("nope".into())),
            Err(TargetError::NoSuchPort("nope".into()))
        );
        assert_eq!(bad(IntOrString::String("81".into())), Ok(81));
        assert_eq!(
            bad(IntOrString::Int(70000)),
            Err(TargetError::BadPort(70000))
        );
        let tcp = TCPSocketAction {
            port: IntOrString::Int(80),
            host: None,
        };
        assert_eq!(
            tcp_target(&tcp, &c, Some("10.0.0.1")),
            Ok(("10.0.0.1".into(), 80))
        );
        assert_eq!(tcp_target(&tcp, &c, None), Err(TargetError::NoHost));
    }
}
