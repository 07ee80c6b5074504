//! The log backend (upstream `plugin/pkg/audit/log` over lumberjack): events go from
//! the request path through a bounded channel to one writer thread, which turns them
//! into JSON lines and writes each batch with one `write` call, rotating the file as
//! lumberjack does (`--audit-log-maxsize` MiB, `--audit-log-maxbackup` files kept,
//! `--audit-log-maxage` days kept; backups named `<name>-<UTC time>.<ext>` beside it).
//!
//! Modes (`--audit-log-mode`), as upstream: `blocking` (the default for the log
//! backend) never drops an event: a request whose event finds the channel full waits
//! for room, so a slow disk slows requests down; `batch` never makes a request wait:
//! when the buffer (`--audit-log-batch-buffer-size`, default 10000) is full the event
//! is dropped and counted, as upstream's buffered backend does. `blocking-strict`
//! (fail the request when its event cannot be written) is refused.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use super::event::Event;

/// Events written in one `write` at most.
const MAX_BATCH: usize = 512;

/// `--audit-log-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditLogMode {
    Blocking,
    Batch,
}

impl AuditLogMode {
    /// `--audit-log-mode`.
    pub fn parse(s: &str) -> Result<AuditLogMode, String> {
        AuditLogMode::parse_flag("--audit-log-mode", s)
    }

    /// The mode flag `flag` of a backend (`--audit-log-mode`, `--audit-webhook-mode`).
    pub fn parse_flag(flag: &str, s: &str) -> Result<AuditLogMode, String> {
        match s {
            "blocking" => Ok(AuditLogMode::Blocking),
            "batch" => Ok(AuditLogMode::Batch),
            "blocking-strict" => Err(format!(
                "{flag}: \"blocking-strict\" is not supported; use \"blocking\" (no event is \
                 lost; requests wait for the backend) or \"batch\""
            )),
            o => Err(format!(
                "{flag}: invalid value {o:?}: supported values: \"batch\", \"blocking\""
            )),
        }
    }
}

/// Where and how the log is written (upstream `AuditLogOptions`).
#[derive(Clone, Debug)]
pub struct AuditLogOptions {
    /// `--audit-log-path`; `-` is standard output. None: no log backend.
    pub path: Option<PathBuf>,
    /// `--audit-log-maxage`: days a backup is kept (0: no limit).
    pub max_age_days: u64,
    /// `--audit-log-maxbackup`: backups kept (0: no limit).
    pub max_backups: usize,
    /// `--audit-log-maxsize`: MiB before rotation (0: lumberjack's 100).
    pub max_size_mb: u64,
    pub mode: AuditLogMode,
    /// `--audit-log-batch-buffer-size`: the channel's capacity.
    pub buffer_size: usize,
}

impl Default for AuditLogOptions {
    fn default() -> Self {
        AuditLogOptions {
            path: None,
            max_age_days: 0,
            max_backups: 0,
            max_size_mb: 0,
            mode: AuditLogMode::Blocking,
            buffer_size: 10_000,
        }
    }
}

/// `--audit-log-format`: only `json` (upstream's default) is written.
pub fn check_format(format: &str) -> Result<(), String> {
    match format {
        "json" => Ok(()),
        "legacy" => {
            Err("--audit-log-format: \"legacy\" is not supported by Ferrokube; use \"json\"".into())
        }
        o => Err(format!(
            "--audit-log-format: invalid value {o:?}: supported values: \"json\", \"legacy\""
        )),
    }
}

/// What a backend's queue carries: events, and at shutdown a request to write or
/// send at once everything queued before it.
// Events go by value: boxing them would cost an allocation per event to spare the
// flush, sent once per shutdown, the unused room.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Queued {
    Event(Event),
    /// Answered once what came before is written (or sent, or given up on).
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The request path's end of a backend (the log's or the webhook's): a bounded
/// queue that the backend's sender empties, filled as the backend's mode says.
#[derive(Debug)]
pub(crate) struct Backend {
    tx: mpsc::Sender<Queued>,
    mode: AuditLogMode,
    dropped: Arc<AtomicU64>,
    /// The mode flag, for the message about dropped events.
    mode_flag: &'static str,
}

/// Opens (creating, mode 0600) the file and starts the writer thread.
pub(crate) fn start(opts: &AuditLogOptions, path: &Path) -> Result<Backend, String> {
    let out = if path == Path::new("-") {
        Output::Stdout
    } else {
        Output::File(RotatingFile::open(path, opts)?)
    };
    let (backend, rx) = Backend::new(opts.buffer_size, opts.mode, "--audit-log-mode");
    std::thread::Builder::new()
        .name("audit-log".into())
        .spawn(move || write_loop(rx, out))
        .map_err(|e| format!("starting the audit log writer: {e}"))?;
    Ok(backend)
}

impl Backend {
    /// The queue (`buffer_size` events) and the receiving end for the sender.
    pub(crate) fn new(
        buffer_size: usize,
        mode: AuditLogMode,
        mode_flag: &'static str,
    ) -> (Backend, mpsc::Receiver<Queued>) {
        let (tx, rx) = mpsc::channel(buffer_size.max(1));
        let backend = Backend {
            tx,
            mode,
            dropped: Arc::default(),
            mode_flag,
        };
        (backend, rx)
    }

    /// Queues an event (see the module's modes).
    pub(crate) async fn emit(&self, event: Event) {
        match self.mode {
            AuditLogMode::Blocking => {
                let _ = self.tx.send(Queued::Event(event)).await;
            }
            AuditLogMode::Batch => self.emit_now(event),
        }
    }

