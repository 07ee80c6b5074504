//! The cron schedules CronJobs use: `robfig/cron/v3`'s standard parser (five fields,
//! month and weekday names, `?` in the day fields, ranges, steps, lists, and the
//! `@hourly`-style descriptors including `@every <duration>`) with its error texts, and
//! its `Next` in the schedule's time zone. The apiserver validates with
//! [`parse_cron_schedule`]; the CronJob controller evaluates [`Schedule::next`].
//!
//! The evaluator is ported rather than taken from a crate because none of the cron
//! crates considered reproduces robfig exactly (`cron` wants a seconds field, `saffron`
//! is UTC-only, `croner` has no `@every`), and the day-of-month / day-of-week rule (OR,
//! but AND when either is `*` or `?`), `N/step`, and the DST walk decide which Jobs run.
//! jiff (through k8s-openapi) supplies the time zones.

use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{Timestamp, ToSpan, Zoned, civil};

/// robfig's marker of a `*`/`?` field: it switches the day match from OR to AND.
const STAR: u64 = 1 << 63;

/// A parsed cron schedule (robfig `SpecSchedule` or `ConstantDelaySchedule`).
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Bit sets of the matching minutes, hours, days of month, months and weekdays.
    Spec {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
        tz: TimeZone,
    },
    /// `@every <duration>`, whole seconds, at least one.
    Every { seconds: i64 },
}

/// Loads a time zone as Go's `time.LoadLocation`: empty is UTC.
pub fn load_time_zone(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" => Ok(TimeZone::UTC),
        "Local" => Ok(TimeZone::system()),
        _ => TimeZone::get(name).map_err(|e| format!("unknown time zone {name}: {e}")),
    }
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    (min..=max)
        .step_by(step as usize)
        .fold(0, |acc, i| acc | (1u64 << i))
}

/// Parses a standard cron schedule, returning robfig/cron's error text on failure.
pub fn parse_cron_schedule(spec: &str) -> Result<(), String> {
    parse_schedule(spec, &TimeZone::UTC).map(|_| ())
}

/// Parses a schedule as robfig's `cron.ParseStandard`: an optional `CRON_TZ=`/`TZ=`
/// prefix (else `default_tz`), then five fields or a descriptor.
pub fn parse_schedule(spec: &str, default_tz: &TimeZone) -> Result<Schedule, String> {
    let mut spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".to_owned());
    }
    let mut tz = default_tz.clone();
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let i = spec.find(' ').ok_or("missing spec after the time zone")?;
        let eq = spec.find('=').unwrap_or(0);
        let name = &spec[eq + 1..i];
        tz = load_time_zone(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
        spec = spec[i..].trim();
    }
    let all = |min, max| bits(min, max, 1) | STAR;
    let spec_of = |minute, hour, dom, month, dow| Schedule::Spec {
        minute,
        hour,
        dom,
        month,
        dow,
        tz: tz.clone(),
    };
    if let Some(descriptor) = spec.strip_prefix('@') {
        return Ok(match descriptor {
            "yearly" | "annually" => spec_of(1, 1, 1 << 1, 1 << 1, all(0, 6)),
            "monthly" => spec_of(1, 1, 1 << 1, all(1, 12), all(0, 6)),
            "weekly" => spec_of(1, 1, all(1, 31), all(1, 12), 1),
            "daily" | "midnight" => spec_of(1, 1, all(1, 31), all(1, 12), all(0, 6)),
            "hourly" => spec_of(1, all(0, 23), all(1, 31), all(1, 12), all(0, 6)),
            d if d.starts_with("every ") => {
                let dur = d["every ".len()..].trim();
                let seconds = parse_go_duration(dur)
                    .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
                Schedule::Every { seconds }
            }
            _ => return Err(format!("unrecognized descriptor: {spec}")),
        });
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    const MONTHS: &[&str] = &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let bounds: [(u32, u32, &[&str], u32); 5] = [
        (0, 59, &[], 0),
        (0, 23, &[], 0),
        (1, 31, &[], 0),
        (1, 12, MONTHS, 1),
        (0, 6, DAYS, 0),
    ];
    let mut sets = [0u64; 5];
    for (i, (field, (min, max, names, name_base))) in fields.iter().zip(bounds).enumerate() {
        let question_ok = i == 2 || i == 4;
        for expr in field.split(',') {
            sets[i] |= parse_range(expr, min, max, names, name_base, question_ok)?;
        }
    }
    let [minute, hour, dom, month, dow] = sets;
    Ok(spec_of(minute, hour, dom, month, dow))
}

fn parse_range(
    expr: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
    question_ok: bool,
) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single_digit = low_and_high.len() == 1;
    let (start, mut end, mut extra) =
        if low_and_high[0] == "*" || (question_ok && low_and_high[0] == "?") {
            (min, max, STAR)
        } else {
            let start = parse_value(low_and_high[0], names, name_base)?;
            let end = match low_and_high.len() {
                1 => start,
                2 => parse_value(low_and_high[1], names, name_base)?,
                _ => return Err(format!("too many hyphens: {expr}")),
            };
            (start, end, 0)
        };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = parse_int(range_and_step[1])?;
            if step == 0 {
                return Err(format!("step of range should be a positive number: {expr}"));
            }
            // "N/step" means "N-max/step".
            if single_digit && extra == 0 {
                end = max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    check_bounds(start, end, min, max, expr)?;
    Ok(bits(start, end, step) | extra)
}

fn check_bounds(start: u32, end: u32, min: u32, max: u32, expr: &str) -> Result<(), String> {
    if start < min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({min}): {expr}"
        ));
    }
    if end > max {
        return Err(format!(
            "end of range ({end}) above maximum ({max}): {expr}"
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    Ok(())
}

fn parse_value(s: &str, names: &[&str], name_base: u32) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        return Ok(u32::try_from(i).unwrap_or(0) + name_base);
    }
    parse_int(s)
}

