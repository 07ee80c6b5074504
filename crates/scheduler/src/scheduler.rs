//! The scheduler loop (`scheduleOne`): pop a pod, run the scheduling cycle on a fresh
//! snapshot, assume + Reserve + Permit, then the binding cycle (PreBind, Bind,
//! PostBind) in its own task. Failures un-assume, record `PodScheduled=False` with
//! upstream's message and an event, and requeue. Cluster IO goes through
//! [`SchedulerApi`] so that the loop is testable without an apiserver.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_client::events::EventType;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use parking_lot::Mutex;

use crate::cache::{Cache, Snapshot};
use crate::config::DEFAULT_SCHEDULER_NAME;
use crate::framework::{
    ActionType, ClusterEvent, CycleState, EVENT_ASSIGNED_POD_ADD, EVENT_ASSIGNED_POD_DELETE,
    EVENT_ASSIGNED_POD_UPDATE, EVENT_NODE_ADD, EVENT_NODE_UPDATE, EventObject, EventResource,
    Framework, PostFilterContext,
};
use crate::metrics::Metrics;
use crate::queue::SchedulingQueue;
use crate::schedule_one::{Algorithm, ScheduleError};
use crate::status::Status;
use crate::types::{PodInfo, QueuedPodInfo, pod_key, pod_node_name};

/// Cluster writes other than binding (which is the Bind plugins' job).
#[async_trait::async_trait]
pub trait SchedulerApi: Send + Sync {
    /// Sets the pod's `PodScheduled` condition and, when `nominated` is `Some`, its
    /// `status.nominatedNodeName` (`Some("")` clears it).
    async fn update_pod_status(
        &self,
        pod: &Pod,
        condition: PodCondition,
        nominated: Option<String>,
    ) -> Result<(), String>;
    /// Evicts a preemption victim: marks it with upstream's `DisruptionTarget`
    /// condition (reason `PreemptionByScheduler`, naming `scheduler_name`, the
    /// preemptor's scheduler), so that what owns it (a Job's pod failure policy) knows
    /// why it went, then deletes it.
    async fn evict_victim(&self, victim: &Pod, scheduler_name: &str) -> Result<(), String>;
    /// Records an event through the recorder of `profile` (fire and forget).
    fn event(&self, profile: &str, event: PodEvent<'_>);
}

/// An event the scheduler records (upstream's `EventRecorder().Eventf` arguments).
#[derive(Debug, Clone)]
pub struct PodEvent<'a> {
    /// The pod the event is about.
    pub regarding: &'a Pod,
    /// A second pod involved (the preemptor of a `Preempted` victim).
    pub related: Option<&'a Pod>,
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// The `PodScheduled=False` condition upstream writes.
pub fn unschedulable_condition(reason: &str, message: &str) -> PodCondition {
    PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        )),
        ..Default::default()
    }
}

/// A scheduler: profiles, cache, queue, metrics.
pub struct Scheduler {
    pub profiles: HashMap<String, Arc<Framework>>,
    pub cache: Arc<Mutex<Cache>>,
    pub queue: Arc<SchedulingQueue>,
    pub api: Arc<dyn SchedulerApi>,
    pub metrics: Arc<Metrics>,
    algorithm: Mutex<Algorithm>,
    snapshot: Mutex<Snapshot>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("profiles", &self.profiles.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME)
}

impl Scheduler {
    pub fn new(
        profiles: Vec<Arc<Framework>>,
        cache: Arc<Mutex<Cache>>,
        queue: Arc<SchedulingQueue>,
        api: Arc<dyn SchedulerApi>,
        metrics: Arc<Metrics>,
        percentage_of_nodes_to_score: i32,
    ) -> Self {
        Scheduler {
            profiles: profiles
                .into_iter()
                .map(|f| (f.profile_name.clone(), f))
                .collect(),
            cache,
            queue,
            api,
            metrics,
            algorithm: Mutex::new(Algorithm {
                next_start_node_index: 0,
                percentage_of_nodes_to_score,
            }),
            snapshot: Mutex::new(Snapshot::default()),
        }
    }

    /// Whether one of our profiles schedules this pod.
    pub fn responsible_for(&self, pod: &Pod) -> bool {
        self.profiles.contains_key(scheduler_name(pod))
    }

    // ---- Informer event handlers (`eventhandlers.go`) -----------------------------

