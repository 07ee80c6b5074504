//! `Warning` response headers as upstream's recorder writes them
//! (k8s.io/apiserver's `WithWarningRecorder`): each text once, quoted, as
//! `299 - "<text>"`; a text with a control character is left out; and once the texts
//! pass 4,096 characters in all, every text is cut to 256 characters and no more are
//! added after the total reaches 4,096 again. Without the bound, a body with 150,000
//! unknown fields under `fieldValidation=Warn` answered with 150,000 headers, which
//! clients (kube-rs, client-go) refuse.

use std::collections::HashSet;

use http::HeaderValue;

/// The warnings' characters upstream sends before it starts cutting them.
const TRUNCATE_AT_TOTAL_CHARS: usize = 4 * 1024;
/// Each warning's length once cutting has started.
const TRUNCATE_ITEM_CHARS: usize = 256;

/// The `Warning` header values for `texts`, in order.
pub(crate) fn warning_headers<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<HeaderValue> {
    recorded(texts, TRUNCATE_AT_TOTAL_CHARS, TRUNCATE_ITEM_CHARS)
        .iter()
        .filter_map(|text| HeaderValue::from_bytes(quoted(text).as_bytes()).ok())
        .collect()
}

/// The texts the recorder keeps, cut as it cuts them.
fn recorded<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    total_chars: usize,
    item_chars: usize,
) -> Vec<String> {
    let cut = |text: &str| -> String { text.chars().take(item_chars).collect() };
    let mut seen = HashSet::new();
    let mut in_order: Vec<&str> = Vec::new();
    let mut written: Vec<String> = Vec::new();
    let mut written_chars = 0;
    let mut truncating = false;
    for text in texts {
        if text.is_empty() || (truncating && written_chars >= total_chars) {
            continue;
        }
        if !seen.insert(text) {
            continue;
        }
        in_order.push(text);
        let text = if truncating {
            cut(text)
        } else {
            text.to_string()
        };
        if text.chars().any(char::is_control) {
            continue;
        }
        let chars = text.chars().count();
        if truncating || written_chars + chars <= total_chars {
            written_chars += chars;
            written.push(text);
            continue;
        }
        // Over the limit: start cutting, and write everything so far again, cut.
        truncating = true;
        written.clear();
        written_chars = 0;
        for text in &in_order {
            let text = cut(text);
            if !text.chars().any(char::is_control) {
                written_chars += text.chars().count();
                written.push(text);
            }
        }
    }
    written
}

/// `299 - "<text>"`, escaping only `"` and `\` (upstream's `makeQuotedString`).
fn quoted(text: &str) -> String {
    let mut header = String::with_capacity(text.len() + 8);
    header.push_str("299 - \"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            header.push('\\');
        }
        header.push(c);
    }
    header.push('"');
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's `TestTruncation`, with its limits of 25 and 5 characters.
    #[test]
    fn cuts_and_stops_as_upstream() {
        let mut texts = vec!["aaaaaaaaaa", "aaaaaaaaaa", "bb", "ccc", "Iñtërnâtiô"];
        assert_eq!(
            recorded(texts.iter().copied(), 25, 5),
            ["aaaaaaaaaa", "bb", "ccc", "Iñtërnâtiô"]
        );
        texts.extend(["e", "ffffffffff", "ffffffffff", "gggggggggg", "h"]);
        assert_eq!(
            recorded(texts.iter().copied(), 25, 5),
            ["aaaaa", "bb", "ccc", "Iñtër", "e", "fffff", "ggggg"]
        );
    }

    #[test]
    fn headers_are_quoted_and_control_characters_left_out() {
        let headers = warning_headers(["a \"b\" \\c", "my\ntext", "", "ünï"]);
        let headers: Vec<&[u8]> = headers.iter().map(HeaderValue::as_bytes).collect();
        assert_eq!(
            headers,
            [
                b"299 - \"a \\\"b\\\" \\\\c\"".as_slice(),
                "299 - \"ünï\"".as_bytes()
            ]
        );
    }

    #[test]
    fn many_warnings_stay_within_the_bound() {
        let texts: Vec<String> = (0..150_000)
            .map(|i| format!("unknown field \"u{i}\""))
            .collect();
        let kept = recorded(
            texts.iter().map(String::as_str),
            TRUNCATE_AT_TOTAL_CHARS,
            TRUNCATE_ITEM_CHARS,
        );
        let chars: usize = kept.iter().map(|t| t.chars().count()).sum();
        assert!(
            (TRUNCATE_AT_TOTAL_CHARS..TRUNCATE_AT_TOTAL_CHARS + TRUNCATE_ITEM_CHARS)
                .contains(&chars),
            "{chars}"
        );
        assert_eq!(kept[..2], texts[..2]);
        let headers = warning_headers(texts.iter().map(String::as_str));
        assert_eq!(headers.len(), kept.len());
        assert_eq!(headers[0].as_bytes(), b"299 - \"unknown field \\\"u0\\\"\"");
    }
}
