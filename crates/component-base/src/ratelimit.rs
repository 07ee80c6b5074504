//! A token bucket with the semantics of Go's `golang.org/x/time/rate.Limiter` as
//! client-go's `flowcontrol.NewTokenBucketRateLimiter` uses it: `qps` tokens a second,
//! at most `burst` stored, the bucket starts full, and a reservation may drive the
//! balance negative (the caller then waits). One bucket for both sides, as upstream's
//! clients (`--kube-api-qps`, event spam filtering, work queues) and the apiserver's
//! audit backends (`--audit-*-batch-throttle-qps`) share client-go's.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A token bucket limiter; shared by reference (wrap in `Arc` to share across tasks).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `qps` tokens a second, `burst` at most (at least 1). A `qps` that is not
    /// positive means no limit.
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        TokenBucket::new_at(qps, burst, Instant::now())
    }

    /// [`new`](Self::new), full at `now`, a clock read by the caller.
    pub fn new_at(qps: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                last: now,
            }),
        }
    }

    /// Whether this bucket limits at all.
    pub fn is_unlimited(&self) -> bool {
        self.qps <= 0.0 || !self.qps.is_finite()
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        b.last = now;
    }

    /// Takes one token now and returns how long the caller must wait before acting
    /// on it (zero when a token was available).
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    /// [`reserve`](Self::reserve) with the clock read by the caller.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        let mut b = self.state.lock();
        self.refill(&mut b, now);
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            // A tiny qps (`--kube-api-qps=1e-30`) makes a wait too long for a Duration.
            Duration::try_from_secs_f64(-b.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }

    /// Takes a token only if one is available now.
    pub fn try_acquire(&self) -> bool {
        self.try_acquire_at(Instant::now())
    }

    /// [`try_acquire`](Self::try_acquire) with the clock read by the caller.
    pub fn try_acquire_at(&self, now: Instant) -> bool {
        if self.is_unlimited() {
            return true;
        }
        let mut b = self.state.lock();
        self.refill(&mut b, now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_spaced_by_qps() {
        let b = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        let w1 = b.reserve();
        let w2 = b.reserve();
        assert!(w1 > Duration::from_millis(90) && w1 <= Duration::from_millis(100));
        assert!(w2 > Duration::from_millis(190) && w2 <= Duration::from_millis(200));
        assert!(!b.try_acquire());
    }

    #[test]
    fn a_burst_then_its_rate_and_full_again_a_second_later() {
        let b = TokenBucket::new(10.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        // The fourth and fifth wait 100 and 200 ms for their tokens.
        assert_eq!(b.reserve_at(t0).as_millis(), 100);
        assert_eq!(b.reserve_at(t0).as_millis(), 200);
        // A second later the debt is paid and the bucket full again (three, not ten).
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t1), Duration::ZERO);
        }
        assert!(b.reserve_at(t1) > Duration::ZERO);
    }

    #[test]
    fn a_tiny_qps_waits_for_ever_without_overflowing() {
        // f64, not f32: an audit backend's 1e-300 must not round to 0 (no limit).
        for qps in [1e-30, 1e-300] {
            let b = TokenBucket::new(qps, 1);
            assert!(!b.is_unlimited());
            assert_eq!(b.reserve(), Duration::ZERO);
            assert_eq!(b.reserve(), Duration::MAX);
        }
    }

    #[test]
    fn unlimited() {
        let b = TokenBucket::new(0.0, 1);
        assert!(b.is_unlimited());
        for _ in 0..1000 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        let b = TokenBucket::new(-1.0, 1);
        assert!(b.try_acquire() && b.try_acquire());
    }

    #[tokio::test]
    async fn refills_over_time() {
        let b = TokenBucket::new(100.0, 1);
        assert!(b.try_acquire());
        assert!(!b.try_acquire());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(b.try_acquire());
    }
}
