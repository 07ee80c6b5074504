//! API Priority and Fairness (upstream `k8s.io/apiserver/pkg/util/flowcontrol` and
//! `server/filters/priority-and-fairness.go`): every request is classified by the
//! FlowSchemas (lowest `matchingPrecedence` first, then by name) into a priority level;
//! an `Exempt` level runs everything at once, a `Limited` one runs as many requests as
//! its share of the server's concurrency limit (`--max-requests-inflight` +
//! `--max-mutating-requests-inflight`) and queues the rest (shuffle-sharded by flow:
//! the schema and the user or namespace) or rejects them with 429. Responses name
//! the schema and the level in `X-Kubernetes-PF-FlowSchema-UID` and
//! `X-Kubernetes-PF-PriorityLevel-UID`.
//!
//! The configuration is read from the FlowSchema and PriorityLevelConfiguration watch
//! caches, and digested again when one of their objects changes; the mandatory objects
//! ([`bootstrap`]) stand in while theirs are missing, as upstream. [`run_status_writer`]
//! keeps each FlowSchema's `Dangling` condition.
//!
//! Observability as upstream's: [`metrics`] has the `apiserver_flowcontrol_*`
//! families on `/metrics` (requests dispatched, refused by reason, waiting and
//! executing by schema and level, their waits, executions and queue lengths, each
//! level's seats), exempt requests counted as dispatched and executing as upstream
//! counts them; [`debug`] serves `/debug/api_priority_and_fairness/dump_priority_levels`,
//! `dump_queues` and `dump_requests` (`?includeRequestDetails=1`), upstream's tables,
//! to whoever may `get` those non-resource paths.
//!
//! Levels borrow seats from one another as upstream's do ([`borrowing`]): every 10 s
//! each level's seat demand over the period decides the seats it may use next, between
//! its nominal seats less what it may lend (`lendablePercent`) and plus what it may
//! borrow (`borrowingLimitPercent`), with the `demand_seats_*`, `target_seats`,
//! `current_limit_seats` and `seat_fair_frac` metrics.
//!
//! A request takes the seats its work estimate says ([`estimate`]: lists by the
//! objects they read, writes by the watches their events reach), and a level's queues
//! are served by virtual-time fair queuing ([`queueset`]).
//!
//! A level whose configuration is removed quiesces, as upstream's: it serves what it
//! runs and queues under its last configuration and goes once idle.
//!
//! Deviations: the virtual clock has no epochs (`epoch_advance_total` is not served,
//! see [`queueset`]); custom resources' lists take one seat; long-running requests
//! other than watches are not limited (as upstream), and a watch holds its seat until
//! its response starts.

pub(crate) mod bootstrap;
mod borrowing;
mod debug;
mod estimate;
mod metrics;
mod queueset;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::Attributes;
use ferrokube_registry::Store;
use k8s_openapi::api::flowcontrol::v1::{
    FlowSchema, PolicyRulesWithSubjects, PriorityLevelConfiguration, Subject,
};
use parking_lot::Mutex;
use serde_json::Value;

use borrowing::Bounds;
use metrics::FlowControlMetrics;
use queueset::{Finished, Level, Step, WorkEstimate, admit_to};

pub(crate) use estimate::TrackedWatch;

/// How long a queued request waits for a seat (upstream: a quarter of the default
/// 60 s request timeout).
const QUEUE_WAIT_LIMIT: Duration = Duration::from_secs(15);
pub(crate) const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
pub(crate) const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";
const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// The digested configuration.
struct Config {
    /// Flow schemas whose level exists, in matching order.
    schemas: Vec<Schema>,
    levels: HashMap<String, LevelSpec>,
}

struct Schema {
    /// Shared with the requests it classifies, which carry it into the metrics' labels
    /// and the dumps.
    name: Arc<str>,
    uid: String,
    level: Arc<str>,
    /// `ByUser` / `ByNamespace`; `None` puts every request of the schema in one flow.
    distinguisher: Option<String>,
    rules: Vec<PolicyRulesWithSubjects>,
}

#[derive(Clone, Debug, PartialEq)]
struct LevelSpec {
    uid: String,
    /// Its nominal seats (upstream's `ceil(server_limit * shares / all shares)`, 0 for
    /// the exempt level's 0 shares), what it may lend and borrow, and whether it is
    /// exempt.
    bounds: Bounds,
    queuing: Option<Queuing>,
    /// The most seats one of its requests may take.
    max_seats: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Queuing {
    queues: usize,
    hand_size: usize,
    queue_length_limit: usize,
}

/// What the debug dumps show of a request waiting or executing in a level.
struct Tracked {
    flow_schema: Arc<str>,
    /// The flow's user or namespace, computed (as upstream) only for a level of more
    /// than one queue.
    distinguisher: String,
    arrived: jiff::Timestamp,
    /// `None` while it waits.
    started: Option<jiff::Timestamp>,
    /// The seats it takes.
    work: WorkEstimate,
    details: RequestDetails,
}

/// `dump_requests?includeRequestDetails=1`'s columns.
struct RequestDetails {
    user: String,
    verb: String,
    path: String,
    namespace: String,
    name: String,
    api_group: String,
    api_version: String,
    resource: String,
    subresource: String,
}

impl RequestDetails {
    fn of(attrs: &Attributes) -> RequestDetails {
        RequestDetails {
            user: attrs.user.name.clone(),
            verb: attrs.verb.clone(),
            path: attrs.path.clone(),
            namespace: attrs.namespace.clone(),
            name: attrs.name.clone(),
            api_group: attrs.api_group.clone(),
            api_version: attrs.api_version.clone(),
            resource: attrs.resource.clone(),
            subresource: attrs.subresource.clone(),
        }
    }
}

/// What the filter decided for a request.
pub(crate) enum Admission {
    /// Not classified: long-running requests other than watches.
    Unlimited,
    /// Run now; the seat is given back when this is dropped.
    Admitted {
        flow_schema_uid: String,
        priority_level_uid: String,
        seat: Seat,
    },
    Rejected {
        flow_schema_uid: String,
        priority_level_uid: String,
    },
}

/// A request's place in its level, from the moment it waits in a queue: dropped, it
/// gives its seat back, or leaves its queue if it never got one.
pub(crate) struct Seat {
    apf: Arc<Apf>,
    level: Arc<str>,
    flow_schema: Arc<str>,
    id: u64,
    /// When it began executing; `None` while it waits.
    started: Option<Instant>,
    watch: bool,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let m = &self.apf.metrics;
        if let Some(started) = self.started {
            m.executed(
                &self.flow_schema,
                &self.level,
                self.watch,
                started.elapsed().as_secs_f64(),
            );
        }
        let mut levels = self.apf.levels.lock();
        let Some(level) = levels.get_mut(&*self.level) else {
            return;
        };
        match level.finish(self.id, m) {
            Finished::Done => {}
            Finished::NotHere => {
                level.withdraw(self.id, m);
            }
            // Its final seats (the watch events of a write) are held a while longer.
            Finished::Holding(held) => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let apf = self.apf.clone();
                    let name = self.level.clone();
                    runtime.spawn(async move {
                        tokio::time::sleep(held.after).await;
                        let mut levels = apf.levels.lock();
                        if let Some(level) = levels.get_mut(&*name) {
                            level.release(held, &apf.metrics);
                        }
                        remove_if_quiesced(&mut levels, &name);
                    });
                }
                // No runtime to wait in (requests are served in one): given back now.
                Err(_) => level.release(held, m),
            },
        }
        if level.quiescing {
            remove_if_quiesced(&mut levels, &self.level);
        }
    }
}

