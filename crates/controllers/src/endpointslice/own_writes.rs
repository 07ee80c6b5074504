//! What the EndpointSlice controller's own writes should look like in its informer cache
//! (upstream's `EndpointSliceTracker` and its `StaleSlices` check). A sync that runs on a
//! cache which has not seen the controller's last writes yet would plan from stale
//! state: create a second slice next to one it just created, or rewrite a slice it just
//! wrote, losing the trigger time it had put there. Such a sync waits for the cache.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::Mutex;

/// How long an expectation holds: a write the cache never shows (its slice removed by
/// someone else before the watch delivered it) must not stop the Service's syncs for
/// good.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Expected {
    /// The slice is in the cache at this resourceVersion or later; `None`: it is gone.
    at_least: Option<u64>,
    since: Instant,
}

/// Per Service (`namespace/name`), the slices (by uid) this controller wrote or deleted
/// that its cache has not shown yet.
#[derive(Debug, Default)]
pub struct OwnWrites {
    by_service: Mutex<HashMap<String, HashMap<String, Expected>>>,
}

fn uid(s: &EndpointSlice) -> &str {
    s.metadata.uid.as_deref().unwrap_or_default()
}

fn resource_version(s: &EndpointSlice) -> u64 {
    s.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl OwnWrites {
    /// The controller created or updated `slice` (the object the write returned).
    pub fn wrote(&self, service: &str, slice: &EndpointSlice) {
        self.expect(service, uid(slice), Some(resource_version(slice)));
    }

    /// The controller deleted the slice with this uid.
    pub fn deleted(&self, service: &str, slice_uid: &str) {
        self.expect(service, slice_uid, None);
    }

    fn expect(&self, service: &str, slice_uid: &str, at_least: Option<u64>) {
        if slice_uid.is_empty() {
            return;
        }
        self.by_service
            .lock()
            .entry(service.to_owned())
            .or_default()
            .insert(
                slice_uid.to_owned(),
                Expected {
                    at_least,
                    since: Instant::now(),
                },
            );
    }

    /// The Service is gone: nothing of it is awaited any more.
    pub fn forget_service(&self, service: &str) {
        self.by_service.lock().remove(service);
    }

    /// Whether `cached`, the Service's slices in the cache, lacks one of the
    /// controller's writes. Expectations the cache meets are dropped.
    pub fn cache_is_stale(&self, service: &str, cached: &[EndpointSlice]) -> bool {
        let mut all = self.by_service.lock();
        let Some(expected) = all.get_mut(service) else {
            return false;
        };
        expected.retain(|slice_uid, e| {
            let seen = cached.iter().find(|s| uid(s) == slice_uid);
            let met = match (e.at_least, seen) {
                (Some(rv), Some(s)) => resource_version(s) >= rv,
                (Some(_), None) => false,
                (None, seen) => seen.is_none(),
            };
            !met && e.since.elapsed() < EXPECTATION_TIMEOUT
        });
        let stale = !expected.is_empty();
        if !stale {
            all.remove(service);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(uid: &str, rv: u64) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(rv.to_string()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![],
            ports: None,
        }
    }

    #[test]
    fn a_cache_without_the_last_writes_is_stale_until_it_shows_them() {
        let w = OwnWrites::default();
        assert!(!w.cache_is_stale("ns/web", &[]));
        w.wrote("ns/web", &slice("a", 10));
        w.deleted("ns/web", "old");
        // Neither the created slice nor the deletion is in the cache yet.
        assert!(w.cache_is_stale("ns/web", &[slice("old", 5)]));
        // The create is seen at an older version: still stale.
        assert!(w.cache_is_stale("ns/web", &[slice("a", 9)]));
        // Both seen.
        assert!(!w.cache_is_stale("ns/web", &[slice("a", 10)]));
        // Met expectations are gone: a later cache without the slice is not stale.
        assert!(!w.cache_is_stale("ns/web", &[]));
        // Other Services are not affected, and a forgotten Service awaits nothing.
        w.wrote("ns/web", &slice("b", 20));
        assert!(!w.cache_is_stale("ns/other", &[]));
        w.forget_service("ns/web");
        assert!(!w.cache_is_stale("ns/web", &[]));
    }
}