fn parse_int(s: &str) -> Result<u32, String> {
    match s.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {s}")),
        Ok(n) => u32::try_from(n).map_err(|_| {
            format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: value out of range")
        }),
        Err(_) => Err(format!(
            "failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"
        )),
    }
}

/// Go's `time.ParseDuration` (`[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`), in whole seconds
/// as robfig's `@every` takes it: the sub-second part dropped, at least one.
fn parse_go_duration(d: &str) -> Result<i64, String> {
    let err = || format!("time: invalid duration {d:?}");
    let (negative, mut rest) = match d.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, d.strip_prefix('+').unwrap_or(d)),
    };
    if rest == "0" {
        return Ok(1);
    }
    if rest.is_empty() {
        return Err(err());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." {
            return Err(err());
        }
        let value: f64 = num.parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {d:?}")),
            _ => return Err(format!("time: unknown unit {unit:?} in duration {d:?}")),
        };
        nanos += value * scale;
        rest = &rest[unit_len..];
    }
    if negative {
        nanos = -nanos;
    }
    // robfig's `Every` drops the sub-second part and runs at least once a second.
    #[allow(clippy::cast_possible_truncation)]
    let seconds = (nanos / 1e9) as i64;
    Ok(seconds.max(1))
}

fn has(set: u64, v: impl Into<i64>) -> bool {
    let v: i64 = v.into();
    (0..64).contains(&v) && set & (1u64 << v) != 0
}

impl Schedule {
    /// The first activation strictly after `t` (robfig `Next`); `None` when there is
    /// none within five years (Go's zero time, e.g. `0 0 30 2 *`).
    pub fn next(&self, t: Timestamp) -> Option<Timestamp> {
        let (minute, hour, dom, month, dow, tz) = match self {
            Schedule::Every { seconds } => {
                let whole = Timestamp::from_second(t.as_second()).ok()?;
                return whole.checked_add(seconds.seconds()).ok();
            }
            Schedule::Spec {
                minute,
                hour,
                dom,
                month,
                dow,
                tz,
            } => (*minute, *hour, *dom, *month, *dow, tz),
        };
        let at = |y: i16, mo: i8, d: i8, h: i8| -> Option<Zoned> {
            civil::date(y, mo, d)
                .at(h, 0, 0, 0)
                .to_zoned(tz.clone())
                .ok()
        };
        let day_matches = |z: &Zoned| {
            let dom_match = has(dom, z.day());
            let dow_match = has(dow, z.weekday().to_sunday_zero_offset());
            if dom & STAR != 0 || dow & STAR != 0 {
                dom_match && dow_match
            } else {
                dom_match || dow_match
            }
        };
        let mut z = Timestamp::from_second(t.as_second() + 1)
            .ok()?
            .to_zoned(tz.clone());
        let mut added = false;
        let year_limit = z.year() + 5;
        'wrap: loop {
            if z.year() > year_limit {
                return None;
            }
            while !has(month, z.month()) {
                if !added {
                    added = true;
                    z = at(z.year(), z.month(), 1, 0)?;
                }
                z = z.checked_add(1.month()).ok()?;
                if z.month() == 1 {
                    continue 'wrap;
                }
            }
            while !day_matches(&z) {
                if !added {
                    added = true;
                    z = at(z.year(), z.month(), z.day(), 0)?;
                }
                z = z.checked_add(1.day()).ok()?;
                // A DST change may leave the day's start off midnight.
                let h = i64::from(z.hour());
                if h > 12 {
                    z = z.checked_add((24 - h).hours()).ok()?;
                } else if h > 0 {
                    z = z.checked_sub(h.hours()).ok()?;
                }
                if z.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(hour, z.hour()) {
                if !added {
                    added = true;
                    z = at(z.year(), z.month(), z.day(), z.hour())?;
                }
                z = z.checked_add(1.hour()).ok()?;
                if z.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(minute, z.minute()) {
                if !added {
                    added = true;
                    let s = z.timestamp().as_second();
                    z = Timestamp::from_second(s - s.rem_euclid(60))
                        .ok()?
                        .to_zoned(tz.clone());
                }
                z = z.checked_add(1.minute()).ok()?;
                if z.minute() == 0 {
                    continue 'wrap;
                }
            }
            // The standard parser's seconds field is "0".
            while z.second() != 0 {
                added = true;
                z = z.checked_add(1.second()).ok()?;
                if z.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(z.timestamp());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let ok = [
            "* * * * *",
            "*/5 * * * *",
            "0 0 1 1 *",
            "0 9-17 * * MON-FRI",
            "15,45 */2 ? jan,JUL sun",
            "5/15 * * * *",
            "@hourly",
            "@daily",
            "@midnight",
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@every 1h30m",
        ];
        for s in ok {
            assert_eq!(parse_cron_schedule(s), Ok(()), "{s}");
        }
        let bad = [
            ("", "empty spec string"),
            ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            (
                "* 5-2 * * *",
                "beginning of range (5) beyond end of range (2): 5-2",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            (
                "? * * * *",
                "failed to parse int from ?: strconv.Atoi: parsing \"?\": invalid syntax",
            ),
            ("@often", "unrecognized descriptor: @often"),
            (
                "@every 5x",
                "failed to parse duration @every 5x: time: unknown unit \"x\" in duration \"5x\"",
            ),
            ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ];
        for (s, want) in bad {
            assert_eq!(parse_cron_schedule(s), Err(want.to_owned()), "{s}");
        }
    }
}
