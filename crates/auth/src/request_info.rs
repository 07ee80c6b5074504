//! `RequestInfo`: what a request is about, from its method, path and query alone
//! (upstream `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`, with API
//! prefixes `api` and `apis` and groupless prefix `api`).
//!
//! Resource paths:
//! `/api/{version}/[namespaces/{ns}/]{resource}[/{name}[/{subresource}...]]` and
//! `/apis/{group}/{version}/...` likewise; `/api/v1/namespaces/{name}[/status|/finalize]`
//! is the namespace itself; the special verbs `watch` and `proxy` may prefix the
//! resource part (`/api/v1/watch/pods`). Anything else is a non-resource request
//! whose verb is the lowercase HTTP method.

use ferrokube_apimachinery::labels::{Requirement as LabelRequirement, Selector};

use crate::authz::Attributes;
use crate::user::UserInfo;

/// Parsed request facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub is_resource_request: bool,
    /// The decoded URL path.
    pub path: String,
    pub verb: String,
    pub api_prefix: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Path parts from the resource on: `{resource}/{name}/{subresource}/...`.
    pub parts: Vec<String>,
    /// The `fieldSelector` of a list, watch or deletecollection as requirements
    /// (upstream's AuthorizeWithSelectors, on in 1.33); empty without one or when it
    /// does not parse.
    pub field_selector: Vec<FieldRequirement>,
    /// The `labelSelector` of a list, watch or deletecollection as requirements
    /// (AuthorizeWithSelectors); empty without one or when it does not parse.
    pub label_selector: Vec<LabelRequirement>,
}

/// Upstream returns an error together with the partial info for
/// `/api/{version}/{watch|proxy}` with nothing after the special verb; the apiserver
/// answers that with 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to determine kind and namespace from url, {path}")]
pub struct RequestInfoError {
    pub path: String,
    /// What was known when parsing stopped.
    pub partial: Box<RequestInfo>,
}

const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
const SPECIAL_VERBS_NO_SUBRESOURCES: [&str; 1] = ["proxy"];
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses a request. `method` is the HTTP method (`GET`, ...), `path` the URL path as
/// received (percent-encoded; decoded here as Go's `url.URL.Path` is), `query` the raw
/// query string without `?`.
pub fn request_info(
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<RequestInfo, RequestInfoError> {
    let path = percent_decode(path);
    let mut info = RequestInfo {
        is_resource_request: false,
        path: path.clone(),
        verb: method.to_lowercase(),
        ..RequestInfo::default()
    };

    let trimmed = path.trim_matches('/');
    let all: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    let mut parts: &[&str] = &all;
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return Ok(info);
    }
    info.api_prefix = parts[0].to_string();
    parts = &parts[1..];
    if info.api_prefix != "api" {
        if parts.len() < 3 {
            return Ok(info);
        }
        info.api_group = parts[0].to_string();
        parts = &parts[1..];
    }
    info.is_resource_request = true;
    info.api_version = parts[0].to_string();
    parts = &parts[1..];

    if SPECIAL_VERBS.contains(&parts[0]) {
        if parts.len() < 2 {
            return Err(RequestInfoError {
                path: path.clone(),
                partial: Box::new(info),
            });
        }
        info.verb = parts[0].to_string();
        parts = &parts[1..];
    } else {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }

    if parts[0] == "namespaces" {
        // A server-side-apply PATCH to /namespaces/{name} creates a namespace: it is
        // not "in" that namespace.
        if parts.len() == 2 && info.verb == "patch" {
            info.namespace = String::new();
        } else if parts.len() > 1 {
            info.namespace = parts[1].to_string();
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                parts = &parts[2..];
            }
        }
    } else {
        info.namespace = String::new();
    }

    info.parts = parts.iter().map(|s| s.to_string()).collect();
    if info.parts.len() >= 3 && !SPECIAL_VERBS_NO_SUBRESOURCES.contains(&info.verb.as_str()) {
        info.subresource = info.parts[2].clone();
    }
    if info.parts.len() >= 2 {
        info.name = info.parts[1].clone();
    }
    if !info.parts.is_empty() {
        info.resource = info.parts[0].clone();
    }

    // The selectors as the list options' decoding parsed them, when it ran.
    let mut selectors = None;
    if info.name.is_empty() && info.verb == "get" {
        let query = parse_query(query.unwrap_or_default());
        let opts = decode_list_options(&query);
        info.verb = if opts.watch { "watch" } else { "list" }.to_string();
        if let Some(name) = opts.field_selector_name
            && is_valid_path_segment_name(&name)
        {
            info.name = name;
        }
        selectors = Some((opts.field_selector, opts.label_selector));
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".to_string();
    }
    if matches!(info.verb.as_str(), "list" | "watch" | "deletecollection") {
        (info.field_selector, info.label_selector) = selectors.unwrap_or_else(|| {
            let query = parse_query(query.unwrap_or_default());
            let first = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            (
                first("fieldSelector")
                    .and_then(|s| field_requirements(s))
                    .unwrap_or_default(),
                first("labelSelector")
                    .and_then(|s| label_requirements(s))
                    .unwrap_or_default(),
            )
        });
    }
    Ok(info)
}

