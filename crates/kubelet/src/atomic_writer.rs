//! Upstream's atomic writer (`pkg/volume/util/atomic_writer.go`) for configMap, secret,
//! downwardAPI and projected volumes. The volume directory holds:
//!
//! ```text
//! ..2026_11_21_13_54_33.0123456789/   the payload of one version (files, subdirectories)
//! ..data -> ..2026_11_21_13_54_33.0123456789
//! key -> ..data/key                  one symlink per top-level name of the payload
//! ```
//!
//! A new version is written into a fresh timestamped directory, then `..data` is swapped to
//! it with one `rename` of a temporary symlink, so a reader sees the old or the new payload,
//! never a mix. The payload checks and path rules are pure; [`write`] does the file system
//! work on a directory it is given.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

/// The symlink naming the current version.
pub const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits (e.g. 0o644).
    pub mode: u32,
}

/// Relative path -> file.
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path {path:?}: {why}")]
    InvalidPath { path: String, why: &'static str },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Upstream `validatePath`: relative, no `..` element, no element starting with `..`
/// (those names are the writer's own), not empty, at most 4096 bytes.
pub fn validate_path(p: &str) -> Result<(), WriteError> {
    let bad = |why| {
        Err(WriteError::InvalidPath {
            path: p.to_owned(),
            why,
        })
    };
    if p.is_empty() {
        return bad("must not be empty");
    }
    if p.len() > 4096 {
        return bad("must be less than or equal to 4096 characters");
    }
    if p.starts_with('/') {
        return bad("must be relative path");
    }
    if p.split('/').any(|e| e == "..") {
        return bad("must not contain '..'");
    }
    if p.starts_with("..") {
        return bad("must not start with '..'");
    }
    Ok(())
}

/// The top-level names a payload makes visible (one symlink each).
pub fn top_level_names(payload: &Payload) -> BTreeSet<String> {
    payload
        .keys()
        .filter_map(|p| p.split('/').find(|e| !e.is_empty()).map(str::to_owned))
        .collect()
}

/// The name of a version directory made at `nanos` since the epoch (upstream uses
/// `..<time>.<random>`; the nanoseconds keep names unique per writer).
pub fn version_dir_name(nanos: i128) -> String {
    let secs = nanos.div_euclid(1_000_000_000) as i64;
    let frac = nanos.rem_euclid(1_000_000_000);
    let t = k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    format!("..{}.{frac:09}", t.strftime("%Y_%m_%d_%H_%M_%S"))
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WriteError + 'a {
    move |source| WriteError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Whether the current version in `dir` holds exactly `payload` (contents and modes).
pub fn is_current(dir: &Path, payload: &Payload) -> bool {
    let data = dir.join(DATA_DIR);
    let Ok(target) = std::fs::read_link(&data) else {
        return false;
    };
    let version = dir.join(target);
    let mut on_disk = BTreeSet::new();
    if collect_files(&version, &version, &mut on_disk).is_err() {
        return false;
    }
    if on_disk.len() != payload.len() {
        return false;
    }
    payload.iter().all(|(p, f)| {
        let path = version.join(p);
        on_disk.contains(p)
            && std::fs::read(&path).is_ok_and(|d| d == f.data)
            && std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o7777 == f.mode)
    })
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            collect_files(root, &p, out)?;
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Writes `payload` into `dir` (created if missing) as a new version and swaps `..data`
/// to it; a payload equal to the current one writes nothing. Returns whether it wrote.
pub fn write(dir: &Path, payload: &Payload, now_nanos: i128) -> Result<bool, WriteError> {
    for p in payload.keys() {
        validate_path(p)?;
    }
    std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    if is_current(dir, payload) {
        return Ok(false);
    }
    let old_version = std::fs::read_link(dir.join(DATA_DIR)).ok();
    let old_names: BTreeSet<String> = match &old_version {
        Some(v) => {
            let mut names = BTreeSet::new();
            if let Ok(rd) = std::fs::read_dir(dir.join(v)) {
                for e in rd.flatten() {
                    names.insert(e.file_name().to_string_lossy().into_owned());
                }
            }
            names
        }
        None => BTreeSet::new(),
    };

    // 1. The new version, complete, beside the old one.
    let mut version_name = version_dir_name(now_nanos);
    let mut n = now_nanos;
    while dir.join(&version_name).exists() {
        n += 1;
        version_name = version_dir_name(n);
    }
    let version = dir.join(&version_name);
    std::fs::create_dir(&version).map_err(io_err("creating", &version))?;
    for (p, f) in payload {
        let path = version.join(p);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        std::fs::write(&path, &f.data).map_err(io_err("writing", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))
            .map_err(io_err("chmod", &path))?;
    }
    // Directories must be traversable by any user the container runs as.
    std::fs::set_permissions(&version, std::fs::Permissions::from_mode(0o755))
        .map_err(io_err("chmod", &version))?;

    // 2. Swap `..data` atomically: a temporary symlink renamed over it.
    let tmp = dir.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp);
    symlink(&version_name, &tmp).map_err(io_err("symlinking", &tmp))?;
    std::fs::rename(&tmp, dir.join(DATA_DIR)).map_err(io_err("renaming", &tmp))?;

    // 3. User-visible symlinks for the new names, then the old names go.
    let new_names = top_level_names(payload);
    for name in &new_names {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(PathBuf::from(DATA_DIR).join(name), &link)
                .map_err(io_err("symlinking", &link))?;
        }
    }
    for name in old_names.difference(&new_names) {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&link).map_err(io_err("removing", &link))?;
        }
    }
    // 4. The old version is no longer reachable.
    if let Some(old) = old_version {
        let old = dir.join(old);
        if old.components().any(|c| matches!(c, Component::ParentDir)) {
            return Ok(true);
        }
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    (*p).to_owned(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn path_rules() {
        for ok in ["a", "a/b", "a..b", "x/.hidden", ".a"] {
            assert!(validate_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/abs",
            "../x",
            "a/../b",
            "..data",
            "..",
            &"x".repeat(4097),
        ] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
        assert_eq!(
            top_level_names(&payload(&[
                ("a/b", "", 0o644),
                ("a/c", "", 0o644),
                ("d", "", 0o644)
            ])),
            BTreeSet::from(["a".to_owned(), "d".to_owned()])
        );
        assert_eq!(
            version_dir_name(1_700_000_000_000_000_123),
            "..2023_11_14_22_13_20.000000123"
        );
    }

    #[test]
    fn writes_swaps_and_cleans_up() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        let v1 = payload(&[("key", "one", 0o644), ("sub/nested", "n", 0o600)]);
        assert!(write(&dir, &v1, 1).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("key")).unwrap(), "one");
        assert_eq!(
            std::fs::read_to_string(dir.join("sub/nested")).unwrap(),
            "n"
        );
        assert_eq!(
            std::fs::read_link(dir.join("key")).unwrap(),
            PathBuf::from("..data/key")
        );
        let first = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        assert!(
            !write(&dir, &v1, 2).unwrap(),
            "same payload: nothing written"
        );

        let v2 = payload(&[("key", "two", 0o400), ("other", "o", 0o644)]);
        assert!(write(&dir, &v2, 3).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("key")).unwrap(), "two");
        assert_eq!(
            std::fs::metadata(dir.join("key"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o400
        );
        assert!(
            std::fs::symlink_metadata(dir.join("sub")).is_err(),
            "gone name removed"
        );
        assert!(!dir.join(&first).exists(), "old version removed");
        let mut entries: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        entries.sort();
        assert_eq!(entries.len(), 4, "{entries:?}");
        assert_eq!(&entries[2..], ["key", "other"]);
        assert_eq!(entries[0], version_dir_name(3), "the new version");
        assert_eq!(entries[1], DATA_DIR);
        assert!(is_current(&dir, &v2));
        assert!(!is_current(&dir, &v1));

        let empty = Payload::new();
        assert!(write(&dir, &empty, 4).unwrap());
        assert!(std::fs::symlink_metadata(dir.join("key")).is_err());
        assert!(
            write(&dir, &v1, 1).is_ok(),
            "an old timestamp still gets a fresh dir"
        );
        assert!(write(&dir, &payload(&[("../evil", "x", 0o644)]), 5).is_err());
    }
}
