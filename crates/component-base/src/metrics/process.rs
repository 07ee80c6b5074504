//! The process metrics every upstream component serves (the Prometheus Go client's
//! process collector): CPU time, memory, file descriptors and start time, read from
//! `/proc/self` when scraped, with the client's names and help texts.

use std::fmt::Write;

use super::write_header;

/// What `/proc/self` says of this process at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: f64,
    pub virtual_memory_max_bytes: f64,
}

/// Appends the `process_*` metrics of this process; nothing where `/proc` cannot be
/// read (they are then absent, as on platforms the client does not support).
pub fn write_process_metrics(out: &mut String) {
    if let Some(stats) = read() {
        write(out, &stats);
    }
}

fn write(out: &mut String, s: &ProcessStats) {
    for (name, help, kind, value) in [
        (
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            s.cpu_seconds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            "gauge",
            s.max_fds,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            s.open_fds,
        ),
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
            s.resident_bytes,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            "gauge",
            s.start_time_seconds,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            "gauge",
            s.virtual_bytes,
        ),
        (
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            "gauge",
            s.virtual_memory_max_bytes,
        ),
    ] {
        write_header(out, name, help, kind);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses, so the split is at the last `)`): index 0 is field 3, the state.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// A soft limit of `/proc/<pid>/limits` by its name; `unlimited` as `u64::MAX`, as
/// the Go client reports it.
fn soft_limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    match line[name.len()..].split_whitespace().next()? {
        "unlimited" => Some(u64::MAX as f64),
        n => n.parse().ok(),
    }
}

/// Seconds since the epoch at boot (`btime` of `/proc/stat`).
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn parse(
    stat: &str,
    proc_stat: &str,
    limits: &str,
    open_fds: usize,
    ticks_per_second: f64,
    page_size: f64,
) -> Option<ProcessStats> {
    let fields = stat_fields(stat)?;
    // Fields 14 and 15 (utime, stime) and 22 (starttime) are in clock ticks, 23
    // (vsize) in bytes and 24 (rss) in pages.
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks_per_second,
        start_time_seconds: boot_time(proc_stat)? + field(22)? / ticks_per_second,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page_size,
        open_fds: open_fds as f64,
        max_fds: soft_limit(limits, "Max open files")?,
        virtual_memory_max_bytes: soft_limit(limits, "Max address space")?,
    })
}

fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    // SAFETY: sysconf only reads constants of the system; it takes no pointers and
    // touches no memory of ours.
    #[allow(unsafe_code)]
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    parse(
        &stat,
        &proc_stat,
        &limits,
        open_fds,
        ticks as f64,
        page as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 50 0 0 20 0 12 0 360000 1073741824 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max open files            1048576              1048576              files     
Max address space         unlimited            unlimited            bytes     
";

    #[test]
    fn proc_files_read_as_the_go_client_reads_them() {
        let stats = parse(
            STAT,
            "cpu  1 2 3\nbtime 1700000000\n",
            LIMITS,
            12,
            100.0,
            4096.0,
        )
        .expect("parsed");
        assert_eq!(
            stats,
            ProcessStats {
                cpu_seconds: 3.0,
                start_time_seconds: 1_700_003_600.0,
                virtual_bytes: 1_073_741_824.0,
                resident_bytes: 2048.0 * 4096.0,
                open_fds: 12.0,
                max_fds: 1_048_576.0,
                virtual_memory_max_bytes: u64::MAX as f64,
            }
        );
        assert_eq!(parse("garbage", "", LIMITS, 0, 100.0, 4096.0), None);
    }

    #[test]
    fn this_process_is_described() {
        let mut out = String::new();
        write_process_metrics(&mut out);
        assert!(
            out.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{out}"
        );
        let resident: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse().ok())
            .expect("resident memory");
        assert!(resident > 0.0);
        let started: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .and_then(|v| v.parse().ok())
            .expect("start time");
        assert!(started > 1_600_000_000.0 && started <= super::super::unix_now());
    }
}