    /// Queues an event from code that cannot wait (a response body's end): in blocking
    /// mode a full channel hands the event to a task that waits for room.
    pub(crate) fn emit_detached(&self, event: Event) {
        match self.mode {
            AuditLogMode::Batch => self.emit_now(event),
            AuditLogMode::Blocking => {
                if let Err(mpsc::error::TrySendError::Full(event)) =
                    self.tx.try_send(Queued::Event(event))
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
        if let Err(mpsc::error::TrySendError::Full(Queued::Event(event))) =
            self.tx.try_send(Queued::Event(event))
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

enum Output {
    Stdout,
    File(RotatingFile),
}

fn write_loop(mut rx: mpsc::Receiver<Queued>, mut out: Output) {
    let mut buf = Vec::with_capacity(64 * 1024);
    while let Some(first) = rx.blocking_recv() {
        buf.clear();
        let mut n = 0;
        let mut flush = None;
        let mut next = Some(first);
        // A batch ends at a flush request, so that it is answered after the write.
        while let Some(queued) = next.take() {
            match queued {
                Queued::Event(e) => {
                    buf.extend_from_slice(&e.to_json_line());
                    n += 1;
                }
                Queued::Flush(done) => {
                    flush = Some(done);
                    break;
                }
            }
            if n < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if n > 0 {
            write_batch(&mut out, &buf, n);
        }
        if let Some(done) = flush {
            let _ = done.send(());
        }
    }
}

/// Writes `n` events' lines at once.
fn write_batch(out: &mut Output, buf: &[u8], n: usize) {
    let result = match out {
        Output::Stdout => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(buf).and_then(|_| stdout.flush())
        }
        Output::File(f) => f.write_batch(buf),
    };
    if let Err(e) = result {
        tracing::error!(error = %e, events = n, "writing the audit log failed");
    }
}

/// lumberjack's file: rotated before a write that would pass the size limit.
struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    max_backups: usize,
    max_age: Option<Duration>,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl RotatingFile {
    fn open(path: &Path, opts: &AuditLogOptions) -> Result<RotatingFile, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("--audit-log-path: creating {}: {e}", dir.display()))?;
        }
        let file =
            open_append(path).map_err(|e| format!("--audit-log-path: {}: {e}", path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let max_size_mb = if opts.max_size_mb == 0 {
            100
        } else {
            opts.max_size_mb
        };
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file,
            size,
            max_size: max_size_mb * 1024 * 1024,
            max_backups: opts.max_backups,
            max_age: (opts.max_age_days > 0)
                .then(|| Duration::from_secs(opts.max_age_days * 24 * 3600)),
        })
    }

    fn write_batch(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + buf.len() as u64 > self.max_size {
            self.rotate()?;
        }
        self.file.write_all(buf)?;
        self.size += buf.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let backup = backup_name(&self.path, jiff::Timestamp::now());
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        self.remove_old_backups();
        Ok(())
    }

    /// lumberjack's `millRunOnce`: keep the newest `max_backups`, none older than
    /// `max_age`.
    fn remove_old_backups(&self) {
        let (Some(dir), Some(stem), ext) = (
            self.path.parent(),
            self.path.file_stem().and_then(|s| s.to_str()),
            self.path.extension().and_then(|s| s.to_str()),
        ) else {
            return;
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let prefix = format!("{stem}-");
        let suffix = ext.map(|e| format!(".{e}")).unwrap_or_default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        // Backup names sort by their time.
        let mut backups: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&prefix)
                        && n.ends_with(&suffix)
                        && n.len() == prefix.len() + BACKUP_TIME_LEN + suffix.len()
                })
            })
            .collect();
        backups.sort();
        backups.reverse();
        let now = SystemTime::now();
        for (i, p) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = self.max_age.is_some_and(|age| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|d| d > age)
            });
            if too_many || too_old {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Length of lumberjack's backup time, `2006-01-02T15-04-05.000`.
const BACKUP_TIME_LEN: usize = 23;

/// lumberjack's `backupName` in UTC: `audit.log` -> `audit-2026-01-02T03-04-05.678.log`.
fn backup_name(path: &Path, now: jiff::Timestamp) -> PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("audit");
    let ext = path
        .extension()
        .and_then(|s| s.to_str())
        .map(|e| format!(".{e}"))
        .unwrap_or_default();
    let time = format!(
        "{}.{:03}",
        now.strftime("%Y-%m-%dT%H-%M-%S"),
        now.subsec_millisecond()
    );
    path.with_file_name(format!("{stem}-{time}{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_as_lumberjack() {
        let t: jiff::Timestamp = "2026-01-02T03:04:05.678Z".parse().unwrap();
        assert_eq!(
            backup_name(Path::new("/var/log/audit.log"), t),
            PathBuf::from("/var/log/audit-2026-01-02T03-04-05.678.log")
        );
        assert_eq!(
            "2026-01-02T03-04-05.678".len(),
            BACKUP_TIME_LEN,
            "the backup filter's length"
        );
    }

    #[test]
    fn rotates_and_keeps_max_backups() {
        let dir =
            std::env::temp_dir().join(format!("ferrokube-audit-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("audit.log");
        let opts = AuditLogOptions {
            max_size_mb: 1,
            max_backups: 2,
            ..Default::default()
        };
        let mut f = RotatingFile::open(&path, &opts).unwrap();
        let chunk = vec![b'x'; 700 * 1024];
        for _ in 0..5 {
            f.write_batch(&chunk).unwrap();
            // Distinct backup names (millisecond resolution).
            std::thread::sleep(Duration::from_millis(3));
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("audit.log"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 700 * 1024);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn modes_and_formats() {
        assert_eq!(AuditLogMode::parse("batch"), Ok(AuditLogMode::Batch));
        assert!(
            AuditLogMode::parse("blocking-strict")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(check_format("json").is_ok());
        assert!(check_format("legacy").unwrap_err().contains("use \"json\""));
    }
}
