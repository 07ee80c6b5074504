//! The log backend (upstream `plugin/pkg/audit/log` over lumberjack): events become
//! JSON lines, and each batch [`buffered`](super::buffered) makes is written with one
//! `write` call on a blocking thread, rotating the file as lumberjack does
//! (`--audit-log-maxsize` MiB, `--audit-log-maxbackup` files kept, `--audit-log-maxage`
//! days kept; backups named `<name>-<UTC time>.<ext>` beside it, gzipped to
//! `<backup>.gz` off the write path with `--audit-log-compress`).
//!
//! Its mode is `blocking` by default (requests wait when the writer is behind; no
//! event is lost; `blocking-strict` also fails a request whose first event could not
//! be written); in `batch` mode the `--audit-log-batch-*` flags apply, with
//! upstream's defaults of one event per write and no throttle.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::buffered::{self, AuditBatchOptions, Backend, Sink, Truncate};

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
    /// `--audit-log-compress`: backups gzipped.
    pub compress: bool,
    /// `--audit-log-mode` and `--audit-log-batch-*`.
    pub batch: AuditBatchOptions,
    /// `--audit-log-truncate-*` (None: `-enabled=false`, the default).
    pub truncate: Option<Truncate>,
}

impl Default for AuditLogOptions {
    fn default() -> Self {
        AuditLogOptions {
            path: None,
            max_age_days: 0,
            max_backups: 0,
            max_size_mb: 0,
            compress: false,
            batch: AuditBatchOptions::log_default(),
            truncate: None,
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

/// Opens (creating, mode 0600) the file and starts the writing task.
pub(crate) fn start(opts: &AuditLogOptions, path: &Path) -> Result<Backend, String> {
    let out = if path == Path::new("-") {
        Output::Stdout
    } else {
        Output::File(RotatingFile::open(path, opts)?)
    };
    Ok(buffered::start(
        &opts.batch,
        opts.truncate,
        "--audit-log-mode",
        Writing {
            out: Some(out),
            buf: Vec::with_capacity(64 * 1024),
        },
    ))
}

enum Output {
    Stdout,
    File(RotatingFile),
}

/// The output and a reused buffer, lent to a blocking thread for each write.
struct Writing {
    /// None only while a write is under way, or after one panicked.
    out: Option<Output>,
    buf: Vec<u8>,
}

impl Sink for Writing {
    async fn deliver(&mut self, lines: Vec<Vec<u8>>) -> bool {
        let Some(mut out) = self.out.take() else {
            return false;
        };
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        for line in &lines {
            buf.extend_from_slice(line);
        }
        let n = lines.len();
        let written = tokio::task::spawn_blocking(move || {
            let ok = write_batch(&mut out, &buf, n);
            (out, buf, ok)
        })
        .await;
        match written {
            Ok((out, buf, ok)) => {
                self.out = Some(out);
                self.buf = buf;
                ok
            }
            Err(e) => {
                tracing::error!(error = %e, "the audit log writer failed; no more events will be written");
                false
            }
        }
    }
}

/// Writes `n` events' lines at once; false when that failed.
fn write_batch(out: &mut Output, buf: &[u8], n: usize) -> bool {
    let result = match out {
        Output::Stdout => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(buf).and_then(|_| stdout.flush())
        }
        Output::File(f) => f.write_batch(buf),
    };
    if let Err(e) = &result {
        tracing::error!(error = %e, events = n, "writing the audit log failed");
    }
    result.is_ok()
}

/// lumberjack's file: rotated before a write that would pass the size limit.
struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    mill: Mill,
}

/// lumberjack's `mill`: what happens to the backups after each rotation.
#[derive(Clone)]
struct Mill {
    path: PathBuf,
    max_backups: usize,
    max_age: Option<Duration>,
    compress: bool,
    /// One run at a time: a run compressing a backup must not race the next.
    running: std::sync::Arc<parking_lot::Mutex<()>>,
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
            // Flags up to u64::MAX: a size or age past what can happen means no limit.
            max_size: max_size_mb.saturating_mul(1024 * 1024),
            mill: Mill {
                path: path.to_path_buf(),
                max_backups: opts.max_backups,
                max_age: (opts.max_age_days > 0)
                    .then(|| Duration::from_secs(opts.max_age_days.saturating_mul(24 * 3600))),
                compress: opts.compress,
                running: Default::default(),
            },
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
        if self.mill.compress {
            // Compressing a whole backup takes long enough to hold up the log.
            let mill = self.mill.clone();
            let _ = std::thread::Builder::new()
                .name("audit-log-mill".into())
                .spawn(move || mill.run());
        } else {
            self.mill.run();
        }
        Ok(())
    }
}

