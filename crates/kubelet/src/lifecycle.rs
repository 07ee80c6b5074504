//! Pod lifecycle rules that are pure (upstream `kubelet_pods.go`, `kuberuntime_container.go`,
//! `active_deadline.go`): `activeDeadlineSeconds`, the grace left for a container after its
//! preStop hook, and running a container lifecycle hook (postStart/preStop: exec, httpGet,
//! sleep) with its error message in upstream's words, and the order in which a pod's
//! sidecars stop (upstream `terminationOrdering`). The hook IO is small and lives here
//! next to its message rules.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use crate::cri::CriClient;
use crate::probe::http_target;
use crate::sandbox::{name, namespace, spec, uid};

/// The pod's phase reason and message when `activeDeadlineSeconds` has passed.
pub const DEADLINE_REASON: &str = "DeadlineExceeded";
pub const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// Whether the pod has been active longer than `spec.activeDeadlineSeconds` since its
/// `status.startTime` (upstream `pastActiveDeadline`).
pub fn past_active_deadline(pod: &Pod, now: Timestamp) -> bool {
    let Some(deadline) = spec(pod).active_deadline_seconds else {
        return false;
    };
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return false;
    };
    now.duration_since(start.0).as_secs() >= deadline
}

/// How long until the pod's active deadline passes (zero once it has), if it has one: the
/// pod worker wakes then.
pub fn until_active_deadline(pod: &Pod, now: Timestamp) -> Option<Duration> {
    let deadline = spec(pod).active_deadline_seconds?;
    let start = pod.status.as_ref()?.start_time.as_ref()?;
    let elapsed = now.duration_since(start.0).as_secs().max(0);
    Some(Duration::from_secs(
        deadline.saturating_sub(elapsed).max(0) as u64
    ))
}

/// The smallest grace a container gets (upstream `minimumGracePeriodInSeconds`).
pub const MIN_GRACE_SECONDS: i64 = 2;

/// The grace left for a pod being deleted: until its `deletionTimestamp` (the apiserver sets
/// it to the DELETE's time plus the grace), never more than `deletionGracePeriodSeconds`.
/// A kubelet that finds the pod Terminating when it starts kills it with what is left, not
/// with the whole grace again. `None` when the pod is not being deleted.
pub fn remaining_deletion_grace(pod: &Pod, now: Timestamp) -> Option<i64> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?;
    let left = deadline.0.duration_since(now).as_secs().max(0);
    Some(match pod.metadata.deletion_grace_period_seconds {
        Some(grace) => left.min(grace.max(0)),
        None => left,
    })
}

/// The most a termination message file gives (upstream `MaxContainerTerminationMessageLength`).
pub const MAX_TERMINATION_MESSAGE: usize = 4096;
/// What `FallbackToLogsOnError` takes from the log: its last 80 lines, at most 2048 bytes.
pub const FALLBACK_LOG_LINES: usize = 80;
pub const FALLBACK_LOG_BYTES: usize = 2048;

/// The last lines of a CRI log file (`<time> <stream> <P|F> <content>` per line; `P` parts
/// join the next line) as the container wrote them, bounded as upstream bounds the
/// `FallbackToLogsOnError` message.
pub fn last_log_message(cri_log: &str) -> String {
    let mut lines: Vec<String> = vec![];
    let mut partial = String::new();
    for l in cri_log.lines() {
        let mut parts = l.splitn(4, ' ');
        let (Some(_time), Some(_stream), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let content = parts.next().unwrap_or("");
        partial.push_str(content);
        if tag != "P" {
            lines.push(std::mem::take(&mut partial));
        }
    }
    if !partial.is_empty() {
        lines.push(partial);
    }
    let start = lines.len().saturating_sub(FALLBACK_LOG_LINES);
    let mut text = lines[start..].join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    if text.len() > FALLBACK_LOG_BYTES {
        let mut cut = text.len() - FALLBACK_LOG_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = text[cut..].to_owned();
    }
    text
}

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    PostStart,
    PreStop,
}

impl Hook {
    pub fn of(self, c: &Container) -> Option<&LifecycleHandler> {
        let l = c.lifecycle.as_ref()?;
        match self {
            Hook::PostStart => l.post_start.as_ref(),
            Hook::PreStop => l.pre_stop.as_ref(),
        }
    }
}

fn pod_desc(pod: &Pod) -> String {
    format!("{}_{}({})", name(pod), namespace(pod), uid(pod))
}

