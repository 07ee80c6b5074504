//! Upstream's `/debug/api_priority_and_fairness/dump_*` tables
//! (`apf_controller_debug.go`): comma-separated columns aligned by Go's
//! `text/tabwriter`, a row per priority level, per queue or per request.
//!
//! Levels are listed by name. A request of a level without queues (exempt, or one
//! that refuses rather than queues) belongs to no queue (queue index -1).

use std::fmt::Write;

use super::{Apf, Level, Tracked};

/// The dump endpoints' path prefix.
const PATH_PREFIX: &str = "/debug/api_priority_and_fairness/";

/// Go's zero `time.Time` in RFC 3339: the start of a request still waiting.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

impl Apf {
    /// The table at `path` (under [`PATH_PREFIX`]), `None` for a path that has none.
    /// `query`: the request's query (`includeRequestDetails` for `dump_requests`).
    pub(crate) fn debug_dump(&self, path: &str, query: Option<&str>) -> Option<String> {
        let which = path.strip_prefix(PATH_PREFIX)?;
        // Upstream asks for any non-empty value.
        let details = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .find(|(k, _)| k == "includeRequestDetails")
            .is_some_and(|(_, v)| !v.is_empty());
        let levels = self.levels.lock();
        let mut sorted: Vec<&Level> = levels.values().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let table = match which {
            "dump_priority_levels" => dump_priority_levels(&sorted),
            "dump_queues" => dump_queues(&sorted),
            "dump_requests" => dump_requests(&sorted, details),
            _ => return None,
        };
        drop(levels);
        Some(tabwrite(&table))
    }
}

fn dump_priority_levels(levels: &[&Level]) -> String {
    let mut out = row(&[
        "PriorityLevelName",
        "ActiveQueues",
        "IsIdle",
        "IsQuiescing",
        "WaitingRequests",
        "ExecutingRequests",
        "DispatchedRequests",
        "RejectedRequests",
        "TimedoutRequests",
        "CancelledRequests",
    ]);
    out.push('\n');
    for level in levels {
        let active = level
            .queues
            .iter()
            .filter(|q| !q.waiting.is_empty())
            .count();
        let waiting = level.waiting();
        let executing = level.running.len();
        out.push_str(&row(&[
            &level.name,
            &active.to_string(),
            &(waiting == 0 && executing == 0).to_string(),
            &level.quiescing.to_string(),
            &waiting.to_string(),
            &executing.to_string(),
            &level.dispatched.to_string(),
            &level.rejected.to_string(),
            // Upstream counts a queued request that gave up as rejected and
            // cancelled, and nothing here.
            "0",
            &level.cancelled.to_string(),
        ]));
        out.push('\n');
    }
    out
}

fn dump_queues(levels: &[&Level]) -> String {
    let mut out = row(&[
        "PriorityLevelName",
        "Index",
        "PendingRequests",
        "ExecutingRequests",
        "SeatsInUse",
        "NextDispatchR",
        "InitialSeatsSum",
        "MaxSeatsSum",
        "TotalWorkSum",
    ]);
    out.push('\n');
    for level in levels {
        for (i, queue) in level.queues.iter().enumerate() {
            out.push_str(&row(&[
                &level.name,
                &i.to_string(),
                &queue.waiting.len().to_string(),
                &queue.executing.to_string(),
                &queue.seats_in_use.to_string(),
                &queue.next_dispatch_r.display(),
                &queue.initial_seats_sum.to_string(),
                &queue.max_seats_sum.to_string(),
                &queue.total_work_sum.display(),
            ]));
            out.push('\n');
        }
    }
    out
}

fn dump_requests(levels: &[&Level], details: bool) -> String {
    let mut out = row(&[
        "PriorityLevelName",
        "FlowSchemaName",
        "QueueIndex",
        "RequestIndexInQueue",
        "FlowDistingsher",
        "ArriveTime",
        "InitialSeats",
        "FinalSeats",
        "AdditionalLatency",
        "StartTime",
    ]);
    if details {
        out.push_str(",\t");
        out.push_str(&row(&[
            "UserName",
            "Verb",
            "APIPath",
            "Namespace",
            "Name",
            "APIVersion",
            "Resource",
            "SubResource",
        ]));
    }
    out.push('\n');
    for level in levels {
        for (iq, queue) in level.queues.iter().enumerate() {
            for (ir, waiter) in queue.waiting.iter().enumerate() {
                request_row(
                    &mut out,
                    level,
                    iq as i64,
                    ir as i64,
                    &waiter.request,
                    details,
                );
            }
            for running in sorted_running(level, Some(iq)) {
                request_row(&mut out, level, iq as i64, -1, running, details);
            }
        }
        for running in sorted_running(level, None) {
            request_row(&mut out, level, -1, -1, running, details);
        }
    }
    out
}