/// Drops the level `name` if its configuration is gone and it has nothing left to do.
fn remove_if_quiesced(levels: &mut HashMap<String, Level>, name: &str) {
    if levels
        .get(name)
        .is_some_and(|level| level.quiescing && level.idle())
    {
        levels.remove(name);
    }
}

/// Marks the levels `config` no longer has as quiescing (and the others not), and
/// drops those of them with nothing left to do.
fn quiesce_removed(levels: &mut HashMap<String, Level>, config: &Config) {
    for (name, level) in levels.iter_mut() {
        level.quiescing = !config.levels.contains_key(name);
    }
    levels.retain(|_, level| !(level.quiescing && level.idle()));
}

/// The change counts of the FlowSchema and PriorityLevelConfiguration caches a digest
/// was made at (none before the first), and the digest.
type Digested = (Option<(u64, u64)>, Arc<Config>);

/// The filter's state: the configuration's sources, its digest and the levels.
pub(crate) struct Apf {
    /// `--max-requests-inflight` + `--max-mutating-requests-inflight` (upstream's
    /// `serverConcurrencyLimit`): the concurrency the levels' shares divide.
    server_limit: u32,
    flow_schemas: Arc<Store>,
    priority_levels: Arc<Store>,
    digested: Mutex<Digested>,
    levels: Mutex<HashMap<String, Level>>,
    next_waiter: AtomicU64,
    metrics: FlowControlMetrics,
    estimator: estimate::Estimator,
}

impl Apf {
    /// `server_limit`: the concurrency the limited levels share (upstream passes
    /// `MaxRequestsInFlight + MaxMutatingRequestsInFlight`).
    pub(crate) fn new(
        registry: &ferrokube_registry::Registry,
        server_limit: u32,
    ) -> Result<Arc<Apf>, String> {
        let store = |plural: &str| {
            registry
                .store(GROUP, "v1", plural)
                .cloned()
                .ok_or_else(|| format!("no store for {plural}"))
        };
        Ok(Arc::new(Apf {
            server_limit,
            flow_schemas: store("flowschemas")?,
            priority_levels: store("prioritylevelconfigurations")?,
            digested: Mutex::new((None, Arc::new(digest(&[], &[], server_limit)))),
            levels: Mutex::new(HashMap::new()),
            next_waiter: AtomicU64::new(0),
            metrics: FlowControlMetrics::default(),
            estimator: estimate::Estimator::new(registry),
        }))
    }

    /// Appends the `apiserver_flowcontrol_*` families to a `/metrics` page.
    pub(crate) fn render_metrics(&self, out: &mut String) {
        self.metrics.render(out);
    }

    /// How many times the FlowSchema and PriorityLevelConfiguration caches have
    /// changed: the configuration's sources are as they were while these are.
    fn changes(&self) -> (u64, u64) {
        (
            self.flow_schemas.cache().changes(),
            self.priority_levels.cache().changes(),
        )
    }

    /// The configuration as the caches have it now, digested again when it changed.
    fn config(&self) -> Arc<Config> {
        // Every request asks; the objects seldom change. Counts read before the
        // snapshots: a change made between the two is digested again next time.
        let changes = self.changes();
        let mut digested = self.digested.lock();
        if digested.0 == Some(changes) {
            return digested.1.clone();
        }
        let (schemas, _) = self.flow_schemas.cache().snapshot("");
        let (levels, _) = self.priority_levels.cache().snapshot("");
        let config = Arc::new(digest(&schemas, &levels, self.server_limit));
        self.apply_levels(&config);
        *digested = (Some(changes), config.clone());
        config
    }

    /// Keeps the run-time levels in step with the configuration: new levels added,
    /// changed ones resized (queues added at once, surplus ones dropped once idle),
    /// removed ones quiescing.
    fn apply_levels(&self, config: &Config) {
        let m = &self.metrics;
        let mut levels = self.levels.lock();
        quiesce_removed(&mut levels, config);
        m.retain_levels(|name| config.levels.contains_key(name));
        for (name, spec) in &config.levels {
            m.level_bounds(name, spec.bounds);
            match levels.get_mut(name) {
                Some(level) if level.spec == *spec => {}
                Some(level) => {
                    let same_queues =
                        level.spec.queuing.map(|q| q.queues) == spec.queuing.map(|q| q.queues);
                    level.spec = spec.clone();
                    if !same_queues {
                        level.resize_queues();
                    }
                    level.dispatch(m);
                }
                None => {
                    levels.insert(
                        name.clone(),
                        Level::new(Arc::from(name.as_str()), spec.clone()),
                    );
                    m.current_r(name, 0.0);
                }
            }
        }
        // As upstream, the seats are divided again at once for the new configuration.
        adjust_borrowing(&mut levels, m);
    }

    /// The periodic borrowing adjustment: each level's seats for the next period.
    fn adjust_borrowing(&self) {
        adjust_borrowing(&mut self.levels.lock(), &self.metrics);
    }

