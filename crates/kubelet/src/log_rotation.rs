//! Container log rotation (upstream `pkg/kubelet/logs/container_log_manager.go`):
//! every monitoring period, each running container's CRI log file over
//! `--container-log-max-size` is renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime is
//! asked to reopen its log (CRI `ReopenContainerLog`; renamed back if that fails). Before
//! that, older rotated files beyond `--container-log-max-files` are removed and all but
//! the newest rotated one are gzipped, as upstream does. `kubectl logs` reads the live
//! file, so it keeps working across rotations.
//!
//! The planning is pure and tested here; [`rotate_logs`] does the IO.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cri::CriClient;

/// Upstream's defaults: 10Mi and 5 files, looked at every 10 s.
pub const DEFAULT_MAX_SIZE: i64 = 10 << 20;
pub const DEFAULT_MAX_FILES: usize = 5;
pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(10);

/// `--container-log-max-size`, `--container-log-max-files` and the monitoring interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotationPolicy {
    pub max_size: i64,
    /// The live file included; at least 2.
    pub max_files: usize,
    pub monitor_interval: Duration,
}

impl Default for LogRotationPolicy {
    fn default() -> Self {
        LogRotationPolicy {
            max_size: DEFAULT_MAX_SIZE,
            max_files: DEFAULT_MAX_FILES,
            monitor_interval: DEFAULT_MONITOR_INTERVAL,
        }
    }
}

/// What to do with a log's rotated files before the next rotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// The oldest ones beyond `max_files - 2` (the live file and the one about to be made
    /// take the other two places).
    pub remove: Vec<String>,
    /// Rotated files not yet compressed, but the newest (the runtime may still be
    /// finishing writes into it).
    pub compress: Vec<String>,
}

/// The order of rotated files: by their timestamp suffix, `.gz` or not.
fn rotation_key(name: &str) -> &str {
    name.strip_suffix(".gz").unwrap_or(name)
}

/// Plans the cleanup of `rotated` (file names `<log>.<timestamp>[.gz]`).
pub fn plan_cleanup(rotated: &[String], max_files: usize) -> Cleanup {
    let mut files: Vec<&String> = rotated.iter().collect();
    files.sort_by_key(|n| rotation_key(n));
    let keep = max_files.saturating_sub(2);
    let excess = files.len().saturating_sub(keep);
    let (remove, kept) = files.split_at(excess);
    let newest = kept.last();
    Cleanup {
        remove: remove.iter().map(|s| s.to_string()).collect(),
        compress: kept
            .iter()
            .filter(|n| !n.ends_with(".gz") && Some(*n) != newest)
            .map(|s| s.to_string())
            .collect(),
    }
}

/// The rotated file name for `log` at `now` (upstream's `20060102-150405`).
pub fn rotated_name(log: &Path, now: jiff::Timestamp) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".");
    name.push(now.strftime("%Y%m%d-%H%M%S").to_string());
    PathBuf::from(name)
}

