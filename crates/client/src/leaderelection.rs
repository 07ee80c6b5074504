//! Leader election on `coordination.k8s.io/v1` Leases (client-go
//! `tools/leaderelection`, Lease lock).
//!
//! The algorithm is upstream's `tryAcquireOrRenew`: a candidate creates the Lease if
//! it does not exist; otherwise it may take it only when the holder is empty or the
//! lease has not changed for `leaseDurationSeconds` *as observed on the candidate's
//! own clock* (no cross-node clock comparison). Every write is a PUT carrying the
//! resourceVersion it read, so two candidates never both win. The leader renews
//! every retry period; if it cannot renew within the renew deadline it has lost:
//! the work future is aborted at once and [`LeaderElector::run`] returns
//! [`Error::LeaderElectionLost`] (the component then exits, as upstream's do). On
//! cancellation with `release_on_cancel`, the leader releases the lease
//! (empty holder, 1 s duration) so a successor need not wait for expiry.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ferrokube_component_base::metrics::{CounterVec, GaugeVec};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// `leader_election_master_status` (component-base's leader election metrics): 1 while
/// this process holds the lease its elector is named for, 0 once it lost or released it;
/// nothing before it first led. Process-wide, as upstream's.
static MASTER_STATUS: LazyLock<GaugeVec<1>> = LazyLock::new(|| {
    GaugeVec::new(
        "leader_election_master_status",
        "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
        ["name"],
    )
});

/// `leader_election_slowpath_total`: renewals of a leader that found the lease changed
/// since it last wrote it (its optimistic update failed), so it read it again first.
static SLOWPATH: LazyLock<CounterVec<1>> = LazyLock::new(|| {
    CounterVec::new(
        "leader_election_slowpath_total",
        "[ALPHA] Total number of slow paths exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.",
        ["name"],
    )
});

/// Writes the leader election metrics of every elector in this process (for a
/// component's `/metrics`).
pub fn write_leader_election_metrics(out: &mut String) {
    MASTER_STATUS.render(out);
    SLOWPATH.render(out);
}

/// Upstream's jitter factor for the acquire loop.
pub const JITTER_FACTOR: f64 = 1.2;

pub use ferrokube_apimachinery::duration::parse_go_duration;

/// Upstream's leader election flags (component-base `LeaderElectionConfiguration`).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct LeaderElectionOptions {
    /// Start a leader election client and gain leadership before executing the main
    /// loop. Enable this when running replicated components for high availability.
    #[arg(
        long = "leader-elect",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_elect: bool,
    /// The duration that non-leader candidates will wait after observing a leadership
    /// renewal until attempting to acquire leadership of a led but unrenewed leader slot.
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = parse_go_duration)]
    pub lease_duration: Duration,
    /// The interval between attempts by the acting master to renew a leadership slot
    /// before it stops leading. Must be less than the lease duration.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = parse_go_duration)]
    pub renew_deadline: Duration,
    /// The duration the clients should wait between attempting acquisition and
    /// renewal of a leadership.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = parse_go_duration)]
    pub retry_period: Duration,
    /// The type of resource object that is used for locking during leader election.
    /// Supported options are 'leases'.
    #[arg(long = "leader-elect-resource-lock", default_value = "leases")]
    pub resource_lock: String,
    /// The name of resource object that is used for locking during leader election
    /// (empty: the component's name).
    #[arg(long = "leader-elect-resource-name", default_value = "")]
    pub resource_name: String,
    /// The namespace of resource object that is used for locking during leader election.
    #[arg(
        long = "leader-elect-resource-namespace",
        default_value = "kube-system"
    )]
    pub resource_namespace: String,
}

impl Default for LeaderElectionOptions {
    fn default() -> Self {
        LeaderElectionOptions {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_lock: "leases".into(),
            resource_name: String::new(),
            resource_namespace: "kube-system".into(),
        }
    }
}

