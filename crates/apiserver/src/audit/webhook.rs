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
//! Left out: the batch throttle (`--audit-webhook-batch-throttle-*`), truncation
//! (`--audit-webhook-truncate-*`), `blocking-strict`, and sending each event on its
//! own in `blocking` mode (upstream's unbuffered backend; here blocking mode sends what
//! is queued at once).

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
        opts.max_batch_size.max(1),
        wait,
        opts.initial_backoff,
    ));
    backend
}

async fn send_loop(
    mut rx: mpsc::Receiver<Queued>,
    webhook: KubeconfigWebhook,
    max_batch: usize,
    max_wait: Duration,
    initial_backoff: Duration,
) {
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
        let events = batch.len();
        if events > 0
            && let Err(e) = webhook
                .post_json_retrying(CALL_TIMEOUT, initial_backoff, event_list(&batch))
                .await
        {
            tracing::error!(error = %e, events, "sending audit events to the webhook failed");
        }
        if let Some(done) = flush {
            let _ = done.send(());
        }
    }
}

/// The batch as an `audit.k8s.io/v1` EventList.
fn event_list(batch: &[Event]) -> Vec<u8> {
    let mut body =
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#.to_vec();
    for (i, event) in batch.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let line = event.to_json_line();
        body.extend_from_slice(line.trim_ascii_end());
    }
    body.extend_from_slice(b"]}");
    body
}
