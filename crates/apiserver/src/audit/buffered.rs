//! What the log and the webhook backends share (upstream `plugin/pkg/audit/buffered`
//! and `plugin/pkg/audit/truncate`, and the batch options of `server/options/audit.go`):
//! a bounded queue between the request path and the backend's task, the task that
//! takes batches from it, throttles them and cuts them down to size, and a [`Sink`]
//! that writes or sends each batch.
//!
//! Modes (`--audit-{log,webhook}-mode`), as upstream: `blocking` never drops an event:
//! a request whose event finds the queue full waits for room, so a slow backend slows
//! requests down; the task takes what is queued, at once, in batches of up to
//! [`BLOCKING_MAX_BATCH`]. `batch` never makes a request wait: when the buffer
//! (`-batch-buffer-size`) is full the event is dropped and counted, and the task makes
//! batches of up to `-batch-max-size` events, waiting up to `-batch-max-wait` for one
//! to fill, at most `-batch-throttle-qps` a second when `-batch-throttle-enable` is
//! set. `blocking-strict` is `blocking` with each event waiting until it is written
//! or sent, so that a request whose `RequestReceived` event could not be fails (as
//! upstream's unbuffered strict backend).
//!
//! With `-truncate-enabled`, an event over `-truncate-max-event-size` loses its request
//! and response objects (and is marked `audit.k8s.io/truncated`), one still over it is
//! dropped with an error, and a batch over `-truncate-max-batch-size` goes to the sink
//! as several.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrokube_component_base::ratelimit::TokenBucket;
use tokio::sync::mpsc;

use super::event::Event;

/// The most events a blocking-mode batch takes from the queue: enough that a burst is
/// written with one `write` or sent with one POST.
const BLOCKING_MAX_BATCH: usize = 512;

/// `--audit-log-mode`, `--audit-webhook-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditMode {
    Blocking,
    BlockingStrict,
    Batch,
}

impl AuditMode {
    /// The mode flag `flag` of a backend (`--audit-log-mode`, `--audit-webhook-mode`).
    pub fn parse_flag(flag: &str, s: &str) -> Result<AuditMode, String> {
        match s {
            "blocking" => Ok(AuditMode::Blocking),
            "blocking-strict" => Ok(AuditMode::BlockingStrict),
            "batch" => Ok(AuditMode::Batch),
            // Upstream's `validateBackendMode`.
            o => {
                let plugin = flag
                    .trim_start_matches("--audit-")
                    .trim_end_matches("-mode");
                Err(format!(
                    "invalid audit {plugin} mode {o}, allowed modes are \"batch,blocking,blocking-strict\""
                ))
            }
        }
    }
}

/// A backend's `--audit-<plugin>-mode` and `--audit-<plugin>-batch-*` (upstream
/// `AuditBatchOptions`).
#[derive(Clone, Debug, PartialEq)]
pub struct AuditBatchOptions {
    pub mode: AuditMode,
    /// `-batch-buffer-size`: the queue's capacity.
    pub buffer_size: usize,
    /// `-batch-max-size`: events in a batch, in batch mode.
    pub max_batch_size: usize,
    /// `-batch-max-wait`: how long a batch waits to fill, in batch mode.
    pub max_batch_wait: Duration,
    /// `-batch-throttle-*` (None: `-enable=false`), in batch mode.
    pub throttle: Option<Throttle>,
}

impl AuditBatchOptions {
    /// Upstream's defaults for the log backend: blocking; in batch mode one event per
    /// write and no throttle ("batching is not useful for the log-file backend").
    pub fn log_default() -> AuditBatchOptions {
        AuditBatchOptions {
            mode: AuditMode::Blocking,
            buffer_size: 10_000,
            max_batch_size: 1,
            max_batch_wait: Duration::ZERO,
            throttle: None,
        }
    }

    /// Upstream's defaults for the webhook backend.
    pub fn webhook_default() -> AuditBatchOptions {
        AuditBatchOptions {
            mode: AuditMode::Batch,
            buffer_size: 10_000,
            max_batch_size: 400,
            max_batch_wait: Duration::from_secs(30),
            throttle: Some(Throttle {
                qps: 10.0,
                burst: 15,
            }),
        }
    }

