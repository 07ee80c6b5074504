//! How many seats a request takes (upstream `util/flowcontrol/request`'s work
//! estimators and `watch_tracker.go`): a collection LIST takes a seat for every 100
//! objects it reads (from the watch cache, or twice its page from storage), at most
//! its level's maximum (10, or fewer for a small level); a write to a resource with
//! watchers keeps a seat for every 10 of them for 5 ms of events after it finishes;
//! anything else takes one seat. Watches are counted by group, resource, namespace and
//! name while they run, as upstream's tracker counts them (a pod watch for one node is
//! left out). Objects are counted per resource, built-in or custom, from its watch
//! cache, as upstream's storage counts them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::Attributes;
use ferrokube_registry::cache::ResourceCache;
use ferrokube_registry::custom::CustomResources;
use parking_lot::Mutex;

use super::queueset::WorkEstimate;

/// Upstream `minimumSeats`, `maximumSeatsLimit`, `objectsPerSeat`, `watchesPerSeat`
/// and `eventAdditionalDuration`.
const MIN_SEATS: u32 = 1;
pub(super) const MAX_SEATS_LIMIT: u32 = 10;
const OBJECTS_PER_SEAT: f64 = 100.0;
const WATCHES_PER_SEAT: f64 = 10.0;
const EVENT_ADDITIONAL_DURATION: Duration = Duration::from_millis(5);

/// Upstream `priorityLevelMaxSeatsPercent`.
const LEVEL_MAX_SEATS_FRACTION: f64 = 0.15;

/// The most seats one request of a level may take: for a queuing level
/// `max(1, min(ceil(15 % of its nominal seats), nominal seats / hand size))`, at most
/// 10; 10 for the others.
pub(super) fn level_max_seats(nominal: u32, hand_size: Option<usize>) -> u32 {
    let Some(hand_size) = hand_size.filter(|h| *h > 0) else {
        return MAX_SEATS_LIMIT;
    };
    let by_share = (f64::from(nominal) * LEVEL_MAX_SEATS_FRACTION).ceil();
    let by_hand = f64::from(nominal / u32::try_from(hand_size).unwrap_or(u32::MAX));
    let seats = by_share.min(by_hand).max(1.0) as u32;
    if seats == 0 || seats > MAX_SEATS_LIMIT {
        MAX_SEATS_LIMIT
    } else {
        seats
    }
}

/// A watch's place in the tracker's counts: what it watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WatchKey {
    group: String,
    resource: String,
    namespace: String,
    name: String,
}

/// The open watches of one resource: of all of it, and by namespace and name (a
/// cluster-scoped object's under the namespace "").
#[derive(Default)]
struct ResourceWatches {
    all: usize,
    namespaces: HashMap<String, NamespaceWatches>,
}

#[derive(Default)]
struct NamespaceWatches {
    all: usize,
    names: HashMap<String, usize>,
}

/// The open watches, by group and resource. Nested maps, so that a write's lookup
/// borrows its request's names rather than building a key.
#[derive(Default)]
pub(super) struct WatchTracker {
    groups: Mutex<HashMap<String, HashMap<String, ResourceWatches>>>,
}

/// An open watch, counted until this is dropped.
pub(crate) struct TrackedWatch {
    tracker: Arc<WatchTracker>,
    key: WatchKey,
}

impl Drop for TrackedWatch {
    fn drop(&mut self) {
        self.tracker.count(&self.key, false);
    }
}

impl WatchTracker {
    /// Counts a watch until the returned guard is dropped; `None` for what upstream
    /// leaves out: a pod watch of one node's pods (`spec.nodeName=<node>`), whose
    /// events are few.
    pub(super) fn register(
        self: &Arc<Self>,
        attrs: &Attributes,
        query: Option<&str>,
    ) -> Option<TrackedWatch> {
        if attrs.resource == "pods"
            && exact_field(query, "spec.nodeName").is_some_and(|node| !node.is_empty())
        {
            return None;
        }
        let key = WatchKey {
            group: attrs.api_group.clone(),
            resource: attrs.resource.clone(),
            namespace: attrs.namespace.clone(),
            name: attrs.name.clone(),
        };
        self.count(&key, true);
        Some(TrackedWatch {
            tracker: self.clone(),
            key,
        })
    }

