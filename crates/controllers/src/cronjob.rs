//! The CronJob controller (upstream `pkg/controller/cronjob`, the v2 controller):
//! creates a Job from `spec.jobTemplate` at each time of the cron schedule, applies
//! the concurrency policy (`Allow`, `Forbid`, `Replace`), keeps `status.active`,
//! `status.lastScheduleTime` and `status.lastSuccessfulTime`, and deletes finished
//! Jobs beyond the history limits. It requeues each CronJob at its next schedule time
//! instead of polling.
//!
//! Pure parts, table-tested below: the schedule ([`parse_schedule`], a port of
//! `robfig/cron/v3`'s standard parser and its `Next`, in the schedule's time zone:
//! `CRON_TZ=`/`TZ=` prefix, else `spec.timeZone`, else the local zone),
//! [`most_recent_schedule_time`], [`next_schedule_delay`] and [`too_late`] (upstream's
//! `mostRecentScheduleTime`, `nextScheduleTimeDuration` and the starting-deadline
//! check), [`history_to_delete`] and [`job_from_template`].
//!
//! The schedule syntax and its evaluation live in `ferrokube_validation::cron`, the
//! parser the apiserver validates CronJobs with, so both agree on every schedule.
//!
//! Deviations from upstream: none in behaviour that we know of; the creation-skew
//! metric is not kept. As upstream, unset history limits keep every Job (the
//! apiserver defaults them to 3 and 1).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp, ToSpan};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};

use ferrokube_client::error_message;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;

pub use ferrokube_validation::cron::{Schedule, load_time_zone, parse_schedule};

use crate::events::{EventSink, EventType, emit, reference_to};
use crate::job::finished_condition;
use crate::replicaset::is_not_found;
use crate::util::{controller_of, new_controller_ref};
use crate::{Action, Controller, Error, Result, enqueue_live, split_key};

/// The annotation with the Job's nominal start time (RFC 3339, CronJob's time zone).
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Slack added to requeues so the sync lands after the schedule time, not before.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// How many start times were missed (upstream `missedSchedulesType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    /// More than 100: upstream warns `TooManyMissedTimes`.
    Many,
}

/// Upstream `mostRecentScheduleTime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MostRecent {
    /// `lastScheduleTime`, else the creation time (or the deadline when later).
    pub earliest: Timestamp,
    /// The latest schedule time in `(earliest, now]`, if any.
    pub time: Option<Timestamp>,
    pub missed: Missed,
}

/// The most recent unmet schedule time of a CronJob created at `created`, last
/// scheduled at `last`, with `startingDeadlineSeconds` `deadline` (counted only with
/// `include_deadline`), as upstream `mostRecentScheduleTime`. An error for schedules
/// that never (or not twice) fire.
pub fn most_recent_schedule_time(
    created: Timestamp,
    last: Option<Timestamp>,
    deadline: Option<i64>,
    now: Timestamp,
    sched: &Schedule,
    include_deadline: bool,
) -> Result<MostRecent, String> {
    let mut earliest = last.unwrap_or(created);
    if include_deadline && let Some(d) = deadline {
        // Nothing before the deadline is scheduled any more.
        // A SignedDuration, not a Span: a span of startingDeadlineSeconds past about
        // 20,000 years panics, and the field takes any int64.
        let sd = now
            .checked_sub(SignedDuration::from_secs(d))
            .unwrap_or(Timestamp::MIN);
        if sd > earliest {
            earliest = sd;
        }
    }
    let none = |missed| MostRecent {
        earliest,
        time: None,
        missed,
    };
    let invalid = || "time difference between two schedules is less than 1 second".to_string();
    let t1 = sched.next(earliest).ok_or_else(invalid)?;
    if now < t1 {
        return Ok(none(Missed::None));
    }
    let t2 = sched.next(t1).ok_or_else(invalid)?;
    if now < t2 {
        return Ok(MostRecent {
            earliest,
            time: Some(t1),
            missed: Missed::None,
        });
    }
    let between_ms = t2.as_millisecond() - t1.as_millisecond();
    let between = (between_ms + 500).div_euclid(1000);
    if between < 1 {
        return Err(invalid());
    }
    let elapsed = (now.as_millisecond() - t1.as_millisecond()) / 1000;
    let missed_count = elapsed / between + 1;
    // Start two intervals early and let the schedule find the exact times: an
    // irregular schedule (`30 6-16/4 * * 1-5`) is not a multiple of `between`.
    let potential_earliest = t1
        .checked_add(((missed_count - 2) * between).seconds())
        .map_err(|e| e.to_string())?;
    let mut most_recent = None;
    let mut t = sched.next(potential_earliest);
    while let Some(ti) = t {
        if ti > now {
            break;
        }
        most_recent = Some(ti);
        t = sched.next(ti);
    }
    let missed = if missed_count > 100 {
        Missed::Many
    } else if missed_count > 0 {
        Missed::Few
    } else {
        Missed::None
    };
    Ok(MostRecent {
        earliest,
        time: most_recent,
        missed,
    })
}