impl LeaderElectionOptions {
    /// The elector these options describe. `component` names the lease when
    /// `--leader-elect-resource-name` is empty; `identity` is usually
    /// [`default_identity`]. Components release on graceful shutdown.
    pub fn build(
        &self,
        client: Client,
        component: &str,
        identity: String,
    ) -> Result<LeaderElector> {
        if self.resource_lock != "leases" {
            return Err(Error::LeaderElectionConfig(format!(
                "unsupported resource lock {:?}: only \"leases\" is supported",
                self.resource_lock
            )));
        }
        let name = if self.resource_name.is_empty() {
            component
        } else {
            &self.resource_name
        };
        let lock = LeaseLock::new(client, &self.resource_namespace, name, identity);
        LeaderElector::new(
            lock,
            LeaderElectionConfig {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
                release_on_cancel: true,
                name: component.to_string(),
            },
        )
    }
}

/// A random 64-bit value (std's per-process random hasher keys; no crypto needed).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Upstream's identity: `hostname_<uuid>`.
pub fn default_identity() -> String {
    let host = crate::events::hostname();
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{host}_{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// Timing of an elector (upstream `LeaderElectionConfig`).
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// How long a lease stays valid after it was last seen to change. Whole seconds
    /// on the wire (`leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before giving up.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
    /// Release the lease when `run` is cancelled.
    pub release_on_cancel: bool,
    /// For logs.
    pub name: String,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
            name: String::new(),
        }
    }
}

/// Upstream's `LeaderElectionRecord`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeaderElectionRecord {
    pub holder_identity: String,
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    fn from_spec(spec: &LeaseSpec) -> Self {
        LeaderElectionRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn apply_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = Some(self.holder_identity.clone());
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_transitions = Some(self.leader_transitions);
    }
}

/// The Lease a set of candidates contend for.
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
}

impl std::fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLock")
            .field("lease", &format!("{}/{}", self.namespace, self.name))
            .field("identity", &self.identity)
            .finish()
    }
}

impl LeaseLock {
    pub fn new(client: Client, namespace: &str, name: &str, identity: impl Into<String>) -> Self {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `namespace/name`.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    async fn get(&self) -> std::result::Result<Lease, kube::Error> {
        self.api.get(&self.name).await
    }

    async fn create(&self, rec: &LeaderElectionRecord) -> std::result::Result<Lease, kube::Error> {
        let mut spec = LeaseSpec::default();
        rec.apply_to(&mut spec);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            spec: Some(spec),
        };
        self.api.create(&PostParams::default(), &lease).await
    }

    /// A PUT of `current` (carrying its resourceVersion) with `rec`.
    async fn update(
        &self,
        current: &Lease,
        rec: &LeaderElectionRecord,
    ) -> std::result::Result<Lease, kube::Error> {
        let mut lease = current.clone();
        rec.apply_to(lease.spec.get_or_insert_with(Default::default));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
    }
}

struct Observed {
    record: LeaderElectionRecord,
    /// The spec as last read or written (upstream's raw record).
    raw: Option<LeaseSpec>,
    /// When `record` was last seen to change, on this process' clock.
    time: Instant,
    /// The Lease last read or written, with its resourceVersion.
    lease: Option<Lease>,
}

/// One candidate. Create with [`LeaderElector::new`] or
/// [`LeaderElectionOptions::build`], then [`LeaderElector::run`].
pub struct LeaderElector {
    lock: LeaseLock,
    config: LeaderElectionConfig,
    observed: Mutex<Observed>,
    leader: watch::Sender<String>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.lock)
            .field("leader", &self.get_leader())
            .finish()
    }
}

