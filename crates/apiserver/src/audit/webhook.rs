//! The webhook backend (upstream `plugin/pkg/audit/webhook` behind
//! `plugin/pkg/audit/buffered`): events are POSTed as an `audit.k8s.io/v1` EventList
//! to the service a kubeconfig names (`--audit-webhook-config-file`).
//!
//! A task takes events from the backend's queue and sends them in batches of up to
//! `--audit-webhook-batch-max-size` (400), waiting up to
//! `--audit-webhook-batch-max-wait` (30s) for a batch to fill in `batch` mode (the
//! default; a full buffer drops events) and not at all in `blocking` mode (requests
//! wait for room in the buffer; nothing is dropped). A failed batch is retried as
//! upstream retries webhook calls, from `--audit-webhook-initial-backoff` (10s), and
//! then dropped with an error in the log. At shutdown what is queued is sent at once
//! ([`Backend::flush`]).
//!
//! As upstream, batches are throttled (`--audit-webhook-batch-throttle-*`: 10 a second,
//! bursts of 15, on by default), and with `--audit-webhook-truncate-enabled` an event
//! over `--audit-webhook-truncate-max-event-size` (100 KiB) loses its request and
//! response objects (and is marked `audit.k8s.io/truncated`), one still over it is
//! dropped with an error, and a batch over `--audit-webhook-truncate-max-batch-size`
//! (10 MiB) is sent as several.
//!
//! Left out: `blocking-strict`, and sending each event on its own in `blocking` mode
//! (upstream's unbuffered backend; here blocking mode sends what is queued at once).

use std::time::Duration;

use tokio::sync::mpsc;

use super::event::Event;
use super::log::{AuditLogMode, Backend, Queued};
use crate::webhook_client::KubeconfigWebhook;

/// How long one batch's POST may take (upstream's webhook request timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `--audit-webhook-*`.
#[derive(Clone, Debug)]
pub struct AuditWebhookOptions {
    /// `--audit-webhook-config-file`: the kubeconfig naming the service. None: no
    /// webhook backend.
    pub config_file: Option<std::path::PathBuf>,
    /// `--audit-webhook-mode` (default batch).
    pub mode: AuditLogMode,
    /// `--audit-webhook-batch-buffer-size` (default 10000).
    pub buffer_size: usize,
    /// `--audit-webhook-batch-max-size` (default 400).
    pub max_batch_size: usize,
    /// `--audit-webhook-batch-max-wait` (default 30s).
    pub max_batch_wait: Duration,
    /// `--audit-webhook-initial-backoff` (default 10s).
    pub initial_backoff: Duration,
    /// `--audit-webhook-batch-throttle-*` (None: `-enable=false`).
    pub throttle: Option<Throttle>,
    /// `--audit-webhook-truncate-*` (None: `-enabled=false`, the default).
    pub truncate: Option<Truncate>,
}

/// `--audit-webhook-batch-throttle-qps` and `-burst`: how many batches may be sent a
/// second, and at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttle {
    pub qps: f64,
    pub burst: u32,
}

impl Default for Throttle {
    /// Upstream's defaults for the webhook backend.
    fn default() -> Self {
        Throttle {
            qps: 10.0,
            burst: 15,
        }
    }
}

/// `--audit-webhook-truncate-max-batch-size` and `-max-event-size`, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncate {
    pub max_batch_size: usize,
    pub max_event_size: usize,
}

impl Default for Truncate {
    /// Upstream's defaults.
    fn default() -> Self {
        Truncate {
            max_batch_size: 10 * 1024 * 1024,
            max_event_size: 100 * 1024,
        }
    }
}

impl Default for AuditWebhookOptions {
    fn default() -> Self {
        AuditWebhookOptions {
            config_file: None,
            mode: AuditLogMode::Batch,
            buffer_size: 10_000,
            max_batch_size: 400,
            max_batch_wait: Duration::from_secs(30),
            initial_backoff: Duration::from_secs(10),
            throttle: Some(Throttle::default()),
            truncate: None,
        }
    }
}

/// Starts the sending task for `webhook`.
pub(crate) fn start(opts: &AuditWebhookOptions, webhook: KubeconfigWebhook) -> Backend {
    let (backend, rx) = Backend::new(opts.buffer_size, opts.mode, "--audit-webhook-mode");
    let wait = match opts.mode {
        AuditLogMode::Batch => opts.max_batch_wait,
        AuditLogMode::Blocking => Duration::ZERO,
    };
    tokio::spawn(send_loop(
        rx,
        webhook,
        Sending {
            max_batch: opts.max_batch_size.max(1),
            max_wait: wait,
            initial_backoff: opts.initial_backoff,
            throttle: opts.throttle.map(TokenBucket::new),
            truncate: opts.truncate,
        },
    ));
    backend
}

/// How the sending task batches and sends.
struct Sending {
    max_batch: usize,
    max_wait: Duration,
    initial_backoff: Duration,
    throttle: Option<TokenBucket>,
    truncate: Option<Truncate>,
}

