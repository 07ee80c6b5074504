//! The webhook backend (upstream `plugin/pkg/audit/webhook`): events are POSTed as an
//! `audit.k8s.io/v1` EventList to the service a kubeconfig names
//! (`--audit-webhook-config-file`), in the batches [`buffered`](super::buffered) makes
//! (`--audit-webhook-mode` batch by default: up to 400 events, waiting up to 30s, 10
//! batches a second, bursts of 15). A failed batch is retried as upstream retries
//! webhook calls, from `--audit-webhook-initial-backoff` (10s), and then dropped with
//! an error in the log. At shutdown what is queued is sent at once.
//!
//! Left out: sending each event on its own in the blocking modes (upstream's
//! unbuffered backend; here they send what is queued at once).

use std::time::Duration;

use super::buffered::{self, AuditBatchOptions, Backend, Sink, Truncate};
use crate::webhook_client::KubeconfigWebhook;

/// How long one batch's POST may take (upstream's webhook request timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `--audit-webhook-*`.
#[derive(Clone, Debug)]
pub struct AuditWebhookOptions {
    /// `--audit-webhook-config-file`: the kubeconfig naming the service. None: no
    /// webhook backend.
    pub config_file: Option<std::path::PathBuf>,
    /// `--audit-webhook-initial-backoff` (default 10s).
    pub initial_backoff: Duration,
    /// `--audit-webhook-mode` and `--audit-webhook-batch-*`.
    pub batch: AuditBatchOptions,
    /// `--audit-webhook-truncate-*` (None: `-enabled=false`, the default).
    pub truncate: Option<Truncate>,
}

impl Default for AuditWebhookOptions {
    fn default() -> Self {
        AuditWebhookOptions {
            config_file: None,
            initial_backoff: Duration::from_secs(10),
            batch: AuditBatchOptions::webhook_default(),
            truncate: None,
        }
    }
}

/// Starts the sending task for `webhook`.
pub(crate) fn start(opts: &AuditWebhookOptions, webhook: KubeconfigWebhook) -> Backend {
    buffered::start(
        &opts.batch,
        opts.truncate,
        "--audit-webhook-mode",
        Posting {
            webhook,
            initial_backoff: opts.initial_backoff,
        },
    )
}

/// Each batch POSTed as an EventList, retried.
struct Posting {
    webhook: KubeconfigWebhook,
    initial_backoff: Duration,
}

impl Sink for Posting {
    async fn deliver(&mut self, lines: Vec<Vec<u8>>) -> bool {
        let events = lines.len();
        match self
            .webhook
            .post_json_retrying(CALL_TIMEOUT, self.initial_backoff, event_list(&lines))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(error = %e, events, "sending audit events to the webhook failed");
                false
            }
        }
    }
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