    /// Upstream `validateBackendBatchOptions` for `plugin` (`log`, `webhook`): the
    /// batch options are checked in batch mode only, where they are used.
    pub fn validate(&self, plugin: &str) -> Result<(), String> {
        if self.mode != AuditMode::Batch {
            return Ok(());
        }
        if self.buffer_size == 0 {
            return Err(format!(
                "invalid audit batch {plugin} buffer size 0, must be a positive number"
            ));
        }
        if self.max_batch_size == 0 {
            return Err(format!(
                "invalid audit batch {plugin} max batch size 0, must be a positive number"
            ));
        }
        if let Some(t) = self.throttle {
            if t.qps <= 0.0 || t.qps.is_nan() {
                return Err(format!(
                    "invalid audit batch {plugin} throttle QPS {}, must be a positive number",
                    t.qps
                ));
            }
            if t.burst == 0 {
                return Err(format!(
                    "invalid audit batch {plugin} throttle burst 0, must be a positive number"
                ));
            }
        }
        Ok(())
    }
}

/// `-batch-throttle-qps` and `-burst`: how many batches may go a second, and at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttle {
    pub qps: f64,
    pub burst: u32,
}

/// `-truncate-max-batch-size` and `-max-event-size`, in bytes.
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

impl Truncate {
    /// Upstream `AuditTruncateOptions.Validate` for `plugin`: checked whether or not
    /// truncation is enabled.
    pub fn validate(&self, plugin: &str) -> Result<(), String> {
        if self.max_event_size == 0 {
            return Err(format!(
                "invalid audit truncate {plugin} max event size 0, must be a positive number"
            ));
        }
        if self.max_batch_size < self.max_event_size {
            return Err(format!(
                "invalid audit truncate {plugin} max batch size {}, must be greater than max \
                 event size ({})",
                self.max_batch_size, self.max_event_size
            ));
        }
        Ok(())
    }
}

/// Where a backend's batches go: each call gets one batch's JSON lines (each with its
/// newline), and returns once they are written or sent (true) or given up on (false).
pub(crate) trait Sink: Send + 'static {
    fn deliver(&mut self, lines: Vec<Vec<u8>>) -> impl Future<Output = bool> + Send;
}

/// What a backend's queue carries: events, and at shutdown a request to write or
/// send at once everything queued before it.
// Events go by value: boxing them would cost an allocation per event to spare the
// flush, sent once per shutdown, the unused room.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Queued {
    /// In blocking-strict mode with where to say whether it was stored.
    Event(Event, Option<tokio::sync::oneshot::Sender<bool>>),
    /// Answered once what came before is written (or sent, or given up on).
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The request path's end of a backend: a bounded queue that the backend's task
/// empties, filled as the backend's mode says.
#[derive(Debug)]
pub(crate) struct Backend {
    tx: mpsc::Sender<Queued>,
    mode: AuditMode,
    dropped: Arc<AtomicU64>,
    /// The mode flag, for the message about dropped events.
    mode_flag: &'static str,
}

/// Starts the task that takes batches from the new backend's queue to `sink`.
pub(crate) fn start(
    batch: &AuditBatchOptions,
    truncate: Option<Truncate>,
    mode_flag: &'static str,
    sink: impl Sink,
) -> Backend {
    // tokio's channel holds at most `MAX_PERMITS` (usize::MAX >> 3); a larger
    // `--audit-*-batch-buffer-size` is as good as unbounded anyway.
    let (tx, rx) = mpsc::channel(
        batch
            .buffer_size
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
    );
    let batching = match batch.mode {
        AuditMode::Batch => Batching {
            max_batch: batch.max_batch_size.max(1),
            max_wait: batch.max_batch_wait,
            throttle: batch.throttle.map(|t| TokenBucket::new(t.qps, t.burst)),
            truncate,
        },
        AuditMode::Blocking | AuditMode::BlockingStrict => Batching {
            max_batch: BLOCKING_MAX_BATCH,
            max_wait: Duration::ZERO,
            throttle: None,
            truncate,
        },
    };
    tokio::spawn(run(rx, batching, sink));
    Backend {
        tx,
        mode: batch.mode,
        dropped: Arc::default(),
        mode_flag,
    }
}

impl Backend {
    /// Queues an event (see the module's modes). False: in blocking-strict mode, the
    /// event could not be written or sent.
    pub(crate) async fn emit(&self, event: Event) -> bool {
        match self.mode {
            AuditMode::Blocking => {
                let _ = self.tx.send(Queued::Event(event, None)).await;
                true
            }
            AuditMode::BlockingStrict => {
                let (stored, outcome) = tokio::sync::oneshot::channel();
                self.tx
                    .send(Queued::Event(event, Some(stored)))
                    .await
                    .is_ok()
                    && outcome.await.unwrap_or(false)
            }
            AuditMode::Batch => {
                self.emit_now(event);
                true
            }
        }
    }