/// Runs a hook of container `c` (instance `container_id`) bounded by `timeout`; the error
/// is upstream's message for the `Failed<Hook>` event and the waiting state.
pub async fn run_hook(
    cri: &CriClient,
    pod: &Pod,
    c: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    handler: &LifecycleHandler,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let secs = timeout.as_secs().max(1) as i64;
        let call = cri.exec_sync(container_id, cmd.clone(), secs);
        let res = tokio::time::timeout(timeout + Duration::from_secs(1), call).await;
        let err = match res {
            Err(_) => format!("command '{}' timed out", cmd.join(" ")),
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(r)) if r.exit_code == 0 => return Ok(()),
            Ok(Ok(r)) => {
                let mut out = r.stdout;
                out.extend_from_slice(&r.stderr);
                format!(
                    "command '{}' exited with {}: {}",
                    cmd.join(" "),
                    r.exit_code,
                    String::from_utf8_lossy(&out)
                )
            }
        };
        return Err(format!(
            "Exec lifecycle hook ({cmd:?}) for Container {:?} in Pod {:?} failed - error: {err}",
            c.name,
            pod_desc(pod)
        ));
    }
    if let Some(h) = &handler.http_get {
        let t = http_target(h, c, pod_ip).map_err(|e| e.to_string())?;
        // Upstream only fails a hook whose request fails; the status code is not checked.
        return match tokio::time::timeout(timeout, crate::prober::http_get(&t)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "HTTP lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: {e}",
                t.path,
                c.name,
                pod_desc(pod)
            )),
            Err(_) => Err(format!(
                "HTTP lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: timed out",
                t.path,
                c.name,
                pod_desc(pod)
            )),
        };
    }
    if let Some(s) = &handler.sleep {
        let d = Duration::from_secs(s.seconds.max(0) as u64).min(timeout);
        tokio::time::sleep(d).await;
        return Ok(());
    }
    Err(format!(
        "a lifecycle hook for Container {:?} in Pod {:?} has no handler",
        c.name,
        pod_desc(pod)
    ))
}

/// Upstream `terminationOrdering`: when a pod with sidecars stops, every container runs
/// its preStop hook at once, but a sidecar is stopped only once the regular containers
/// and every sidecar after it in the spec have stopped (or its grace ran out), so each
/// sidecar serves the containers started after it to their end.
#[derive(Debug, Default)]
pub struct TerminationOrdering {
    /// Cancelled once the container of that name has stopped (at once when it was not
    /// running).
    terminated: HashMap<String, CancellationToken>,
    /// What each sidecar waits for.
    prereqs: HashMap<String, Vec<CancellationToken>>,
}

impl TerminationOrdering {
    /// The ordering for a pod with sidecars (`None` without: nothing waits), given the
    /// names of its running containers.
    pub fn for_pod(spec: &PodSpec, running: &[&str]) -> Option<Self> {
        let inits = spec.init_containers.as_deref().unwrap_or_default();
        if !inits.iter().any(crate::container::is_sidecar) {
            return None;
        }
        let mut ordering = TerminationOrdering::default();
        let mut token = |name: &str| {
            let t = CancellationToken::new();
            if !running.contains(&name) {
                t.cancel();
            }
            ordering.terminated.insert(name.to_string(), t.clone());
            t
        };
        let regular: Vec<CancellationToken> =
            spec.containers.iter().map(|c| token(&c.name)).collect();
        let mut later_sidecar: Option<CancellationToken> = None;
        let mut prereqs = HashMap::new();
        for c in inits.iter().rev() {
            let stopped = token(&c.name);
            if crate::container::is_sidecar(c) {
                let mut waits = regular.clone();
                waits.extend(later_sidecar.replace(stopped));
                prereqs.insert(c.name.clone(), waits);
            }
        }
        ordering.prereqs = prereqs;
        Some(ordering)
    }