/// [`request_info`] as authorization [`Attributes`], with an empty user for the caller
/// to fill in. On a [`RequestInfoError`] the partial info is used (the apiserver
/// should call [`request_info`] itself if it wants to answer such requests with 500,
/// as upstream).
pub fn request_attributes(method: &str, path: &str, query: Option<&str>) -> Attributes {
    let info = match request_info(method, path, query) {
        Ok(info) => info,
        Err(e) => *e.partial,
    };
    Attributes::from_request_info(UserInfo::default(), &info)
}

struct ListOptionsLite {
    watch: bool,
    field_selector_name: Option<String>,
    /// The whole `fieldSelector` (empty without one or when it does not parse).
    field_selector: Vec<FieldRequirement>,
    /// The `labelSelector` likewise.
    label_selector: Vec<LabelRequirement>,
}

/// The part of upstream's `ListOptions` decoding RequestInfo depends on: `watch`
/// (any value but `false`/`0`, case-insensitive, is true; first value counts) and the
/// `metadata.name` of an exact-match field selector. If any decoded parameter is
/// invalid, upstream discards everything but `watch`; this checks `fieldSelector`,
/// `labelSelector`, `limit` and `timeoutSeconds`.
fn decode_list_options(query: &[(String, String)]) -> ListOptionsLite {
    let first = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let watch = first("watch").is_some_and(ferrokube_apimachinery::resource_version::query_bool);
    let mut valid = true;
    for key in ["limit", "timeoutSeconds"] {
        if let Some(v) = first(key)
            && !v.is_empty()
            && v.parse::<i64>().is_err()
        {
            valid = false;
        }
    }
    let mut field_selector_name = None;
    let mut field_selector = Vec::new();
    if let Some(selector) = first("fieldSelector") {
        match parse_field_selector(selector) {
            Ok(terms) => {
                field_selector_name = terms
                    .iter()
                    .find(|t| t.field == "metadata.name" && t.equals)
                    .map(|t| t.value.clone());
                field_selector = terms;
            }
            Err(()) => valid = false,
        }
    }
    let mut label_selector = Vec::new();
    if let Some(selector) = first("labelSelector") {
        match label_requirements(selector) {
            Some(requirements) => label_selector = requirements,
            None => valid = false,
        }
    }
    ListOptionsLite {
        watch,
        field_selector_name: if valid { field_selector_name } else { None },
        field_selector,
        label_selector,
    }
}

/// One term of a field selector (upstream's `fields.Requirement`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    /// `=` or `==`; else `!=`.
    pub equals: bool,
    pub value: String,
}

/// A label selector's requirements (upstream `labels.Parse`), `None` when it does
/// not parse.
pub fn label_requirements(selector: &str) -> Option<Vec<LabelRequirement>> {
    Selector::parse(selector)
        .ok()
        .map(|s| s.requirements().to_vec())
}

/// A field selector's requirements, `None` when it does not parse (see
/// [`parse_field_selector`]).
pub fn field_requirements(selector: &str) -> Option<Vec<FieldRequirement>> {
    parse_field_selector(selector).ok()
}

/// Upstream `fields.ParseSelector`: terms split on unescaped `,`, each
/// `field=value`, `field==value` or `field!=value` (first operator found, scanning
/// left to right), values unescaped (`\\`, `\,`, `\=`).
fn parse_field_selector(selector: &str) -> Result<Vec<FieldRequirement>, ()> {
    let mut terms = Vec::new();
    let mut part_list = split_terms(selector);
    part_list.sort();
    for part in part_list {
        if part.is_empty() {
            continue;
        }
        let (field, op, rhs) = split_term(&part).ok_or(())?;
        let value = unescape_field_value(rhs)?;
        terms.push(FieldRequirement {
            field: field.to_string(),
            equals: op != "!=",
            value,
        });
    }
    Ok(terms)
}