    /// Queues an event from code that cannot wait (a response body's end): in blocking
    /// mode a full queue hands the event to a task that waits for room.
    pub(crate) fn emit_detached(&self, event: Event) {
        match self.mode {
            AuditMode::Batch => self.emit_now(event),
            AuditMode::Blocking | AuditMode::BlockingStrict => {
                if let Err(mpsc::error::TrySendError::Full(event)) =
                    self.tx.try_send(Queued::Event(event, None))
                {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(event).await;
                    });
                }
            }
        }
    }

    /// Waits until every event queued so far is written or sent (upstream's
    /// `Shutdown` of a buffered backend).
    pub(crate) async fn flush(&self) {
        let (done, flushed) = tokio::sync::oneshot::channel();
        if self.tx.send(Queued::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }

    fn emit_now(&self, event: Event) {
        if let Err(mpsc::error::TrySendError::Full(Queued::Event(event, _))) =
            self.tx.try_send(Queued::Event(event, None))
        {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Upstream logs each drop; once per thousand keeps a flood readable.
            if n % 1000 == 1 {
                tracing::error!(
                    audit_id = %event.facts.audit_id,
                    dropped = n,
                    flag = self.mode_flag,
                    "audit buffer full: event dropped (batch mode)"
                );
            }
        }
    }
}

/// How the task makes batches.
struct Batching {
    max_batch: usize,
    /// Zero: a batch is what is queued now.
    max_wait: Duration,
    throttle: Option<TokenBucket>,
    truncate: Option<Truncate>,
}