/// The executing requests of a level that waited in `queue` (or in none), oldest first.
fn sorted_running(level: &Level, queue: Option<usize>) -> Vec<&Tracked> {
    let mut running: Vec<(u64, &Tracked)> = level
        .running
        .iter()
        .filter(|(_, r)| r.queue == queue)
        .map(|(id, r)| (*id, &r.request))
        .collect();
    running.sort_unstable_by_key(|(id, _)| *id);
    running.into_iter().map(|(_, r)| r).collect()
}

fn request_row(out: &mut String, level: &Level, iq: i64, ir: i64, r: &Tracked, details: bool) {
    let started = r.started.map(rfc3339_nano);
    out.push_str(&row(&[
        &level.name,
        &r.flow_schema,
        &iq.to_string(),
        &ir.to_string(),
        &r.distinguisher,
        &rfc3339_nano(r.arrived),
        &r.work.initial_seats.to_string(),
        &r.work.final_seats.to_string(),
        &ferrokube_apimachinery::duration::go_duration(
            i64::try_from(r.work.additional_latency.as_nanos()).unwrap_or(i64::MAX),
        ),
        started.as_deref().unwrap_or(ZERO_TIME),
    ]));
    if details {
        let d = &r.details;
        // Upstream's `schema.GroupVersion.String()`: the version alone in the core group.
        let group_version = if d.api_group.is_empty() {
            d.api_version.clone()
        } else {
            format!("{}/{}", d.api_group, d.api_version)
        };
        out.push_str(",\t");
        out.push_str(&row(&[
            &d.user,
            &d.verb,
            &d.path,
            &d.namespace,
            &d.name,
            &group_version,
            &d.resource,
            &d.subresource,
        ]));
    }
    out.push('\n');
}

/// Upstream's `row`: the columns joined by `,\t`.
fn row(columns: &[&str]) -> String {
    columns.join(",\t")
}

/// Go's `time.RFC3339Nano` in UTC: the fraction of a second without trailing zeros,
/// none at all when whole.
fn rfc3339_nano(t: jiff::Timestamp) -> String {
    let mut out = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.subsec_nanosecond();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        let _ = write!(out, ".{}", fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Go's `tabwriter.NewWriter(w, 8, 0, 1, ' ', 0)` over `text`: each tab-terminated
/// cell padded with spaces to its column's width (its widest cell plus one, at least
/// eight), a column running over the consecutive lines that have a cell in it; a
/// line's last cell (not tab-terminated) is written as it is.
fn tabwrite(text: &str) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut out = String::with_capacity(text.len() * 2);
    // A line of a single cell ends every column above it, as a flush.
    let mut start = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.len() == 1 || i + 1 == lines.len() {
            let block = Tabwriter {
                lines: &lines,
                last: lines.len() - 1,
            };
            block.format(&mut out, &mut Vec::new(), start, i + 1);
            start = i + 1;
        }
    }
    out
}

struct Tabwriter<'a> {
    lines: &'a [Vec<&'a str>],
    /// The line after the text's last newline: written without one.
    last: usize,
}