fn split_terms(selector: &str) -> Vec<String> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut escaping = false;
    for c in selector.chars() {
        if escaping {
            current.push(c);
            escaping = false;
        } else if c == '\\' {
            current.push(c);
            escaping = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    terms.push(current);
    terms
}

fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_field_value(s: &str) -> Result<String, ()> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return Err(()),
            }
        } else if c == ',' || c == '=' {
            // Unescaped separators in a value are invalid upstream.
            return Err(());
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Upstream `path.IsValidPathSegmentName`.
fn is_valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// Go's `url.ParseQuery`, keeping pairs in order; pairs with invalid escapes or a
/// `;` are dropped (Go reports an error for them, which `URL.Query()` ignores).
fn parse_query(query: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for pair in query.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if let (Some(k), Some(v)) = (strict_decode(k), strict_decode(v)) {
            out.push((k, v));
        }
    }
    out
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Query-component decoding (`+` is a space); `None` on an invalid escape.
fn strict_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = hex_val(*b.get(i + 1)?)?;
                let lo = hex_val(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Path decoding (`+` stays); invalid escapes are kept literally (Go's server would
/// have rejected such a request before it got here).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                b.get(i + 1).copied().and_then(hex_val),
                b.get(i + 2).copied().and_then(hex_val),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream `TestGetAPIRequestInfo` success cases:
    /// (method, url, verb, prefix, group, version, namespace, resource, subresource, name, parts).
    #[allow(clippy::type_complexity)]
    #[rustfmt::skip]
    const SUCCESS: &[(&str, &str, &str, &str, &str, &str, &str, &str, &str, &str, &[&str])] = &[
        ("GET", "/api/v1/namespaces", "list", "api", "", "v1", "", "namespaces", "", "", &["namespaces"]),
        ("GET", "/api/v1/namespaces/other", "get", "api", "", "v1", "other", "namespaces", "", "other", &["namespaces", "other"]),
        ("GET", "/api/v1/namespaces/other/pods", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("HEAD", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/namespaces/other/pods", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("PATCH", "/api/v1/namespaces/new-namespace", "patch", "api", "", "v1", "", "namespaces", "", "new-namespace", &["namespaces", "new-namespace"]),
        // special verbs
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "proxy", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "proxy", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo", "subpath", "not", "a", "subresource"]),
        ("GET", "/api/v1/watch/pods", "watch", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/pods?watch=true", "watch", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/pods?watch=false", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/watch/namespaces/other/pods", "watch", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods?watch=1", "watch", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        // subresource identification
        ("GET", "/api/v1/namespaces/other/pods/foo/status", "get", "api", "", "v1", "other", "pods", "status", "foo", &["pods", "foo", "status"]),
        ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "get", "api", "", "v1", "other", "pods", "proxy", "foo", &["pods", "foo", "proxy", "subpath"]),
        ("PUT", "/api/v1/namespaces/other/finalize", "update", "api", "", "v1", "other", "namespaces", "finalize", "other", &["namespaces", "other", "finalize"]),
        ("PUT", "/api/v1/namespaces/other/status", "update", "api", "", "v1", "other", "namespaces", "status", "other", &["namespaces", "other", "status"]),
        // verb identification
        ("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("POST", "/api/v1/namespaces/other/pods", "create", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        // deletecollection verb identification
        ("DELETE", "/api/v1/nodes", "deletecollection", "api", "", "v1", "", "nodes", "", "", &["nodes"]),
        ("DELETE", "/api/v1/namespaces", "deletecollection", "api", "", "v1", "", "namespaces", "", "", &["namespaces"]),
        ("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("DELETE", "/apis/extensions/v1/namespaces/other/pods", "deletecollection", "apis", "extensions", "v1", "other", "pods", "", "", &["pods"]),
        // api group identification
        ("POST", "/apis/extensions/v1/namespaces/other/pods", "create", "apis", "extensions", "v1", "other", "pods", "", "", &["pods"]),
        // api version identification
        ("POST", "/apis/extensions/v1beta3/namespaces/other/pods", "create", "apis", "extensions", "v1beta3", "other", "pods", "", "", &["pods"]),
    ];

    fn split(url: &str) -> (&str, Option<&str>) {
        match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        }
    }

    #[test]
    fn upstream_success_cases() {
        for &(method, url, verb, prefix, group, version, ns, resource, sub, name, parts) in SUCCESS
        {
            let (path, query) = split(url);
            let info = request_info(method, path, query).unwrap();
            assert!(info.is_resource_request, "{url}");
            assert_eq!(info.verb, verb, "verb {method} {url}");
            assert_eq!(info.api_prefix, prefix, "prefix {url}");
            assert_eq!(info.api_group, group, "group {url}");
            assert_eq!(info.api_version, version, "version {url}");
            assert_eq!(info.namespace, ns, "namespace {url}");
            assert_eq!(info.resource, resource, "resource {url}");
            assert_eq!(info.subresource, sub, "subresource {url}");
            assert_eq!(info.name, name, "name {url}");
            assert_eq!(info.parts, parts, "parts {url}");
            assert_eq!(info.path, path);
        }
    }

    #[test]
    fn upstream_non_resource_cases() {
        for path in [
            "/",
            "/api/version/",
            "/apis/group/version/",
            "/badprefix/version/resource",
            "/apis/version/resource",
            "/not-api/version/resource",
            "/apis/extensions/v1beta1",
            "/apis/extensions/v1beta1/",
            "/api/version",
            "/api",
            "",
            "/healthz",
            "/openapi/v2",
        ] {
            let info = request_info("GET", path, None).unwrap();
            assert!(!info.is_resource_request, "{path:?}");
            assert_eq!(info.verb, "get");
            assert_eq!(info.path, path);
        }
        assert_eq!(request_info("POST", "/healthz", None).unwrap().verb, "post");
        for (path, expected) in [
            ("/api/version/resource", true),
            ("/apis/group/version/resource/name/subresource", true),
            ("/api/version/resource/name/subresource", true),
            ("/apis/batch/v1/job", true),
            ("/apis/batch/v1/job/foo", true),
            ("/apis/batch/v1/job/foo/scale", true),
        ] {
            assert_eq!(
                request_info("GET", path, None).unwrap().is_resource_request,
                expected,
                "{path}"
            );
        }
    }

    #[test]
    fn upstream_field_selector_cases() {
        for (url, name, verb) in [
            ("/apis/group/version/resource", "", "list"),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=name1",
                "name1",
                "list",
            ),
            (
                "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1",
                "name1",
                "watch",
            ),
            (
                "/apis/group/version/resource?fieldSelector=foo=bar",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true",
                "",
                "watch",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false",
                "",
                "list",
            ),
            // Ferrokube additions around the same rules.
            (
                "/apis/group/version/resource?fieldSelector=metadata.name%3D%3Dn2",
                "n2",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name!=n2",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=spec.x=1,metadata.name=n3",
                "n3",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=a%2Fb",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=..",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=n4&limit=x",
                "",
                "list",
            ),
            (
                "/apis/group/version/resource?fieldSelector=metadata.name=n5&limit=10",
                "n5",
                "list",
            ),
            ("/apis/group/version/resource?watch=TRUE", "", "watch"),
            ("/apis/group/version/resource?watch=", "", "watch"),
            (
                "/apis/group/version/resource?watch=False&watch=true",
                "",
                "list",
            ),
            ("/apis/group/version/resource?watch=%zz", "", "list"),
        ] {
            let (path, query) = split(url);
            let info = request_info("GET", path, query).unwrap();
            assert_eq!(info.name, name, "{url}");
            assert_eq!(info.verb, verb, "{url}");
        }
    }

    /// AuthorizeWithSelectors: the field selector of a list, watch or deletecollection
    /// reaches the authorizers as requirements; an unparsable one as none.
    #[test]
    fn field_selectors_reach_the_authorizers() {
        let selector = |method: &str, path: &str, query: &str| {
            request_info(method, path, Some(query))
                .unwrap()
                .field_selector
                .into_iter()
                .map(|r| (r.field, r.equals, r.value))
                .collect::<Vec<_>>()
        };
        let pods = "/api/v1/pods";
        assert_eq!(
            selector(
                "GET",
                pods,
                "fieldSelector=spec.nodeName%3Dn1,status.phase!%3DFailed"
            ),
            [
                ("spec.nodeName".to_string(), true, "n1".to_string()),
                ("status.phase".to_string(), false, "Failed".to_string()),
            ]
        );
        assert_eq!(
            selector("GET", pods, "watch=1&fieldSelector=spec.nodeName%3D%3Dn1").len(),
            1
        );
        assert_eq!(
            selector("DELETE", "/api/v1/namespaces/d/pods", "fieldSelector=a%3Db").len(),
            1
        );
        assert!(selector("GET", pods, "fieldSelector=no-operator").is_empty());
        assert!(selector("GET", "/api/v1/namespaces/d/pods/p", "fieldSelector=a%3Db").is_empty());
    }

    /// The label selector likewise; an unparsable one is none, and (as any invalid
    /// list option upstream) voids the name a field selector gave.
    #[test]
    fn label_selectors_reach_the_authorizers() {
        let info = |method: &str, path: &str, query: &str| {
            request_info(method, path, Some(query)).unwrap()
        };
        let keys = |info: RequestInfo| {
            info.label_selector
                .iter()
                .map(|r| (r.key().to_string(), r.operator().as_str()))
                .collect::<Vec<_>>()
        };
        let pods = "/api/v1/pods";
        assert_eq!(
            keys(info("GET", pods, "labelSelector=tier%3Dweb,!canary")),
            [("canary".to_string(), "!"), ("tier".to_string(), "=")]
        );
        assert_eq!(
            keys(info(
                "DELETE",
                "/api/v1/namespaces/d/pods",
                "labelSelector=a%20in%20(x,y)"
            )),
            [("a".to_string(), "in")]
        );
        assert!(keys(info("GET", pods, "labelSelector=a%3D%3D%3D")).is_empty());
        assert!(
            keys(info(
                "GET",
                "/api/v1/namespaces/d/pods/p",
                "labelSelector=a"
            ))
            .is_empty()
        );
        let bad_labels = info(
            "GET",
            pods,
            "fieldSelector=metadata.name%3Dp&labelSelector=%3D",
        );
        assert_eq!(bad_labels.name, "");
        assert_eq!(bad_labels.field_selector.len(), 1);
    }

    #[test]
    fn special_verb_without_resource_is_an_error_with_partial_info() {
        let err = request_info("GET", "/api/v1/watch", None).unwrap_err();
        assert!(err.partial.is_resource_request);
        assert_eq!(err.partial.api_version, "v1");
        assert!(
            err.to_string()
                .contains("unable to determine kind and namespace")
        );
        let attrs = request_attributes("GET", "/apis/apps/v1/proxy", None);
        assert!(attrs.resource_request);
        assert_eq!(attrs.api_group, "apps");
        assert_eq!(attrs.verb, "get");
    }

    #[test]
    fn unknown_methods_and_decoding() {
        assert_eq!(
            request_info("OPTIONS", "/api/v1/pods", None).unwrap().verb,
            ""
        );
        let info = request_info("GET", "/api/v1/namespaces/a%2Fb/pods", None).unwrap();
        assert_eq!(info.path, "/api/v1/namespaces/a/b/pods");
        assert_eq!(info.namespace, "a");
        assert_eq!(info.resource, "b");
        let info = request_info("GET", "/api/v1/namespaces/x/pods/a+b%zz", None).unwrap();
        assert_eq!(info.name, "a+b%zz");
    }

    #[test]
    fn attributes_from_request() {
        let attrs = request_attributes(
            "POST",
            "/apis/apps/v1/namespaces/ns/deployments",
            Some("dryRun=All"),
        );
        assert_eq!(attrs.verb, "create");
        assert_eq!(attrs.api_group, "apps");
        assert_eq!(attrs.api_version, "v1");
        assert_eq!(attrs.namespace, "ns");
        assert_eq!(attrs.resource, "deployments");
        assert!(attrs.resource_request);
        assert_eq!(attrs.user, UserInfo::default());
        let attrs = request_attributes("GET", "/version", None);
        assert!(!attrs.resource_request);
        assert_eq!(
            (attrs.verb.as_str(), attrs.path.as_str()),
            ("get", "/version")
        );
    }

    #[test]
    fn field_selector_parser() {
        assert!(parse_field_selector("").unwrap().is_empty());
        assert!(parse_field_selector("a").is_err());
        assert!(parse_field_selector("a=b\\").is_err());
        assert!(parse_field_selector("a=b\\x").is_err());
        let t = parse_field_selector("a=b\\,c").unwrap();
        assert_eq!((t[0].field.as_str(), t[0].value.as_str()), ("a", "b,c"));
        assert!(parse_field_selector("a=b=c").is_err());
        let t = parse_field_selector("x!=y").unwrap();
        assert!(!t[0].equals);
    }
}