impl Mill {
    /// lumberjack's `millRunOnce`: keep the newest `max_backups` (a backup and its
    /// `.gz` counting once), none older than `max_age`, and gzip the rest if asked.
    fn run(&self) {
        let _one_at_a_time = self.running.lock();
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
        let is_backup = |name: &str| {
            let name = name.strip_suffix(".gz").unwrap_or(name);
            name.starts_with(&prefix)
                && name.ends_with(&suffix)
                && name.len() == prefix.len() + BACKUP_TIME_LEN + suffix.len()
        };
        // Backup names sort by their time; a backup's `.gz` sorts next to it.
        let mut backups: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_backup)
            })
            .collect();
        backups.sort();
        backups.reverse();
        let now = SystemTime::now();
        let mut kept = std::collections::HashSet::new();
        for p in &backups {
            let name = p.to_string_lossy();
            let backup = name.strip_suffix(".gz").unwrap_or(&name).to_owned();
            let too_many =
                self.max_backups > 0 && !kept.contains(&backup) && kept.len() >= self.max_backups;
            let too_old = self.max_age.is_some_and(|age| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|d| d > age)
            });
            if too_many || too_old {
                let _ = std::fs::remove_file(p);
                continue;
            }
            kept.insert(backup);
            if self.compress
                && !name.ends_with(".gz")
                && let Err(e) = compress(p)
            {
                tracing::error!(backup = %p.display(), error = %e, "compressing an audit log backup failed");
            }
        }
    }
}

/// lumberjack's `compressLogFile`: `p` gzipped to `p.gz` (mode 0600, as the log), then
/// removed; a failed compression leaves `p` and no `.gz`.
fn compress(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut gz_name = p.as_os_str().to_owned();
    gz_name.push(".gz");
    let gz_path = PathBuf::from(gz_name);
    let written = (|| {
        let mut src = File::open(p)?;
        let dst = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&gz_path)?;
        let mut encoder = flate2::write::GzEncoder::new(dst, flate2::Compression::default());
        std::io::copy(&mut src, &mut encoder)?;
        encoder.finish()?.sync_all()
    })();
    match written {
        Ok(()) => std::fs::remove_file(p),
        Err(e) => {
            let _ = std::fs::remove_file(&gz_path);
            Err(e)
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

    /// The size of each write in [`write_five_times`].
    const CHUNK: usize = 700 * 1024;

    /// `audit.log` in a new directory named by `test`, written five times with
    /// [`CHUNK`] bytes at 1 MiB rotation and two backups kept (four rotations).
    fn write_five_times(test: &str, compress: bool) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ferrokube-audit-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = AuditLogOptions {
            max_size_mb: 1,
            max_backups: 2,
            compress,
            ..Default::default()
        };
        let mut f = RotatingFile::open(&dir.join("audit.log"), &opts).unwrap();
        for _ in 0..5 {
            f.write_batch(&vec![b'x'; CHUNK]).unwrap();
            // Distinct backup names (millisecond resolution).
            std::thread::sleep(Duration::from_millis(3));
        }
        dir
    }

    /// The names in `dir`, sorted.
    fn sorted_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn rotates_and_keeps_max_backups() {
        let dir = write_five_times("rotate", false);
        let path = dir.join("audit.log");
        let names = sorted_names(&dir);
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("audit.log"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), CHUNK as u64);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_largest_size_and_age_flags_mean_no_limit() {
        let dir = std::env::temp_dir().join(format!("ferrokube-audit-max-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = AuditLogOptions {
            max_size_mb: u64::MAX,
            max_age_days: u64::MAX,
            ..Default::default()
        };
        let mut f = RotatingFile::open(&dir.join("audit.log"), &opts).unwrap();
        f.write_batch(&vec![b'x'; CHUNK]).unwrap();
        f.write_batch(&vec![b'x'; CHUNK]).unwrap();
        assert_eq!(sorted_names(&dir), ["audit.log"], "never rotated");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn formats() {
        assert!(check_format("json").is_ok());
        assert!(check_format("legacy").unwrap_err().contains("use \"json\""));
    }

    #[test]
    fn compressed_backups_count_once_and_are_kept_to_max_backups() {
        let dir = write_five_times("gz", true);
        // The last mill runs on its own thread: wait (at most 10 s) for it.
        let names = || sorted_names(&dir);
        for _ in 0..200 {
            if names().len() == 3 && names()[..2].iter().all(|n| n.ends_with(".log.gz")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let names = names();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names[..2].iter().all(|n| n.ends_with(".log.gz")),
            "{names:?}"
        );
        assert_eq!(names[2], "audit.log");
        // A backup's whole content, gzipped.
        let gz = std::fs::read(dir.join(&names[1])).unwrap();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut content)
            .unwrap();
        assert_eq!(content, vec![b'x'; CHUNK]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