/// How long until the sync after the next schedule time (upstream
/// `nextScheduleTimeDuration`, with its 100 ms slack). `None` when the schedule
/// never fires again.
pub fn next_schedule_delay(
    created: Timestamp,
    last: Option<Timestamp>,
    now: Timestamp,
    sched: &Schedule,
) -> Option<Duration> {
    let from = match most_recent_schedule_time(created, last, None, now, sched, false) {
        Err(_) => now,
        Ok(MostRecent { time: Some(t), .. }) => t,
        Ok(MostRecent {
            earliest,
            time: None,
            missed: Missed::None,
        }) => earliest,
        Ok(_) => now,
    };
    let next = sched.next(from)?;
    let ms = next.as_millisecond() - now.as_millisecond();
    let d = Duration::from_millis(ms.max(0).unsigned_abs()) + NEXT_SCHEDULE_DELTA;
    Some(d)
}

/// Whether `scheduled` is past its `startingDeadlineSeconds` at `now` (upstream's
/// `tooLate`: a `MissSchedule` warning instead of a Job).
pub fn too_late(scheduled: Timestamp, deadline: Option<i64>, now: Timestamp) -> bool {
    deadline.is_some_and(|d| {
        scheduled
            .checked_add(SignedDuration::from_secs(d))
            .is_ok_and(|t| t < now)
    })
}

/// The Job name for a nominal start time: `<cronjob>-<minutes since the epoch>`
/// (upstream `getJobName`), deterministic so a time is never run twice.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// The Job to create for `scheduled` (upstream `getJobFromTemplate2`): the template's
/// labels, annotations and spec, the scheduled-timestamp annotation in the CronJob's
/// `spec.timeZone` (UTC when unset), and a controller reference to the CronJob.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, String> {
    let tmpl = &cj.spec.as_ref().ok_or("no spec")?.job_template;
    let tmeta = tmpl.metadata.clone().unwrap_or_default();
    let tz_name = cj
        .spec
        .as_ref()
        .and_then(|s| s.time_zone.as_deref())
        .unwrap_or("");
    let tz = load_time_zone(tz_name)?;
    let mut annotations = tmeta.annotations.unwrap_or_default();
    let stamp = scheduled
        .to_zoned(tz)
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    // Go's RFC 3339 writes a zero offset as "Z".
    let stamp = match stamp.strip_suffix("+00:00") {
        Some(s) => format!("{s}Z"),
        None => stamp,
    };
    annotations.insert(SCHEDULED_TIMESTAMP_ANNOTATION.to_string(), stamp);
    let name = cj.metadata.name.clone().unwrap_or_default();
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&name, scheduled)),
            labels: Some(tmeta.labels.unwrap_or_default()),
            annotations: Some(annotations),
            owner_references: Some(vec![new_controller_ref(
                "batch/v1",
                "CronJob",
                &name,
                cj.metadata.uid.as_deref().unwrap_or(""),
            )]),
            ..Default::default()
        },
        spec: tmpl.spec.clone(),
        status: None,
    })
}

/// `Complete` or `Failed` when the Job finished (upstream `getFinishedStatus`).
pub fn finished_type(job: &Job) -> Option<&str> {
    finished_condition(job).map(|c| c.type_.as_str())
}