    /// Counts an admitted watch (for the seats of writes its events will cost) until
    /// the returned guard is dropped with its response.
    pub(crate) fn track_watch(
        &self,
        attrs: &Attributes,
        query: Option<&str>,
    ) -> Option<TrackedWatch> {
        (attrs.verb == "watch")
            .then(|| self.estimator.watches.register(attrs, query))
            .flatten()
    }

    /// Classifies the request and waits for the seats of its level (or refuses it).
    pub(crate) async fn admit(
        self: &Arc<Self>,
        attrs: &Attributes,
        query: Option<&str>,
        long_running: bool,
    ) -> Admission {
        if long_running && attrs.verb != "watch" {
            return Admission::Unlimited;
        }
        let config = self.config();
        let Some(schema) = config.schemas.iter().find(|s| matches_schema(s, attrs)) else {
            // The mandatory catch-all matches everything; nothing matching means the
            // configuration has none, which the digest does not allow.
            return Admission::Unlimited;
        };
        let Some(spec) = config.levels.get(&*schema.level) else {
            return Admission::Unlimited;
        };
        let arrived = Instant::now();
        let (fs, pl) = (&*schema.name, &*schema.level);
        let m = &self.metrics;
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let many_queues = spec.queuing.is_some_and(|q| q.queues > 1);
        let distinguisher = if many_queues {
            distinguisher(schema, attrs)
        } else {
            String::new()
        };
        // As upstream: the flow is hashed only where there is more than one queue.
        let flow_hash = if many_queues {
            hash(&schema.name, &distinguisher)
        } else {
            0
        };
        let (work, watches) = self.estimator.estimate(attrs, query, spec.max_seats);
        m.estimated(fs, pl, work.max_seats(), watches);
        let request = Tracked {
            flow_schema: schema.name.clone(),
            distinguisher,
            arrived: jiff::Timestamp::now(),
            started: None,
            work,
            details: RequestDetails::of(attrs),
        };
        let step = {
            let mut levels = self.levels.lock();
            let Some(level) = levels.get_mut(pl) else {
                return Admission::Unlimited;
            };
            admit_to(level, id, request, work, flow_hash, m)
        };
        let rx = match step {
            Step::Rejected => {
                m.waited(fs, pl, false, arrived.elapsed().as_secs_f64());
                return Admission::Rejected {
                    flow_schema_uid: schema.uid.clone(),
                    priority_level_uid: spec.uid.clone(),
                };
            }
            Step::Admitted => None,
            Step::Queued(rx) => Some(rx),
        };
        // From here the seat guard travels with the request: a request dropped while it
        // waits (the client went away) leaves its queue, and one dropped after its seat
        // was granted gives it back.
        let mut seat = Seat {
            apf: self.clone(),
            level: schema.level.clone(),
            flow_schema: schema.name.clone(),
            id,
            started: None,
            watch: attrs.verb == "watch",
        };
        let admitted = match rx {
            // Upstream times no wait for exempt requests.
            None if spec.bounds.exempt => true,
            None => {
                m.waited(fs, pl, true, arrived.elapsed().as_secs_f64());
                true
            }
            Some(rx) => {
                let granted = tokio::time::timeout(QUEUE_WAIT_LIMIT, rx).await;
                let admitted = matches!(granted, Ok(Ok(()))) || {
                    // Its wait ran out: it leaves the queue, unless the seat came
                    // meanwhile.
                    let mut levels = self.levels.lock();
                    levels.get_mut(pl).is_some_and(|level| {
                        level.running.contains_key(&id) || {
                            level.withdraw(id, m);
                            false
                        }
                    })
                };
                m.waited(fs, pl, admitted, arrived.elapsed().as_secs_f64());
                admitted
            }
        };
        if admitted {
            seat.started = Some(Instant::now());
            Admission::Admitted {
                flow_schema_uid: schema.uid.clone(),
                priority_level_uid: spec.uid.clone(),
                seat,
            }
        } else {
            Admission::Rejected {
                flow_schema_uid: schema.uid.clone(),
                priority_level_uid: spec.uid.clone(),
            }
        }
    }
}

/// Divides the server's seats among the levels by their seat demand since the last
/// adjustment ([`borrowing::adjust`]), and serves what the new limits let through.
fn adjust_borrowing(levels: &mut HashMap<String, Level>, m: &FlowControlMetrics) {
    let now = Instant::now();
    let nominal_sum = levels
        .values()
        .map(|l| l.spec.bounds.nominal)
        .fold(0u32, u32::saturating_add);
    // In name order: upstream's order is its map's, so any is as faithful, and this
    // one is the same each time.
    let mut all: Vec<&mut Level> = levels.values_mut().collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let states: Vec<borrowing::LevelState> = all
        .iter_mut()
        .map(|l| {
            let observed = l.demand.reset(now);
            l.demand_stats.update(&observed);
            borrowing::LevelState {
                bounds: l.spec.bounds,
                stats: l.demand_stats,
                current: l.current,
            }
        })
        .collect();
    let (adjusted, fair_frac) = borrowing::adjust(&states, nominal_sum);
    m.fair_frac(fair_frac);
    for (level, a) in all.into_iter().zip(adjusted) {
        level.current = a.current;
        m.adjusted(&level.name, &level.demand_stats, a.target, a.current);
        level.dispatch(m);
    }
}

/// Adjusts the levels' seats every [`borrowing::ADJUSTMENT_PERIOD`] until shutdown.
pub(crate) async fn run_borrowing(apf: Arc<Apf>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(borrowing::ADJUSTMENT_PERIOD) => apf.adjust_borrowing(),
        }
    }
}

/// The 429 of a refused request (upstream's message).
pub(crate) fn too_many_requests() -> ApiError {
    ApiError::too_many_requests("Too many requests, please try again later.", 1)
}