    /// Adds (or removes) one watch of `key`, dropping what counts none.
    fn count(&self, key: &WatchKey, added: bool) {
        let step = |n: &mut usize| {
            if added {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        };
        let mut groups = self.groups.lock();
        let resources = groups.entry(key.group.clone()).or_default();
        let watches = resources.entry(key.resource.clone()).or_default();
        if key.namespace.is_empty() && key.name.is_empty() {
            step(&mut watches.all);
        } else {
            let namespace = watches.namespaces.entry(key.namespace.clone()).or_default();
            if key.name.is_empty() {
                step(&mut namespace.all);
            } else {
                let n = namespace.names.entry(key.name.clone()).or_default();
                step(n);
                if *n == 0 {
                    namespace.names.remove(&key.name);
                }
            }
            if namespace.all == 0 && namespace.names.is_empty() {
                watches.namespaces.remove(&key.namespace);
            }
        }
        if watches.all == 0 && watches.namespaces.is_empty() {
            resources.remove(&key.resource);
        }
        if resources.is_empty() {
            groups.remove(&key.group);
        }
    }

    /// Upstream `GetInterestedWatchCount`: the watches of the whole resource, of the
    /// request's namespace and of its object.
    fn interested(&self, attrs: &Attributes) -> usize {
        let groups = self.groups.lock();
        let Some(watches) = groups
            .get(&attrs.api_group)
            .and_then(|resources| resources.get(&attrs.resource))
        else {
            return 0;
        };
        let mut n = watches.all;
        if let Some(namespace) = watches.namespaces.get(&attrs.namespace) {
            if !attrs.namespace.is_empty() {
                n += namespace.all;
            }
            if !attrs.name.is_empty() {
                n += namespace.names.get(&attrs.name).copied().unwrap_or(0);
            }
        }
        n
    }
}

/// How many objects a request's resource holds; none for a resource this server does
/// not serve (an aggregated API's).
type ObjectCount = dyn Fn(&Attributes) -> Option<usize> + Send + Sync;

/// The work estimator: the resources' object counts (from their watch caches) and the
/// open watches.
pub(super) struct Estimator {
    object_count: Box<ObjectCount>,
    pub(super) watches: Arc<WatchTracker>,
}

impl Estimator {
    pub(super) fn new(registry: &ferrokube_registry::Registry) -> Estimator {
        let built_in: HashMap<(&'static str, &'static str), Arc<ResourceCache>> =
            ferrokube_api::resources::RESOURCES
                .iter()
                .filter_map(|info| {
                    let store = registry.store_for(info)?;
                    Some(((info.group, info.plural), store.cache().clone()))
                })
                .collect();
        // Custom resources' caches come and go with their definitions.
        let custom: Arc<CustomResources> = registry.custom().clone();
        let object_count = move |attrs: &Attributes| {
            let key = (attrs.api_group.as_str(), attrs.resource.as_str());
            if let Some(cache) = built_in.get(&key) {
                return Some(cache.object_count());
            }
            let served = custom.served();
            let resource = served.get(&attrs.api_group, &attrs.api_version, &attrs.resource)?;
            Some(resource.store.cache().object_count())
        };
        Estimator {
            object_count: Box::new(object_count),
            watches: Arc::default(),
        }
    }

    /// The seats of a request of a level whose requests may take `max_seats`, and for
    /// a write the watches it was estimated from.
    pub(super) fn estimate(
        &self,
        attrs: &Attributes,
        query: Option<&str>,
        max_seats: u32,
    ) -> (WorkEstimate, Option<usize>) {
        let one = |seats| WorkEstimate {
            initial_seats: seats,
            final_seats: 0,
            additional_latency: Duration::ZERO,
        };
        match attrs.verb.as_str() {
            "list" => (one(self.list_seats(attrs, query, max_seats)), None),
            "create" | "update" | "patch" | "delete" => self.write_estimate(attrs, max_seats),
            _ => (one(MIN_SEATS), None),
        }
    }