async fn run(mut rx: mpsc::Receiver<Queued>, batching: Batching, mut sink: impl Sink) {
    let (max_batch, max_wait) = (batching.max_batch, batching.max_wait);
    let mut open = true;
    while open {
        let Some(first) = rx.recv().await else { break };
        let mut batch = Vec::new();
        let mut waiting = Vec::new();
        let mut flush = None;
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + max_wait;
        // A batch ends when full, at its deadline, or at a flush request (answered
        // once the batch is delivered).
        loop {
            match next.take() {
                Some(Queued::Event(event, stored)) => {
                    batch.push(event);
                    waiting.extend(stored);
                }
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
        let mut delivered = true;
        for lines in event_lines(&batch, batching.truncate) {
            if let Some(bucket) = &batching.throttle {
                tokio::time::sleep(bucket.reserve()).await;
            }
            delivered &= sink.deliver(lines).await;
        }
        for stored in waiting {
            let _ = stored.send(delivered);
        }
        if let Some(done) = flush {
            let _ = done.send(());
        }
    }
}

/// The batch's events as JSON lines, in the batches to deliver: one, or with
/// `truncate`, its events cut down to size and as many batches as keep each under the
/// limit (upstream counts the events' sizes, not the list around them).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::samples::event;
    use crate::audit::policy::Level;

    #[test]
    fn truncation_cuts_events_down_and_splits_batches() {
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
    fn options_are_checked_as_upstream() {
        assert_eq!(
            AuditMode::parse_flag("--audit-log-mode", "batch"),
            Ok(AuditMode::Batch)
        );
        assert_eq!(
            AuditMode::parse_flag("--audit-log-mode", "blocking-strict"),
            Ok(AuditMode::BlockingStrict)
        );
        assert_eq!(
            AuditMode::parse_flag("--audit-webhook-mode", "async").unwrap_err(),
            "invalid audit webhook mode async, allowed modes are \"batch,blocking,blocking-strict\""
        );
        assert!(AuditBatchOptions::log_default().validate("log").is_ok());
        assert!(
            AuditBatchOptions::webhook_default()
                .validate("webhook")
                .is_ok()
        );
        // Unused in blocking mode, so not checked there.
        let blocking_zero = AuditBatchOptions {
            max_batch_size: 0,
            ..AuditBatchOptions::log_default()
        };
        assert!(blocking_zero.validate("log").is_ok());
        let batch_zero = AuditBatchOptions {
            mode: AuditMode::Batch,
            ..blocking_zero
        };
        assert_eq!(
            batch_zero.validate("log").unwrap_err(),
            "invalid audit batch log max batch size 0, must be a positive number"
        );
        let no_qps = AuditBatchOptions {
            throttle: Some(Throttle { qps: 0.0, burst: 1 }),
            ..AuditBatchOptions::webhook_default()
        };
        assert_eq!(
            no_qps.validate("webhook").unwrap_err(),
            "invalid audit batch webhook throttle QPS 0, must be a positive number"
        );
        let small_batches = Truncate {
            max_batch_size: 10,
            max_event_size: 100,
        };
        assert_eq!(
            small_batches.validate("log").unwrap_err(),
            "invalid audit truncate log max batch size 10, must be greater than max event size \
             (100)"
        );
        assert!(Truncate::default().validate("webhook").is_ok());
    }

    /// A sink that keeps what it is given.
    struct Kept(Arc<parking_lot::Mutex<Vec<Vec<Vec<u8>>>>>);

    impl Sink for Kept {
        async fn deliver(&mut self, lines: Vec<Vec<u8>>) -> bool {
            self.0.lock().push(lines);
            true
        }
    }

    /// A sink that fails every batch.
    struct Failing;

    impl Sink for Failing {
        async fn deliver(&mut self, _: Vec<Vec<u8>>) -> bool {
            false
        }
    }

    #[tokio::test]
    async fn only_blocking_strict_mode_reports_a_failed_delivery() {
        for (mode, reported) in [
            (AuditMode::BlockingStrict, false),
            (AuditMode::Blocking, true),
            (AuditMode::Batch, true),
        ] {
            let options = AuditBatchOptions {
                mode,
                ..AuditBatchOptions::log_default()
            };
            let backend = start(&options, None, "--audit-log-mode", Failing);
            assert_eq!(
                backend.emit(event(Level::Metadata)).await,
                reported,
                "{mode:?}"
            );
        }
        let options = AuditBatchOptions {
            mode: AuditMode::BlockingStrict,
            ..AuditBatchOptions::log_default()
        };
        let kept = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let backend = start(&options, None, "--audit-log-mode", Kept(kept.clone()));
        assert!(backend.emit(event(Level::Metadata)).await);
        // Delivered before the answer.
        assert_eq!(kept.lock().len(), 1);
    }

    /// Waits (at most 5 s) until the sink holds batches of `sizes`.
    async fn wait_for_batches(kept: &parking_lot::Mutex<Vec<Vec<Vec<u8>>>>, sizes: &[usize]) {
        for _ in 0..100 {
            if kept.lock().iter().map(Vec::len).eq(sizes.iter().copied()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let held: Vec<_> = kept.lock().iter().map(Vec::len).collect();
        panic!("batches of {held:?}, not {sizes:?}");
    }

    #[tokio::test]
    async fn the_largest_buffer_size_is_unbounded() {
        let kept = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let options = AuditBatchOptions {
            mode: AuditMode::Batch,
            buffer_size: usize::MAX,
            max_batch_size: 1,
            max_batch_wait: Duration::from_millis(10),
            throttle: None,
        };
        let backend = start(&options, None, "--audit-log-mode", Kept(kept.clone()));
        assert!(backend.emit(event(Level::Metadata)).await);
        wait_for_batches(&kept, &[1]).await;
    }

    #[tokio::test]
    async fn batch_mode_fills_batches_up_to_their_size_and_wait() {
        let kept = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let options = AuditBatchOptions {
            mode: AuditMode::Batch,
            buffer_size: 100,
            max_batch_size: 3,
            max_batch_wait: Duration::from_secs(60),
            throttle: None,
        };
        let backend = start(&options, None, "--audit-log-mode", Kept(kept.clone()));
        for _ in 0..4 {
            backend.emit(event(Level::Metadata)).await;
        }
        // Three fill the first batch at once; the fourth waits for more.
        wait_for_batches(&kept, &[3]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        wait_for_batches(&kept, &[3]).await;
        // A flush delivers what is queued without waiting.
        backend.flush().await;
        wait_for_batches(&kept, &[3, 1]).await;

        // A batch that does not fill goes at its deadline.
        let kept = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let options = AuditBatchOptions {
            max_batch_wait: Duration::from_millis(100),
            ..options
        };
        let backend = start(&options, None, "--audit-log-mode", Kept(kept.clone()));
        backend.emit(event(Level::Metadata)).await;
        wait_for_batches(&kept, &[1]).await;
    }
}
