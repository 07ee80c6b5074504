//! Returning freed heap to the OS, for long-running components.
//!
//! glibc's malloc gives memory back to the kernel on `free` only from the top of the
//! main heap (past `M_TRIM_THRESHOLD`). Pages in the middle of a heap, or in the arenas
//! of other threads, stay resident after everything on them was freed: a kubelet that
//! started and removed a hundred pods, or an apiserver after its start-up work, keeps
//! megabytes it no longer uses. `malloc_trim(0)` walks every arena and hands wholly free
//! pages back (`MADV_DONTNEED`), so the resident size follows what is live.
//!
//! * [`trim`]: one pass, now.
//! * [`HeapTrimmer`]: a pass every period, and one shortly after its owner reports a
//!   burst of frees ([`HeapTrimmer::request`], e.g. after a pod's cleanup), waiting until
//!   the burst has settled so a churn of pods costs one pass, not one per pod.
//!
//! Layer: a leaf utility for the binaries and components (kube-apiserver, kubelet). It
//! depends only on libc and tokio and must not depend on any other ferrokube crate. On
//! targets other than Linux with glibc it does nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Returns wholly free heap pages of every malloc arena to the OS; true when glibc
/// released something.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointers and touches no memory of ours: it locks each
    // glibc arena in turn and returns wholly free pages to the OS, which glibc documents
    // as safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Returns wholly free heap pages to the OS: nothing to do without glibc's malloc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

/// Trims the heap every `period`, and `settle` after the last of a burst of
/// [`HeapTrimmer::request`]s (at most `period` after the first of them).
#[derive(Debug)]
pub struct HeapTrimmer {
    period: Duration,
    settle: Duration,
    requested: Notify,
    trims: AtomicU64,
}

impl HeapTrimmer {
    pub fn new(period: Duration, settle: Duration) -> Self {
        HeapTrimmer {
            period,
            settle,
            requested: Notify::new(),
            trims: AtomicU64::new(0),
        }
    }

    /// Asks for a trim once the current burst of frees is over. Never blocks; a request
    /// made before [`HeapTrimmer::run`] starts is kept.
    pub fn request(&self) {
        self.requested.notify_one();
    }

    /// How many trims have run.
    pub fn trims(&self) -> u64 {
        self.trims.load(Ordering::Relaxed)
    }

    /// Trims until the future is dropped (select it against a cancellation, or spawn it).
    pub async fn run(&self) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.period) => {}
                _ = self.requested.notified() => self.wait_for_quiet().await,
            }
            trim();
            self.trims.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until no request came for `settle`, but not past `period` from now: a
    /// steady stream of requests still gets a trim every period.
    async fn wait_for_quiet(&self) {
        let latest = Instant::now() + self.period;
        loop {
            let until = (Instant::now() + self.settle).min(latest);
            let again = tokio::time::timeout_at(until, self.requested.notified()).await;
            if again.is_err() || Instant::now() >= latest {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Taken by every test here: a trimmer test's `malloc_trim` trims every arena, so run
    /// beside `trim_returns_pages_that_free_could_not` it would trim that test's heap
    /// between its `free` and its measurement.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Polls `f` every 5 ms, at most 1,000 times (5 s).
    async fn eventually(f: impl Fn() -> bool) -> bool {
        for _ in 0..1000 {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf reads a constant of the system; no memory of ours is involved.
        #[allow(unsafe_code)]
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        pages * page
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_returns_pages_that_free_could_not() {
        let _serial = SERIAL.blocking_lock();
        // 16 MiB in 1 KiB blocks (below the mmap threshold, so on the heap), each touched,
        // then one more block above them so `free` cannot shrink the heap from its top.
        let blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|i| vec![i as u8; 1024]).collect();
        let pin = vec![1u8; 1024];
        let before_free = resident_bytes();
        drop(blocks);
        let after_free = resident_bytes();
        assert!(trim(), "malloc_trim released nothing");
        let after_trim = resident_bytes();
        assert!(
            after_free.saturating_sub(after_trim) >= 8 << 20,
            "resident {before_free} before free, {after_free} after free, {after_trim} after trim"
        );
        assert_eq!(pin[0], 1);
    }

    #[tokio::test]
    async fn a_burst_of_requests_is_one_trim() {
        let _serial = SERIAL.lock().await;
        let trimmer = Arc::new(HeapTrimmer::new(
            Duration::from_secs(3600),
            Duration::from_millis(10),
        ));
        for _ in 0..5 {
            trimmer.request();
        }
        let running = tokio::spawn({
            let t = trimmer.clone();
            async move { t.run().await }
        });
        assert!(eventually(|| trimmer.trims() >= 1).await);
        // Nothing is pending and the period is an hour: no second trim comes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(trimmer.trims(), 1);
        trimmer.request();
        assert!(eventually(|| trimmer.trims() >= 2).await);
        running.abort();
    }

    #[tokio::test]
    async fn trims_every_period_without_requests() {
        let _serial = SERIAL.lock().await;
        let trimmer = Arc::new(HeapTrimmer::new(
            Duration::from_millis(10),
            Duration::from_secs(3600),
        ));
        let running = tokio::spawn({
            let t = trimmer.clone();
            async move { t.run().await }
        });
        assert!(eventually(|| trimmer.trims() >= 3).await);
        running.abort();
    }

    #[tokio::test]
    async fn steady_requests_still_trim_within_a_period() {
        let _serial = SERIAL.lock().await;
        // A request every 2 ms never leaves 1 s of quiet; the period (50 ms) bounds the wait.
        let trimmer = Arc::new(HeapTrimmer::new(
            Duration::from_millis(50),
            Duration::from_secs(1),
        ));
        let running = tokio::spawn({
            let t = trimmer.clone();
            async move { t.run().await }
        });
        let mut trimmed = false;
        for _ in 0..2500 {
            trimmer.request();
            if trimmer.trims() >= 2 {
                trimmed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(trimmed);
        running.abort();
    }
}
