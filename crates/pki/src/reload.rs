//! Certificate and CA files followed while a server runs (upstream's
//! `dynamiccertificates` file controllers), so rotating them needs no restart.
//!
//! A [`FollowedFiles`] is read again at each [`FollowedFiles::check`] and compared by
//! content (an atomic rename, or a rewrite within the same second, changes no mtime
//! one can rely on). Changed content is handed to the caller's install step only when
//! every file reads; what the step refuses is not tried again until it changes, so a
//! half-written pair is retried as soon as its other half lands, and a bad file does
//! not log a warning at every check. What is installed stays in use until a good
//! replacement loads.
//!
//! The files are read with blocking IO: they are a few KiB, read every few seconds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::serving::ServingCertificate;

/// How often servers read their files again (upstream re-reads them every minute and
/// on file events; a short poll of a few small files does without the events).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// One followed file: the flag that names it (for log messages) and its path.
#[derive(Debug, Clone)]
struct Followed {
    flag: &'static str,
    path: PathBuf,
}

/// Files installed together (a certificate and its key, or a CA bundle), with the
/// contents last tried.
#[derive(Debug)]
pub struct FollowedFiles {
    /// What the files are, for log messages ("serving certificate", "--client-ca-file").
    what: &'static str,
    files: Vec<Followed>,
    tried: Vec<Vec<u8>>,
}

