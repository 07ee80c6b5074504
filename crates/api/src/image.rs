//! Container image references as upstream reads them (distribution's `reference`
//! package, through the kubelet's `parsers.ParseImageName`): the normalized repository
//! a pull secret is matched against, and whether a reference pulls `:latest` (which
//! decides the default `imagePullPolicy`).

/// The parts of a reference (`name[:tag][@digest]`, distribution's `ReferenceRegexp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    pub name: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

/// The repository of an image reference as distribution's `ParseNormalizedNamed(..).Name()`
/// gives it (what upstream's `parsers.ParseImageName` returns first): `nginx` ->
/// `docker.io/library/nginx`, `index.docker.io/x/y:1` -> `docker.io/x/y`,
/// `127.0.0.1:5001/private/busybox:latest` -> `127.0.0.1:5001/private/busybox`. `None`
/// when the reference is invalid.
pub fn normalized_repository(image: &str) -> Option<String> {
    if image.len() == 64
        && image
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        // "cannot specify 64-byte hexadecimal strings"
        return None;
    }
    let (mut domain, mut remainder) = match image.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first, rest.to_owned())
        }
        _ => ("docker.io", image.to_owned()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io";
    }
    if domain == "docker.io" && !remainder.contains('/') {
        remainder = format!("library/{remainder}");
    }
    let remote_name = remainder.split(':').next().unwrap_or_default();
    if remote_name.to_lowercase() != remote_name {
        return None;
    }
    parse(&format!("{domain}/{remainder}")).map(|r| r.name.to_owned())
}

/// A reference matching distribution's `ReferenceRegexp` (`name[:tag][@digest]`), with
/// the digest's algorithm and length checked; `None` when it does not.
pub fn parse(reference: &str) -> Option<Reference<'_>> {
    let (name_tag, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    if let Some(d) = digest {
        let (alg, hex) = d.split_once(':')?;
        let want = match alg {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return None,
        };
        if hex.len() != want || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
    }
    let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_tag[last_slash..].find(':') {
        Some(i) => {
            let tag = &name_tag[last_slash + i + 1..];
            let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && word(tag.as_bytes()[0])
                && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-');
            if !ok {
                return None;
            }
            (&name_tag[..last_slash + i], Some(tag))
        }
        None => (name_tag, None),
    };
    if name.is_empty() || name.len() > 255 {
        return None;
    }
    let all_path = |p: &str| p.split('/').all(path_component_ok);
    let valid = all_path(name)
        || name
            .split_once('/')
            .is_some_and(|(d, p)| domain_ok(d) && all_path(p));
    valid.then_some(Reference { name, tag, digest })
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn path_component_ok(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

/// `(?:domainName|\[[a-fA-F0-9:]+\])(?::[0-9]+)?` with domain name components
/// `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`.
fn domain_ok(d: &str) -> bool {
    let (host, port) = if d.starts_with('[') {
        match d.find(']') {
            Some(end) => (&d[..=end], &d[end + 1..]),
            None => return false,
        }
    } else {
        match d.rfind(':') {
            Some(i) => (&d[..i], &d[i..]),
            None => (d, ""),
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':')
    } else {
        host.split('.').all(|c| {
            !c.is_empty()
                && !c.starts_with('-')
                && !c.ends_with('-')
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
    };
    port_ok && host_ok
}

/// Whether an image reference pulls `:latest` (an explicit `latest` tag, or neither tag
/// nor digest), as upstream's `parsers.ParseImageName` decides it. References that do
/// not parse count as not `latest`, like upstream (which ignores the parse error).
pub fn is_latest(image: &str) -> bool {
    match parse(image) {
        Some(r) => r.tag == Some("latest") || (r.tag.is_none() && r.digest.is_none()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalise_like_parse_image_name() {
        let digest = "sha256:e9b0e8c4b6b05b7f3e0f1e4f6d9fbe4c9c5e5f3fbc8ad2b0a43c7aa8d6d0e0b1";
        let cases = [
            ("nginx", Some("docker.io/library/nginx")),
            ("nginx:1.25", Some("docker.io/library/nginx")),
            ("library/nginx", Some("docker.io/library/nginx")),
            ("docker.io/nginx", Some("docker.io/library/nginx")),
            (
                "index.docker.io/nginx:latest",
                Some("docker.io/library/nginx"),
            ),
            ("index.docker.io/team/app", Some("docker.io/team/app")),
            ("foo/bar/baz", Some("docker.io/foo/bar/baz")),
            ("localhost/app", Some("localhost/app")),
            ("localhost:5000/app:v1", Some("localhost:5000/app")),
            (
                "127.0.0.1:5001/private/busybox:latest",
                Some("127.0.0.1:5001/private/busybox"),
            ),
            (
                "Registry.Example.com/team/app",
                Some("Registry.Example.com/team/app"),
            ),
            ("Foo/bar", Some("Foo/bar")),
            ("[::1]:5000/app", Some("[::1]:5000/app")),
            (
                "quay.io/a__b/c-d.e_f:tag_1.0-x",
                Some("quay.io/a__b/c-d.e_f"),
            ),
            ("registry.k8s.io/pause:3.10", Some("registry.k8s.io/pause")),
            ("", None),
            ("foo/Bar", None),
            ("NGINX", None),
            ("nginx:", None),
            ("nginx:-x", None),
            ("nginx@sha256:short", None),
            ("nginx@md5:e9b0e8c4b6b05b7f3e0f1e4f6d9fbe4c", None),
            ("reg.io/app_/x", None),
            ("reg-.io/app", None),
            ("reg.io:x/app", None),
            (
                "e9b0e8c4b6b05b7f3e0f1e4f6d9fbe4c9c5e5f3fbc8ad2b0a43c7aa8d6d0e0b1",
                None,
            ),
        ];
        for (image, want) in cases {
            assert_eq!(normalized_repository(image).as_deref(), want, "{image:?}");
        }
        assert_eq!(
            normalized_repository(&format!("nginx@{digest}")).as_deref(),
            Some("docker.io/library/nginx")
        );
        assert_eq!(
            normalized_repository(&format!("reg.io:5000/a/b:v1@{digest}")).as_deref(),
            Some("reg.io:5000/a/b")
        );
        assert_eq!(
            normalized_repository(&format!("a/{}", "b".repeat(260))),
            None
        );
    }
}