    /// Waits until `name` may stop, for at most `grace` seconds (not at all without a
    /// grace); returns how long it waited.
    pub async fn wait_for_turn(&self, name: &str, grace: i64) -> Duration {
        let started = tokio::time::Instant::now();
        if grace <= 0 {
            return Duration::ZERO;
        }
        let all = async {
            for t in self.prereqs.get(name).into_iter().flatten() {
                t.cancelled().await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(grace as u64), all).await;
        started.elapsed()
    }

    /// Marks `name` stopped: the sidecars waiting for it may go.
    pub fn container_terminated(&self, name: &str) {
        if let Some(t) = self.terminated.get(name) {
            t.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn remaining_grace_counts_from_the_deletion_timestamp() {
        let t = |s: i64| Timestamp::from_second(s).unwrap();
        let mut pod = Pod::default();
        assert_eq!(remaining_deletion_grace(&pod, t(100)), None);
        pod.metadata.deletion_timestamp = Some(Time(t(130)));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(remaining_deletion_grace(&pod, t(100)), Some(30));
        assert_eq!(remaining_deletion_grace(&pod, t(126)), Some(4));
        assert_eq!(remaining_deletion_grace(&pod, t(500)), Some(0));
        // Never above the pod's deletion grace (a clock ahead of the apiserver's).
        assert_eq!(remaining_deletion_grace(&pod, t(50)), Some(30));
    }

    #[test]
    fn active_deadline() {
        let pod = |deadline: Option<i64>, start: Option<i64>| Pod {
            spec: Some(PodSpec {
                active_deadline_seconds: deadline,
                ..Default::default()
            }),
            status: Some(PodStatus {
                start_time: start.map(|s| Time(Timestamp::from_second(s).unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let now = Timestamp::from_second(1000).unwrap();
        let cases = [
            (None, Some(0), false),
            (Some(10), None, false),
            (Some(10), Some(995), false),
            (Some(10), Some(990), true),
            (Some(10), Some(100), true),
        ];
        for (deadline, start, want) in cases {
            assert_eq!(
                past_active_deadline(&pod(deadline, start), now),
                want,
                "{deadline:?} {start:?}"
            );
        }
        assert_eq!(
            until_active_deadline(&pod(Some(10), Some(995)), now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            until_active_deadline(&pod(Some(10), Some(100)), now),
            Some(Duration::ZERO)
        );
        assert_eq!(until_active_deadline(&pod(None, Some(100)), now), None);
    }

    #[test]
    fn log_tail_for_termination_messages() {
        let log = "2026-01-01T00:00:00.1Z stdout F first\n\
                   2026-01-01T00:00:00.2Z stderr P par\n\
                   2026-01-01T00:00:00.3Z stderr F tial\n\
                   garbage\n";
        assert_eq!(last_log_message(log), "first\npartial\n");
        assert_eq!(last_log_message(""), "");
        let many: String = (0..200)
            .map(|i| format!("2026-01-01T00:00:00Z stdout F line {i}\n"))
            .collect();
        let tail = last_log_message(&many);
        assert!(
            tail.starts_with("line 120\n") && tail.ends_with("line 199\n"),
            "{tail}"
        );
        let long: String = format!("2026-01-01T00:00:00Z stdout F {}\n", "x".repeat(5000));
        assert_eq!(last_log_message(&long).len(), FALLBACK_LOG_BYTES);
    }

    fn sidecar_pod() -> PodSpec {
        serde_json::from_value(serde_json::json!({
            "initContainers": [
                {"name": "first", "restartPolicy": "Always"},
                {"name": "setup"},
                {"name": "second", "restartPolicy": "Always"}],
            "containers": [{"name": "app"}, {"name": "done"}]}))
        .unwrap()
    }

    #[test]
    fn only_pods_with_sidecars_order_their_stop() {
        let plain: PodSpec =
            serde_json::from_value(serde_json::json!({"containers": [{"name": "app"}]})).unwrap();
        assert!(TerminationOrdering::for_pod(&plain, &["app"]).is_none());
        assert!(TerminationOrdering::for_pod(&sidecar_pod(), &["app"]).is_some());
    }

    #[tokio::test]
    async fn sidecars_stop_after_the_regular_containers_in_reverse_order() {
        let ordering = std::sync::Arc::new(
            TerminationOrdering::for_pod(&sidecar_pod(), &["first", "second", "app"]).unwrap(),
        );
        // Regular containers do not wait; a container not running has stopped already.
        assert!(ordering.wait_for_turn("app", 30).await < Duration::from_secs(1));
        let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for name in ["first", "second"] {
            let (ordering, order) = (ordering.clone(), order.clone());
            tasks.spawn(async move {
                ordering.wait_for_turn(name, 30).await;
                order.lock().push(name);
                ordering.container_terminated(name);
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(order.lock().is_empty(), "the sidecars went before app");
        ordering.container_terminated("app");
        while tasks.join_next().await.is_some() {}
        assert_eq!(*order.lock(), ["second", "first"]);
    }

    #[tokio::test]
    async fn a_sidecar_waits_no_longer_than_its_grace() {
        let ordering =
            TerminationOrdering::for_pod(&sidecar_pod(), &["first", "second", "app"]).unwrap();
        let waited = ordering.wait_for_turn("first", 1).await;
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(ordering.wait_for_turn("first", 0).await, Duration::ZERO);
    }
}
