//! Upstream's `ControllerExpectations` / `UIDTrackingControllerExpectations`: how many
//! creates and which deletes a controller has issued but not yet seen through its
//! informer. Until they are observed (or the TTL of 5 minutes passes), the controller
//! does not act on the key again, so a burst of stale watch events never makes it
//! over- or under-create. Time is passed in (seconds on any monotonic scale).

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;

/// Upstream's `ExpectationsTimeout`.
pub const EXPECTATIONS_TIMEOUT_SECS: u64 = 5 * 60;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Expectee {
    add: i64,
    del: i64,
    /// Uids whose deletion is expected and not yet observed.
    deleting: HashSet<String>,
    set_at: u64,
}

/// Per-key outstanding creates and deletes.
#[derive(Debug, Default)]
pub struct Expectations {
    inner: Mutex<HashMap<String, Expectee>>,
}

impl Expectations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the controller may sync `key` now: no record, every expectation
    /// observed, or the record expired.
    pub fn satisfied(&self, key: &str, now: u64) -> bool {
        match self.inner.lock().get(key) {
            None => true,
            Some(e) => {
                (e.add <= 0 && e.del <= 0)
                    || now.saturating_sub(e.set_at) > EXPECTATIONS_TIMEOUT_SECS
            }
        }
    }

    /// Records `adds` creates about to be issued (replacing any earlier record).
    pub fn expect_creations(&self, key: &str, adds: usize, now: u64) {
        self.inner.lock().insert(
            key.to_string(),
            Expectee {
                add: adds as i64,
                del: 0,
                deleting: HashSet::new(),
                set_at: now,
            },
        );
    }

    /// Records the deletes of these pod uids about to be issued.
    pub fn expect_deletions(&self, key: &str, uids: &[String], now: u64) {
        self.inner.lock().insert(
            key.to_string(),
            Expectee {
                add: 0,
                del: uids.len() as i64,
                deleting: uids.iter().cloned().collect(),
                set_at: now,
            },
        );
    }

    /// A create was observed (an informer Add), or a create failed / was skipped.
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.inner.lock().get_mut(key) {
            e.add -= 1;
        }
    }

    /// A delete of `uid` was observed or failed. Counted once per uid.
    pub fn deletion_observed(&self, key: &str, uid: &str) {
        if let Some(e) = self.inner.lock().get_mut(key)
            && e.deleting.remove(uid)
        {
            e.del -= 1;
        }
    }

    /// Forgets the key (its owner was deleted).
    pub fn delete(&self, key: &str) {
        self.inner.lock().remove(key);
    }

    /// Outstanding (adds, deletes) of `key`.
    pub fn pending(&self, key: &str) -> Option<(i64, i64)> {
        self.inner.lock().get(key).map(|e| (e.add, e.del))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_and_deletions() {
        let e = Expectations::new();
        assert!(e.satisfied("ns/rs", 0));
        e.expect_creations("ns/rs", 2, 10);
        assert!(!e.satisfied("ns/rs", 11));
        e.creation_observed("ns/rs");
        assert!(!e.satisfied("ns/rs", 11));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs", 11));
        // An extra observation (a pod someone else created) keeps it satisfied.
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs", 11));

        e.expect_deletions("ns/rs", &["a".into(), "b".into()], 20);
        e.deletion_observed("ns/rs", "a");
        // The same delete seen twice (update with deletionTimestamp, then delete) counts once.
        e.deletion_observed("ns/rs", "a");
        assert!(!e.satisfied("ns/rs", 21));
        e.deletion_observed("ns/rs", "b");
        assert!(e.satisfied("ns/rs", 21));
    }

    #[test]
    fn expire_after_ttl() {
        let e = Expectations::new();
        e.expect_creations("k", 5, 100);
        assert!(!e.satisfied("k", 100 + EXPECTATIONS_TIMEOUT_SECS));
        assert!(e.satisfied("k", 101 + EXPECTATIONS_TIMEOUT_SECS));
        e.delete("k");
        assert_eq!(e.pending("k"), None);
    }
}