/// The finished Jobs beyond the history limits, oldest (by `status.startTime`, unset
/// last, then name) first (upstream `cleanupFinishedJobs`). An unset limit keeps all:
/// the apiserver defaults them to 3 and 1.
pub fn history_to_delete<'a>(
    jobs: &[&'a Job],
    successful_limit: Option<i32>,
    failed_limit: Option<i32>,
) -> Vec<&'a Job> {
    let mut out = Vec::new();
    for (type_, limit) in [("Complete", successful_limit), ("Failed", failed_limit)] {
        let Some(limit) = limit else { continue };
        let mut of: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| finished_type(j) == Some(type_))
            .collect();
        let n = of.len().saturating_sub(usize::try_from(limit).unwrap_or(0));
        if n == 0 {
            continue;
        }
        of.sort_by(|a, b| {
            let st = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
            };
            match (st(a), st(b)) {
                (Some(x), Some(y)) if x != y => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.metadata.name.cmp(&b.metadata.name),
            }
        });
        out.extend(of.into_iter().take(n));
    }
    out
}

fn in_active_list(cj: &CronJob, uid: &str) -> bool {
    cj.status
        .as_ref()
        .and_then(|s| s.active.as_ref())
        .is_some_and(|a| a.iter().any(|r| r.uid.as_deref() == Some(uid)))
}

fn delete_from_active_list(cj: &mut CronJob, uid: &str) {
    if let Some(a) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
        a.retain(|r| r.uid.as_deref() != Some(uid));
    }
}

