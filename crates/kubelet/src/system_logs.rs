//! The kubelet's `/logs/` endpoint (upstream `enableSystemLogHandler`): the node's log
//! directory (`/var/log`) served as Go's `http.FileServer(http.Dir(...))` serves it —
//! directory listings, files streamed, Go's redirects and content types — but never a
//! path outside the directory. Layer: the kubelet's HTTP server; no runtime or API access.

use std::convert::Infallible;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};

use crate::server::{method_not_allowed, not_found};
use crate::streaming::{Body, text};

/// `/logs` and `/logs/...` (upstream `enableSystemLogHandler`: Go's
/// `http.StripPrefix("/logs/", http.FileServer(http.Dir("/var/log")))`) served from
/// `dir`: GET only; `None` is the handler turned off. `query` only travels along in
/// redirects: the node log query (`?query=`, feature gate NodeLogQuery, off by default)
/// is not implemented, so a query lists or serves the path like upstream with the gate
/// off.
pub(crate) async fn system_logs(
    dir: Option<PathBuf>,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Response<Body> {
    let Some(dir) = dir else {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "logs endpoint is disabled.\n",
        );
    };
    if method != Method::GET {
        return method_not_allowed();
    }
    let Some(rest) = path.strip_prefix("/logs") else {
        return not_found();
    };
    if rest.is_empty() {
        // Upstream answers 404 (`StripPrefix("/logs/")`); the directory's own URL is
        // friendlier.
        return redirect(&with_query("logs/".into(), query));
    }
    let (rest, query) = (rest.to_owned(), query.map(str::to_owned));
    let answer =
        tokio::task::spawn_blocking(move || system_logs_answer(&dir, &rest, query.as_deref()))
            .await;
    match answer {
        Ok(LogsAnswer::Redirect(location)) => redirect(&location),
        Ok(LogsAnswer::Listing { html, modified }) => {
            let mut r = text(StatusCode::OK, html);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            set_last_modified(&mut r, modified);
            r
        }
        Ok(LogsAnswer::File {
            file,
            size,
            content_type,
            modified,
        }) => {
            let mut r = Response::new(file_body(file, size));
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            set_last_modified(&mut r, modified);
            r
        }
        Ok(LogsAnswer::Error(code, msg)) => text(code, msg),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A 301 to `location` (relative, as Go's `localRedirect`).
fn redirect(location: &str) -> Response<Body> {
    let mut r = text(StatusCode::MOVED_PERMANENTLY, "");
    r.headers_mut().remove(header::CONTENT_TYPE);
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn with_query(mut location: String, query: Option<&str>) -> String {
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(q);
    }
    location
}

/// `Last-Modified` in HTTP's date format, left out for an unknown or epoch time (Go's
/// `setLastModified`).
fn set_last_modified(r: &mut Response<Body>, modified: Option<SystemTime>) {
    let Some(t) = modified
        .and_then(|m| jiff::Timestamp::try_from(m).ok())
        .filter(|t| t.as_second() != 0)
    else {
        return;
    };
    let date = t.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    if let Ok(v) = HeaderValue::from_str(&date) {
        r.headers_mut().insert(header::LAST_MODIFIED, v);
    }
}

/// The first `size` bytes of `file`, read as the client takes them (a log that grows
/// while it is sent is cut at the size announced; one that shrinks ends the body early,
/// which the client sees as a short read, as with Go's server).
fn file_body(file: std::fs::File, size: u64) -> Body {
    use tokio::io::AsyncReadExt as _;
    const CHUNK: u64 = 64 << 10;
    let file = tokio::fs::File::from_std(file);
    let chunks = futures::stream::unfold((file, size), |(mut file, left)| async move {
        if left == 0 {
            return None;
        }
        let mut buf = vec![0u8; left.min(CHUNK) as usize];
        match file.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                let data = Frame::data(Bytes::from(buf));
                Some((Ok::<_, Infallible>(data), (file, left - n as u64)))
            }
        }
    });
    StreamBody::new(chunks).boxed()
}

/// What a `/logs/...` request gets.
#[derive(Debug)]
enum LogsAnswer {
    /// 301 to this relative location.
    Redirect(String),
    /// A directory's HTML listing.
    Listing {
        html: String,
        modified: Option<SystemTime>,
    },
    /// A file to send (its size when opened).
    File {
        file: std::fs::File,
        size: u64,
        content_type: &'static str,
        modified: Option<SystemTime>,
    },
    /// An error with Go's `http.Error` text.
    Error(StatusCode, &'static str),
}

/// The answer for `url_path` (the request path after `/logs`, still percent-encoded)
/// under `root`, as Go's `http.FileServer(http.Dir(root))` gives it: a directory URL
/// without its trailing slash and a file URL with one are redirected; a directory is
/// listed (or its `index.html` served); a file is opened to be sent; a missing path is
/// 404. Unlike Go's `http.Dir`, nothing outside `root` is reachable: a `..` segment is
/// refused (400) and a path that resolves outside `root` through a symlink is 404, as
/// are files that are neither regular files nor directories.
fn system_logs_answer(root: &Path, url_path: &str, query: Option<&str>) -> LogsAnswer {
    let Some(mut url) = percent_decode_path(url_path) else {
        return LogsAnswer::Error(StatusCode::BAD_REQUEST, "invalid URL escape\n");
    };
    if !url.starts_with(b"/") {
        url.insert(0, b'/');
    }
    let segments: Vec<&[u8]> = url
        .split(|b| *b == b'/')
        .filter(|s| !s.is_empty() && *s != b".")
        .collect();
    if url.contains(&0) || segments.iter().any(|s| *s == b"..") {
        return LogsAnswer::Error(StatusCode::BAD_REQUEST, "invalid URL path\n");
    }
    let redirect_to = |to: &[u8]| LogsAnswer::Redirect(with_query(href(to), query));
    if url.ends_with(b"/index.html") {
        return redirect_to(b"./");
    }
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) => return io_error(&e),
    };
    let mut target = root.clone();
    target.extend(segments.iter().map(|s| OsStr::from_bytes(s)));
    let (file, meta) = match open_within(&root, &target) {
        Ok(opened) => opened,
        Err(answer) => return answer,
    };
    let trailing_slash = url.ends_with(b"/");
    if meta.is_dir() && !trailing_slash {
        let mut to = go_path_base(&url).to_vec();
        to.push(b'/');
        return redirect_to(&to);
    }
    if !meta.is_dir() && trailing_slash {
        let base = go_path_base(&url);
        if base == b"/" || base == b"." {
            return LogsAnswer::Error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "http: attempting to traverse a non-directory\n",
            );
        }
        return redirect_to(&[b"../", base].concat());
    }
    if !meta.is_dir() {
        return file_answer(file, &meta, segments.last().copied().unwrap_or_default());
    }
    // A directory: its index.html when there is one, else the listing.
    if let Ok((index, index_meta)) = open_within(&root, &target.join("index.html"))
        && index_meta.is_file()
    {
        return file_answer(index, &index_meta, b"index.html");
    }
    let entries = std::fs::read_dir(fd_path(&file).unwrap_or(target));
    // Sorted by name, then a directory's gets its `/` (a symlink to one does not: Go
    // looks at the entry's own type).
    let mut entries: Vec<(Vec<u8>, bool)> = match entries {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| {
                let name = e.file_name().as_bytes().to_vec();
                (name, e.file_type().is_ok_and(|t| t.is_dir()))
            })
            .collect(),
        Err(_) => {
            return LogsAnswer::Error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error reading directory\n",
            );
        }
    };
    entries.sort();
    let names: Vec<Vec<u8>> = entries
        .into_iter()
        .map(|(mut name, dir)| {
            if dir {
                name.push(b'/');
            }
            name
        })
        .collect();
    LogsAnswer::Listing {
        html: dir_listing(&names),
        modified: meta.modified().ok(),
    }
}