/// The configuration from the cached objects, the mandatory objects standing in for
/// missing ones; flow schemas naming a missing level are left out (dangling). Each
/// limited level's nominal limit is upstream's `ceil(server_limit * shares /
/// sum of all levels' shares)`.
fn digest(schemas: &[Arc<Value>], levels: &[Arc<Value>], server_limit: u32) -> Config {
    let mut level_objects: Vec<PriorityLevelConfiguration> = levels
        .iter()
        .filter_map(|v| serde_json::from_value((**v).clone()).ok())
        .collect();
    for mandatory in bootstrap::mandatory_priority_levels() {
        if !level_objects
            .iter()
            .any(|l| l.metadata.name == mandatory.metadata.name)
        {
            level_objects.push(mandatory);
        }
    }
    let mut schema_objects: Vec<FlowSchema> = schemas
        .iter()
        .filter_map(|v| serde_json::from_value((**v).clone()).ok())
        .collect();
    for mandatory in bootstrap::mandatory_flow_schemas() {
        if !schema_objects
            .iter()
            .any(|s| s.metadata.name == mandatory.metadata.name)
        {
            schema_objects.push(mandatory);
        }
    }
    let shares = |l: &PriorityLevelConfiguration| -> u32 {
        let spec = l.spec.as_ref();
        let limited = spec.and_then(|s| s.limited.as_ref());
        let exempt = spec.and_then(|s| s.exempt.as_ref());
        let shares = match (limited, exempt) {
            (Some(l), _) => l.nominal_concurrency_shares.unwrap_or(30),
            (None, Some(e)) => e.nominal_concurrency_shares.unwrap_or(0),
            _ => 0,
        };
        u32::try_from(shares).unwrap_or(0)
    };
    let total_shares: u32 = level_objects.iter().map(shares).sum::<u32>().max(1);
    // `lendablePercent` and `borrowingLimitPercent` (exempt levels have no borrowing
    // limit).
    let percents = |l: &PriorityLevelConfiguration| {
        let spec = l.spec.as_ref();
        match (
            spec.and_then(|s| s.limited.as_ref()),
            spec.and_then(|s| s.exempt.as_ref()),
        ) {
            (Some(l), _) => (l.lendable_percent, l.borrowing_limit_percent),
            (None, Some(e)) => (e.lendable_percent, None),
            _ => (None, None),
        }
    };
    let levels: HashMap<String, LevelSpec> = level_objects
        .iter()
        .map(|l| {
            let name = l.metadata.name.clone().unwrap_or_default();
            let uid = l.metadata.uid.clone().unwrap_or_default();
            let limited = l.spec.as_ref().and_then(|s| s.limited.as_ref());
            let nominal =
                (u64::from(server_limit) * u64::from(shares(l))).div_ceil(u64::from(total_shares));
            let nominal = u32::try_from(nominal).unwrap_or(u32::MAX);
            let (lendable, borrowing) = percents(l);
            let bounds = |exempt| Bounds::of(nominal, lendable, borrowing, server_limit, exempt);
            let spec = match limited {
                None => LevelSpec {
                    uid,
                    bounds: bounds(true),
                    queuing: None,
                    max_seats: estimate::MAX_SEATS_LIMIT,
                },
                Some(limited) => {
                    let response = limited.limit_response.as_ref();
                    let queuing = response.filter(|r| r.type_ == "Queue").map(|r| {
                        let q = r.queuing.clone().unwrap_or_default();
                        let positive = |v: Option<i32>, default: usize| {
                            v.and_then(|v| usize::try_from(v).ok())
                                .filter(|v| *v > 0)
                                .unwrap_or(default)
                        };
                        let queues = positive(q.queues, 64);
                        Queuing {
                            queues,
                            hand_size: positive(q.hand_size, 8).min(queues),
                            queue_length_limit: positive(q.queue_length_limit, 50),
                        }
                    });
                    LevelSpec {
                        uid,
                        bounds: bounds(false),
                        max_seats: estimate::level_max_seats(nominal, queuing.map(|q| q.hand_size)),
                        queuing,
                    }
                }
            };
            (name, spec)
        })
        .collect();
    let mut schemas: Vec<(i32, Schema)> = schema_objects
        .into_iter()
        .filter_map(|s| {
            let spec = s.spec?;
            let level = spec.priority_level_configuration.name;
            levels.contains_key(&level).then(|| {
                (
                    spec.matching_precedence.unwrap_or(1000),
                    Schema {
                        name: Arc::from(s.metadata.name.unwrap_or_default()),
                        uid: s.metadata.uid.unwrap_or_default(),
                        level: Arc::from(level),
                        distinguisher: spec.distinguisher_method.map(|d| d.type_),
                        rules: spec.rules.unwrap_or_default(),
                    },
                )
            })
        })
        .collect();
    schemas.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    Config {
        schemas: schemas.into_iter().map(|(_, s)| s).collect(),
        levels,
    }
}

/// The flow a request belongs to within its schema: its user or namespace, as the
/// schema's distinguisher method says.
fn distinguisher(schema: &Schema, attrs: &Attributes) -> String {
    match schema.distinguisher.as_deref() {
        Some("ByUser") => attrs.user.name.clone(),
        Some("ByNamespace") => attrs.namespace.clone(),
        _ => String::new(),
    }
}

fn hash(flow_schema: &str, distinguisher: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (flow_schema, distinguisher).hash(&mut h);
    h.finish()
}

/// Shuffle sharding (upstream `shufflesharding.Dealer`): `hand_size` distinct queues
/// of `deck_size` picked by the bits of `hash`, so that flows rarely share their whole
/// hand.
fn deal_hand(mut hash: u64, deck_size: usize, hand_size: usize) -> Vec<usize> {
    let mut deck: Vec<usize> = (0..deck_size).collect();
    let mut hand = Vec::with_capacity(hand_size);
    for i in 0..hand_size.min(deck_size) {
        let remaining = (deck_size - i) as u64;
        let pick = i + (hash % remaining) as usize;
        hash /= remaining;
        deck.swap(i, pick);
        hand.push(deck[i]);
    }
    hand
}

/// Upstream `matchesFlowSchema`.
fn matches_schema(schema: &Schema, attrs: &Attributes) -> bool {
    schema.rules.iter().any(|rule| matches_rule(rule, attrs))
}

