//! The front-proxy request headers (upstream's `headerrequest`): the settings of the
//! `--requestheader-*` flags but the CA file, and the user a front proxy names in
//! them. The apiserver's request-header authenticator and the delegated
//! authentication of kube-scheduler, kube-controller-manager and metrics-server both
//! read the headers through this; each checks the proxy's certificate its own way.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The request-header settings (`--requestheader-*` but the CA file), as upstream's
/// `authenticatorfactory.RequestHeaderConfig`. Header names are matched without
/// regard to case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// `--requestheader-username-headers`.
    pub username_headers: Vec<String>,
    /// `--requestheader-uid-headers`.
    pub uid_headers: Vec<String>,
    /// `--requestheader-group-headers`.
    pub group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix`.
    pub extra_header_prefixes: Vec<String>,
    /// `--requestheader-allowed-names`: common names a front proxy's certificate may
    /// have; empty allows every certificate of the request-header CA.
    pub allowed_names: Vec<String>,
}

/// The user a front proxy names in the headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderUser {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl RequestHeaderConfig {
    /// Upstream's `RequestHeaderAuthenticationOptions.Validate`: no name in any list
    /// may be empty or only white space (`checkForWhiteSpaceOnly`).
    pub fn validate(&self) -> Result<(), String> {
        for (flag, values) in [
            ("requestheader-username-headers", &self.username_headers),
            ("requestheader-uid-headers", &self.uid_headers),
            ("requestheader-group-headers", &self.group_headers),
            (
                "requestheader-extra-headers-prefix",
                &self.extra_header_prefixes,
            ),
            ("requestheader-allowed-names", &self.allowed_names),
        ] {
            if values.iter().any(|v| v.trim().is_empty()) {
                return Err(format!("empty value in {flag:?}"));
            }
        }
        Ok(())
    }

    /// Removes the headers this configuration reads (upstream's
    /// `ClearAuthenticationHeaders`), so they are not passed on by proxies.
    pub fn clear_headers(&self, headers: &mut HeaderMap) {
        for name in self
            .username_headers
            .iter()
            .chain(&self.uid_headers)
            .chain(&self.group_headers)
        {
            headers.remove(name.trim().to_ascii_lowercase().as_str());
        }
        let matching: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                self.extra_header_prefixes
                    .iter()
                    .any(|prefix| strip_prefix_ignore_case(name.as_str(), prefix.trim()).is_some())
            })
            .cloned()
            .collect();
        for name in matching {
            headers.remove(name);
        }
    }

    /// The user the headers name: the first non-empty username header, else `None`;
    /// uid likewise; every non-empty group value; extra from each prefixed header,
    /// keyed by the rest of its name lower-cased and %-unescaped.
    pub fn user_from_headers(&self, headers: &HeaderMap) -> Option<HeaderUser> {
        let name = first_value(headers, &self.username_headers)?;
        let uid = first_value(headers, &self.uid_headers).unwrap_or_default();
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.trim()).iter())
            .map(header_string)
            .filter(|v| !v.is_empty())
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // Prefixes in their order, so that a key's values keep it (as upstream).
        for prefix in &self.extra_header_prefixes {
            let prefix = prefix.trim();
            for (header, value) in headers {
                // http's header names are lower case already.
                let Some(rest) = strip_prefix_ignore_case(header.as_str(), prefix) else {
                    continue;
                };
                extra
                    .entry(path_unescape(rest))
                    .or_default()
                    .push(header_string(value));
            }
        }
        Some(HeaderUser {
            name,
            uid,
            groups,
            extra,
        })
    }
}

/// Go's `Header.Get` over several names: the first non-empty first value.
fn first_value(headers: &HeaderMap, names: &[String]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| headers.get(n.trim()))
        .map(header_string)
        .find(|v| !v.is_empty())
}

/// A header value as Go sees it: its bytes (not valid UTF-8 ones replaced).
fn header_string(value: &HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).into_owned()
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Go's `url.PathUnescape`, or the input as it is when an escape is malformed
/// (upstream's `unescapeExtraKey`).
fn path_unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let digit = |at: usize| bytes.get(at).and_then(|&d| char::from(d).to_digit(16));
        match (digit(i + 1), digit(i + 2)) {
            (Some(hi), Some(lo)) => {
                out.extend(u8::try_from(hi * 16 + lo).ok());
                i += 3;
            }
            _ => return s.to_string(),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeadm() -> RequestHeaderConfig {
        RequestHeaderConfig {
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_header_prefixes: vec!["X-Remote-Extra-".into()],
            allowed_names: vec!["front-proxy-client".into()],
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_headers_name_the_user() {
        let config = RequestHeaderConfig {
            username_headers: vec!["X-First".into(), "X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_header_prefixes: vec!["X-Remote-Extra-".into()],
            allowed_names: vec![],
        };
        let user = config
            .user_from_headers(&headers(&[
                ("x-first", ""),
                ("x-remote-user", "alice"),
                ("x-remote-uid", "u-1"),
                ("x-remote-group", "dev"),
                ("x-remote-group", ""),
                ("x-remote-group", "ops"),
                ("x-remote-extra-scopes", "a"),
                ("x-remote-extra-scopes", "b"),
                ("X-Remote-Extra-Acme.com%2Fproject", "p"),
                ("x-remote-extra-bad%zz", "v"),
            ]))
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, ["dev", "ops"]);
        let extra: Vec<(&str, Vec<&str>)> = user
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            extra,
            [
                ("acme.com/project", vec!["p"]),
                ("bad%zz", vec!["v"]),
                ("scopes", vec!["a", "b"]),
            ]
        );
        // No username: no user, whatever else is there.
        assert!(
            config
                .user_from_headers(&headers(&[("x-remote-group", "system:masters")]))
                .is_none()
        );
    }

    #[test]
    fn blank_names_are_refused_and_the_headers_cleared() {
        let mut bad = kubeadm();
        bad.group_headers.push("  ".into());
        assert_eq!(
            bad.validate().unwrap_err(),
            "empty value in \"requestheader-group-headers\""
        );
        assert_eq!(kubeadm().validate(), Ok(()));
        let mut h = headers(&[
            ("x-remote-user", "a"),
            ("x-remote-uid", "u"),
            ("x-remote-group", "g"),
            ("x-remote-extra-k", "v"),
            ("X-REMOTE-EXTRA-other", "v"),
            ("accept", "application/json"),
        ]);
        kubeadm().clear_headers(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn unescaping() {
        assert_eq!(path_unescape("a%2Fb"), "a/b");
        assert_eq!(path_unescape("a+b"), "a+b");
        assert_eq!(path_unescape("100%"), "100%");
        assert_eq!(path_unescape("%4"), "%4");
        assert_eq!(path_unescape("%e2%9c%93"), "\u{2713}");
    }
}
