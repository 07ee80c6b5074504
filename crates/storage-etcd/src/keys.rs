//! Mapping between Ferrokube keys and etcd keys: the optional storage prefix, prefix
//! ranges, and the internal bookkeeping key. Pure functions.

/// The key that records the newest compaction revision, as a decimal string.
///
/// It starts with `0xff`, a byte no UTF-8 string contains, so it lies outside every
/// range of user keys (those are all in `[0x00, 0xff)`, see [`range_end`]) even when no
/// storage prefix is configured, and never shows up in a list, a watch or a key count.
/// It is global on purpose: etcd compacts the whole keyspace, whatever the prefix.
pub(crate) const COMPACT_KEY: &[u8] = b"\xffferrokube/compact_rev_key";

/// The end of the etcd range holding every key that starts with `prefix`.
///
/// The empty prefix ranges over all user keys, `[0x00, 0xff)`, which leaves out
/// [`COMPACT_KEY`]. For a non-empty prefix it is the prefix with its last byte below
/// `0xff` incremented (etcd's `GetPrefixRangeEnd`); an all-`0xff` prefix cannot come
/// from UTF-8 strings, and falls back to the user-key bound.
pub(crate) fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff]
}

/// The first etcd key of the range of `prefix` (etcd has no empty key).
pub(crate) fn range_start(prefix: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        vec![0]
    } else {
        prefix.to_vec()
    }
}

/// Joins the storage prefix and a user key into an etcd key.
pub(crate) fn full_key(storage_prefix: &str, key: &str) -> Vec<u8> {
    let mut full = Vec::with_capacity(storage_prefix.len() + key.len());
    full.extend_from_slice(storage_prefix.as_bytes());
    full.extend_from_slice(key.as_bytes());
    full
}

/// The user key of an etcd key, or `None` when it is outside the storage prefix or not
/// UTF-8 (neither is ever written through this backend).
pub(crate) fn user_key(storage_prefix: &str, etcd_key: &[u8]) -> Option<String> {
    let rest = etcd_key.strip_prefix(storage_prefix.as_bytes())?;
    String::from_utf8(rest.to_vec()).ok()
}

/// Parses the value of [`COMPACT_KEY`].
pub(crate) fn parse_compact_value(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_end_increments_last_byte() {
        assert_eq!(range_end(b"/r/pods/"), b"/r/pods0".to_vec());
        assert_eq!(range_end(b"a"), b"b".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b"\xff\xff"), vec![0xff]);
    }

    #[test]
    fn empty_prefix_covers_user_keys_but_not_the_compact_key() {
        let (start, end) = (range_start(b""), range_end(b""));
        for key in ["/a", "\u{0}", "\u{10ffff}", "zzz", "é"] {
            let key = key.as_bytes();
            assert!(start.as_slice() <= key && key < end.as_slice(), "{key:?}");
        }
        assert!(COMPACT_KEY >= end.as_slice());
        // ... nor under any non-empty UTF-8 prefix.
        let end = range_end("\u{10ffff}".as_bytes());
        assert!(COMPACT_KEY >= end.as_slice());
    }

    #[test]
    fn keys_round_trip_through_the_storage_prefix() {
        assert_eq!(
            full_key("/registry", "/pods/a"),
            b"/registry/pods/a".to_vec()
        );
        assert_eq!(
            user_key("/registry", b"/registry/pods/a").as_deref(),
            Some("/pods/a")
        );
        assert_eq!(user_key("/registry", b"/other/a"), None);
        assert_eq!(user_key("", b"\xff\xfe"), None);
        assert_eq!(user_key("", b"/a").as_deref(), Some("/a"));
    }

    #[test]
    fn compact_value_parses_decimal_only() {
        assert_eq!(parse_compact_value(b"42"), Some(42));
        assert_eq!(parse_compact_value(b"x"), None);
        assert_eq!(parse_compact_value(b"\xff"), None);
    }
}