    /// Upstream `listWorkEstimator` (a watch takes one seat: upstream estimates it as a
    /// list only with the WatchList gate, off in 1.33).
    fn list_seats(&self, attrs: &Attributes, query: Option<&str>, max_seats: u32) -> u32 {
        if !attrs.name.is_empty() {
            return MIN_SEATS;
        }
        let Ok(options) = ListOptions::parse(query) else {
            return max_seats;
        };
        let Some(stored) = (self.object_count)(attrs) else {
            return MIN_SEATS;
        };
        let stored = stored as u64;
        let limit = match options.limit {
            Some(l) if l > 0 && l < stored => l,
            _ => stored,
        };
        let objects = if !options.reads_storage() {
            stored
        } else if options.selective {
            stored + limit
        } else {
            2 * limit
        };
        let seats = (objects as f64 / OBJECTS_PER_SEAT).ceil() as u32;
        seats.clamp(MIN_SEATS, max_seats.max(MIN_SEATS))
    }

    /// Upstream `mutatingWorkEstimator`.
    fn write_estimate(&self, attrs: &Attributes, max_seats: u32) -> (WorkEstimate, Option<usize>) {
        let mut estimate = WorkEstimate::ONE_SEAT;
        // A token request makes no watch event.
        if attrs.resource == "serviceaccounts" && attrs.subresource == "token" {
            return (estimate, None);
        }
        let count = self.watches.interested(attrs);
        let watches = count as f64;
        if watches >= WATCHES_PER_SEAT {
            let seats = (watches / WATCHES_PER_SEAT).ceil();
            let work = seats * EVENT_ADDITIONAL_DURATION.as_secs_f64();
            let seats = seats.min(f64::from(max_seats.max(1)));
            estimate.final_seats = seats as u32;
            estimate.additional_latency = Duration::from_secs_f64(work / seats);
        }
        (estimate, Some(count))
    }
}

/// What a list's estimate reads of its query.
struct ListOptions {
    limit: Option<u64>,
    resource_version: String,
    resource_version_match: String,
    continued: bool,
    /// A label or field selector.
    selective: bool,
}

impl ListOptions {
    fn parse(query: Option<&str>) -> Result<ListOptions, ()> {
        let mut o = ListOptions {
            limit: None,
            resource_version: String::new(),
            resource_version_match: String::new(),
            continued: false,
            selective: false,
        };
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "limit" => o.limit = Some(v.parse::<i64>().map_err(|_| ())?.max(0) as u64),
                "resourceVersion" => o.resource_version = v.into_owned(),
                "resourceVersionMatch" => o.resource_version_match = v.into_owned(),
                "continue" => o.continued = !v.is_empty(),
                "labelSelector" | "fieldSelector" => o.selective |= !v.is_empty(),
                _ => {}
            }
        }
        Ok(o)
    }

    /// Upstream `ShouldDelegateListMeta` with consistent reads served by the cache:
    /// whether the list reads storage rather than the watch cache.
    fn reads_storage(&self) -> bool {
        match self.resource_version_match.as_str() {
            "Exact" => true,
            "NotOlderThan" => false,
            "" => {
                self.continued
                    || (self.limit.is_some_and(|l| l > 0)
                        && !self.resource_version.is_empty()
                        && self.resource_version != "0")
            }
            _ => true,
        }
    }
}

