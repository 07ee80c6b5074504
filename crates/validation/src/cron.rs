//! The cron schedule syntax CronJobs accept: `robfig/cron/v3`'s standard parser (five
//! fields, month and weekday names, `?`, ranges, steps, lists, and the `@hourly`-style
//! descriptors including `@every <duration>`), with its error texts.

/// Parses a standard cron schedule, returning robfig/cron's error text on failure.
pub fn parse_cron_schedule(spec: &str) -> Result<(), String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".to_owned());
    }
    if let Some(descriptor) = spec.strip_prefix('@') {
        return match descriptor {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => {
                let dur = d["every ".len()..].trim();
                parse_go_duration(dur).map_err(|e| format!("failed to parse duration {spec}: {e}"))
            }
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
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
    for (i, (field, (min, max, names, name_base))) in fields.iter().zip(bounds).enumerate() {
        let question_ok = i == 2 || i == 4;
        for expr in field.split(',') {
            parse_range(expr, min, max, names, name_base, question_ok)?;
        }
    }
    Ok(())
}

fn parse_range(
    expr: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
    question_ok: bool,
) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single_digit = low_and_high.len() == 1;
    let (start, end) = if low_and_high[0] == "*" || (question_ok && low_and_high[0] == "?") {
        (min, max)
    } else {
        let start = parse_value(low_and_high[0], names, name_base)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => parse_value(low_and_high[1], names, name_base)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    match range_and_step.len() {
        1 => {}
        2 => {
            let step = parse_int(range_and_step[1])?;
            if step == 0 {
                return Err(format!("step of range should be a positive number: {expr}"));
            }
            // "N/step" means "N-max/step".
            if single_digit && low_and_high[0] != "*" && low_and_high[0] != "?" {
                return check_bounds(start, max, min, max, expr);
            }
        }
        _ => return Err(format!("too many slashes: {expr}")),
    }
    check_bounds(start, end, min, max, expr)
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

/// Go's `time.ParseDuration` syntax: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`.
fn parse_go_duration(d: &str) -> Result<(), String> {
    let err = || format!("time: invalid duration {d:?}");
    let mut rest = d.strip_prefix(['-', '+']).unwrap_or(d);
    if rest == "0" {
        return Ok(());
    }
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." {
            return Err(err());
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&unit) {
            return Err(if unit.is_empty() {
                format!("time: missing unit in duration {d:?}")
            } else {
                format!("time: unknown unit {unit:?} in duration {d:?}")
            });
        }
        rest = &rest[unit_len..];
    }
    Ok(())
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