fn active(cj: &CronJob) -> Vec<ObjectReference> {
    cj.status
        .as_ref()
        .and_then(|s| s.active.clone())
        .unwrap_or_default()
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// The CronJob controller.
pub struct CronJobController {
    client: kube::Client,
    cronjobs: Store<CronJob>,
    jobs: Store<Job>,
    recorder: Arc<dyn EventSink>,
}

impl CronJobController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(CronJobController {
            client,
            cronjobs: factory.informer::<CronJob>().store(),
            jobs: factory.informer::<Job>().store(),
            recorder,
        })
    }

    fn event(&self, cj: &CronJob, type_: EventType, reason: &str, note: String) {
        emit(&*self.recorder, cj, type_, reason, note);
    }

    /// Deletes a Job (background propagation) and drops it from the active list
    /// (upstream `deleteJob`); false when the delete failed.
    async fn delete_job(&self, cj: &mut CronJob, job: &Job) -> bool {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let name = job.metadata.name.as_deref().unwrap_or("");
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "FailedDelete",
                    format!("Deleted job: {}", error_message(&e)),
                );
                return false;
            }
        }
        delete_from_active_list(cj, job.metadata.uid.as_deref().unwrap_or(""));
        self.event(
            cj,
            EventType::Normal,
            "SuccessfulDelete",
            format!("Deleted job {name}"),
        );
        true
    }

    /// Upstream `syncCronJob` on `cj` (updated in place): the requeue delay, whether
    /// the status changed, and the error to retry on.
    async fn sync_cronjob(
        &self,
        cj: &mut CronJob,
        jobs: &[Arc<Job>],
    ) -> (Option<Duration>, bool, Result<()>) {
        let now = Timestamp::now();
        let ns = cj.metadata.namespace.clone().unwrap_or_default();
        let jobs_api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        let cj_api: Api<CronJob> = Api::namespaced(self.client.clone(), &ns);
        let mut update = false;
        for j in jobs {
            let uid = j.metadata.uid.as_deref().unwrap_or("");
            let found = in_active_list(cj, uid);
            let finished = finished_type(j);
            if !found && finished.is_none() {
                // Our status may be older than the Job: a fresh copy may list it.
                let name = cj.metadata.name.clone().unwrap_or_default();
                match cj_api.get(&name).await {
                    Ok(fresh) if in_active_list(&fresh, uid) => {
                        *cj = fresh;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => return (None, update, Err(e.into())),
                }
                let jname = j.metadata.name.as_deref().unwrap_or("");
                self.event(
                    cj,
                    EventType::Warning,
                    "UnexpectedJob",
                    format!("Saw a job that the controller did not create or forgot: {jname}"),
                );
            } else if found && let Some(cond) = finished {
                delete_from_active_list(cj, uid);
                let jname = j.metadata.name.as_deref().unwrap_or("");
                self.event(
                    cj,
                    EventType::Normal,
                    "SawCompletedJob",
                    format!("Saw completed job: {jname}, condition: {cond}"),
                );
                update = true;
            } else if finished == Some("Complete") {
                let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
                let status = cj.status.get_or_insert_with(Default::default);
                match (&status.last_successful_time, &done) {
                    (None, _) => {
                        status.last_successful_time = done;
                        update = true;
                    }
                    (Some(last), Some(d)) if d.0 > last.0 => {
                        status.last_successful_time = done;
                        update = true;
                    }
                    _ => {}
                }
            }
        }

        // Active Jobs that are gone from the cache: ask the apiserver before
        // dropping them (the watch may be behind).
        for r in active(cj) {
            let uid = r.uid.as_deref().unwrap_or("");
            if jobs.iter().any(|j| j.metadata.uid.as_deref() == Some(uid)) {
                continue;
            }
            let api: Api<Job> =
                Api::namespaced(self.client.clone(), r.namespace.as_deref().unwrap_or(&ns));
            match api.get_opt(r.name.as_deref().unwrap_or("")).await {
                Ok(None) => {
                    let rname = r.name.as_deref().unwrap_or("");
                    self.event(
                        cj,
                        EventType::Normal,
                        "MissingJob",
                        format!("Active job went missing: {rname}"),
                    );
                    delete_from_active_list(cj, uid);
                    update = true;
                }
                Ok(Some(_)) => {}
                Err(e) => return (None, update, Err(e.into())),
            }
        }

        if cj.metadata.deletion_timestamp.is_some() {
            return (None, update, Ok(()));
        }
        let Some(spec) = cj.spec.clone() else {
            return (None, update, Ok(()));
        };
        if let Some(tz) = &spec.time_zone
            && let Err(e) = load_time_zone(tz)
        {
            self.event(
                cj,
                EventType::Warning,
                "UnknownTimeZone",
                format!("invalid timeZone: {tz:?}: {e}"),
            );
            return (None, update, Ok(()));
        }
        if spec.suspend == Some(true) {
            return (None, update, Ok(()));
        }
        // Upstream: a schedule's own TZ wins over spec.timeZone, with a warning.
        let default_tz = if spec.schedule.contains("TZ") {
            self.event(
                cj,
                EventType::Warning,
                "UnsupportedSchedule",
                format!(
                    "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                    spec.schedule
                ),
            );
            TimeZone::system()
        } else {
            match &spec.time_zone {
                Some(tz) => load_time_zone(tz).unwrap_or_else(|_| TimeZone::system()),
                None => TimeZone::system(),
            }
        };
        let sched = match parse_schedule(&spec.schedule, &default_tz) {
            Ok(s) => s,
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "UnparseableSchedule",
                    format!("unparseable schedule: {:?} : {e}", spec.schedule),
                );
                return (None, update, Ok(()));
            }
        };
        let created = cj.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
        let last = |cj: &CronJob| {
            cj.status
                .as_ref()
                .and_then(|s| s.last_schedule_time.as_ref())
                .map(|t| t.0)
        };
        let deadline = spec.starting_deadline_seconds;
        let requeue = |cj: &CronJob| next_schedule_delay(created, last(cj), now, &sched);

        let scheduled = match most_recent_schedule_time(
            created,
            last(cj),
            deadline,
            now,
            &sched,
            true,
        ) {
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "InvalidSchedule",
                    format!("invalid schedule: {} : {e}", spec.schedule),
                );
                return (None, update, Ok(()));
            }
            Ok(MostRecent { time: None, .. }) => return (requeue(cj), update, Ok(())),
            Ok(MostRecent {
                time: Some(t),
                missed,
                ..
            }) => {
                if missed == Missed::Many {
                    self.event(
                        cj,
                        EventType::Warning,
                        "TooManyMissedTimes",
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into(),
                    );
                }
                t
            }
        };

        if too_late(scheduled, deadline, now) {
            let at = scheduled
                .strftime("%a, %d %b %Y %H:%M:%S +0000")
                .to_string();
            self.event(
                cj,
                EventType::Warning,
                "MissSchedule",
                format!("Missed scheduled time to start a job: {at}"),
            );
            return (requeue(cj), update, Ok(()));
        }
        let cj_name = cj.metadata.name.clone().unwrap_or_default();
        let name = job_name(&cj_name, scheduled);
        let already = active(cj)
            .iter()
            .any(|r| r.name.as_deref() == Some(name.as_str()))
            || last(cj) == Some(scheduled);
        if already {
            return (requeue(cj), update, Ok(()));
        }
        let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
        if policy == "Forbid" && !active(cj).is_empty() {
            self.event(
                cj,
                EventType::Normal,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
            );
            return (requeue(cj), update, Ok(()));
        }
        if policy == "Replace" {
            for r in active(cj) {
                let api: Api<Job> =
                    Api::namespaced(self.client.clone(), r.namespace.as_deref().unwrap_or(&ns));
                let job = match api.get(r.name.as_deref().unwrap_or("")).await {
                    Ok(j) => j,
                    Err(e) => {
                        self.event(
                            cj,
                            EventType::Warning,
                            "FailedGet",
                            format!("Get job: {}", error_message(&e)),
                        );
                        return (None, update, Err(e.into()));
                    }
                };
                if !self.delete_job(cj, &job).await {
                    let jname = job.metadata.name.as_deref().unwrap_or("");
                    return (
                        None,
                        update,
                        Err(Error::Invalid(format!(
                            "could not replace job {ns}/{jname}"
                        ))),
                    );
                }
                update = true;
            }
        }

        let req = match job_from_template(cj, scheduled) {
            Ok(j) => j,
            Err(e) => return (None, update, Err(Error::Invalid(e))),
        };
        let created_job = match jobs_api.create(&PostParams::default(), &req).await {
            Ok(j) => {
                self.event(
                    cj,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created job {name}"),
                );
                j
            }
            Err(e) if is_already_exists(&e) => {
                let job = match jobs_api.get(&name).await {
                    Ok(j) => j,
                    Err(e) => return (None, update, Err(e.into())),
                };
                // Someone else's Job of that name: they keep the status.
                let ours = controller_of(&job.metadata).map(|r| r.uid.as_str())
                    == cj.metadata.uid.as_deref();
                if !ours || in_active_list(cj, job.metadata.uid.as_deref().unwrap_or("")) {
                    return (None, update, Ok(()));
                }
                job
            }
            Err(e) => {
                if !crate::podcontrol::is_namespace_terminating(&e) {
                    self.event(
                        cj,
                        EventType::Warning,
                        "FailedCreate",
                        format!("Error creating job: {}", error_message(&e)),
                    );
                }
                return (None, update, Err(e.into()));
            }
        };
        let status = cj.status.get_or_insert_with(Default::default);
        status
            .active
            .get_or_insert_with(Vec::new)
            .push(reference_to(&created_job));
        status.last_schedule_time = Some(Time(scheduled));
        (requeue(cj), true, Ok(()))
    }

    /// Upstream `cleanupFinishedJobs`: whether the status changed.
    async fn cleanup_finished_jobs(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
        let Some(spec) = cj.spec.clone() else {
            return false;
        };
        let refs: Vec<&Job> = jobs.iter().map(|j| &**j).collect();
        let doomed = history_to_delete(
            &refs,
            spec.successful_jobs_history_limit,
            spec.failed_jobs_history_limit,
        );
        let mut update = false;
        for j in doomed {
            update |= self.delete_job(cj, j).await;
        }
        update
    }
}