fn matches_rule(rule: &PolicyRulesWithSubjects, attrs: &Attributes) -> bool {
    if !rule.subjects.iter().any(|s| matches_subject(s, attrs)) {
        return false;
    }
    if attrs.resource_request {
        rule.resource_rules.iter().flatten().any(|r| {
            contains(&attrs.verb, &r.verbs, "*")
                && contains(
                    &join_resource(&attrs.resource, &attrs.subresource),
                    &r.resources,
                    "*",
                )
                && contains(&attrs.api_group, &r.api_groups, "*")
                && if attrs.namespace.is_empty() {
                    r.cluster_scope.unwrap_or(false)
                } else {
                    contains(
                        &attrs.namespace,
                        r.namespaces.as_deref().unwrap_or_default(),
                        "*",
                    )
                }
        })
    } else {
        rule.non_resource_rules.iter().flatten().any(|r| {
            contains(&attrs.verb, &r.verbs, "*")
                && r.non_resource_urls
                    .iter()
                    .any(|url| matches_non_resource_url(url, &attrs.path))
        })
    }
}

fn join_resource(resource: &str, subresource: &str) -> String {
    if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    }
}

/// Upstream `containsString`: a list of just the wildcard matches everything.
fn contains(x: &str, list: &[String], wildcard: &str) -> bool {
    (list.len() == 1 && list[0] == wildcard) || list.iter().any(|y| y == x)
}

/// Upstream `matchPolicyRuleNonResourceURL`: `*`, the path itself, or a prefix rule
/// (`/healthz/*`, and a rule's path as the parent of longer paths).
fn matches_non_resource_url(rule: &str, path: &str) -> bool {
    if rule == "*" || rule == path {
        return true;
    }
    let mut prefix = rule.strip_suffix('*').unwrap_or(rule).to_owned();
    if !prefix.ends_with('/') {
        prefix.push('/');
    }
    path.starts_with(&prefix)
}

/// Upstream `matchesSubject`.
fn matches_subject(subject: &Subject, attrs: &Attributes) -> bool {
    let user = &attrs.user;
    match subject.kind.as_str() {
        "User" => subject
            .user
            .as_ref()
            .is_some_and(|u| u.name == "*" || u.name == user.name),
        "Group" => subject
            .group
            .as_ref()
            .is_some_and(|g| g.name == "*" || user.groups.contains(&g.name)),
        "ServiceAccount" => subject.service_account.as_ref().is_some_and(|sa| {
            let Some(rest) = user.name.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            match rest.split_once(':') {
                Some((ns, name)) if !name.contains(':') => {
                    ns == sa.namespace && (sa.name == "*" || sa.name == name)
                }
                _ => false,
            }
        }),
        _ => false,
    }
}