async fn send_loop(
    mut rx: mpsc::Receiver<Queued>,
    webhook: KubeconfigWebhook,
    mut sending: Sending,
) {
    let (max_batch, max_wait) = (sending.max_batch, sending.max_wait);
    let mut open = true;
    while open {
        let Some(first) = rx.recv().await else { break };
        let mut batch = Vec::new();
        let mut flush = None;
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + max_wait;
        // A batch ends when full, at its deadline, or at a flush request (answered
        // once the batch is sent).
        loop {
            match next.take() {
                Some(Queued::Event(event)) => batch.push(event),
                Some(Queued::Flush(done)) => {
                    flush = Some(done);
                    break;
                }
                None => break,
            }
            if batch.len() >= max_batch {
                break;
            }
            next = if max_wait.is_zero() {
                rx.try_recv().ok()
            } else {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(event)) => Some(event),
                    Ok(None) => {
                        open = false;
                        None
                    }
                    Err(_) => None,
                }
            };
        }
        for lines in event_lines(&batch, sending.truncate) {
            if let Some(bucket) = &mut sending.throttle {
                tokio::time::sleep(bucket.take(tokio::time::Instant::now())).await;
            }
            let events = lines.len();
            if let Err(e) = webhook
                .post_json_retrying(CALL_TIMEOUT, sending.initial_backoff, event_list(&lines))
                .await
            {
                tracing::error!(error = %e, events, "sending audit events to the webhook failed");
            }
        }
        if let Some(done) = flush {
            let _ = done.send(());
        }
    }
}

/// The batch's events as JSON, in the batches to send: one, or with `truncate`, its
/// events cut down to size and as many batches as keep each under the limit (upstream
/// counts the events' sizes, not the list around them).
fn event_lines(batch: &[Event], truncate: Option<Truncate>) -> Vec<Vec<Vec<u8>>> {
    let Some(limits) = truncate else {
        let lines: Vec<_> = batch.iter().map(Event::to_json_line).collect();
        return if lines.is_empty() {
            vec![]
        } else {
            vec![lines]
        };
    };
    let mut batches = Vec::new();
    let (mut current, mut current_size) = (Vec::new(), 0);
    for event in batch {
        let mut line = event.to_json_line();
        if line.len() > limits.max_event_size {
            line = event.to_truncated_json_line();
        }
        if line.len() > limits.max_event_size {
            tracing::error!(
                audit_id = %event.facts.audit_id,
                size = line.len(),
                max = limits.max_event_size,
                "audit event is too large even after truncating; dropped"
            );
            continue;
        }
        if !current.is_empty() && current_size + line.len() > limits.max_batch_size {
            batches.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current_size += line.len();
        current.push(line);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// The events as an `audit.k8s.io/v1` EventList.
fn event_list(lines: &[Vec<u8>]) -> Vec<u8> {
    let mut body =
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#.to_vec();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(line.trim_ascii_end());
    }
    body.extend_from_slice(b"]}");
    body
}

/// A token bucket (client-go's `NewTokenBucketRateLimiter`): `burst` batches at once,
/// then `qps` a second.
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<tokio::time::Instant>,
}

impl TokenBucket {
    fn new(throttle: Throttle) -> TokenBucket {
        let burst = f64::from(throttle.burst.max(1));
        TokenBucket {
            qps: throttle.qps,
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Takes a token at `now`: how long to wait before using it.
    fn take(&mut self, now: tokio::time::Instant) -> Duration {
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.last = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 || self.qps <= 0.0 {
            return Duration::ZERO;
        }
        // In debt: the wait until the token is earned.
        Duration::from_secs_f64(-self.tokens / self.qps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_cuts_events_down_and_splits_batches() {
        use crate::audit::event::samples::event;
        use crate::audit::policy::Level;
        let full = event(Level::RequestResponse);
        let full_size = full.to_json_line().len();
        let truncated_size = full.to_truncated_json_line().len();
        assert!(truncated_size < full_size);
        let batch = vec![full.clone(), full.clone(), full.clone()];

        // Off: one batch, events whole.
        let sent = event_lines(&batch, None);
        assert_eq!(sent.len(), 1);
        assert!(sent[0].iter().all(|l| l.len() == full_size));
        assert!(event_lines(&[], None).is_empty());

        // Events over the limit lose their objects; two fit in a batch.
        let sent = event_lines(
            &batch,
            Some(Truncate {
                max_event_size: full_size - 1,
                max_batch_size: 2 * truncated_size,
            }),
        );
        assert_eq!(
            sent.iter().map(Vec::len).collect::<Vec<_>>(),
            [2, 1],
            "{sent:?}"
        );
        let first: serde_json::Value = serde_json::from_slice(&sent[0][0]).unwrap();
        assert_eq!(first["annotations"]["audit.k8s.io/truncated"], "true");
        assert!(first.get("requestObject").is_none());

        // Too large even without them: dropped.
        let sent = event_lines(
            &batch,
            Some(Truncate {
                max_event_size: truncated_size - 1,
                max_batch_size: usize::MAX,
            }),
        );
        assert!(sent.is_empty());
        // Small enough: whole, one batch.
        let sent = event_lines(&batch, Some(Truncate::default()));
        assert_eq!(sent.len(), 1);
        assert!(sent[0].iter().all(|l| l.len() == full_size));
    }

    #[test]
    fn the_bucket_gives_a_burst_then_its_rate() {
        let mut bucket = TokenBucket::new(Throttle {
            qps: 10.0,
            burst: 3,
        });
        let t0 = tokio::time::Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.take(t0), Duration::ZERO);
        }
        // The fourth and fifth wait 100 and 200 ms for their tokens.
        assert_eq!(bucket.take(t0).as_millis(), 100);
        assert_eq!(bucket.take(t0).as_millis(), 200);
        // A second later the bucket is full again (three, not ten).
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(bucket.take(t1), Duration::ZERO);
        }
        assert!(bucket.take(t1) > Duration::ZERO);
    }
}
