//! Pure helpers: key ranges for prefixes and the mapping of SQLite errors.

use ferrokube_storage::StorageError;
use rusqlite::ErrorCode;

/// The half-open byte range `[start, end)` of keys starting with a prefix.
///
/// Keys are stored as BLOBs of their UTF-8 bytes, so SQLite orders them exactly as
/// Rust orders `str` (bytewise), and a prefix scan is an index range scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl KeyRange {
    pub fn prefix(prefix: &str) -> KeyRange {
        KeyRange {
            start: prefix.as_bytes().to_vec(),
            end: prefix_end(prefix.as_bytes()),
        }
    }

    /// The same range, starting at `start` instead (a continue token's key).
    pub fn starting_at(&self, start: &str) -> KeyRange {
        let start = start.as_bytes();
        KeyRange {
            start: if start > self.start.as_slice() {
                start.to_vec()
            } else {
                self.start.clone()
            },
            end: self.end.clone(),
        }
    }
}

/// The smallest byte string greater than every string starting with `prefix`.
///
/// For the empty prefix (and, for completeness, an all-0xFF one, which no UTF-8 string
/// is) that is `[0xFF]`: no UTF-8 string starts with the byte 0xFF, so it bounds every
/// key.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF]
}

/// SQLite failures: "busy"/"locked" is a transient [`StorageError::Unavailable`],
/// everything else [`StorageError::Internal`].
pub(crate) fn sql_error(err: rusqlite::Error) -> StorageError {
    if let rusqlite::Error::SqliteFailure(failure, _) = &err
        && matches!(
            failure.code,
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked
        )
    {
        return StorageError::Unavailable(format!("sqlite is busy: {err}"));
    }
    StorageError::Internal(format!("sqlite: {err}"))
}

/// A stored key back into a `String`; keys are only ever written from `&str`.
pub(crate) fn key_from_blob(blob: Vec<u8>) -> Result<String, StorageError> {
    String::from_utf8(blob)
        .map_err(|_| StorageError::Internal("stored key is not UTF-8".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_exactly_the_prefixed_keys() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"/r/pods/", b"/r/pods0"),
            (b"a", b"b"),
            (b"", &[0xFF]),
            (&[b'a', 0xFF], b"b"),
            (&[0xFF, 0xFF], &[0xFF]),
            (&[0x00], &[0x01]),
        ];
        for (prefix, want) in cases {
            assert_eq!(prefix_end(prefix), *want, "prefix {prefix:?}");
        }
    }

    #[test]
    fn range_contains_prefixed_keys_only() {
        let range = KeyRange::prefix("/r/pods/");
        let inside =
            |k: &str| k.as_bytes() >= range.start.as_slice() && k.as_bytes() < range.end.as_slice();
        for key in ["/r/pods/", "/r/pods/a", "/r/pods/\u{10FFFF}", "/r/pods/\0"] {
            assert!(inside(key), "{key:?}");
        }
        for key in ["/r/pods", "/r/podsx/a", "/r/pod", "/q/pods/a", "/r/pods0"] {
            assert!(!inside(key), "{key:?}");
        }
        let all = KeyRange::prefix("");
        assert!("\u{10FFFF}\u{10FFFF}".as_bytes() < all.end.as_slice());
    }

    #[test]
    fn starting_at_never_leaves_the_range() {
        let range = KeyRange::prefix("/p/");
        assert_eq!(range.starting_at("/p/b").start, b"/p/b");
        assert_eq!(range.starting_at("/a").start, b"/p/");
        assert_eq!(range.starting_at("/p/b").end, range.end);
    }

    #[test]
    fn busy_is_unavailable_other_errors_internal() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(matches!(sql_error(busy), StorageError::Unavailable(_)));
        let other = rusqlite::Error::InvalidQuery;
        assert!(matches!(sql_error(other), StorageError::Internal(_)));
    }
}