/// Aborts a task when dropped: the work never outlives the elector's `run`.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl LeaderElector {
    /// Validates the timing as upstream's `NewLeaderElector` does.
    pub fn new(lock: LeaseLock, config: LeaderElectionConfig) -> Result<Self> {
        let bad = |m: &str| Err(Error::LeaderElectionConfig(m.to_string()));
        if config.lease_duration <= config.renew_deadline {
            return bad("leaseDuration must be greater than renewDeadline");
        }
        if config.renew_deadline.as_secs_f64() <= JITTER_FACTOR * config.retry_period.as_secs_f64()
        {
            return bad("renewDeadline must be greater than retryPeriod*JitterFactor");
        }
        if config.lease_duration < Duration::from_secs(1) {
            return bad("leaseDuration must be at least 1s");
        }
        if config.renew_deadline.is_zero() || config.retry_period.is_zero() {
            return bad("renewDeadline and retryPeriod must be greater than zero");
        }
        if lock.identity.is_empty() {
            return bad("lock identity is empty");
        }
        Ok(LeaderElector {
            lock,
            config,
            observed: Mutex::new(Observed {
                record: LeaderElectionRecord::default(),
                raw: None,
                time: Instant::now(),
                lease: None,
            }),
            leader: watch::channel(String::new()).0,
        })
    }

    pub fn identity(&self) -> &str {
        self.lock.identity()
    }

    /// The last observed leader's identity (empty if none yet).
    pub fn get_leader(&self) -> String {
        self.observed.lock().record.holder_identity.clone()
    }

    /// Whether the last observed leader is this candidate.
    pub fn is_leader(&self) -> bool {
        self.observed.lock().record.holder_identity == self.lock.identity
    }

    /// Changes of the observed leader (upstream's `OnNewLeader`).
    pub fn watch_leader(&self) -> watch::Receiver<String> {
        self.leader.subscribe()
    }

    /// Upstream's healthz check: an error when this process leads but has not renewed
    /// for longer than the lease duration plus `max_tolerable_expired`.
    pub fn check(&self, max_tolerable_expired: Duration) -> Result<()> {
        let o = self.observed.lock();
        if o.record.holder_identity != self.lock.identity {
            return Ok(());
        }
        if o.time.elapsed() > self.config.lease_duration + max_tolerable_expired {
            return Err(Error::LeaderElectionLost(format!(
                "failed election to renew leadership on lease {}",
                self.lock.describe()
            )));
        }
        Ok(())
    }

    fn lease_valid(&self, o: &Observed, now: Instant) -> bool {
        o.time + Duration::from_secs(u64::try_from(o.record.lease_duration_seconds).unwrap_or(0))
            > now
    }

    fn set_observed(&self, record: LeaderElectionRecord, lease: Lease) {
        let mut o = self.observed.lock();
        o.raw = lease.spec.clone();
        o.record = record;
        o.time = Instant::now();
        o.lease = Some(lease);
        self.report_leader(&o.record.holder_identity);
    }

    fn report_leader(&self, holder: &str) {
        self.leader.send_if_modified(|cur| {
            if cur != holder {
                holder.clone_into(cur);
                true
            } else {
                false
            }
        });
    }

    /// One attempt to acquire or renew (upstream's `tryAcquireOrRenew`).
    pub async fn try_acquire_or_renew(&self) -> bool {
        let now = Timestamp::now();
        let secs = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let mut rec = LeaderElectionRecord {
            holder_identity: self.lock.identity.clone(),
            lease_duration_seconds: secs,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: 0,
        };

        // 1. Fast path: the leader updates what it last saw.
        let fast = {
            let o = self.observed.lock();
            if o.record.holder_identity == self.lock.identity
                && self.lease_valid(&o, Instant::now())
            {
                o.lease.clone().map(|l| (l, o.record.clone()))
            } else {
                None
            }
        };
        if let Some((lease, old)) = fast {
            rec.acquire_time = old.acquire_time;
            rec.leader_transitions = old.leader_transitions;
            match self.lock.update(&lease, &rec).await {
                Ok(l) => {
                    self.set_observed(rec, l);
                    return true;
                }
                Err(e) => {
                    tracing::info!(lease = %self.lock.describe(), error = %e, "failed to update lease optimistically, falling back to slow path")
                }
            }
        }

        // 2. Get or create.
        let lease = match self.lock.get().await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 => match self.lock.create(&rec).await {
                Ok(l) => {
                    self.set_observed(rec, l);
                    return true;
                }
                Err(e) => {
                    tracing::info!(lease = %self.lock.describe(), error = %e, "error initially creating lease");
                    return false;
                }
            },
            Err(e) => {
                tracing::info!(lease = %self.lock.describe(), error = %e, "error retrieving lease");
                return false;
            }
        };

        // 3. Compare with what was observed; check holder and expiry.
        let old =
            LeaderElectionRecord::from_spec(lease.spec.as_ref().unwrap_or(&LeaseSpec::default()));
        {
            let mut o = self.observed.lock();
            if o.raw != lease.spec {
                o.raw = lease.spec.clone();
                o.record = old.clone();
                o.time = Instant::now();
                self.report_leader(&old.holder_identity);
            }
            o.lease = Some(lease.clone());
            let leader = o.record.holder_identity == self.lock.identity;
            if !old.holder_identity.is_empty() && self.lease_valid(&o, Instant::now()) && !leader {
                tracing::debug!(holder = %old.holder_identity, "lease is held and has not yet expired");
                return false;
            }
            // 4. Keep acquire time and transitions when renewing.
            if leader {
                rec.acquire_time = old.acquire_time;
                rec.leader_transitions = old.leader_transitions;
                SLOWPATH.inc([&self.config.name]);
            } else {
                rec.leader_transitions = old.leader_transitions + 1;
            }
        }
        match self.lock.update(&lease, &rec).await {
            Ok(l) => {
                self.set_observed(rec, l);
                true
            }
            Err(e) => {
                tracing::info!(lease = %self.lock.describe(), error = %e, "failed to update lease");
                false
            }
        }
    }

    fn jittered(&self) -> Duration {
        let frac = (random_u64() % 10_000) as f64 / 10_000.0;
        self.config.retry_period.mul_f64(1.0 + JITTER_FACTOR * frac)
    }

    /// Releases the lease if held (empty holder, 1 s duration, as upstream).
    pub async fn release(&self) -> bool {
        let (lease, transitions) = {
            let o = self.observed.lock();
            if o.record.holder_identity != self.lock.identity {
                return true;
            }
            match &o.lease {
                Some(l) => (l.clone(), o.record.leader_transitions),
                None => return true,
            }
        };
        let now = Timestamp::now();
        let rec = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: transitions,
        };
        match self.lock.update(&lease, &rec).await {
            Ok(l) => {
                self.set_observed(rec, l);
                self.report_leading(false);
                true
            }
            Err(e) => {
                tracing::warn!(lease = %self.lock.describe(), error = %e, "failed to release lease");
                false
            }
        }
    }

    /// Waits until this candidate holds the lease; `false` if cancelled first.
    async fn acquire(&self, cancel: &CancellationToken) -> bool {
        tracing::info!(lease = %self.lock.describe(), identity = %self.lock.identity, "attempting to acquire leader lease");
        loop {
            let ok = tokio::select! {
                _ = cancel.cancelled() => return false,
                ok = self.try_acquire_or_renew() => ok,
            };
            if ok {
                tracing::info!(lease = %self.lock.describe(), "successfully acquired lease");
                self.report_leading(true);
                return true;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(self.jittered()) => {}
            }
        }
    }

    /// One renewal round: retries every retry period until the renew deadline.
    async fn renew_once(&self) -> bool {
        let attempt = async {
            loop {
                if self.try_acquire_or_renew().await {
                    return;
                }
                tokio::time::sleep(self.config.retry_period).await;
            }
        };
        let renewed = tokio::time::timeout(self.config.renew_deadline, attempt)
            .await
            .is_ok();
        if !renewed {
            self.report_leading(false);
        }
        renewed
    }

    fn report_leading(&self, leading: bool) {
        MASTER_STATUS.set([&self.config.name], if leading { 1.0 } else { 0.0 });
    }

    /// Campaigns until leading, then runs `work` (given a token cancelled when
    /// leadership ends) while renewing. Returns `Ok(())` when `cancel` fires (the
    /// lease is released if `release_on_cancel`) or `work` returns;
    /// [`Error::LeaderElectionLost`] when a renewal failed: `work` is aborted first.
    /// Dropping the returned future also aborts `work`.
    pub async fn run<F, Fut>(self: Arc<Self>, cancel: CancellationToken, work: F) -> Result<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if !self.acquire(&cancel).await {
            return Ok(());
        }
        let leading = cancel.child_token();
        let mut task = AbortOnDrop(tokio::spawn(work(leading.clone())));
        let mut work_done = false;
        let outcome = loop {
            tokio::select! {
                _ = cancel.cancelled() => break Ok(()),
                _ = &mut task.0 => {
                    work_done = true;
                    break Ok(());
                }
                _ = tokio::time::sleep(self.config.retry_period) => {
                    let renewed = tokio::select! {
                        _ = cancel.cancelled() => break Ok(()),
                        r = self.renew_once() => r,
                    };
                    if !renewed {
                        break Err(Error::LeaderElectionLost(format!(
                            "failed to renew lease {} within {:?}",
                            self.lock.describe(),
                            self.config.renew_deadline
                        )));
                    }
                }
            }
        };
        // Stop the work at once, then let go of the lease if asked to.
        leading.cancel();
        if !work_done {
            task.0.abort();
            let _ = (&mut task.0).await;
        }
        if outcome.is_err() {
            tracing::error!(lease = %self.lock.describe(), "leaderelection lost");
        }
        if self.config.release_on_cancel {
            self.release().await;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        le: LeaderElectionOptions,
    }

    #[test]
    fn flags_have_upstream_names_and_defaults() {
        let c = Cmd::try_parse_from(["x"]).unwrap();
        assert_eq!(c.le, LeaderElectionOptions::default());
        let c = Cmd::try_parse_from([
            "x",
            "--leader-elect=false",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline",
            "20s",
            "--leader-elect-retry-period=3s",
            "--leader-elect-resource-lock=leases",
            "--leader-elect-resource-name=sched",
            "--leader-elect-resource-namespace=ns",
        ])
        .unwrap();
        assert!(!c.le.leader_elect);
        assert_eq!(c.le.lease_duration, Duration::from_secs(30));
        assert_eq!(c.le.renew_deadline, Duration::from_secs(20));
        assert_eq!(c.le.retry_period, Duration::from_secs(3));
        assert_eq!(c.le.resource_name, "sched");
        assert_eq!(c.le.resource_namespace, "ns");
        let c = Cmd::try_parse_from(["x", "--leader-elect"]).unwrap();
        assert!(c.le.leader_elect);
    }

    #[tokio::test]
    async fn validates_timing_and_lock() {
        let cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let lock = || LeaseLock::new(client.clone(), "ns", "l", "me");
        let mk = |lease, renew, retry| LeaderElectionConfig {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
            ..Default::default()
        };
        assert!(LeaderElector::new(lock(), LeaderElectionConfig::default()).is_ok());
        assert!(LeaderElector::new(lock(), mk(10_000, 10_000, 2000)).is_err());
        assert!(LeaderElector::new(lock(), mk(15_000, 2_400, 2000)).is_err());
        assert!(LeaderElector::new(lock(), mk(900, 500, 100)).is_err());
        assert!(
            LeaderElector::new(
                LeaseLock::new(client.clone(), "ns", "l", ""),
                LeaderElectionConfig::default()
            )
            .is_err()
        );
        let o = LeaderElectionOptions {
            resource_lock: "endpoints".into(),
            ..Default::default()
        };
        assert!(o.build(client.clone(), "c", "id".into()).is_err());
        let e = LeaderElectionOptions::default()
            .build(client, "kube-scheduler", "id".into())
            .unwrap();
        assert_eq!(e.lock.describe(), "kube-system/kube-scheduler");
    }

    #[test]
    fn identities_are_unique() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