/// The `Dangling` condition a FlowSchema should carry (upstream's config consumer):
/// whether its level exists.
fn dangling_condition(level: &str, exists: bool, now: &str) -> Value {
    let (status, reason, message) = if exists {
        (
            "False",
            "Found",
            format!(
                "This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"
            ),
        )
    } else {
        (
            "True",
            "NotFound",
            format!(
                "This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"
            ),
        )
    };
    serde_json::json!({
        "type": "Dangling",
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}

/// Keeps every FlowSchema's `Dangling` condition true to whether its level exists,
/// writing only the schemas whose condition is missing or differs (its transition
/// time kept when only the message changed). Runs until `shutdown`.
pub(crate) async fn run_status_writer(
    apf: Arc<Apf>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut seen = None;
    loop {
        let changes = apf.changes();
        if seen != Some(changes) {
            let (schemas, _) = apf.flow_schemas.cache().snapshot("");
            let (levels, _) = apf.priority_levels.cache().snapshot("");
            write_dangling_conditions(&apf.flow_schemas, &schemas, &levels).await;
            seen = Some(changes);
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn write_dangling_conditions(store: &Store, schemas: &[Arc<Value>], levels: &[Arc<Value>]) {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    for schema in schemas {
        let level = schema["spec"]["priorityLevelConfiguration"]["name"]
            .as_str()
            .unwrap_or("");
        let exists = levels.iter().any(|l| l["metadata"]["name"] == level);
        let want = dangling_condition(level, exists, &now);
        let conditions = schema["status"]["conditions"].as_array();
        let current = conditions.and_then(|c| c.iter().find(|c| c["type"] == "Dangling"));
        let unchanged = current.is_some_and(|c| {
            c["status"] == want["status"]
                && c["reason"] == want["reason"]
                && c["message"] == want["message"]
        });
        if unchanged {
            continue;
        }
        let mut condition = want;
        if let Some(c) = current.filter(|c| c["status"] == condition["status"]) {
            condition["lastTransitionTime"] = c["lastTransitionTime"].clone();
        }
        let mut others: Vec<Value> = conditions
            .into_iter()
            .flatten()
            .filter(|c| c["type"] != "Dangling")
            .cloned()
            .collect();
        others.push(condition);
        let mut updated = (**schema).clone();
        updated["status"] = serde_json::json!({ "conditions": others });
        let name = schema["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Err(e) = store
            .update(
                None,
                &name,
                ferrokube_registry::UpdateInput::Replace(updated),
                ferrokube_registry::Part::Status,
                &Default::default(),
            )
            .await
        {
            // A conflict means the schema changed meanwhile: the next pass sees it.
            tracing::debug!(flow_schema = %name, error = %e, "writing the Dangling condition");
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use ferrokube_auth::UserInfo;
    use serde_json::json;

    fn attrs(user: &str, groups: &[&str], verb: &str, ns: &str, resource: &str) -> Attributes {
        Attributes {
            user: UserInfo::new(user, groups.iter().copied()),
            verb: verb.into(),
            namespace: ns.into(),
            resource: resource.into(),
            resource_request: !resource.is_empty(),
            path: if resource.is_empty() {
                "/healthz".into()
            } else {
                format!("/api/v1/namespaces/{ns}/{resource}")
            },
            ..Attributes::default()
        }
    }

    fn level(name: &str, shares: i32, queuing: Option<Value>) -> Arc<Value> {
        let response = match queuing {
            Some(q) => json!({"type": "Queue", "queuing": q}),
            None => json!({"type": "Reject"}),
        };
        Arc::new(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares,
                "lendablePercent": 0, "limitResponse": response}},
        }))
    }

    fn schema(name: &str, precedence: i32, level: &str, rules: Value) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"matchingPrecedence": precedence, "priorityLevelConfiguration": {"name": level},
                "distinguisherMethod": {"type": "ByUser"}, "rules": rules},
        }))
    }

    #[test]
    fn requests_take_the_first_matching_schema_by_precedence_then_name() {
        let everything = json!([{"subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                "namespaces": ["*"], "clusterScope": true}]}]);
        let pods_of_alice = json!([{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
            "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"],
                "namespaces": ["team"]}]}]);
        let config = digest(
            &[
                schema("b-wide", 500, "low", everything.clone()),
                schema("a-wide", 500, "low", everything),
                schema("alice", 100, "high", pods_of_alice),
                schema("dangling", 1, "missing", json!([])),
            ],
            &[level("low", 10, None), level("high", 30, None)],
            600,
        );
        let names: Vec<&str> = config.schemas.iter().map(|s| &*s.name).collect();
        // The mandatory exempt (precedence 1) and catch-all (10000) stand in; the
        // dangling schema is left out.
        assert_eq!(names, ["exempt", "alice", "a-wide", "b-wide", "catch-all"]);
        let pick = |a: &Attributes| {
            config
                .schemas
                .iter()
                .find(|s| matches_schema(s, a))
                .map(|s| s.name.clone())
        };
        let alice = attrs("alice", &["system:authenticated"], "list", "team", "pods");
        assert_eq!(pick(&alice).as_deref(), Some("alice"));
        let elsewhere = attrs("alice", &["system:authenticated"], "list", "other", "pods");
        assert_eq!(pick(&elsewhere).as_deref(), Some("a-wide"));
        let admin = attrs(
            "admin",
            &["system:masters", "system:authenticated"],
            "get",
            "x",
            "pods",
        );
        assert_eq!(pick(&admin).as_deref(), Some("exempt"));
        let anonymous = attrs(
            "system:anonymous",
            &["system:unauthenticated"],
            "get",
            "",
            "",
        );
        assert_eq!(pick(&anonymous).as_deref(), Some("catch-all"));
    }

    #[test]
    fn levels_share_the_server_limit_by_their_shares() {
        let levels = [level("low", 10, None), level("high", 30, None)];
        // The flags' defaults, 400 + 200. With the mandatory exempt (0 shares) and
        // catch-all (5): 45 shares in all.
        let config = digest(&[], &levels, 600);
        assert_eq!(config.levels["high"].bounds.nominal, 400);
        assert_eq!(config.levels["low"].bounds.nominal, 134);
        assert_eq!(config.levels["catch-all"].bounds.nominal, 67);
        assert!(config.levels["exempt"].bounds.exempt);
        assert_eq!(config.levels["exempt"].bounds.nominal, 0);
        // Another configured limit divides the same way (ceil(90 * 10 / 45) = 20).
        let config = digest(&[], &levels, 90);
        assert_eq!(config.levels["high"].bounds.nominal, 60);
        assert_eq!(config.levels["low"].bounds.nominal, 20);
        assert_eq!(config.levels["catch-all"].bounds.nominal, 10);
        // Rounding up: ceil(2 * 5 / 45) = 1.
        let config = digest(&[], &levels, 2);
        assert_eq!(config.levels["high"].bounds.nominal, 2);
        assert_eq!(config.levels["low"].bounds.nominal, 1);
        assert_eq!(config.levels["catch-all"].bounds.nominal, 1);
    }

    #[test]
    fn subjects_and_urls_match_as_upstream() {
        let sa = Subject {
            kind: "ServiceAccount".into(),
            service_account: Some(k8s_openapi::api::flowcontrol::v1::ServiceAccountSubject {
                namespace: "kube-system".into(),
                name: "*".into(),
            }),
            ..Subject::default()
        };
        let user = |name: &str| attrs(name, &[], "get", "", "");
        assert!(matches_subject(
            &sa,
            &user("system:serviceaccount:kube-system:x")
        ));
        assert!(!matches_subject(
            &sa,
            &user("system:serviceaccount:default:x")
        ));
        assert!(!matches_subject(&sa, &user("kube-system:x")));
        assert!(matches_non_resource_url("/healthz/*", "/healthz/etcd"));
        assert!(matches_non_resource_url("/healthz", "/healthz"));
        assert!(!matches_non_resource_url("/healthz", "/healthzx"));
        assert!(matches_non_resource_url("*", "/version"));
    }

    #[test]
    fn hands_are_distinct_queues_of_the_deck() {
        for h in [0u64, 1, 12345, u64::MAX] {
            let mut hand = deal_hand(h, 64, 8);
            assert_eq!(hand.len(), 8);
            assert!(hand.iter().all(|&q| q < 64));
            hand.sort_unstable();
            hand.dedup();
            assert_eq!(hand.len(), 8);
        }
        assert_ne!(deal_hand(1, 64, 8), deal_hand(2, 64, 8));
    }

    #[test]
    fn dangling_condition_names_the_level() {
        let c = dangling_condition("gone", false, "2026-01-01T00:00:00Z");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "NotFound");
        assert_eq!(
            c["message"],
            "This FlowSchema references the PriorityLevelConfiguration object named \"gone\" but there is no such object"
        );
        assert_eq!(dangling_condition("x", true, "t")["reason"], "Found");
    }

    pub(super) fn tracked(flow_schema: &str, user: &str) -> Tracked {
        Tracked {
            flow_schema: Arc::from(flow_schema),
            distinguisher: user.into(),
            arrived: jiff::Timestamp::UNIX_EPOCH,
            started: None,
            work: WorkEstimate::ONE_SEAT,
            details: RequestDetails::of(&attrs(user, &[], "create", "team", "configmaps")),
        }
    }

    /// A one-seat request's first turn at `level`, in its first queue.
    pub(super) fn admit(
        level: &mut Level,
        id: u64,
        request: Tracked,
        m: &FlowControlMetrics,
    ) -> Step {
        admit_to(level, id, request, WorkEstimate::ONE_SEAT, 0, m)
    }

    pub(super) fn one_seat(name: &str, queuing: Option<Queuing>) -> Level {
        Level::new(
            Arc::from(name),
            LevelSpec {
                uid: format!("uid-{name}"),
                bounds: Bounds {
                    nominal: 1,
                    min: 1,
                    max: 1,
                    exempt: false,
                },
                queuing,
                max_seats: 1,
            },
        )
    }

    const ONE_QUEUE_OF_ONE: Queuing = Queuing {
        queues: 1,
        hand_size: 1,
        queue_length_limit: 1,
    };

    /// The value of the sample `series` (name and labels) on the metrics' page.
    pub(super) fn sample(m: &FlowControlMetrics, series: &str) -> Option<String> {
        let mut page = String::new();
        m.render(&mut page);
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    const FS_PL: &str = r#"{flow_schema="fs",priority_level="pl"}"#;

    fn gauge(m: &FlowControlMetrics, name: &str) -> Option<String> {
        sample(m, &format!("apiserver_flowcontrol_{name}{FS_PL}"))
    }

    #[tokio::test]
    async fn a_full_level_queues_then_rejects_and_counts_each_step() {
        let m = FlowControlMetrics::default();
        let mut level = one_seat("pl", Some(ONE_QUEUE_OF_ONE));
        assert!(matches!(
            admit(&mut level, 0, tracked("fs", "a"), &m),
            Step::Admitted
        ));
        let Step::Queued(mut rx) = admit(&mut level, 1, tracked("fs", "b"), &m) else {
            panic!("the second request should wait");
        };
        assert!(rx.try_recv().is_err(), "no seat is free yet");
        assert!(matches!(
            admit(&mut level, 2, tracked("fs", "c"), &m),
            Step::Rejected
        ));
        let rejected = |reason: &str| {
            sample(
                &m,
                &format!(
                    r#"apiserver_flowcontrol_rejected_requests_total{{flow_schema="fs",priority_level="pl",reason="{reason}"}}"#
                ),
            )
        };
        assert_eq!(rejected("queue-full").as_deref(), Some("1"));
        assert_eq!(gauge(&m, "current_inqueue_requests").as_deref(), Some("1"));
        assert_eq!(gauge(&m, "current_inqueue_seats").as_deref(), Some("1"));
        assert_eq!(
            gauge(&m, "current_executing_requests").as_deref(),
            Some("1")
        );
        assert_eq!(gauge(&m, "dispatched_requests_total").as_deref(), Some("1"));

        // The freed seat goes to the waiter.
        assert!(matches!(level.finish(0, &m), Finished::Done));
        assert!(rx.try_recv().is_ok());
        assert!(level.running.contains_key(&1));
        assert_eq!(gauge(&m, "current_inqueue_requests").as_deref(), Some("0"));
        assert_eq!(gauge(&m, "current_executing_seats").as_deref(), Some("1"));
        assert_eq!(gauge(&m, "dispatched_requests_total").as_deref(), Some("2"));
        // Both saw a queue of one: the first as upstream's immediate dispatch does.
        assert_eq!(
            gauge(&m, "request_queue_length_after_enqueue_count").as_deref(),
            Some("2")
        );
        assert_eq!(level.queues[0].executing, 1);

        // A waiter that gave up is skipped, counted refused after waiting.
        let Step::Queued(gone) = admit(&mut level, 3, tracked("fs", "d"), &m) else {
            panic!("the fourth request should wait");
        };
        drop(gone);
        assert!(matches!(level.finish(1, &m), Finished::Done));
        assert_eq!(level.executing(), 0);
        assert_eq!(level.queues[0].executing, 0);
        assert_eq!(
            (level.dispatched, level.rejected, level.cancelled),
            (2, 2, 1)
        );
        assert_eq!(rejected("time-out").as_deref(), Some("1"));
        assert_eq!(
            gauge(&m, "current_executing_requests").as_deref(),
            Some("0")
        );
        assert_eq!(gauge(&m, "current_inqueue_requests").as_deref(), Some("0"));
    }

    #[tokio::test]
    async fn a_request_whose_wait_ends_leaves_its_queue_refused() {
        let m = FlowControlMetrics::default();
        let mut level = one_seat("pl", Some(ONE_QUEUE_OF_ONE));
        admit(&mut level, 0, tracked("fs", "a"), &m);
        let Step::Queued(_rx) = admit(&mut level, 1, tracked("fs", "b"), &m) else {
            panic!("the second request should wait");
        };
        assert!(level.withdraw(1, &m));
        assert!(!level.withdraw(1, &m), "counted once");
        assert!(matches!(level.finish(1, &m), Finished::NotHere));
        assert_eq!(level.waiting(), 0);
        assert_eq!((level.rejected, level.cancelled), (1, 1));
        assert_eq!(gauge(&m, "current_inqueue_requests").as_deref(), Some("0"));
        assert_eq!(
            sample(
                &m,
                r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="fs",priority_level="pl",reason="time-out"}"#
            )
            .as_deref(),
            Some("1")
        );
    }

    #[test]
    fn a_level_that_does_not_queue_refuses_over_its_limit() {
        let m = FlowControlMetrics::default();
        let mut level = one_seat("pl", None);
        assert!(matches!(
            admit(&mut level, 0, tracked("fs", "a"), &m),
            Step::Admitted
        ));
        assert!(matches!(
            admit(&mut level, 1, tracked("fs", "a"), &m),
            Step::Rejected
        ));
        assert_eq!(
            sample(
                &m,
                r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="fs",priority_level="pl",reason="concurrency-limit"}"#
            )
            .as_deref(),
            Some("1")
        );
        // No queue: nothing observed of one.
        assert_eq!(gauge(&m, "request_queue_length_after_enqueue_count"), None);
    }

    #[test]
    fn exempt_requests_are_counted_but_never_held() {
        let m = FlowControlMetrics::default();
        let mut level = Level::new(
            Arc::from("pl"),
            LevelSpec {
                uid: "u".into(),
                bounds: Bounds {
                    nominal: 0,
                    min: 0,
                    max: 0,
                    exempt: true,
                },
                queuing: None,
                max_seats: 10,
            },
        );
        for id in 0..3 {
            assert!(matches!(
                admit(&mut level, id, tracked("fs", "admin"), &m),
                Step::Admitted
            ));
        }
        assert_eq!(
            gauge(&m, "current_executing_requests").as_deref(),
            Some("3")
        );
        assert_eq!(gauge(&m, "dispatched_requests_total").as_deref(), Some("3"));
        for id in 0..3 {
            assert!(matches!(level.finish(id, &m), Finished::Done));
        }
        assert_eq!(
            gauge(&m, "current_executing_requests").as_deref(),
            Some("0")
        );
    }

    #[test]
    fn level_limits_are_published_per_level() {
        let m = FlowControlMetrics::default();
        let config = digest(&[], &[level("low", 10, None)], 90);
        let mut levels: HashMap<String, Level> = HashMap::new();
        for (name, spec) in &config.levels {
            m.level_bounds(name, spec.bounds);
            levels.insert(
                name.clone(),
                Level::new(Arc::from(name.as_str()), spec.clone()),
            );
        }
        adjust_borrowing(&mut levels, &m);
        let limit = |name: &str, level: &str| {
            sample(
                &m,
                &format!(r#"apiserver_flowcontrol_{name}{{priority_level="{level}"}}"#),
            )
        };
        // 10 and 5 (catch-all) of 15 shares of 90; exempt has 0 shares. Neither
        // limited level lends any (lendablePercent 0), and both may borrow up to the
        // server's 90 seats more.
        assert_eq!(limit("nominal_limit_seats", "low").as_deref(), Some("60"));
        assert_eq!(limit("lower_limit_seats", "low").as_deref(), Some("60"));
        assert_eq!(limit("upper_limit_seats", "low").as_deref(), Some("150"));
        assert_eq!(
            limit("current_limit_seats", "catch-all").as_deref(),
            Some("30")
        );
        assert_eq!(
            limit("upper_limit_seats", "catch-all").as_deref(),
            Some("120")
        );
        assert_eq!(limit("nominal_limit_seats", "exempt").as_deref(), Some("0"));
        assert_eq!(limit("current_limit_seats", "exempt").as_deref(), Some("0"));
        assert_eq!(limit("demand_seats_smoothed", "low").as_deref(), Some("0"));
        // The lower bounds take every seat: no fair share is computed.
        assert_eq!(
            sample(&m, "apiserver_flowcontrol_seat_fair_frac").as_deref(),
            Some("0")
        );
        m.retain_levels(|name| name != "low");
        assert_eq!(limit("nominal_limit_seats", "low"), None);
        assert_eq!(limit("demand_seats_smoothed", "low"), None);
    }

    /// A level whose configuration is removed serves its waiters one seat at a time as
    /// before, takes no new request, and goes once idle; one configured again is not
    /// quiescing any more.
    #[test]
    fn a_removed_level_quiesces_until_idle() {
        let m = FlowControlMetrics::default();
        let mut levels: HashMap<String, Level> = HashMap::new();
        levels.insert("pl".into(), one_seat("pl", Some(ONE_QUEUE_OF_ONE)));
        let level = levels.get_mut("pl").unwrap();
        assert!(matches!(
            admit(level, 0, tracked("fs", "a"), &m),
            Step::Admitted
        ));
        let Step::Queued(mut rx) = admit(level, 1, tracked("fs", "b"), &m) else {
            panic!("the second request should wait");
        };
        let without = digest(&[], &[], 600);
        assert!(!without.levels.contains_key("pl"));
        quiesce_removed(&mut levels, &without);
        let level = levels.get_mut("pl").expect("kept while it has work");
        assert!(level.quiescing);
        assert!(rx.try_recv().is_err(), "not served at once");
        assert!(matches!(level.finish(0, &m), Finished::Done));
        assert!(rx.try_recv().is_ok(), "served when its seat is free");
        remove_if_quiesced(&mut levels, "pl");
        assert!(levels.contains_key("pl"), "the second still runs");
        let level = levels.get_mut("pl").unwrap();
        assert!(matches!(level.finish(1, &m), Finished::Done));
        remove_if_quiesced(&mut levels, "pl");
        assert!(!levels.contains_key("pl"));

        // Configured again before it went: it serves on as before.
        levels.insert("pl".into(), one_seat("pl", Some(ONE_QUEUE_OF_ONE)));
        let level = levels.get_mut("pl").unwrap();
        assert!(matches!(
            admit(level, 2, tracked("fs", "a"), &m),
            Step::Admitted
        ));
        quiesce_removed(&mut levels, &without);
        let with = digest(&[], &[self::level("pl", 1, None)], 600);
        quiesce_removed(&mut levels, &with);
        assert!(!levels["pl"].quiescing);
    }

    /// A level whose requests wait gets, at the next adjustment, the seats an idle
    /// level lends, and its waiters run on them.
    #[tokio::test]
    async fn a_busy_level_borrows_the_seats_an_idle_one_lends() {
        let m = FlowControlMetrics::default();
        let spec = |name: &str, nominal| LevelSpec {
            uid: format!("uid-{name}"),
            // Half of its seats lendable, no borrowing limit (12 seats in all).
            bounds: Bounds::of(nominal, Some(50), None, 12, false),
            queuing: Some(Queuing {
                queues: 1,
                hand_size: 1,
                queue_length_limit: 100,
            }),
            max_seats: 1,
        };
        let mut levels: HashMap<String, Level> = [("busy", 4), ("idle", 8)]
            .into_iter()
            .map(|(name, nominal)| {
                (
                    name.to_string(),
                    Level::new(Arc::from(name), spec(name, nominal)),
                )
            })
            .collect();
        let busy = levels.get_mut("busy").unwrap();
        // It starts at its nominal seats less half of those it may lend: 3.
        assert_eq!(busy.current, 3);
        let mut granted = Vec::new();
        for id in 0..8 {
            match admit(busy, id, tracked("fs", "a"), &m) {
                Step::Admitted => {}
                Step::Queued(rx) => granted.push(rx),
                Step::Rejected => panic!("request {id} refused"),
            }
        }
        assert_eq!((busy.executing(), granted.len()), (3, 5));
        // Let the period's demand be mostly these 8 seats.
        tokio::time::sleep(Duration::from_millis(50)).await;
        adjust_borrowing(&mut levels, &m);
        // The idle level keeps its lower bound (4 of its 8); the busy one has the
        // other 8 of the 12, and its 5 waiters are running.
        assert_eq!((levels["idle"].current, levels["busy"].current), (4, 8));
        assert_eq!(levels["busy"].executing(), 8);
        for mut rx in granted {
            assert!(rx.try_recv().is_ok());
        }
        assert_eq!(
            sample(
                &m,
                r#"apiserver_flowcontrol_demand_seats_high_watermark{priority_level="busy"}"#
            )
            .as_deref(),
            Some("8")
        );
    }
}
