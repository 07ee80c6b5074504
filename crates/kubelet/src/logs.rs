//! Container logs as the kubelet serves them at `/containerLogs/{ns}/{pod}/{container}`
//! (upstream `pkg/kubelet/kuberuntime/logs`): the CRI log file format the runtime writes
//! (`<RFC3339Nano> <stdout|stderr> <F|P> <content>`), the `PodLogOptions` query
//! (follow, previous, timestamps, sinceSeconds, sinceTime, tailLines, limitBytes, stream)
//! and a reader that writes the selected lines into a channel, following the file while
//! the container runs.
//!
//! Parsing, option handling, tail and the output writer are pure and tested here; only
//! [`stream_log_file`] does IO.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncBufReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use k8s_openapi::api::core::v1::PodStatus;

/// Which stream a CRI log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// One parsed line of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub timestamp: Timestamp,
    pub stream: LogStream,
    /// A `P` (partial) line: the runtime split a long line; no newline follows it.
    pub partial: bool,
    /// The content without the file's trailing newline.
    pub content: &'a [u8],
}

/// Why a line of a log file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp format {0:?}")]
    BadTimestamp(String),
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type {0:?}")]
    BadStream(String),
    #[error("log tag is not found")]
    NoTag,
}

fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = line.iter().position(|&b| b == b' ')?;
    Some((&line[..i], &line[i + 1..]))
}