/// Opens `path` if it resolves (symlinks followed) to a directory or regular file inside
/// `root` (canonical), checked again on the opened descriptor so a symlink swapped in
/// meanwhile does not lead out.
fn open_within(root: &Path, path: &Path) -> Result<(std::fs::File, std::fs::Metadata), LogsAnswer> {
    use std::os::unix::fs::OpenOptionsExt as _;
    const NOT_FOUND: LogsAnswer = LogsAnswer::Error(StatusCode::NOT_FOUND, "404 page not found\n");
    let real = std::fs::canonicalize(path).map_err(|e| io_error(&e))?;
    if !real.starts_with(root) {
        return Err(NOT_FOUND);
    }
    // Non-blocking, so a FIFO does not hang the open; it is refused below.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&real)
        .map_err(|e| io_error(&e))?;
    if let Some(opened) = fd_path(&file).and_then(|p| std::fs::read_link(p).ok())
        && !opened.starts_with(root)
    {
        return Err(NOT_FOUND);
    }
    let meta = file.metadata().map_err(|e| io_error(&e))?;
    if !(meta.is_dir() || meta.is_file()) {
        return Err(NOT_FOUND);
    }
    Ok((file, meta))
}

/// `/proc/self/fd/<fd>` of an open file, when /proc is there.
fn fd_path(file: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd as _;
    let p = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    p.exists().then_some(p)
}

