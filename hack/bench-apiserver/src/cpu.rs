//! Where a create phase's CPU went: the server process (the apiserver, or the floor
//! server), this driver (the clients, or for the raw baseline the store itself),
//! everything else on the machine (etcd, the kernel's own threads), how much of the
//! two cores stayed idle, and how much of their time the hypervisor gave to others
//! (steal: this VM's speed changes from minute to minute with it). The ratio of API to raw creates only says how far apart they
//! are; this says which side of the machine the gap is on. Read from `/proc` in clock
//! ticks (10 ms), so it is meant for phases of seconds, not milliseconds.

use std::time::Duration;

use anyhow::{Context, Result};

/// CPU time used so far, by the processes a phase involves and by the whole machine.
pub struct CpuSample {
    /// The server process's name in the report, and its CPU time.
    server: Option<(&'static str, Duration)>,
    driver: Duration,
    machine_busy: Duration,
    machine_idle: Duration,
    machine_stolen: Duration,
}

/// The CPU a phase used per operation (µs), the machine's idle share and the share
/// of its time stolen.
pub struct CpuPerOp {
    /// The server process's name in the report, and its CPU per operation.
    pub server_us: Option<(&'static str, f64)>,
    pub driver_us: f64,
    pub other_us: f64,
    /// Idle over the time the cores were ours (busy and idle), as before steal was
    /// shown, so that figures of earlier sessions compare.
    pub idle_percent: f64,
    /// Stolen over all the cores' time.
    pub stolen_percent: f64,
}

impl CpuSample {
    /// Now, for `server` (the server process's pid and name, if the phase has one) and
    /// this process.
    pub fn take(server: Option<(u32, &'static str)>) -> Result<CpuSample> {
        let (machine_busy, machine_idle, machine_stolen) = machine_times()?;
        Ok(CpuSample {
            server: server
                .map(|(pid, name)| process_time(pid).map(|used| (name, used)))
                .transpose()?,
            driver: process_time(std::process::id())?,
            machine_busy,
            machine_idle,
            machine_stolen,
        })
    }

    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuSample) -> CpuUsed {
        let later = self;
        CpuUsed {
            server: match (earlier.server, later.server) {
                (Some((_, a)), Some((name, b))) => Some((name, b.saturating_sub(a))),
                _ => None,
            },
            driver: later.driver.saturating_sub(earlier.driver),
            machine_busy: later.machine_busy.saturating_sub(earlier.machine_busy),
            machine_idle: later.machine_idle.saturating_sub(earlier.machine_idle),
            machine_stolen: later.machine_stolen.saturating_sub(earlier.machine_stolen),
        }
    }
}

/// The CPU used over one span of time, or over several added together (a phase run in
/// rounds).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUsed {
    server: Option<(&'static str, Duration)>,
    driver: Duration,
    machine_busy: Duration,
    machine_idle: Duration,
    machine_stolen: Duration,
}

impl std::ops::AddAssign for CpuUsed {
    fn add_assign(&mut self, other: CpuUsed) {
        self.server = match (self.server, other.server) {
            (Some((name, a)), Some((_, b))) => Some((name, a + b)),
            (a, b) => a.or(b),
        };
        self.driver += other.driver;
        self.machine_busy += other.machine_busy;
        self.machine_idle += other.machine_idle;
        self.machine_stolen += other.machine_stolen;
    }
}

impl CpuUsed {
    /// Divided over `ops` operations.
    pub fn per_op(&self, ops: usize) -> CpuPerOp {
        let ops = ops.max(1) as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / ops;
        let server = self.server.map(|(_, used)| used).unwrap_or_default();
        let other = self
            .machine_busy
            .saturating_sub(self.driver)
            .saturating_sub(server);
        let ours = (self.machine_busy + self.machine_idle).as_secs_f64();
        let all = ours + self.machine_stolen.as_secs_f64();
        let percent = |part: Duration, of: f64| {
            if of > 0.0 {
                100.0 * part.as_secs_f64() / of
            } else {
                0.0
            }
        };
        CpuPerOp {
            server_us: self.server.map(|(name, used)| (name, us(used))),
            driver_us: us(self.driver),
            other_us: us(other),
            idle_percent: percent(self.machine_idle, ours),
            stolen_percent: percent(self.machine_stolen, all),
        }
    }
}

/// Runs `phase` and returns its result with the CPU it used, divided over `ops`;
/// `server` is the server process's pid and its name in the report, if there is one.
pub async fn measure<T>(
    server: Option<(u32, &'static str)>,
    ops: usize,
    phase: impl std::future::Future<Output = Result<T>>,
) -> Result<(T, CpuPerOp)> {
    let (out, used) = measure_used(server, phase).await?;
    Ok((out, used.per_op(ops)))
}

/// Runs `phase` and returns its result with the CPU it used.
pub async fn measure_used<T>(
    server: Option<(u32, &'static str)>,
    phase: impl std::future::Future<Output = Result<T>>,
) -> Result<(T, CpuUsed)> {
    let before = CpuSample::take(server)?;
    let out = phase.await?;
    Ok((out, CpuSample::take(server)?.since(&before)))
}

impl std::fmt::Display for CpuPerOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some((name, server)) = self.server_us {
            write!(f, "{name} {server:.0} µs, ")?;
        }
        write!(
            f,
            "driver {:.0} µs, other processes {:.0} µs; machine idle {:.0} %, stolen {:.0} %",
            self.driver_us, self.other_us, self.idle_percent, self.stolen_percent
        )
    }
}

/// Clock ticks per second of `/proc`'s times (USER_HZ; 100 on every Linux that ships
/// with glibc's default, which `getconf CLK_TCK` confirms on these machines).
const TICKS_PER_SECOND: u64 = 100;

fn ticks(n: u64) -> Duration {
    Duration::from_micros(n * 1_000_000 / TICKS_PER_SECOND)
}

/// User plus system time of a process, all its threads (`/proc/<pid>/stat` fields 14
/// and 15).
fn process_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after_comm = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("no ')' in /proc/<pid>/stat")?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3 (state): utime is field 14, stime field 15.
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .context("short /proc/<pid>/stat")?
            .parse()
            .context("parsing /proc/<pid>/stat")
    };
    Ok(ticks(field(14)? + field(15)?))
}