/// The value a field selector of the query requires `field` to equal exactly
/// (upstream `RequiresExactMatch`); an unparsable selector requires nothing.
fn exact_field(query: Option<&str>, field: &str) -> Option<String> {
    let selector = form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "fieldSelector")?
        .1;
    let selector = ferrokube_apimachinery::fields::FieldSelector::parse(&selector).ok()?;
    selector.requires_exact_match(field).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    #[test]
    fn a_level_takes_at_most_its_share_of_seats_per_request() {
        // Upstream's levels at the default 600 seats: 10 where the share allows.
        assert_eq!(level_max_seats(245, Some(6)), 10);
        assert_eq!(level_max_seats(13, Some(6)), 2);
        assert_eq!(level_max_seats(3, Some(8)), 1);
        assert_eq!(level_max_seats(100, None), 10);
    }

    #[test]
    fn lists_read_storage_or_the_cache_as_upstream_delegates_them() {
        let parse = |q: &str| ListOptions::parse(Some(q)).ok().unwrap();
        assert!(
            !parse("").reads_storage(),
            "a consistent read from the cache"
        );
        assert!(!parse("resourceVersion=0&limit=500").reads_storage());
        assert!(parse("resourceVersion=12&limit=500").reads_storage());
        assert!(!parse("resourceVersion=12").reads_storage());
        assert!(parse("continue=abc").reads_storage());
        assert!(parse("resourceVersion=12&resourceVersionMatch=Exact").reads_storage());
        assert!(!parse("resourceVersion=12&resourceVersionMatch=NotOlderThan").reads_storage());
        assert!(ListOptions::parse(Some("limit=many")).is_err());
        assert!(parse("labelSelector=app%3Dx").selective);
    }

    #[test]
    fn writes_keep_a_seat_per_ten_interested_watches() {
        let tracker = Arc::new(WatchTracker::default());
        let estimator = Estimator {
            object_count: Box::new(|_| None),
            watches: tracker.clone(),
        };
        let create = attrs("create", "configmaps", "a", "");
        assert_eq!(
            estimator.estimate(&create, None, 10),
            (WorkEstimate::ONE_SEAT, Some(0))
        );
        // 15 watches of every namespace, 10 of namespace a, 5 of namespace b, and a
        // kubelet's watch of its own pods.
        let mut held = Vec::new();
        for (ns, n) in [("", 15), ("a", 10), ("b", 5)] {
            for _ in 0..n {
                held.push(tracker.register(&attrs("watch", "configmaps", ns, ""), None));
            }
        }
        assert!(
            tracker
                .register(
                    &attrs("watch", "pods", "", ""),
                    Some("fieldSelector=spec.nodeName%3Dnode-1")
                )
                .is_none()
        );
        let (e, watches) = estimator.estimate(&create, None, 10);
        assert_eq!(watches, Some(25));
        // 25 interested: 3 final seats for 5 ms each.
        assert_eq!((e.initial_seats, e.final_seats), (1, 3));
        assert_eq!(e.additional_latency, Duration::from_millis(5));
        // Capped by the level: the same work over fewer seats.
        let e = estimator.estimate(&create, None, 2).0;
        assert_eq!(e.final_seats, 2);
        assert!((e.additional_latency.as_secs_f64() - 0.0075).abs() < 1e-9);
        // An update of one object also reaches the watches of that object.
        for _ in 0..10 {
            held.push(tracker.register(&attrs("watch", "configmaps", "a", "x"), None));
        }
        let update = attrs("update", "configmaps", "a", "x");
        assert_eq!(estimator.estimate(&update, None, 10).0.final_seats, 4);
        assert_eq!(estimator.estimate(&create, None, 10).0.final_seats, 3);
        // A token request makes no event.
        let mut token = attrs("create", "configmaps", "a", "x");
        token.resource = "serviceaccounts".into();
        token.subresource = "token".into();
        assert_eq!(
            estimator.estimate(&token, None, 10).0,
            WorkEstimate::ONE_SEAT
        );
        drop(held);
        assert_eq!(
            estimator.estimate(&create, None, 10),
            (WorkEstimate::ONE_SEAT, Some(0))
        );
        assert!(tracker.groups.lock().is_empty());
    }
}