/// Go's `toHTTPError`: 404 for a missing path (or one through a non-directory), 403 for
/// a permission error, 500 otherwise; never the error's own text.
fn io_error(e: &std::io::Error) -> LogsAnswer {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory => {
            LogsAnswer::Error(StatusCode::NOT_FOUND, "404 page not found\n")
        }
        ErrorKind::PermissionDenied => LogsAnswer::Error(StatusCode::FORBIDDEN, "403 Forbidden\n"),
        _ => LogsAnswer::Error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500 Internal Server Error\n",
        ),
    }
}

fn file_answer(file: std::fs::File, meta: &std::fs::Metadata, name: &[u8]) -> LogsAnswer {
    use std::os::unix::fs::FileExt as _;
    let mut head = [0u8; 512];
    let n = file.read_at(&mut head, 0).unwrap_or(0);
    LogsAnswer::File {
        file,
        size: meta.len(),
        content_type: content_type(name, &head[..n]),
        modified: meta.modified().ok(),
    }
}

/// Go's `path.Base`: the last element, trailing slashes dropped; `/` for the root.
fn go_path_base(p: &[u8]) -> &[u8] {
    let trimmed = {
        let mut end = p.len();
        while end > 0 && p[end - 1] == b'/' {
            end -= 1;
        }
        &p[..end]
    };
    if trimmed.is_empty() {
        return if p.is_empty() { b"." } else { b"/" };
    }
    match trimmed.iter().rposition(|b| *b == b'/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

/// A URL path's `%XX` escapes decoded (a `+` stays a `+`); `None` for a bad escape.
fn percent_decode_path(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Go's directory listing (`net/http` `dirList`): names sorted, a directory's with a
/// trailing `/`, each linked relatively.
fn dir_listing(names: &[Vec<u8>]) -> String {
    let mut html = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for name in names {
        html.push_str(&format!(
            "<a href=\"{}\">{}</a>\n",
            href(name),
            html_escape(&String::from_utf8_lossy(name))
        ));
    }
    html.push_str("</pre>\n");
    html
}

/// A relative URL for the path `p` (Go's `url.URL{Path: p}.String()`): bytes outside
/// RFC 3986's path characters `%XX`-escaped (so `?` and `#` stay in the path), and `./`
/// in front when the first segment has a colon (it would read as a scheme).
fn href(p: &[u8]) -> String {
    let mut out = String::with_capacity(p.len());
    for &c in p {
        let keep = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    let first = out.split('/').next().unwrap_or("");
    if first.contains(':') {
        out.insert_str(0, "./");
    }
    out
}

/// Go's `htmlReplacer`.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A file's Content-Type as Go's `serveContent` picks it: by extension from Go's
/// built-in table, else by its first 512 bytes (gzip, UTF BOMs, text or binary; Go's
/// other signatures are left out).
fn content_type(name: &[u8], head: &[u8]) -> &'static str {
    let ext = name
        .iter()
        .rposition(|b| *b == b'.')
        .map(|i| name[i..].to_ascii_lowercase());
    let by_ext = match ext.as_deref() {
        Some(b".avif") => Some("image/avif"),
        Some(b".css") => Some("text/css; charset=utf-8"),
        Some(b".gif") => Some("image/gif"),
        Some(b".htm" | b".html") => Some("text/html; charset=utf-8"),
        Some(b".jpeg" | b".jpg") => Some("image/jpeg"),
        Some(b".js" | b".mjs") => Some("text/javascript; charset=utf-8"),
        Some(b".json") => Some("application/json"),
        Some(b".pdf") => Some("application/pdf"),
        Some(b".png") => Some("image/png"),
        Some(b".svg") => Some("image/svg+xml"),
        Some(b".wasm") => Some("application/wasm"),
        Some(b".webp") => Some("image/webp"),
        Some(b".xml") => Some("text/xml; charset=utf-8"),
        _ => None,
    };
    if let Some(t) = by_ext {
        return t;
    }
    if head.starts_with(b"\xFE\xFF") {
        return "text/plain; charset=utf-16be";
    }
    if head.starts_with(b"\xFF\xFE") {
        return "text/plain; charset=utf-16le";
    }
    if head.starts_with(b"\xEF\xBB\xBF") {
        return "text/plain; charset=utf-8";
    }
    if head.starts_with(b"\x1F\x8B\x08") {
        return "application/x-gzip";
    }
    let binary = head.iter().any(|&b| {
        b <= 0x08 || b == 0x0B || (0x0E..=0x1A).contains(&b) || (0x1C..=0x1F).contains(&b)
    });
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log directory: files, a subdirectory, a symlink inside and one out of it.
    fn log_tree() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let p = root.path();
        std::fs::write(p.join("syslog"), "line one\nline two\n").unwrap();
        std::fs::write(p.join("wtmp"), [0u8, 1, 2, 3]).unwrap();
        std::fs::write(p.join("x y?#.log"), "odd\n").unwrap();
        std::fs::write(p.join("a:b"), "colon\n").unwrap();
        std::fs::write(p.join("<b>&'\""), "html\n").unwrap();
        std::fs::create_dir(p.join("pods")).unwrap();
        std::fs::write(p.join("pods/0.log"), "pod log\n").unwrap();
        std::fs::create_dir(p.join("site")).unwrap();
        std::fs::write(p.join("site/index.html"), "<p>hi</p>").unwrap();
        std::fs::write(outside.path().join("secret"), "secret\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), p.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), p.join("secret")).unwrap();
        std::os::unix::fs::symlink(p.join("pods/0.log"), p.join("current.log")).unwrap();
        std::os::unix::fs::symlink(p.join("pods"), p.join("pods-link")).unwrap();
        std::os::unix::fs::symlink(p.join("nowhere"), p.join("dangling")).unwrap();
        (root, outside)
    }

    fn read_all(file: &std::fs::File) -> String {
        use std::io::Read as _;
        let mut s = String::new();
        let mut f = file.try_clone().unwrap();
        f.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn system_logs_list_directories() {
        let (root, _outside) = log_tree();
        let LogsAnswer::Listing { html, modified } = system_logs_answer(root.path(), "/", None)
        else {
            panic!("not a listing")
        };
        assert!(modified.is_some());
        assert_eq!(
            html,
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
             <a href=\"%3Cb%3E&%27%22\">&lt;b&gt;&amp;&#39;&#34;</a>\n\
             <a href=\"./a:b\">a:b</a>\n\
             <a href=\"current.log\">current.log</a>\n\
             <a href=\"dangling\">dangling</a>\n\
             <a href=\"escape\">escape</a>\n\
             <a href=\"pods/\">pods/</a>\n\
             <a href=\"pods-link\">pods-link</a>\n\
             <a href=\"secret\">secret</a>\n\
             <a href=\"site/\">site/</a>\n\
             <a href=\"syslog\">syslog</a>\n\
             <a href=\"wtmp\">wtmp</a>\n\
             <a href=\"x%20y%3F%23.log\">x y?#.log</a>\n\
             </pre>\n"
        );
        // A directory, also through a symlink inside the root, and with `.` and `//`.
        for path in ["/pods/", "/pods-link/", "/./pods//", "//pods/."] {
            let answer = system_logs_answer(root.path(), path, Some("query=kubelet"));
            let want = if path.ends_with('/') {
                "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n\
                 <pre>\n<a href=\"0.log\">0.log</a>\n</pre>\n"
            } else {
                // path.Base("//pods/.") is ".": Go's redirect to "./".
                assert!(
                    matches!(&answer, LogsAnswer::Redirect(l) if l == "./?query=kubelet"),
                    "{path}: {answer:?}"
                );
                continue;
            };
            assert!(
                matches!(&answer, LogsAnswer::Listing { html, .. } if html == want),
                "{path}: {answer:?}"
            );
        }
        // A directory with an index.html is that page.
        match system_logs_answer(root.path(), "/site/", None) {
            LogsAnswer::File {
                file, content_type, ..
            } => {
                assert_eq!(content_type, "text/html; charset=utf-8");
                assert_eq!(read_all(&file), "<p>hi</p>");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn system_logs_redirects_like_go() {
        let (root, _outside) = log_tree();
        let redirect =
            |path: &str, query: Option<&str>| match system_logs_answer(root.path(), path, query) {
                LogsAnswer::Redirect(l) => l,
                other => panic!("{path}: {other:?}"),
            };
        // A directory without its slash; a file with one; .../index.html to ./.
        assert_eq!(redirect("/pods", None), "pods/");
        assert_eq!(redirect("/pods", Some("a=1")), "pods/?a=1");
        assert_eq!(redirect("/pods-link", None), "pods-link/");
        assert_eq!(redirect("/syslog/", None), "../syslog");
        assert_eq!(redirect("/x%20y%3F%23.log/", None), "../x%20y%3F%23.log");
        assert_eq!(redirect("/site/index.html", None), "./");
    }

    #[test]
    fn system_logs_serve_files() {
        let (root, _outside) = log_tree();
        let file = |path: &str| match system_logs_answer(root.path(), path, None) {
            LogsAnswer::File {
                file,
                size,
                content_type,
                modified,
            } => {
                assert!(modified.is_some());
                (read_all(&file), size, content_type)
            }
            other => panic!("{path}: {other:?}"),
        };
        assert_eq!(
            file("/syslog"),
            (
                "line one\nline two\n".into(),
                18,
                "text/plain; charset=utf-8"
            )
        );
        assert_eq!(file("/pods/0.log").0, "pod log\n");
        assert_eq!(file("/pods/%30.log").0, "pod log\n", "escapes are decoded");
        assert_eq!(
            file("/current.log").0,
            "pod log\n",
            "a symlink inside the root"
        );
        assert_eq!(file("/pods-link/0.log").0, "pod log\n");
        assert_eq!(file("/x%20y%3F%23.log").0, "odd\n");
        assert_eq!(file("/wtmp").2, "application/octet-stream");
    }

    #[test]
    fn system_logs_stay_inside_the_root() {
        let (root, _outside) = log_tree();
        let error = |path: &str| match system_logs_answer(root.path(), path, None) {
            LogsAnswer::Error(code, msg) => (code.as_u16(), msg),
            other => panic!("{path}: {other:?}"),
        };
        let not_found = (404, "404 page not found\n");
        let bad_path = (400, "invalid URL path\n");
        for path in [
            "/..",
            "/../etc/passwd",
            "/pods/../../etc/passwd",
            "/pods/../syslog",
            "/%2e%2e/etc/passwd",
            "/pods/%2E%2E/%2E%2E/etc",
            "/..%2fetc%2fpasswd",
            "/syslog%00",
        ] {
            assert_eq!(error(path), bad_path, "{path}");
        }
        assert_eq!(error("/%zz"), (400, "invalid URL escape\n"));
        assert_eq!(error("/%2"), (400, "invalid URL escape\n"));
        // Symlinks out of the root are not followed.
        for path in ["/secret", "/escape/", "/escape/secret", "/escape"] {
            assert_eq!(error(path), not_found, "{path}");
        }
        for path in ["/missing", "/pods/missing.log", "/syslog/x", "/dangling"] {
            assert_eq!(error(path), not_found, "{path}");
        }
        // A missing root is a 404 for everything.
        assert_eq!(
            system_logs_answer(&root.path().join("gone"), "/", None).status(),
            404
        );
    }

    impl LogsAnswer {
        fn status(&self) -> u16 {
            match self {
                LogsAnswer::Redirect(_) => 301,
                LogsAnswer::Listing { .. } | LogsAnswer::File { .. } => 200,
                LogsAnswer::Error(code, _) => code.as_u16(),
            }
        }
    }

    async fn body_of(r: Response<Body>) -> String {
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn system_logs_responses() {
        let (root, _outside) = log_tree();
        let dir = Some(root.path().to_owned());
        let r = system_logs(dir.clone(), &Method::GET, "/logs/syslog", None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "18");
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        let modified = r.headers()[header::LAST_MODIFIED].to_str().unwrap();
        assert!(
            modified.ends_with(" GMT") && modified.len() == 29,
            "{modified}"
        );
        assert_eq!(body_of(r).await, "line one\nline two\n");

        let r = system_logs(dir.clone(), &Method::GET, "/logs/", Some("query=x")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert!(body_of(r).await.contains("<a href=\"syslog\">syslog</a>\n"));

        let r = system_logs(dir.clone(), &Method::GET, "/logs/pods", None).await;
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "pods/");
        let r = system_logs(dir.clone(), &Method::GET, "/logs", Some("a=b")).await;
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "logs/?a=b");

        let r = system_logs(dir.clone(), &Method::GET, "/logs/nope", None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(body_of(r).await, "404 page not found\n");
        let r = system_logs(dir.clone(), &Method::GET, "/logs/%2e%2e/x", None).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);

        let r = system_logs(dir.clone(), &Method::POST, "/logs/syslog", None).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET");
        let r = system_logs(None, &Method::GET, "/logs/syslog", None).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(body_of(r).await, "logs endpoint is disabled.\n");
    }

    #[tokio::test]
    async fn large_files_are_streamed_whole() {
        let root = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(1u32 << 20) + 17)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        std::fs::write(root.path().join("big.log"), &data).unwrap();
        let r = system_logs(
            Some(root.path().to_owned()),
            &Method::GET,
            "/logs/big.log",
            None,
        )
        .await;
        assert_eq!(
            r.headers()[header::CONTENT_LENGTH],
            data.len().to_string().as_str()
        );
        let mut body = r.into_body();
        let mut frames = 0;
        let mut got = vec![];
        while let Some(frame) = body.frame().await {
            got.extend_from_slice(frame.unwrap().data_ref().unwrap());
            frames += 1;
        }
        assert_eq!(got, data);
        assert!(frames > 1, "sent in chunks");
    }

    #[test]
    fn hrefs_and_content_types() {
        assert_eq!(href(b"pods/"), "pods/");
        assert_eq!(href(b"a b"), "a%20b");
        assert_eq!(href("é".as_bytes()), "%C3%A9");
        assert_eq!(href(b"k=v;x,y@z$+&~"), "k=v;x,y@z$+&~");
        assert_eq!(href(b"a:b/c"), "./a:b/c");
        assert_eq!(href(b"a/b:c"), "a/b:c");
        assert_eq!(href(b"100%"), "100%25");
        assert_eq!(go_path_base(b"/a/b/"), b"b");
        assert_eq!(go_path_base(b"/"), b"/");
        assert_eq!(go_path_base(b"/a/."), b".");
        assert_eq!(
            content_type(b"kubelet.log", b"I0101 hello\n"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(content_type(b"empty", b""), "text/plain; charset=utf-8");
        assert_eq!(
            content_type(b"x.log.gz", b"\x1F\x8B\x08\x00"),
            "application/x-gzip"
        );
        assert_eq!(
            content_type(b"journal", b"LPKSHHRH\x00\x00"),
            "application/octet-stream"
        );
        assert_eq!(content_type(b"a.json", b"{}"), "application/json");
        assert_eq!(content_type(b"A.HTML", b""), "text/html; charset=utf-8");
        assert_eq!(
            content_type(b"utf16", b"\xFF\xFEa\x00"),
            "text/plain; charset=utf-16le"
        );
    }
}
