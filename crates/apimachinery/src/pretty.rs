//! Pretty-printed JSON for people, as upstream's API servers write it: when a request
//! asks (`?pretty=true`) or comes from a person's tool (curl, Wget, a browser), JSON
//! answers are indented as Go's `json.MarshalIndent(obj, "", "  ")`. Shared by every
//! Ferrokube API server (kube-apiserver, metrics-server).

/// Whether the answer is pretty-printed JSON, as upstream's `isPrettyPrint`: `?pretty=`
/// when it is set (Go's `strconv.ParseBool`; a value it does not take means no), else
/// a User-Agent of a person's tool (curl, Wget, a browser).
pub fn wants_pretty(query: Option<&str>, user_agent: Option<&str>) -> bool {
    let pretty = query
        .filter(|q| q.contains("pretty"))
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "pretty")
                .map(|(_, v)| v.into_owned())
        })
        .filter(|v| !v.is_empty());
    match pretty {
        Some(v) => matches!(v.as_str(), "1" | "t" | "T" | "TRUE" | "true" | "True"),
        None => user_agent.is_some_and(|ua| {
            ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
        }),
    }
}

/// `json` indented as upstream's pretty serializer writes it (`json.MarshalIndent`
/// with two spaces): members in the order they came, no newline at the end. `None`
/// when it is not one JSON value.
pub fn indent_json(json: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(json.len() + json.len() / 2);
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut ser = serde_json::Serializer::pretty(&mut out);
    serde_transcode::transcode(&mut de, &mut ser).ok()?;
    de.end().ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indented_as_go_marshal_indent() {
        // What json.MarshalIndent(v, "", "  ") writes for this value, members kept in
        // the order given (not sorted), empty containers on one line.
        let compact = br#"{"z":[],"b":{},"c":[1,{"d":null,"a":"x\"y"}],"e":2.5}"#;
        let want = "{\n  \"z\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": null,\n      \"a\": \"x\\\"y\"\n    }\n  ],\n  \"e\": 2.5\n}";
        let got = indent_json(compact).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
        assert!(indent_json(b"{\"a\":1} trailing").is_none());
        assert!(indent_json(b"").is_none());
    }

    #[test]
    fn pretty_as_is_pretty_print() {
        let curl = Some("curl/8.5.0");
        assert!(wants_pretty(None, curl));
        assert!(wants_pretty(Some("limit=5"), Some("Wget/1.21")));
        assert!(wants_pretty(Some("pretty=True"), None));
        assert!(wants_pretty(Some("pretty=t&pretty=false"), None));
        assert!(!wants_pretty(Some("pretty=0"), curl));
        assert!(!wants_pretty(Some("pretty=on"), curl));
        assert!(wants_pretty(Some("pretty="), curl));
        assert!(!wants_pretty(None, None));
        assert!(!wants_pretty(None, Some("kubectl/v1.33.1 (linux/amd64)")));
    }
}
