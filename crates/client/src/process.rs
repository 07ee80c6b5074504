//! What every client-side binary does on start and stop: logs at the `-v` verbosity
//! upstream components take, and one cancellation token for SIGTERM or Ctrl-C.

use tokio_util::sync::CancellationToken;

/// Logs to stderr at klog's verbosity levels: `-v` 0–1 info, 2–4 debug, 5 and more
/// trace. `RUST_LOG`, when set, wins.
pub fn init_logging(verbosity: u8) {
    let level = match verbosity {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .init();
}

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
