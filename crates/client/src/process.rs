//! What every client-side binary does to stop: one cancellation token for SIGTERM or
//! Ctrl-C. (Logging is component-base's `ComponentFlags`.)

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or Ctrl-C, with `what` logged (e.g.
/// "shutting down"). Needs a running tokio runtime.
pub fn cancel_on_termination(what: &'static str) -> CancellationToken {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: {what}"),
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: {what}"),
            },
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
                tracing::info!("interrupted: {what}");
            }
        }
        stop.cancel();
    });
    cancel
}