impl Tabwriter<'_> {
    const MIN_WIDTH: usize = 8;
    const PADDING: usize = 1;

    /// Go's `Writer.format`: lines `line0..line1`, with the widths of the columns left
    /// of the current one known.
    fn format(&self, out: &mut String, widths: &mut Vec<usize>, mut line0: usize, line1: usize) {
        let column = widths.len();
        let mut this = line0;
        while this < line1 {
            if column + 1 >= self.lines[this].len() {
                this += 1;
                continue;
            }
            // A block of lines with a cell in this column begins.
            self.write_lines(out, widths, line0, this);
            line0 = this;
            let mut width = Self::MIN_WIDTH;
            while this < line1 && column + 1 < self.lines[this].len() {
                width = width.max(self.lines[this][column].chars().count() + Self::PADDING);
                this += 1;
            }
            widths.push(width);
            self.format(out, widths, line0, this);
            widths.pop();
            line0 = this;
        }
        self.write_lines(out, widths, line0, line1);
    }

    fn write_lines(&self, out: &mut String, widths: &[usize], line0: usize, line1: usize) {
        for i in line0..line1 {
            for (j, cell) in self.lines[i].iter().enumerate() {
                out.push_str(cell);
                if let Some(width) = widths.get(j) {
                    let pad = width.saturating_sub(cell.chars().count());
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            if i != self.last {
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_as_go_tabwriter() {
        let text = "PriorityLevelName,\tActiveQueues,\tIsIdle\ncatch-all,\t0,\ttrue\nexempt,\t12,\tfalse\n";
        assert_eq!(
            tabwrite(text),
            "PriorityLevelName, ActiveQueues, IsIdle\n\
             catch-all,         0,            true\n\
             exempt,            12,           false\n"
        );
        // Short cells are padded to eight; a column lasts while lines have a cell in
        // it, and a line of one cell ends the columns above it.
        assert_eq!(
            tabwrite("a,\tb\nccc,\td,\te\nx\nlong-cell,\ty\n"),
            "a,      b\nccc,    d,      e\nx\nlong-cell, y\n"
        );
        assert_eq!(tabwrite("no tabs"), "no tabs");
    }

    /// The rows of a table, each cut into its trimmed columns.
    fn cells(table: &str) -> Vec<Vec<String>> {
        table
            .lines()
            .map(|l| {
                l.split(", ")
                    .map(|c| c.trim().trim_end_matches(',').to_owned())
                    .collect()
            })
            .collect()
    }

    #[tokio::test]
    async fn dumps_show_levels_queues_and_requests() {
        use super::super::tests::{admit, one_seat};
        use super::super::{
            Queuing, RequestDetails, Step, WorkEstimate, metrics::FlowControlMetrics,
        };
        let m = FlowControlMetrics::default();
        let mut level = one_seat(
            "pl",
            Some(Queuing {
                queues: 2,
                hand_size: 1,
                queue_length_limit: 5,
            }),
        );
        let request = |user: &str| Tracked {
            flow_schema: "fs".into(),
            distinguisher: user.into(),
            arrived: "2026-12-05T15:52:33.5Z".parse().unwrap(),
            started: None,
            work: WorkEstimate::ONE_SEAT,
            details: RequestDetails {
                user: user.into(),
                verb: "create".into(),
                path: "/apis/apps/v1/namespaces/team/deployments".into(),
                namespace: "team".into(),
                name: String::new(),
                api_group: "apps".into(),
                api_version: "v1".into(),
                resource: "deployments".into(),
                subresource: String::new(),
            },
        };
        assert!(matches!(
            admit(&mut level, 0, request("alice"), &m),
            Step::Admitted
        ));
        let Step::Queued(_waiting) = admit(&mut level, 1, request("bob"), &m) else {
            panic!("the second request should wait");
        };
        let levels = [&level];

        let table = tabwrite(&dump_priority_levels(&levels));
        assert!(table.starts_with("PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, "));
        assert_eq!(
            cells(&table)[1],
            ["pl", "1", "false", "false", "1", "1", "1", "0", "0", "0"]
        );

        // Both in queue 0: alice executing (her 3 ms of work moved the queue's next
        // dispatch on), bob waiting with his.
        let queues = cells(&tabwrite(&dump_queues(&levels)));
        assert_eq!(queues.len(), 3, "a row per queue: {queues:?}");
        assert_eq!(
            queues[1][1..],
            ["0", "1", "1", "1", "0.00300000ss", "1", "1", "0.00300000ss"]
        );
        assert_eq!(
            queues[2][1..],
            ["1", "0", "0", "0", "0.00000000ss", "0", "0", "0.00000000ss"]
        );

        let requests = cells(&tabwrite(&dump_requests(&levels, true)));
        assert_eq!(requests[0].len(), 18);
        assert_eq!(requests[0][4], "FlowDistingsher");
        assert_eq!(requests[0][10], "UserName");
        assert_eq!(requests.len(), 3, "{requests:?}");
        // The waiting request, in its queue, not started; then the one executing from
        // the same queue.
        let waiting = &requests[1];
        assert_eq!(&waiting[..2], ["pl", "fs"]);
        assert_eq!(
            &waiting[3..10],
            [
                "0",
                "bob",
                "2026-12-05T15:52:33.5Z",
                "1",
                "0",
                "0s",
                ZERO_TIME
            ]
        );
        assert_eq!(
            &waiting[10..],
            [
                "bob",
                "create",
                "/apis/apps/v1/namespaces/team/deployments",
                "team",
                "",
                "apps/v1",
                "deployments",
                ""
            ]
        );
        let executing = &requests[2];
        assert_eq!(&executing[..5], ["pl", "fs", "0", "-1", "alice"]);
        assert_ne!(executing[9], ZERO_TIME);
        let without = cells(&tabwrite(&dump_requests(&levels, false)));
        assert_eq!(without[0].len(), 10);
    }

    #[test]
    fn times_are_rfc3339_nano() {
        let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(
            rfc3339_nano(t("2026-12-05T15:52:33.120000000Z")),
            "2026-12-05T15:52:33.12Z"
        );
        assert_eq!(
            rfc3339_nano(t("2026-12-05T15:52:33Z")),
            "2026-12-05T15:52:33Z"
        );
        assert_eq!(
            rfc3339_nano(t("2026-12-05T15:52:33.000000001Z")),
            "2026-12-05T15:52:33.000000001Z"
        );
    }
}