    /// A pod was added or updated.
    pub fn on_pod(&self, old: Option<&Pod>, pod: Arc<Pod>) {
        let assigned = !pod_node_name(&pod).is_empty();
        if assigned {
            self.cache.lock().add_pod(pod.clone());
            self.queue.delete(&pod);
            let ev = if old.is_some_and(|o| !pod_node_name(o).is_empty()) {
                EVENT_ASSIGNED_POD_UPDATE
            } else {
                EVENT_ASSIGNED_POD_ADD
            };
            self.queue.move_all_to_active_or_backoff(
                ev,
                old.map_or(EventObject::None, EventObject::Pod),
                EventObject::Pod(&pod),
            );
        } else if self.responsible_for(&pod) {
            if pod.metadata.deletion_timestamp.is_some() {
                self.queue.delete(&pod);
                return;
            }
            if old.is_some() {
                self.queue.update(pod);
            } else {
                self.queue.add(pod);
            }
        }
    }

    /// A pod was deleted.
    pub fn on_pod_delete(&self, pod: &Pod) {
        if !pod_node_name(pod).is_empty() {
            self.cache.lock().remove_pod(pod);
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                EventObject::Pod(pod),
                EventObject::None,
            );
        } else {
            self.queue.delete(pod);
        }
        for fw in self.profiles.values() {
            fw.reject_waiting_pod(pod.metadata.uid.as_deref().unwrap_or(""), "", "pod deleted");
        }
    }

    pub fn on_node(&self, old: Option<&Node>, node: Arc<Node>) {
        self.cache.lock().add_node(node.clone());
        let ev = if old.is_some() {
            EVENT_NODE_UPDATE
        } else {
            EVENT_NODE_ADD
        };
        self.queue.move_all_to_active_or_backoff(
            ev,
            old.map_or(EventObject::None, EventObject::Node),
            EventObject::Node(&node),
        );
    }

    pub fn on_node_delete(&self, node: &Node) {
        self.cache.lock().remove_node(node);
    }

    /// Any other object that some plugin cares about (PVs, PVCs, ...).
    pub fn on_other(&self, resource: EventResource, action: ActionType) {
        self.queue.move_all_to_active_or_backoff(
            ClusterEvent::new(resource, action, "Other"),
            EventObject::None,
            EventObject::None,
        );
    }

    /// Runs the periodic queue and cache chores until `stop` resolves.
    pub async fn run_background(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n = 0u64;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            n += 1;
            self.queue.flush_backoff_completed();
            if n.is_multiple_of(30) {
                self.queue.flush_unschedulable_left_over();
                let expired = self.cache.lock().cleanup_assumed(Instant::now());
                for k in expired {
                    tracing::warn!(pod = %k, "assumed pod expired");
                }
            }
        }
    }

    /// Schedules pods until the queue closes.
    pub async fn run(self: Arc<Self>) {
        while self.clone().schedule_one().await {}
    }

    /// `scheduleOne`: one pod through the scheduling cycle; the binding cycle is
    /// spawned. Returns false once the queue is closed.
    pub async fn schedule_one(self: Arc<Self>) -> bool {
        let Some(q) = self.queue.pop().await else {
            return false;
        };
        let key = q.pod_info.key();
        let Some(fw) = self.profiles.get(scheduler_name(q.pod())).cloned() else {
            self.queue.done(&key);
            return true;
        };
        if q.pod().metadata.deletion_timestamp.is_some() || self.cache.lock().is_assumed(&key) {
            self.queue.done(&key);
            return true;
        }
        let start = Instant::now();
        let cycle = self.queue.scheduling_cycle();
        let mut state = CycleState::new();
        let result = {
            let mut snap = self.snapshot.lock();
            self.cache.lock().update_snapshot(&mut snap);
            let mut alg = self.algorithm.lock();
            let r = alg.schedule_pod(&fw, &mut state, &q.pod_info, &snap, self.queue.as_ref());
            match r {
                Ok(r) => Ok(r),
                Err(ScheduleError::Fit(mut fe)) => {
                    let mut post = None;
                    if fw.has_post_filter() {
                        self.metrics
                            .preemption_attempts
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let ctx = PostFilterContext {
                            fw: &fw,
                            state: &state,
                            pod: &q.pod_info,
                            snapshot: &snap,
                            statuses: &fe.diagnosis.node_to_status,
                            nominator: self.queue.as_ref(),
                        };
                        let (r, s) = fw.run_post_filter(&ctx);
                        if !s.is_success() {
                            fe.diagnosis.post_filter_msg = s.message();
                        }
                        post = r;
                    }
                    Err((ScheduleError::Fit(fe), post))
                }
                Err(e) => Err((e, None)),
            }
        };
        match result {
            Err((err, post)) => {
                let mut nominated = None;
                if let Some(p) = post {
                    if let Some(node) = p.nominated_node_name.clone() {
                        self.preempt(q.pod(), &p.victims, &p.clear_nominated, &fw)
                            .await;
                        self.queue.set_nominated(&q.pod_info, Some(&node));
                        nominated = Some(node);
                    } else if q
                        .pod()
                        .status
                        .as_ref()
                        .and_then(|s| s.nominated_node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
                    {
                        self.queue.set_nominated(&q.pod_info, None);
                        nominated = Some(String::new());
                    }
                }
                self.handle_failure(&fw, q, err, nominated, cycle, start)
                    .await;
            }
            Ok(r) => {
                self.after_schedule(fw, q, state, r.suggested_host, cycle, start)
                    .await;
            }
        }
        true
    }

    async fn preempt(
        &self,
        preemptor: &Pod,
        victims: &[Arc<Pod>],
        clear: &[Arc<Pod>],
        fw: &Framework,
    ) {
        self.metrics
            .preemption_victims
            .fetch_add(victims.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let deletes = victims.iter().map(|v| async move {
            // A victim waiting at Permit is rejected instead of deleted.
            let waiting = fw.reject_waiting_pod(
                v.metadata.uid.as_deref().unwrap_or(""),
                "DefaultPreemption",
                "preempted",
            );
            let scheduler_name = preemptor
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref())
                .unwrap_or(DEFAULT_SCHEDULER_NAME);
            if !waiting && let Err(e) = self.api.evict_victim(v, scheduler_name).await {
                tracing::warn!(pod = %pod_key(v), error = %e, "deleting preemption victim");
                return;
            }
            // Upstream's event (`PreemptPod`): about the victim, related to the preemptor.
            self.api.event(
                &fw.profile_name,
                PodEvent {
                    regarding: v,
                    related: Some(preemptor),
                    type_: EventType::Normal,
                    reason: "Preempted",
                    action: "Preempting",
                    note: format!(
                        "Preempted by pod {} on node {}",
                        preemptor.metadata.uid.as_deref().unwrap_or(""),
                        pod_node_name(v)
                    ),
                },
            );
        });
        futures::future::join_all(deletes).await;
        for p in clear {
            let pi = Arc::new(PodInfo::new(p.clone()));
            self.queue.set_nominated(&pi, None);
            let cond = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled").cloned())
                .unwrap_or_else(|| unschedulable_condition("Unschedulable", ""));
            let _ = self
                .api
                .update_pod_status(p, cond, Some(String::new()))
                .await;
        }
    }

    async fn after_schedule(
        self: Arc<Self>,
        fw: Arc<Framework>,
        q: QueuedPodInfo,
        mut state: CycleState,
        host: String,
        cycle: u64,
        start: Instant,
    ) {
        let mut assumed = (*q.pod_info.pod).clone();
        if let Some(s) = assumed.spec.as_mut() {
            s.node_name = Some(host.clone());
        }
        let assumed_info = Arc::new(PodInfo::new(Arc::new(assumed)));
        let assumed_ok = self.cache.lock().assume_pod(assumed_info.clone(), &host);
        if let Err(e) = assumed_ok {
            let st = Status::error(e.to_string());
            self.handle_failure(&fw, q, ScheduleError::Error(st), None, cycle, start)
                .await;
            return;
        }
        let s = fw.run_reserve(&mut state, &assumed_info, &host);
        if !s.is_success() {
            fw.run_unreserve(&mut state, &assumed_info, &host);
            let _ = self.cache.lock().forget_pod(&assumed_info.pod);
            self.fail_with_status(&fw, q, s, cycle, start).await;
            return;
        }
        let s = fw.run_permit(&state, &assumed_info, &host);
        if !s.is_success() && !s.is_wait() {
            fw.run_unreserve(&mut state, &assumed_info, &host);
            let _ = self.cache.lock().forget_pod(&assumed_info.pod);
            self.fail_with_status(&fw, q, s, cycle, start).await;
            return;
        }
        // Nominations end once a pod is assumed.
        self.queue.set_nominated(&q.pod_info, None);
        let this = self.clone();
        tokio::spawn(async move {
            this.binding_cycle(fw, q, state, assumed_info, host, start)
                .await;
        });
    }

    async fn fail_with_status(
        &self,
        fw: &Framework,
        mut q: QueuedPodInfo,
        s: Status,
        cycle: u64,
        start: Instant,
    ) {
        if s.is_rejected() {
            q.unschedulable_plugins.insert(s.plugin.clone());
            let reason = s.message();
            self.metrics
                .observe_attempt("unschedulable", &fw.profile_name, start.elapsed());
            self.record_failure(&q, "Unschedulable", &reason, None)
                .await;
            self.queue.add_unschedulable_if_not_present(q, cycle);
        } else {
            self.handle_failure(fw, q, ScheduleError::Error(s), None, cycle, start)
                .await;
        }
    }

    async fn binding_cycle(
        self: Arc<Self>,
        fw: Arc<Framework>,
        q: QueuedPodInfo,
        mut state: CycleState,
        assumed: Arc<PodInfo>,
        host: String,
        start: Instant,
    ) {
        let key = q.pod_info.key();
        let mut s = fw.wait_on_permit(&assumed).await;
        if s.is_success() {
            s = fw.run_pre_bind(&assumed, &host).await;
        }
        if s.is_success() {
            s = fw.run_bind(&assumed, &host).await;
            if s.is_skip() {
                s = Status::error("no bind plugin bound the pod");
            }
        }
        if !s.is_success() {
            fw.run_unreserve(&mut state, &assumed, &host);
            let _ = self.cache.lock().forget_pod(&assumed.pod);
            // The freed room may help others.
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                EventObject::Pod(&assumed.pod),
                EventObject::None,
            );
            let cycle = self.queue.scheduling_cycle();
            self.fail_with_status(&fw, q, s, cycle, start).await;
            return;
        }
        self.cache
            .lock()
            .finish_binding(&assumed.pod, Instant::now());
        self.metrics
            .observe_attempt("scheduled", &fw.profile_name, start.elapsed());
        if let Some(t) = q.initial_attempt_timestamp {
            self.metrics.observe_e2e(t.elapsed());
        }
        self.api.event(
            &fw.profile_name,
            PodEvent {
                regarding: &q.pod_info.pod,
                related: None,
                type_: EventType::Normal,
                reason: "Scheduled",
                action: "Binding",
                note: format!("Successfully assigned {key} to {host}"),
            },
        );
        fw.run_post_bind(&assumed, &host).await;
        self.queue.done(&key);
    }

    async fn record_failure(
        &self,
        q: &QueuedPodInfo,
        reason: &str,
        msg: &str,
        nominated: Option<String>,
    ) {
        self.api.event(
            scheduler_name(q.pod()),
            PodEvent {
                regarding: q.pod(),
                related: None,
                type_: EventType::Warning,
                reason: "FailedScheduling",
                action: "Scheduling",
                note: msg.to_string(),
            },
        );
        let cond = unschedulable_condition(reason, msg);
        // Skip the write when nothing changes (`updatePod` does the same).
        let same = q
            .pod()
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some(reason)
                    && c.message.as_deref() == Some(msg)
            });
        if same && nominated.is_none() {
            return;
        }
        if let Err(e) = self.api.update_pod_status(q.pod(), cond, nominated).await {
            tracing::warn!(pod = %q.pod_info.key(), error = %e, "updating pod condition");
        }
    }

    /// `handleSchedulingFailure`.
    async fn handle_failure(
        &self,
        fw: &Framework,
        mut q: QueuedPodInfo,
        err: ScheduleError,
        nominated: Option<String>,
        cycle: u64,
        start: Instant,
    ) {
        let msg = err.to_string();
        let reason = match &err {
            ScheduleError::Fit(fe) => {
                q.unschedulable_plugins = fe.diagnosis.unschedulable_plugins.clone();
                q.pending_plugins = fe.diagnosis.pending_plugins.clone();
                self.metrics
                    .observe_attempt("unschedulable", &fw.profile_name, start.elapsed());
                "Unschedulable"
            }
            ScheduleError::Error(_) | ScheduleError::NoNodes => {
                q.unschedulable_plugins.clear();
                self.metrics
                    .observe_attempt("error", &fw.profile_name, start.elapsed());
                "SchedulerError"
            }
        };
        tracing::debug!(pod = %q.pod_info.key(), %msg, "unable to schedule pod");
        self.record_failure(&q, reason, &msg, nominated).await;
        if matches!(err, ScheduleError::NoNodes) {
            // Wait for a node rather than spin.
            q.unschedulable_plugins
                .insert(crate::plugins::basic::NODE_NAME.into());
        }
        self.queue.add_unschedulable_if_not_present(q, cycle);
    }
}