impl FollowedFiles {
    /// `files` as `(flag, path, content installed at start)`.
    pub fn new(
        what: &'static str,
        files: impl IntoIterator<Item = (&'static str, PathBuf, String)>,
    ) -> Self {
        let (files, tried) = files
            .into_iter()
            .map(|(flag, path, content)| (Followed { flag, path }, content.into_bytes()))
            .unzip();
        FollowedFiles { what, files, tried }
    }

    /// Reads the files again. When every one reads as UTF-8 and one of them differs
    /// from what was last tried, `install` gets their contents (in the order given to
    /// [`FollowedFiles::new`]) and answers whether what is in use changed; a refusal
    /// keeps what is in use. Returns whether it changed.
    pub fn check(&mut self, install: impl FnOnce(&[&str]) -> Result<bool, String>) -> bool {
        let Some(contents) = self.changed() else {
            return false;
        };
        let installed = contents
            .and_then(|texts| install(&texts.iter().map(String::as_str).collect::<Vec<_>>()));
        match installed {
            Ok(changed) => {
                if changed {
                    tracing::info!(files = %self.paths(), "{} changed; new connections use it", self.what);
                }
                changed
            }
            Err(e) => {
                tracing::warn!(
                    files = %self.paths(),
                    error = %e,
                    "{} changed but does not load; keeping the one in use",
                    self.what
                );
                false
            }
        }
    }

    /// Reads the files again: None when one cannot be read (a warning names it) or
    /// none differs from what was last tried; else their contents, now the last
    /// tried, or why they are not text. For callers that install in steps of their
    /// own (an asynchronous build, their own log lines).
    pub fn changed(&mut self) -> Option<Result<Vec<String>, String>> {
        let mut contents = Vec::with_capacity(self.files.len());
        for file in &self.files {
            match std::fs::read(&file.path) {
                Ok(content) => contents.push(content),
                Err(e) => {
                    tracing::warn!(path = %file.path.display(), error = %e, "reading {}", file.flag);
                    return None;
                }
            }
        }
        if contents == self.tried {
            return None;
        }
        let texts = contents
            .iter()
            .map(|c| String::from_utf8(c.clone()).map_err(|e| e.to_string()))
            .collect();
        self.tried = contents;
        Some(texts)
    }

    fn paths(&self) -> String {
        self.files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A [`ServingCertificate`] followed in its files (`--tls-cert-file` and
/// `--tls-private-key-file`): a new pair is served once both files load and the key is
/// the certificate's.
#[derive(Debug)]
pub struct ServingFiles {
    files: FollowedFiles,
    certificate: Arc<ServingCertificate>,
}

impl ServingFiles {
    /// `cert_pem` and `key_pem` are what `certificate` was built from at start.
    pub fn new(
        cert: (PathBuf, &str),
        key: (PathBuf, &str),
        certificate: Arc<ServingCertificate>,
    ) -> Self {
        Self::named_by(
            ["--tls-cert-file", "--tls-private-key-file"],
            cert,
            key,
            certificate,
        )
    }

    /// A pair of `--tls-sni-cert-key`, as [`ServingFiles::new`].
    pub fn sni(
        cert: (PathBuf, &str),
        key: (PathBuf, &str),
        certificate: Arc<ServingCertificate>,
    ) -> Self {
        Self::named_by(
            ["--tls-sni-cert-key", "--tls-sni-cert-key"],
            cert,
            key,
            certificate,
        )
    }

    /// `flags`: how the warnings name the certificate's and the key's file.
    fn named_by(
        [cert_flag, key_flag]: [&'static str; 2],
        (cert, cert_pem): (PathBuf, &str),
        (key, key_pem): (PathBuf, &str),
        certificate: Arc<ServingCertificate>,
    ) -> Self {
        ServingFiles {
            files: FollowedFiles::new(
                "serving certificate",
                [
                    (cert_flag, cert, cert_pem.to_string()),
                    (key_flag, key, key_pem.to_string()),
                ],
            ),
            certificate,
        }
    }

    /// Serves the files' pair from the next handshake on if it changed and loads:
    /// whether it did.
    pub fn check(&mut self) -> bool {
        let certificate = &self.certificate;
        self.files.check(|pair| {
            certificate
                .replace(pair[0], pair[1])
                .map(|()| true)
                .map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn followed(dir: &Path) -> FollowedFiles {
        std::fs::write(dir.join("a"), "a1").unwrap();
        std::fs::write(dir.join("b"), "b1").unwrap();
        FollowedFiles::new(
            "pair",
            [
                ("--a", dir.join("a"), "a1".to_string()),
                ("--b", dir.join("b"), "b1".to_string()),
            ],
        )
    }

    #[test]
    fn unchanged_files_are_not_installed() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = followed(dir.path());
        assert!(!files.check(|_| panic!("nothing changed")));
    }

    #[test]
    fn changed_files_are_installed_together_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = followed(dir.path());
        std::fs::write(dir.path().join("b"), "b2").unwrap();
        let mut seen = vec![];
        assert!(files.check(|c| {
            seen = c.iter().map(|s| s.to_string()).collect();
            Ok(true)
        }));
        assert_eq!(seen, ["a1", "b2"]);
        assert!(!files.check(|_| panic!("installed already")));
    }

    #[test]
    fn a_refused_content_is_not_retried_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = followed(dir.path());
        std::fs::write(dir.path().join("a"), "a2").unwrap();
        assert!(!files.check(|_| Err("key does not match".into())));
        assert!(!files.check(|_| panic!("the same refused content")));
        std::fs::write(dir.path().join("b"), "b2").unwrap();
        assert!(files.check(|c| Ok(c == ["a2", "b2"])));
    }

    #[test]
    fn a_missing_file_keeps_what_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = followed(dir.path());
        std::fs::remove_file(dir.path().join("b")).unwrap();
        assert!(!files.check(|_| panic!("a file is missing")));
        std::fs::write(dir.path().join("b"), "b1").unwrap();
        assert!(!files.check(|_| panic!("back as it was")));
    }

    #[test]
    fn changed_contents_are_handed_over_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = followed(dir.path());
        assert!(files.changed().is_none());
        std::fs::write(dir.path().join("a"), "a2").unwrap();
        assert_eq!(files.changed(), Some(Ok(vec!["a2".into(), "b1".into()])));
        assert!(files.changed().is_none());
        std::fs::write(dir.path().join("a"), [0xff, 0xfe]).unwrap();
        assert!(matches!(files.changed(), Some(Err(_))));
        assert!(files.changed().is_none());
    }
}
