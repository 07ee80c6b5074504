//! Container restart back-off (upstream `client-go/util/flowcontrol.Backoff` as the kubelet
//! uses it): 10 s, doubling per restart up to 5 min; an entry whose last restart is more
//! than twice the maximum (10 min) older than the container's latest exit starts over.
//! Time is passed in; nothing here reads a clock.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The kubelet's defaults.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: SystemTime,
}

/// Per-key exponential back-off.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF)
    }
}

fn has_expired(event: SystemTime, last_update: SystemTime, max: Duration) -> bool {
    event.duration_since(last_update).is_ok_and(|d| d > max * 2)
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// The current delay for `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.backoff)
    }

    /// Whether a restart of `key`, whose container exited at `event`, must still wait at
    /// `now`; `Some(delay)` then (the delay the message reports).
    pub fn in_backoff_since(
        &self,
        key: &str,
        event: SystemTime,
        now: SystemTime,
    ) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if has_expired(event, e.last_update, self.max) {
            return None;
        }
        let since = now.duration_since(event).unwrap_or_default();
        (since < e.backoff).then_some(e.backoff)
    }

    /// Whether `key` must still wait at `now`, counting from its last [`Backoff::next`]
    /// (upstream `IsInBackOffSinceUpdate`, what image pulls use); `Some(delay)` then.
    pub fn in_backoff_since_update(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if has_expired(now, e.last_update, self.max) {
            return None;
        }
        let since = now.duration_since(e.last_update).unwrap_or_default();
        (since < e.backoff).then_some(e.backoff)
    }

    /// Records a restart of `key` at `now` after an exit at `event`: the first (or first after
    /// expiry) gets the initial delay, later ones double it up to the maximum.
    pub fn next(&mut self, key: &str, event: SystemTime, now: SystemTime) {
        let (initial, max) = (self.initial, self.max);
        let entry = self.entries.entry(key.to_owned()).or_insert(Entry {
            backoff: Duration::ZERO,
            last_update: now,
        });
        if entry.backoff.is_zero() || has_expired(event, entry.last_update, max) {
            entry.backoff = initial;
        } else {
            entry.backoff = (entry.backoff * 2).min(max);
        }
        entry.last_update = now;
    }

    /// Drops entries not updated for twice the maximum (upstream's periodic GC).
    pub fn gc(&mut self, now: SystemTime) {
        let max = self.max;
        self.entries
            .retain(|_, e| !has_expired(now, e.last_update, max));
    }

    /// Forgets `key` (its pod is gone).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forgets every key starting with `prefix`.
    pub fn reset_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

/// The key upstream uses: `<pod name>_<namespace>_<pod uid>_<container name>_<spec hash>`.
pub fn backoff_key(
    pod_name: &str,
    namespace: &str,
    uid: &str,
    container: &str,
    hash: &str,
) -> String {
    format!("{pod_name}_{namespace}_{uid}_{container}_{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn doubles_to_the_maximum() {
        let mut b = Backoff::default();
        let mut delays = vec![];
        for now in 0..8 {
            b.next("k", t(now), t(now));
            delays.push(b.get("k").unwrap().as_secs());
        }
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn in_backoff_until_the_delay_has_passed() {
        let mut b = Backoff::default();
        assert_eq!(
            b.in_backoff_since("k", t(0), t(0)),
            None,
            "unknown key is not in back-off"
        );
        b.next("k", t(0), t(0));
        assert_eq!(
            b.in_backoff_since("k", t(0), t(5)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(b.in_backoff_since("k", t(0), t(10)), None);
        // A second exit at t=12 after the restart: 20 s from that exit.
        b.next("k", t(12), t(12));
        assert!(b.in_backoff_since("k", t(12), t(31)).is_some());
        assert!(b.in_backoff_since("k", t(12), t(32)).is_none());
        assert!(b.in_backoff_since("other", t(12), t(13)).is_none());
    }

    #[test]
    fn image_pulls_wait_from_the_last_failure() {
        let mut b = Backoff::default();
        assert_eq!(b.in_backoff_since_update("img", t(0)), None);
        b.next("img", t(0), t(0));
        assert_eq!(
            b.in_backoff_since_update("img", t(9)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(b.in_backoff_since_update("img", t(10)), None);
        b.next("img", t(11), t(11));
        assert!(b.in_backoff_since_update("img", t(30)).is_some());
        assert!(b.in_backoff_since_update("img", t(31)).is_none());
        // Untouched for more than twice the maximum: forgotten.
        assert_eq!(b.in_backoff_since_update("img", t(11 + 601)), None);
    }

    #[test]
    fn resets_after_ten_minutes_of_running() {
        let mut b = Backoff::default();
        for i in 0..5 {
            b.next("k", t(i), t(i));
        }
        assert_eq!(b.get("k"), Some(Duration::from_secs(160)));
        // The container ran for 10 min + 1 s after its last restart, then exited.
        let exit = t(4 + 601);
        assert_eq!(b.in_backoff_since("k", exit, exit), None);
        b.next("k", exit, exit);
        assert_eq!(b.get("k"), Some(Duration::from_secs(10)));
        // Exactly 10 min is not yet expired.
        let mut b = Backoff::default();
        b.next("k", t(0), t(0));
        b.next("k", t(600), t(600));
        assert_eq!(b.get("k"), Some(Duration::from_secs(20)));
    }

    #[test]
    fn gc_and_reset() {
        let mut b = Backoff::default();
        b.next("pod_ns_uid_a_1", t(0), t(0));
        b.next("pod_ns_uid_b_1", t(500), t(500));
        b.next("other_ns_uid2_a_1", t(500), t(500));
        b.gc(t(700));
        assert!(b.get("pod_ns_uid_a_1").is_none());
        assert!(b.get("pod_ns_uid_b_1").is_some());
        b.reset_prefix("pod_ns_uid_");
        assert!(b.get("pod_ns_uid_b_1").is_none());
        assert!(b.get("other_ns_uid2_a_1").is_some());
        b.reset("other_ns_uid2_a_1");
        assert!(b.get("other_ns_uid2_a_1").is_none());
        assert_eq!(backoff_key("p", "ns", "u", "c", "h"), "p_ns_u_c_h");
    }
}