/// The machine's busy, idle and stolen time over all CPUs (the `cpu` line of
/// `/proc/stat`; iowait counts as idle; steal is time the hypervisor ran others).
fn machine_times() -> Result<(Duration, Duration, Duration)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = get(0) + get(1) + get(2) + get(5) + get(6);
    let idle = get(3) + get(4);
    Ok((ticks(busy), ticks(idle), ticks(get(7))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_busy_loop_is_charged_to_the_driver_and_divided_over_the_ops() {
        let before = CpuSample::take(None).unwrap();
        let own = process_time(std::process::id()).unwrap();
        // Spin until this process has used 100 ms more CPU (bounded in wall time: a
        // machine that never schedules us fails the test instead of hanging it).
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut x = 0u64;
        while process_time(std::process::id()).unwrap() < own + Duration::from_millis(100) {
            assert!(Instant::now() < deadline, "no CPU time in 30 s");
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let after = CpuSample::take(None).unwrap();
        let used = after.since(&before).per_op(4);
        assert!(
            used.driver_us >= 25_000.0,
            "driver {} µs per op",
            used.driver_us
        );
        assert!(used.server_us.is_none());
        assert!((0.0..=100.0).contains(&used.idle_percent));
        assert!((0.0..=100.0).contains(&used.stolen_percent));
    }

    #[test]
    fn spans_added_together_are_divided_as_one() {
        let span = |server_ms, driver_ms, busy_ms, idle_ms, stolen_ms| CpuUsed {
            server: Some(("apiserver", Duration::from_millis(server_ms))),
            driver: Duration::from_millis(driver_ms),
            machine_busy: Duration::from_millis(busy_ms),
            machine_idle: Duration::from_millis(idle_ms),
            machine_stolen: Duration::from_millis(stolen_ms),
        };
        let mut used = span(300, 100, 500, 500, 0);
        used += span(100, 100, 300, 100, 600);
        let per_op = used.per_op(200);
        assert_eq!(per_op.server_us, Some(("apiserver", 2_000.0)));
        assert_eq!(per_op.driver_us, 1_000.0);
        // 800 ms busy, of which 400 the server's and 200 the driver's.
        assert_eq!(per_op.other_us, 1_000.0);
        // Idle over the time that was ours; stolen over all of it.
        assert!((per_op.idle_percent - 100.0 * 600.0 / 1_400.0).abs() < 1e-9);
        assert!((per_op.stolen_percent - 100.0 * 600.0 / 2_000.0).abs() < 1e-9);
    }
}