/// Parses one line of the CRI log format (upstream `parseCRILog`). `line` may end in
/// `\n`; it is not part of the content. Tags other than `P` count as full lines, as
/// upstream (tags may carry more `:`-separated fields in the future).
pub fn parse_cri_line(line: &[u8]) -> Result<LogLine<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (ts, rest) = split_field(line).ok_or(ParseError::NoTimestamp)?;
    let ts_str = std::str::from_utf8(ts).map_err(|_| ParseError::BadTimestamp(lossy(ts)))?;
    let timestamp: Timestamp = ts_str
        .parse()
        .map_err(|_| ParseError::BadTimestamp(ts_str.to_owned()))?;
    let (stream, rest) = split_field(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => LogStream::Stdout,
        b"stderr" => LogStream::Stderr,
        other => return Err(ParseError::BadStream(lossy(other))),
    };
    // The tag is followed by a space and the content; an empty content may drop the space.
    let (tag, content) = split_field(rest).unwrap_or((rest, b""));
    if tag.is_empty() {
        return Err(ParseError::NoTag);
    }
    let partial = tag.split(|&b| b == b':').next() == Some(b"P");
    Ok(LogLine {
        timestamp,
        stream,
        partial,
        content,
    })
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Which streams to return (`stream` query parameter: `All`, `Stdout`, `Stderr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamFilter {
    #[default]
    All,
    Stdout,
    Stderr,
}

impl StreamFilter {
    fn admits(self, s: LogStream) -> bool {
        match self {
            StreamFilter::All => true,
            StreamFilter::Stdout => s == LogStream::Stdout,
            StreamFilter::Stderr => s == LogStream::Stderr,
        }
    }
}

/// Upstream's `PodLogOptions` as the kubelet uses them, `since*` already resolved to
/// an instant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Lines older than this are skipped (`sinceSeconds` or `sinceTime`).
    pub since: Option<Timestamp>,
    /// Only the last N lines of the file (`tailLines`).
    pub tail_lines: Option<u64>,
    /// Stop after this many bytes of output (`limitBytes`).
    pub limit_bytes: Option<u64>,
    pub stream: StreamFilter,
}

/// A bad query parameter: upstream answers these with 400 (unparsable) or 422 (invalid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
}

impl OptionsError {
    /// The HTTP status upstream gives this error.
    pub fn code(&self) -> u16 {
        match self {
            OptionsError::BadRequest(_) => 400,
            OptionsError::Invalid(_) => 422,
        }
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool, OptionsError> {
    match v {
        "" | "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" => Ok(false),
        _ => Err(OptionsError::BadRequest(format!(
            "{key}: invalid boolean value {v:?}"
        ))),
    }
}

fn parse_int(key: &str, v: &str) -> Result<i64, OptionsError> {
    v.parse()
        .map_err(|_| OptionsError::BadRequest(format!("{key}: invalid integer value {v:?}")))
}

impl LogOptions {
    /// From a URL query string (as the apiserver forwards `PodLogOptions`), validated as
    /// upstream's `ValidatePodLogOptions`; `now` resolves `sinceSeconds`.
    pub fn from_query(query: Option<&str>, now: Timestamp) -> Result<LogOptions, OptionsError> {
        let mut o = LogOptions::default();
        let mut since_seconds = None;
        let mut since_time = None;
        for (k, v) in form_urlencoded_pairs(query.unwrap_or("")) {
            match k.as_str() {
                "container" => o.container = Some(v).filter(|c| !c.is_empty()),
                "follow" => o.follow = parse_bool(&k, &v)?,
                "previous" => o.previous = parse_bool(&k, &v)?,
                "timestamps" => o.timestamps = parse_bool(&k, &v)?,
                "sinceSeconds" => since_seconds = Some(parse_int(&k, &v)?),
                "sinceTime" => {
                    since_time = Some(v.parse::<Timestamp>().map_err(|_| {
                        OptionsError::BadRequest(format!("sinceTime: invalid time {v:?}"))
                    })?)
                }
                "tailLines" => {
                    let n = parse_int(&k, &v)?;
                    if n < 0 {
                        return Err(OptionsError::Invalid(format!(
                            "tailLines: Invalid value: {n}: must be greater than or equal to 0"
                        )));
                    }
                    o.tail_lines = Some(n as u64);
                }
                "limitBytes" => {
                    let n = parse_int(&k, &v)?;
                    if n < 1 {
                        return Err(OptionsError::Invalid(format!(
                            "limitBytes: Invalid value: {n}: must be greater than 0"
                        )));
                    }
                    o.limit_bytes = Some(n as u64);
                }
                "stream" => {
                    o.stream = match v.as_str() {
                        "" | "All" => StreamFilter::All,
                        "Stdout" => StreamFilter::Stdout,
                        "Stderr" => StreamFilter::Stderr,
                        _ => {
                            return Err(OptionsError::Invalid(format!(
                                "stream: Unsupported value: {v:?}: supported values: \"All\", \"Stderr\", \"Stdout\""
                            )));
                        }
                    }
                }
                _ => {}
            }
        }
        match (since_seconds, since_time) {
            (Some(_), Some(_)) => {
                return Err(OptionsError::Invalid(
                    "sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                        .into(),
                ));
            }
            (Some(s), None) => {
                if s < 1 {
                    return Err(OptionsError::Invalid(format!(
                        "sinceSeconds: Invalid value: {s}: must be greater than 0"
                    )));
                }
                o.since = Some(
                    now.checked_sub(jiff::SignedDuration::from_secs(s))
                        .unwrap_or(Timestamp::MIN),
                );
            }
            (None, t) => o.since = t,
        }
        if o.tail_lines.is_some() && o.stream != StreamFilter::All {
            return Err(OptionsError::Invalid(
                "tailLines: Forbidden: tailLines is not supported when stream is not All".into(),
            ));
        }
        Ok(o)
    }
}

fn form_urlencoded_pairs(q: &str) -> impl Iterator<Item = (String, String)> + '_ {
    q.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k), percent_decode(v))
    })
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space, `%XX` a byte).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Turns parsed lines into the bytes the client gets, applying `since`, the stream
/// filter, timestamps and `limitBytes` (upstream `logWriter`).
#[derive(Debug)]
pub struct LogWriter {
    since: Option<Timestamp>,
    stream: StreamFilter,
    timestamps: bool,
    remaining: Option<u64>,
    /// Whether the last line written per stream was partial (its continuation gets no
    /// timestamp prefix).
    open_partial: [bool; 2],
}

impl LogWriter {
    pub fn new(o: &LogOptions) -> Self {
        LogWriter {
            since: o.since,
            stream: o.stream,
            timestamps: o.timestamps,
            remaining: o.limit_bytes,
            open_partial: [false; 2],
        }
    }

    /// Whether `limitBytes` is used up (nothing more will be written).
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// The output for one raw file line; empty when the line is filtered out. A line
    /// that does not parse is skipped, as upstream logs and skips it.
    pub fn write_line(&mut self, raw: &[u8]) -> Vec<u8> {
        let Ok(line) = parse_cri_line(raw) else {
            return Vec::new();
        };
        if self.done()
            || !self.stream.admits(line.stream)
            || self.since.is_some_and(|s| line.timestamp < s)
        {
            return Vec::new();
        }
        let slot = match line.stream {
            LogStream::Stdout => 0,
            LogStream::Stderr => 1,
        };
        let mut out = Vec::with_capacity(line.content.len() + 40);
        if self.timestamps && !self.open_partial[slot] {
            out.extend_from_slice(line.timestamp.to_string().as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(line.content);
        if !line.partial {
            out.push(b'\n');
        }
        self.open_partial[slot] = line.partial;
        if let Some(rem) = &mut self.remaining {
            let n = (out.len() as u64).min(*rem);
            out.truncate(n as usize);
            *rem -= n;
        }
        out
    }
}

/// The byte offset where the last `n` lines of a file start (upstream
/// `FindTailLineStartIndex`); a final line without a newline counts as a line.
pub fn tail_start_offset(f: &mut (impl Read + Seek), n: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let size = f.seek(SeekFrom::End(0))?;
    if n == 0 {
        return Ok(size);
    }
    let mut pos = size;
    let mut newlines = 0u64;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut first = true;
    while pos > 0 {
        let len = BLOCK.min(pos);
        pos -= len;
        f.seek(SeekFrom::Start(pos))?;
        let chunk = &mut buf[..len as usize];
        f.read_exact(chunk)?;
        let mut end = chunk.len();
        // The file's own trailing newline ends the last line; it does not start one.
        if first && chunk.last() == Some(&b'\n') {
            end -= 1;
        }
        first = false;
        for i in (0..end).rev() {
            if chunk[i] == b'\n' {
                newlines += 1;
                if newlines == n {
                    return Ok(pos + i as u64 + 1);
                }
            }
        }
    }
    Ok(0)
}

/// How often a followed file is polled at its end, and how often the container's state
/// is checked while following.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
const RUNNING_CHECK: Duration = Duration::from_secs(1);

/// Writes the log file's selected lines into `tx` (each send is one chunk the HTTP
/// response flushes). With `follow`, it waits at the end of the file for more until
/// `still_running` says the container stopped (then drains what is left) or the
/// receiver is gone.
pub async fn stream_log_file<F, Fut>(
    path: PathBuf,
    opts: LogOptions,
    tx: mpsc::Sender<Bytes>,
    mut still_running: F,
) -> std::io::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = match opts.tail_lines {
        Some(n) => {
            let p = path.clone();
            tokio::task::spawn_blocking(move || {
                let mut f = std::fs::File::open(p)?;
                tail_start_offset(&mut f, n)
            })
            .await
            .map_err(std::io::Error::other)??
        }
        None => 0,
    };
    let mut file = tokio::fs::File::open(&path).await?;
    file.seek(SeekFrom::Start(start)).await?;
    let mut reader = tokio::io::BufReader::new(file);
    let mut writer = LogWriter::new(&opts);
    let mut line = Vec::with_capacity(4096);
    let mut last_check = tokio::time::Instant::now();
    let mut stopping = false;
    loop {
        reader.read_until(b'\n', &mut line).await?;
        if line.ends_with(b"\n") {
            let out = writer.write_line(&line);
            line.clear();
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                return Ok(());
            }
            if writer.done() {
                return Ok(());
            }
            continue;
        }
        // At the end of the file (a line without its newline is still being written).
        if !opts.follow || stopping {
            if !line.is_empty() && !opts.follow {
                let out = writer.write_line(&line);
                if !out.is_empty() {
                    let _ = tx.send(Bytes::from(out)).await;
                }
            }
            return Ok(());
        }
        if tx.is_closed() {
            return Ok(());
        }
        if last_check.elapsed() >= RUNNING_CHECK {
            last_check = tokio::time::Instant::now();
            if !still_running().await {
                // One more pass picks up what the container wrote before it stopped.
                stopping = true;
                continue;
            }
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// The runtime id of the container instance whose log a request reads, chosen from the
/// pod's status as upstream's `validateContainerLogStatus`: with `previous`, the last
/// terminated instance; else the running one, the terminated one, or the last terminated
/// one while the next waits (so in CrashLoopBackOff both read the instance that just
/// failed). The error is the message the kubelet answers (400) with.
pub fn log_container_id(
    status: Option<&PodStatus>,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let not_available =
        || format!("container \"{container}\" in pod \"{pod_name}\" is not available");
    let status = status.ok_or_else(not_available)?;
    let cs = [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|c| c.name == container)
    .ok_or_else(not_available)?;
    let state = cs.state.clone().unwrap_or_default();
    let last_terminated = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.container_id.clone())
        .filter(|id| !id.is_empty());
    let terminated = || format!("container \"{container}\" in pod \"{pod_name}\" is terminated");
    let id = if previous {
        last_terminated.ok_or_else(|| {
            format!("previous terminated container \"{container}\" in pod \"{pod_name}\" not found")
        })?
    } else if state.running.is_some() {
        cs.container_id.clone().unwrap_or_default()
    } else if let Some(t) = &state.terminated {
        match t.container_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => id,
            // The next instance did not start: the last one's log.
            None => last_terminated.ok_or_else(terminated)?,
        }
    } else if cs
        .last_state
        .as_ref()
        .is_some_and(|s| s.terminated.is_some())
    {
        last_terminated.ok_or_else(terminated)?
    } else if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        let why = match reason.as_str() {
            "ErrImagePull" => "image can't be pulled".to_owned(),
            "ImagePullBackOff" => "trying and failing to pull image".to_owned(),
            _ => reason,
        };
        return Err(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {why}"
        ));
    } else {
        return Err(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start - no logs yet"
        ));
    };
    // `containerd://<id>`: the runtime knows the id alone.
    Ok(id
        .split_once("://")
        .map_or(id.as_str(), |(_, id)| id)
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn status_of(cs: serde_json::Value) -> PodStatus {
        serde_json::from_value(serde_json::json!({ "containerStatuses": [cs] })).unwrap()
    }

    #[test]
    fn log_instance_follows_upstreams_choice() {
        let pick = |cs: serde_json::Value, previous| {
            log_container_id(Some(&status_of(cs)), "p", "c", previous)
        };
        // CrashLoopBackOff: both read the instance that just failed.
        let crashing = serde_json::json!({
            "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
            "containerID": "containerd://old",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}},
        });
        assert_eq!(pick(crashing.clone(), true).unwrap(), "old");
        assert_eq!(pick(crashing, false).unwrap(), "old");
        // Running after a restart: the current one, and the previous one.
        let running = serde_json::json!({
            "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
            "containerID": "containerd://new",
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}},
        });
        assert_eq!(pick(running.clone(), false).unwrap(), "new");
        assert_eq!(pick(running, true).unwrap(), "old");
        // Never restarted: no previous instance.
        let first = serde_json::json!({
            "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": "containerd://first", "state": {"running": {}},
        });
        assert_eq!(
            pick(first, true).unwrap_err(),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        let pulling = serde_json::json!({
            "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}},
        });
        assert_eq!(
            pick(pulling, false).unwrap_err(),
            "container \"c\" in pod \"p\" is waiting to start: trying and failing to pull image"
        );
        assert_eq!(
            log_container_id(Some(&PodStatus::default()), "p", "c", false).unwrap_err(),
            "container \"c\" in pod \"p\" is not available"
        );
    }

    #[test]
    fn parses_cri_lines() {
        let l = parse_cri_line(b"2026-11-21T08:56:29.820255954Z stdout F hello world\n").unwrap();
        assert_eq!(l.timestamp, ts("2026-11-21T08:56:29.820255954Z"));
        assert_eq!(l.stream, LogStream::Stdout);
        assert!(!l.partial);
        assert_eq!(l.content, b"hello world");

        let l = parse_cri_line(b"2026-11-21T08:56:29Z stderr P part").unwrap();
        assert_eq!(
            (l.stream, l.partial, l.content),
            (LogStream::Stderr, true, &b"part"[..])
        );

        let l = parse_cri_line(b"2026-11-21T08:56:29+01:00 stdout F\n").unwrap();
        assert_eq!(l.content, b"", "empty content without the separating space");
        assert_eq!(l.timestamp, ts("2026-11-21T07:56:29Z"));

        let l = parse_cri_line(b"2026-11-21T08:56:29Z stdout F:x  two  spaces").unwrap();
        assert!(!l.partial);
        assert_eq!(l.content, b" two  spaces");

        assert_eq!(parse_cri_line(b"garbage"), Err(ParseError::NoTimestamp));
        assert_eq!(
            parse_cri_line(b"yesterday stdout F x"),
            Err(ParseError::BadTimestamp("yesterday".into()))
        );
        assert_eq!(
            parse_cri_line(b"2026-11-21T08:56:29Z stdin F x"),
            Err(ParseError::BadStream("stdin".into()))
        );
        assert_eq!(
            parse_cri_line(b"2026-11-21T08:56:29Z stdout"),
            Err(ParseError::NoStream)
        );
    }

    fn now() -> Timestamp {
        ts("2026-11-21T10:00:00Z")
    }

    #[test]
    fn options_from_query() {
        let o = LogOptions::from_query(
            Some("container=web&follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=5"),
            now(),
        )
        .unwrap();
        assert_eq!(o.container.as_deref(), Some("web"));
        assert!(o.follow && o.previous && o.timestamps);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(10), Some(5)));
        assert_eq!(o.since, None);

        let o = LogOptions::from_query(Some("sinceSeconds=60"), now()).unwrap();
        assert_eq!(o.since, Some(ts("2026-11-21T09:59:00Z")));
        let o = LogOptions::from_query(Some("sinceTime=2026-11-21T09%3A30%3A00Z"), now()).unwrap();
        assert_eq!(o.since, Some(ts("2026-11-21T09:30:00Z")));
        assert_eq!(
            LogOptions::from_query(None, now()).unwrap(),
            LogOptions::default()
        );

        let err = |q: &str| LogOptions::from_query(Some(q), now()).unwrap_err();
        assert_eq!(err("tailLines=-1").code(), 422);
        assert_eq!(err("limitBytes=0").code(), 422);
        assert_eq!(err("sinceSeconds=0").code(), 422);
        assert_eq!(
            err("sinceSeconds=5&sinceTime=2026-11-21T09:30:00Z").code(),
            422
        );
        assert_eq!(err("stream=Both").code(), 422);
        assert_eq!(err("stream=Stdout&tailLines=1").code(), 422);
        assert_eq!(err("follow=maybe").code(), 400);
        assert_eq!(err("tailLines=ten").code(), 400);
        assert_eq!(err("sinceTime=noon").code(), 400);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b+c%2Fd"), "a b c/d");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    const FILE: &[u8] = b"2026-11-21T09:00:00.5Z stdout F one\n\