/// Errors of one rotation (logged; the next period tries again).
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reopening the log of container {id}: {source}")]
    Reopen {
        id: String,
        #[source]
        source: crate::cri::CriError,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RotateError + 'a {
    move |source| RotateError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Gzips `path` into `path.gz` (through a `.tmp` file), then removes `path`.
fn compress(path: &Path) -> Result<(), RotateError> {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    let tmp = PathBuf::from(format!("{}.gz.tmp", path.display()));
    let mut input = std::fs::File::open(path).map_err(io("opening", path))?;
    let out = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
    let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    std::io::copy(&mut input, &mut enc).map_err(io("compressing", path))?;
    enc.finish()
        .and_then(|mut f| f.flush())
        .map_err(io("compressing", path))?;
    std::fs::rename(&tmp, &gz).map_err(io("renaming", &tmp))?;
    std::fs::remove_file(path).map_err(io("removing", path))
}

/// Rotates `log` of container `id` when it is over the policy's size.
async fn rotate_one(
    cri: &CriClient,
    id: &str,
    log: &Path,
    policy: &LogRotationPolicy,
) -> Result<bool, RotateError> {
    let size = match std::fs::metadata(log) {
        Ok(m) => m.len() as i64,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io("reading", log)(e)),
    };
    if size < policy.max_size {
        return Ok(false);
    }
    let dir = log.parent().unwrap_or(Path::new("."));
    let base = log
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!("{base}.");
    let mut rotated = vec![];
    for e in std::fs::read_dir(dir)
        .map_err(io("listing", dir))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) {
            continue;
        }
        if name.ends_with(".tmp") {
            // A compression cut short.
            let _ = std::fs::remove_file(e.path());
        } else {
            rotated.push(name);
        }
    }
    let plan = plan_cleanup(&rotated, policy.max_files);
    for name in &plan.remove {
        let p = dir.join(name);
        std::fs::remove_file(&p).map_err(io("removing", &p))?;
    }
    for name in &plan.compress {
        compress(&dir.join(name))?;
    }
    let target = rotated_name(log, jiff::Timestamp::now());
    if target.exists() {
        // Rotated within this second already.
        return Ok(false);
    }
    std::fs::rename(log, &target).map_err(io("renaming", log))?;
    if let Err(source) = cri.reopen_container_log(id).await {
        // Put it back so the runtime's open file is the live log again.
        let _ = std::fs::rename(&target, log);
        return Err(RotateError::Reopen {
            id: id.to_owned(),
            source,
        });
    }
    Ok(true)
}

/// One pass over the running containers: rotates every log over the size limit.
pub async fn rotate_logs(cri: &CriClient, policy: &LogRotationPolicy) {
    let running = cri
        .list_containers(Some(k8s_cri::v1::ContainerFilter {
            state: Some(k8s_cri::v1::ContainerStateValue {
                state: k8s_cri::v1::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    for c in running {
        let Ok(status) = cri.container_status(&c.id).await else {
            continue;
        };
        if status.log_path.is_empty() {
            continue;
        }
        match rotate_one(cri, &c.id, Path::new(&status.log_path), policy).await {
            Ok(true) => {
                tracing::debug!(container = %c.id, log = %status.log_path, "rotated container log")
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(container = %c.id, error = %e, "rotating container log"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keeps_max_files_minus_two_and_compresses_all_but_the_newest() {
        let rotated = names(&[
            "0.log.20240101-000003",
            "0.log.20240101-000001.gz",
            "0.log.20240101-000002",
            "0.log.20240101-000004",
        ]);
        let plan = plan_cleanup(&rotated, 5);
        assert_eq!(plan.remove, names(&["0.log.20240101-000001.gz"]));
        assert_eq!(
            plan.compress,
            names(&["0.log.20240101-000002", "0.log.20240101-000003"])
        );
        let plan = plan_cleanup(&rotated, 2);
        assert_eq!(
            plan.remove.len(),
            4,
            "only the live file and the next rotation"
        );
        assert!(plan.compress.is_empty());
        assert_eq!(plan_cleanup(&[], 5), Cleanup::default());
    }

    #[test]
    fn rotated_names_carry_upstream_timestamps() {
        let t: jiff::Timestamp = "2024-03-05T06:07:08Z".parse().unwrap();
        assert_eq!(
            rotated_name(Path::new("/var/log/pods/x/c/0.log"), t),
            PathBuf::from("/var/log/pods/x/c/0.log.20240305-060708")
        );
    }

    #[test]
    fn compress_replaces_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("0.log.20240101-000001");
        std::fs::write(&f, "hello\n".repeat(100)).unwrap();
        compress(&f).unwrap();
        assert!(!f.exists());
        let gz = tmp.path().join("0.log.20240101-000001.gz");
        let mut out = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap()),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, "hello\n".repeat(100));
    }
}