#[async_trait::async_trait]
impl Controller for CronJobController {
    fn name(&self) -> &'static str {
        "cronjob"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |_: &CronJob| true);
        let q = queue.clone();
        let owner_key = |job: &Job| {
            let r = controller_of(&job.metadata)?;
            (r.kind == "CronJob").then(|| key_of(job.metadata.namespace.as_deref(), &r.name))
        };
        factory.informer::<Job>().add_event_handler(
            move |n: Notification<Job>| {
                if let Notification::Updated { old, .. } = &n
                    && let Some(k) = owner_key(old)
                {
                    q.add(k);
                }
                if let Some(k) = owner_key(n.object()) {
                    q.add(k);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, _) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(cached) = self.cronjobs.get(key) else {
            return Ok(Action::Done);
        };
        let uid = cached.metadata.uid.clone().unwrap_or_default();
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .list_namespace(ns)
            .into_iter()
            .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        let mut cj = (*cached).clone();
        let cleaned = self.cleanup_finished_jobs(&mut cj, &jobs).await;
        let (requeue, synced, result) = self.sync_cronjob(&mut cj, &jobs).await;
        if cleaned || synced {
            let api: Api<CronJob> = Api::namespaced(self.client.clone(), ns);
            let name = cj.metadata.name.clone().unwrap_or_default();
            match api.replace_status(&name, &PostParams::default(), &cj).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(Action::Done),
                Err(e) => return Err(e.into()),
            }
        }
        match requeue {
            Some(d) => Ok(Action::RequeueAfter(d)),
            None => result.map(|()| Action::Done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn utc(spec: &str) -> Schedule {
        parse_schedule(spec, &TimeZone::UTC).unwrap()
    }

    #[test]
    fn next_times() {
        let cases: &[(&str, &str, &str)] = &[
            ("* * * * *", "2026-01-01T10:00:00Z", "2026-01-01T10:01:00Z"),
            (
                "* * * * *",
                "2026-01-01T10:00:30.5Z",
                "2026-01-01T10:01:00Z",
            ),
            (
                "*/15 * * * *",
                "2026-01-01T10:01:00Z",
                "2026-01-01T10:15:00Z",
            ),
            (
                "5/20 * * * *",
                "2026-01-01T10:26:00Z",
                "2026-01-01T10:45:00Z",
            ),
            ("0 0 * * *", "2026-01-01T10:00:00Z", "2026-01-02T00:00:00Z"),
            ("@hourly", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"),
            ("@daily", "2026-01-01T10:00:00Z", "2026-01-02T00:00:00Z"),
            ("@weekly", "2026-01-01T10:00:00Z", "2026-01-04T00:00:00Z"),
            ("@monthly", "2026-01-01T10:00:00Z", "2026-02-01T00:00:00Z"),
            ("@yearly", "2026-01-01T10:00:00Z", "2027-01-01T00:00:00Z"),
            (
                "0 9 * jan-feb mon",
                "2026-01-01T10:00:00Z",
                "2026-01-05T09:00:00Z",
            ),
            // Day of month OR day of week when neither is `*`: the 10th or a Monday.
            (
                "0 0 10 * MON",
                "2026-01-06T00:00:00Z",
                "2026-01-10T00:00:00Z",
            ),
            (
                "0 0 10 * mon",
                "2026-01-10T00:00:00Z",
                "2026-01-12T00:00:00Z",
            ),
            // ... AND when one is `*`/`?` (`*/1` keeps the star, `*/2` does not).
            ("0 0 10 * ?", "2026-01-06T00:00:00Z", "2026-01-10T00:00:00Z"),
            (
                "0 0 */2 * 1",
                "2026-01-05T00:00:00Z",
                "2026-01-07T00:00:00Z",
            ),
            (
                "0 0 1,15 * *",
                "2026-01-02T00:00:00Z",
                "2026-01-15T00:00:00Z",
            ),
            ("0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"),
            (
                "@every 90s",
                "2026-01-01T10:00:00.7Z",
                "2026-01-01T10:01:30Z",
            ),
            (
                "@every 1m30.5s",
                "2026-01-01T10:00:00Z",
                "2026-01-01T10:01:30Z",
            ),
            (
                "@every 200ms",
                "2026-01-01T10:00:00Z",
                "2026-01-01T10:00:01Z",
            ),
            // A time zone of the schedule's own.
            (
                "CRON_TZ=Asia/Tokyo 0 9 * * *",
                "2026-01-01T00:00:00Z",
                "2026-01-02T00:00:00Z",
            ),
            (
                "TZ=America/New_York 0 0 * * *",
                "2026-01-01T00:00:00Z",
                "2026-01-01T05:00:00Z",
            ),
            // DST: 02:30 does not exist on 2026-03-08 in New York; 01:30 is twice on 11-01.
            (
                "TZ=America/New_York 30 2 * * *",
                "2026-03-07T12:00:00Z",
                "2026-03-09T06:30:00Z",
            ),
            (
                "TZ=America/New_York 30 1 * * *",
                "2026-11-01T05:31:00Z",
                "2026-11-01T06:30:00Z",
            ),
        ];
        for (spec, from, want) in cases {
            let got = utc(spec).next(ts(from));
            assert_eq!(got, Some(ts(want)), "{spec} after {from}");
        }
        // Never: February 30th.
        assert_eq!(utc("0 0 30 2 *").next(ts("2026-01-01T00:00:00Z")), None);
        // spec.timeZone comes in as the default zone.
        let tokyo = load_time_zone("Asia/Tokyo").unwrap();
        let s = parse_schedule("0 9 * * *", &tokyo).unwrap();
        assert_eq!(
            s.next(ts("2026-01-01T00:00:00Z")),
            Some(ts("2026-01-02T00:00:00Z"))
        );
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "5-1 * * * *",
            "*/0 * * * *",
            "1-2-3 * * * *",
            "a * * * *",
            "@fortnightly",
            "@every x",
            "TZ=Nowhere/Land * * * * *",
        ] {
            assert!(parse_schedule(bad, &TimeZone::UTC).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn most_recent_unmet_time() {
        let every_min = utc("* * * * *");
        let created = ts("2026-01-01T10:00:00Z");
        let at = |s| ts(s);
        // (last, deadline, now) -> (time, missed)
        type Case<'a> = (
            Option<&'a str>,
            Option<i64>,
            &'a str,
            Option<&'a str>,
            Missed,
        );
        let cases: &[Case<'_>] = &[
            (None, None, "2026-01-01T10:00:30Z", None, Missed::None),
            (
                None,
                None,
                "2026-01-01T10:01:00Z",
                Some("2026-01-01T10:01:00Z"),
                Missed::None,
            ),
            (
                None,
                None,
                "2026-01-01T10:01:59Z",
                Some("2026-01-01T10:01:00Z"),
                Missed::None,
            ),
            (
                None,
                None,
                "2026-01-01T10:05:10Z",
                Some("2026-01-01T10:05:00Z"),
                Missed::Few,
            ),
            (
                Some("2026-01-01T10:05:00Z"),
                None,
                "2026-01-01T10:05:30Z",
                None,
                Missed::None,
            ),
            (
                None,
                None,
                "2026-01-01T13:00:00Z",
                Some("2026-01-01T13:00:00Z"),
                Missed::Many,
            ),
            // A deadline longer than any span is no deadline (it overflowed before).
            (
                None,
                Some(i64::MAX),
                "2026-01-01T13:00:00Z",
                Some("2026-01-01T13:00:00Z"),
                Missed::Many,
            ),
            // The deadline moves the earliest time up: fewer missed.
            (
                None,
                Some(200),
                "2026-01-01T13:00:00Z",
                Some("2026-01-01T13:00:00Z"),
                Missed::Few,
            ),
        ];
        for (last, deadline, now, want, missed) in cases {
            let got = most_recent_schedule_time(
                created,
                last.map(at),
                *deadline,
                at(now),
                &every_min,
                true,
            )
            .unwrap();
            assert_eq!(got.time, want.map(at), "{last:?} {deadline:?} {now}");
            assert_eq!(got.missed, *missed, "{last:?} {deadline:?} {now}");
        }
        // An irregular schedule finds the exact latest time.
        let irregular = utc("30 6-16/4 * * 1-5");
        let got = most_recent_schedule_time(
            ts("2026-01-05T00:00:00Z"),
            None,
            None,
            ts("2026-01-07T12:00:00Z"),
            &irregular,
            true,
        )
        .unwrap();
        assert_eq!(got.time, Some(ts("2026-01-07T10:30:00Z")));
        // A schedule that never fires is an error.
        assert!(
            most_recent_schedule_time(created, None, None, created, &utc("0 0 31 2 *"), true)
                .is_err()
        );
    }

    #[test]
    fn requeue_delay() {
        let every_min = utc("* * * * *");
        let created = ts("2026-01-01T10:00:00Z");
        let d = |last: Option<&str>, now: &str| {
            next_schedule_delay(created, last.map(ts), ts(now), &every_min)
        };
        assert_eq!(
            d(None, "2026-01-01T10:00:30Z"),
            Some(Duration::from_millis(30_100))
        );
        assert_eq!(
            d(Some("2026-01-01T10:05:00Z"), "2026-01-01T10:05:00Z"),
            Some(Duration::from_millis(60_100))
        );
        // Missed times: from now.
        assert_eq!(
            d(None, "2026-01-01T10:07:20Z"),
            Some(Duration::from_millis(40_100))
        );
    }

    #[test]
    fn starting_deadline() {
        let t = ts("2026-01-01T10:00:00Z");
        let at = |ms: i64| Timestamp::from_millisecond(t.as_millisecond() + ms).unwrap();
        assert!(!too_late(t, None, at(10_000_000)));
        assert!(!too_late(t, Some(10), at(10_000)));
        assert!(too_late(t, Some(10), at(10_001)));
        assert!(too_late(t, Some(0), at(1)));
        assert!(!too_late(t, Some(0), at(0)));
        // Any int64 deadline: the largest is never too late.
        assert!(!too_late(t, Some(i64::MAX), at(10_000_000)));
    }

    fn cronjob(tz: Option<&str>) -> CronJob {
        let mut v = json!({
            "metadata": {"name": "cj", "namespace": "default", "uid": "u1"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {
                "metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}},
                "spec": {"template": {"spec": {"containers": []}}}}}
        });
        if let Some(tz) = tz {
            v["spec"]["timeZone"] = json!(tz);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn job_from_the_template() {
        let t = ts("2026-01-01T10:01:00Z");
        let j = job_from_template(&cronjob(None), t).unwrap();
        assert_eq!(j.metadata.name.as_deref(), Some("cj-29454361"));
        assert_eq!(j.metadata.labels, Some(map(&[("app", "x")])));
        assert_eq!(
            j.metadata.annotations,
            Some(map(&[
                ("a", "b"),
                (SCHEDULED_TIMESTAMP_ANNOTATION, "2026-01-01T10:01:00Z")
            ]))
        );
        let r = &j.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.name.as_str(), r.uid.as_str()),
            ("CronJob", "cj", "u1")
        );
        assert_eq!(
            (r.controller, r.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(j.spec.is_some());
        let j = job_from_template(&cronjob(Some("Asia/Tokyo")), t).unwrap();
        assert_eq!(
            j.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION],
            "2026-01-01T19:01:00+09:00"
        );
        assert!(job_from_template(&cronjob(Some("Nowhere/Land")), t).is_err());
    }

    fn finished(name: &str, type_: &str, start: Option<&str>) -> Job {
        let mut v = json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": type_, "status": "True"}]}});
        if let Some(s) = start {
            v["status"]["startTime"] = json!(s);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn history_beyond_the_limits() {
        let jobs = [
            finished("s3", "Complete", Some("2026-01-01T03:00:00Z")),
            finished("s1", "Complete", Some("2026-01-01T01:00:00Z")),
            finished("s-none", "Complete", None),
            finished("s2", "Complete", Some("2026-01-01T02:00:00Z")),
            finished("f1", "Failed", Some("2026-01-01T01:00:00Z")),
            finished("f2", "Failed", Some("2026-01-01T02:00:00Z")),
            finished("running", "Suspended", None),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let names = |v: Vec<&Job>| -> Vec<String> {
            v.iter()
                .map(|j| j.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(
            names(history_to_delete(&refs, Some(3), Some(1))),
            ["s1", "f1"]
        );
        assert_eq!(
            names(history_to_delete(&refs, Some(0), None)),
            ["s1", "s2", "s3", "s-none"]
        );
        assert_eq!(names(history_to_delete(&refs, Some(1), Some(0))).len(), 5);
        assert!(history_to_delete(&refs, None, None).is_empty());
        assert!(history_to_delete(&refs, Some(10), Some(10)).is_empty());
    }
}