2026-11-21T09:10:00Z stderr F two\n\
2026-11-21T09:20:00Z stdout P thr\n\
2026-11-21T09:20:01Z stdout F ee\n\
not a cri line\n\
2026-11-21T09:30:00Z stdout F four\n";

    fn render(o: &LogOptions) -> String {
        let mut w = LogWriter::new(o);
        let mut out = Vec::new();
        for line in FILE.split_inclusive(|&b| b == b'\n') {
            out.extend(w.write_line(line));
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writer_applies_options() {
        assert_eq!(render(&LogOptions::default()), "one\ntwo\nthree\nfour\n");
        let o = LogOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            render(&o),
            "2026-11-21T09:00:00.5Z one\n2026-11-21T09:10:00Z two\n\
             2026-11-21T09:20:00Z three\n2026-11-21T09:30:00Z four\n"
        );
        let o = LogOptions {
            since: Some(ts("2026-11-21T09:10:00Z")),
            ..Default::default()
        };
        assert_eq!(render(&o), "two\nthree\nfour\n");
        let o = LogOptions {
            stream: StreamFilter::Stderr,
            ..Default::default()
        };
        assert_eq!(render(&o), "two\n");
        let o = LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(render(&o), "one\ntw");
    }

    #[test]
    fn tail_offsets() {
        let mut f = Cursor::new(FILE.to_vec());
        let start = |f: &mut Cursor<Vec<u8>>, n| tail_start_offset(f, n).unwrap() as usize;
        assert_eq!(
            &FILE[start(&mut f, 1)..],
            b"2026-11-21T09:30:00Z stdout F four\n"
        );
        assert_eq!(start(&mut f, 0), FILE.len());
        assert_eq!(start(&mut f, 6), 0);
        assert_eq!(start(&mut f, 100), 0);
        let mut unterminated = Cursor::new(b"a\nb\nc".to_vec());
        assert_eq!(tail_start_offset(&mut unterminated, 2).unwrap(), 2);
        let mut empty = Cursor::new(Vec::new());
        assert_eq!(tail_start_offset(&mut empty, 3).unwrap(), 0);
        // Lines longer than one block.
        let mut big = vec![b'x'; 200_000];
        big.push(b'\n');
        big.extend_from_slice(b"last\n");
        let mut c = Cursor::new(big);
        assert_eq!(tail_start_offset(&mut c, 1).unwrap(), 200_001);
        assert_eq!(tail_start_offset(&mut c, 2).unwrap(), 0);
    }

    #[tokio::test]
    async fn follows_until_the_container_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(
            &path,
            b"2026-11-21T09:00:00Z stdout F first\n2026-11-21T09:00:01Z stdout P hal",
        )
        .unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let r = running.clone();
        let task = tokio::spawn(stream_log_file(path.clone(), opts, tx, move || {
            let r = r.clone();
            async move { r.load(std::sync::atomic::Ordering::SeqCst) }
        }));
        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap();
        assert_eq!(first.as_deref(), Some(&b"first\n"[..]));
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(b"f\n2026-11-21T09:00:02Z stdout F second\n")
                .unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some(&b"half"[..]));
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some(&b"second\n"[..]));
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the follower ends once the container stopped")
            .unwrap()
            .unwrap();
        assert_eq!(rx.recv().await, None);
    }
}
