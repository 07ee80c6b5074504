//! Borrowing between priority levels (upstream `apf_controller.go`'s
//! `updateBorrowingLocked`, `conc_alloc.go`, and the seat-demand integrator of its
//! queue sets): every [`ADJUSTMENT_PERIOD`] each level's seat demand over the period
//! (seats executing plus seats waiting, time-weighted) decides how many seats it may use
//! next, within its bounds. A level lends up to `lendablePercent` of its nominal seats
//! to the others and borrows up to `borrowingLimitPercent` more (any number without
//! one); the server's seats are divided by a fair allocation of the levels' smoothed
//! demands. Pure logic: the clock is passed in.

use std::time::{Duration, Instant};

/// Upstream `borrowingAdjustmentPeriod`.
pub(super) const ADJUSTMENT_PERIOD: Duration = Duration::from_secs(10);

/// Upstream `seatDemandSmoothingCoefficient`: how slowly the smoothed demand falls.
const SMOOTHING: f64 = 0.977;

/// Upstream `MinTarget`: a target of zero would make every level's share undefined.
const MIN_TARGET: f64 = 0.001;
const EPSILON: f64 = 0.000_000_1;

/// The time-weighted moments of a level's seat demand since the period began
/// (upstream `fairqueuing.integrator`).
#[derive(Debug, Clone)]
pub(super) struct SeatDemand {
    last: Instant,
    /// The demand now.
    x: f64,
    elapsed: f64,
    integral_x: f64,
    integral_xx: f64,
    max: f64,
}

/// What a period's demand was: its time-weighted average and standard deviation
/// (`NaN` for a period of no length) and its highest value.
#[derive(Debug, Clone, Copy)]
pub(super) struct DemandObservation {
    pub duration: f64,
    pub average: f64,
    pub deviation: f64,
    pub max: f64,
}

impl SeatDemand {
    pub(super) fn new(now: Instant) -> SeatDemand {
        SeatDemand {
            last: now,
            x: 0.0,
            elapsed: 0.0,
            integral_x: 0.0,
            integral_xx: 0.0,
            max: 0.0,
        }
    }

    /// The demand changed to `x` at `now`.
    pub(super) fn set(&mut self, x: f64, now: Instant) {
        self.advance(now);
        self.x = x;
        self.max = self.max.max(x);
    }

    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.elapsed += dt;
        self.integral_x += self.x * dt;
        self.integral_xx += self.x * self.x * dt;
    }

    /// The period up to `now`, and a new period from the demand as it is.
    pub(super) fn reset(&mut self, now: Instant) -> DemandObservation {
        self.advance(now);
        let (average, deviation) = if self.elapsed > 0.0 {
            let average = self.integral_x / self.elapsed;
            let variance = self.integral_xx / self.elapsed - average * average;
            // Rounding can make a constant demand's variance a hair below zero;
            // upstream calls that NaN, and the stats take NaN as no deviation.
            (
                average,
                if variance >= 0.0 {
                    variance.sqrt()
                } else {
                    f64::NAN
                },
            )
        } else {
            (f64::NAN, f64::NAN)
        };
        let observed = DemandObservation {
            duration: self.elapsed,
            average,
            deviation,
            max: self.max,
        };
        self.elapsed = 0.0;
        self.integral_x = 0.0;
        self.integral_xx = 0.0;
        self.max = self.x;
        observed
    }
}

/// A level's seat demand as the adjustments see it (upstream `seatDemandStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct DemandStats {
    pub avg: f64,
    pub std_dev: f64,
    pub high_watermark: u32,
    /// Follows a rise of the demand (average plus deviation) at once and a fall slowly.
    pub smoothed: f64,
}

impl DemandStats {
    pub(super) fn update(&mut self, observed: &DemandObservation) {
        self.high_watermark = observed.max.round() as u32;
        if observed.duration <= 0.0 {
            return;
        }
        let deviation = if observed.deviation.is_nan() {
            0.0
        } else {
            observed.deviation
        };
        self.avg = observed.average;
        self.std_dev = deviation;
        let envelope = observed.average + deviation;
        self.smoothed = envelope.max(SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * envelope);
    }
}

/// A level's seats as its configuration bounds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bounds {
    /// `ceil(server seats * shares / all levels' shares)`.
    pub nominal: u32,
    /// The nominal seats less those it may lend.
    pub min: u32,
    /// The nominal seats and those it may borrow.
    pub max: u32,
    /// An exempt level is never held to its seats; its demand only keeps them from
    /// the others.
    pub exempt: bool,
}

impl Bounds {
    /// Upstream's bounds from a level's nominal seats and its percentages (a level
    /// without `borrowingLimitPercent` may borrow as many seats as the server has).
    pub(super) fn of(
        nominal: u32,
        lendable_percent: Option<i32>,
        borrowing_limit_percent: Option<i32>,
        server_seats: u32,
        exempt: bool,
    ) -> Bounds {
        let percent_of = |p: i32| -> u32 {
            (f64::from(nominal) * f64::from(p.clamp(0, i32::MAX)) / 100.0).round() as u32
        };
        let lendable = lendable_percent.map_or(0, percent_of).min(nominal);
        let borrowable = borrowing_limit_percent.map_or(server_seats, percent_of);
        Bounds {
            nominal,
            min: nominal - lendable,
            max: nominal.saturating_add(borrowable),
            exempt,
        }
    }

    /// The seats a new level starts with: its nominal ones less half of those it may
    /// lend.
    pub(super) fn initial(&self) -> u32 {
        self.nominal - (self.nominal - self.min) / 2
    }
}

/// One level in an adjustment.
#[derive(Debug, Clone, Copy)]
pub(super) struct LevelState {
    pub bounds: Bounds,
    pub stats: DemandStats,
    /// The seats it has now, kept should the allocation fail.
    pub current: u32,
}

/// What an adjustment gives a level: its seats, and the target its share came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Adjusted {
    pub current: u32,
    pub target: f64,
}

/// The seats of every level for the next period, and the fair fraction (the share of
/// its target each level that can use it gets; 0 when the levels' lower bounds take
/// every seat). `nominal_sum`: the levels' nominal seats summed, exempt ones included.
pub(super) fn adjust(levels: &[LevelState], nominal_sum: u32) -> (Vec<Adjusted>, f64) {
    let nominal_sum = i64::from(nominal_sum);
    let mut remaining = nominal_sum;
    let mut items = Vec::with_capacity(levels.len());
    let (mut min_sum, mut min_current_sum) = (0i64, 0i64);
    // A limited level keeps at least what it used at its busiest (up to its nominal
    // seats), and never less than its lower bound.
    let min_current = |l: &LevelState| {
        l.bounds
            .min
            .max(l.bounds.nominal.min(l.stats.high_watermark))
    };
    for l in levels {
        if l.bounds.exempt {
            remaining -= i64::from(l.bounds.min.max(l.stats.high_watermark));
        } else {
            let lower = min_current(l);
            items.push(AllocItem {
                lower: f64::from(lower),
                upper: f64::from(l.bounds.max),
                target: f64::from(lower).max(l.stats.smoothed),
            });
            min_sum += i64::from(l.bounds.min);
            min_current_sum += i64::from(lower);
        }
    }
    let mut fair_frac = 0.0;
    let mut share_frac = 0.0;
    let mut allocs: Option<Vec<f64>> = None;
    if remaining <= min_sum {
    } else if remaining <= min_current_sum {
        share_frac = (remaining - min_sum) as f64 / (min_current_sum - min_sum) as f64;
    } else {
        match allocate(nominal_sum as f64, &items) {
            Ok((a, f)) => {
                allocs = Some(a);
                fair_frac = f;
            }
            // Upstream's backstop: every limited level keeps its seats.
            Err(_) => {
                allocs = Some(
                    levels
                        .iter()
                        .filter(|l| !l.bounds.exempt)
                        .map(|l| f64::from(l.current))
                        .collect(),
                )
            }
        }
    }
    let mut item = 0;
    let adjusted = levels
        .iter()
        .map(|l| {
            if l.bounds.exempt {
                // Upstream reports the first limited level's target for an exempt one
                // (its index lookup misses and reads item 0).
                let target = items.first().map_or(0.0, |i| i.target);
                return Adjusted {
                    current: l.bounds.min.max(l.stats.high_watermark),
                    target,
                };
            }
            let i = item;
            item += 1;
            let current = if remaining <= min_sum {
                l.bounds.min
            } else if let Some(allocs) = &allocs {
                allocs[i].round() as u32
            } else {
                let extra = f64::from(min_current(l) - l.bounds.min) * share_frac;
                l.bounds.min + extra.round() as u32
            };
            Adjusted {
                current,
                target: items[i].target,
            }
        })
        .collect();
    (adjusted, fair_frac)
}

/// One class of upstream's allocation problem.
#[derive(Debug, Clone, Copy)]
struct AllocItem {
    target: f64,
    lower: f64,
    upper: f64,
}

/// Upstream `computeConcurrencyAllocation`: allocations summing to `required`, each
/// within its bounds and otherwise proportional to its target (the same fraction of
/// each target, "fair"), and that fraction.
fn allocate(required: f64, items: &[AllocItem]) -> Result<(Vec<f64>, f64), String> {
    if required < 0.0 {
        return Err("negative sums are not supported".into());
    }
    let (mut low_sum, mut high_sum, mut target_sum) = (0.0, 0.0, 0.0);
    let (mut lower_min, mut lower_max) = (f64::from(f32::MAX), f64::MIN);
    let (mut upper_min, mut upper_max) = (f64::from(f32::MAX), f64::MIN);
    // Per item: its target, and its bounds as fractions of its target.
    let mut relative = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if item.lower < 0.0 {
            return Err(format!("lower bound {i} is negative"));
        }
        if item.target < item.lower {
            return Err(format!("target {i} is below its lower bound"));
        }
        if item.upper < item.lower {
            return Err(format!("upper bound {i} is below its lower bound"));
        }
        let target = item.target.max(MIN_TARGET);
        low_sum += item.lower;
        high_sum += item.upper;
        target_sum += target;
        let (lower, upper) = (item.lower / target, item.upper / target);
        lower_min = lower_min.min(lower);
        lower_max = lower_max.max(lower);
        upper_min = upper_min.min(upper);
        upper_max = upper_max.max(upper);
        relative.push((target, lower, upper));
    }
    if lower_max > 1.0 {
        return Err("a lower bound is above its target".into());
    }
    if low_sum - required > EPSILON {
        return Err(format!(
            "lower bounds sum to {low_sum}, above the required {required}"
        ));
    }
    if required - high_sum > EPSILON {
        return Err(format!(
            "upper bounds sum to {high_sum}, below the required {required}"
        ));
    }
    if required == 0.0 {
        return Ok((vec![0.0; items.len()], 0.0));
    }
    if low_sum - required > -EPSILON {
        return Ok((items.iter().map(|i| i.lower).collect(), lower_min));
    }
    if required - high_sum > -EPSILON {
        return Ok((items.iter().map(|i| i.upper).collect(), upper_max));
    }
    let mut fair = required / target_sum;
    if lower_max <= fair && fair <= upper_min {
        return Ok((relative.iter().map(|(t, _, _)| t * fair).collect(), fair));
    }
    // Some bound binds: walk the bounds (as fractions) upwards, keeping the sum of the
    // targets of the items whose allocation still grows with the fraction, until the
    // allocations reach the required sum.
    let mut bounds: Vec<(f64, usize, bool)> = relative
        .iter()
        .enumerate()
        .flat_map(|(i, &(_, lower, upper))| [(lower, i, true), (upper, i, false)])
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut sum_so_far = low_sum;
    fair = lower_min;
    let (mut sensitive_target_sum, mut delta_target_sum) = (0.0, 0.0);
    let (mut sensitive, mut delta_sensitive) = (0i64, 0i64);
    let mut next = 0;
    while sum_so_far < required {
        let mut next_bound;
        loop {
            sensitive_target_sum += delta_target_sum;
            sensitive += delta_sensitive;
            let Some(&(bound, i, lower)) = bounds.get(next) else {
                return Err("ran out of bounds to consider".into());
            };
            next_bound = bound;
            let target = relative[i].0;
            (delta_sensitive, delta_target_sum) = if lower { (1, target) } else { (-1, -target) };
            next += 1;
            if next_bound > fair {
                break;
            }
        }
        if sensitive == 0 {
            fair = next_bound;
            continue;
        }
        let next_fair = fair + (required - sum_so_far) / sensitive_target_sum;
        if next_fair <= next_bound {
            fair = next_fair;
            break;
        }
        sum_so_far += (next_bound - fair) * sensitive_target_sum;
        fair = next_bound;
    }
    let allocs = items
        .iter()
        .zip(&relative)
        .map(|(item, (target, _, _))| item.lower.max(item.upper.min(fair * target)))
        .collect();
    Ok((allocs, fair))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(lower: f64, target: f64, upper: f64) -> AllocItem {
        AllocItem {
            target,
            lower,
            upper,
        }
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn the_integrator_weighs_demand_by_time() {
        let t0 = Instant::now();
        let mut d = SeatDemand::new(t0);
        d.set(4.0, t0);
        d.set(0.0, t0 + Duration::from_secs(1));
        let o = d.reset(t0 + Duration::from_secs(4));
        assert_eq!((o.duration, o.max), (4.0, 4.0));
        assert!((o.average - 1.0).abs() < 1e-9);
        // mean of x² is 4, so the variance is 4 - 1.
        assert!((o.deviation - 3f64.sqrt()).abs() < 1e-9);
        // The next period starts from the demand as it is.
        let o = d.reset(t0 + Duration::from_secs(6));
        assert_eq!((o.duration, o.average, o.max), (2.0, 0.0, 0.0));
    }

    #[test]
    fn smoothed_demand_rises_at_once_and_falls_slowly() {
        let mut s = DemandStats::default();
        let observed = |average: f64, max: f64| DemandObservation {
            duration: 10.0,
            average,
            deviation: 0.0,
            max,
        };
        s.update(&observed(50.0, 60.0));
        assert_eq!((s.smoothed, s.high_watermark), (50.0, 60));
        s.update(&observed(0.0, 0.0));
        assert!((s.smoothed - 50.0 * SMOOTHING).abs() < 1e-9);
        assert_eq!(s.high_watermark, 0);
        // A period of no length keeps the averages.
        s.update(&DemandObservation {
            duration: 0.0,
            average: f64::NAN,
            deviation: f64::NAN,
            max: 3.0,
        });
        assert_eq!((s.avg, s.high_watermark), (0.0, 3));
    }

    #[test]
    fn bounds_follow_the_percentages() {
        // Upstream's workload-low: 100 shares, 90 % lendable, no borrowing limit.
        let b = Bounds::of(200, Some(90), None, 600, false);
        assert_eq!((b.min, b.max, b.initial()), (20, 800, 110));
        let b = Bounds::of(7, Some(50), Some(100), 600, false);
        assert_eq!((b.min, b.max, b.initial()), (3, 14, 5)); // round(3.5) = 4 lent
        let b = Bounds::of(0, None, None, 600, true);
        assert_eq!((b.min, b.max, b.initial()), (0, 600, 0));
    }

    #[test]
    fn allocation_is_fair_within_the_bounds() {
        // No bound matters: proportional to the targets.
        let (a, f) = allocate(30.0, &[item(0.0, 10.0, 100.0), item(0.0, 20.0, 100.0)]).unwrap();
        assert!(
            close(&a, &[10.0, 20.0]) && (f - 1.0).abs() < 1e-9,
            "{a:?} {f}"
        );
        // An upper bound binds: the other takes the rest.
        let (a, _) = allocate(30.0, &[item(0.0, 10.0, 5.0), item(0.0, 10.0, 100.0)]).unwrap();
        assert!(close(&a, &[5.0, 25.0]), "{a:?}");
        // A lower bound binds.
        let (a, _) = allocate(20.0, &[item(8.0, 8.0, 100.0), item(0.0, 100.0, 100.0)]).unwrap();
        assert!(close(&a, &[8.0, 12.0]), "{a:?}");
        // No room either way.
        let (a, _) = allocate(10.0, &[item(4.0, 4.0, 9.0), item(6.0, 6.0, 9.0)]).unwrap();
        assert!(close(&a, &[4.0, 6.0]), "{a:?}");
        assert!(allocate(10.0, &[item(6.0, 6.0, 9.0), item(6.0, 6.0, 9.0)]).is_err());
        assert!(allocate(10.0, &[item(0.0, 1.0, 2.0), item(0.0, 1.0, 2.0)]).is_err());
    }

    /// Upstream's defaults at 600 seats: what each limited level may use when only
    /// one is busy, and when none is.
    #[test]
    fn a_busy_level_borrows_what_idle_ones_lend() {
        let server = 600;
        // (shares, lendable %): upstream's suggested and mandatory levels.
        let config = [
            ("exempt", 0, 0, true),
            ("catch-all", 5, 0, false),
            ("global-default", 20, 50, false),
            ("leader-election", 10, 0, false),
            ("node-high", 40, 25, false),
            ("system", 30, 33, false),
            ("workload-high", 40, 50, false),
            ("workload-low", 100, 90, false),
        ];
        let shares: u32 = config.iter().map(|c| c.1).sum();
        let state = |busy: Option<&str>| -> Vec<LevelState> {
            config
                .iter()
                .map(|&(name, s, lendable, exempt)| {
                    let nominal = (server * s).div_ceil(shares);
                    let bounds = Bounds::of(nominal, Some(lendable), None, server, exempt);
                    let demand = if busy == Some(name) { 10_000.0 } else { 0.0 };
                    LevelState {
                        bounds,
                        stats: DemandStats {
                            avg: demand,
                            std_dev: 0.0,
                            high_watermark: demand as u32,
                            smoothed: demand,
                        },
                        current: bounds.initial(),
                    }
                })
                .collect()
        };
        let nominal_sum: u32 = state(None).iter().map(|l| l.bounds.nominal).sum();
        let (idle, _) = adjust(&state(None), nominal_sum);
        let (busy, fair) = adjust(&state(Some("workload-low")), nominal_sum);
        let low = 7;
        // Nobody busy: every limited level gets the same fraction of its lower bound,
        // and the server's seats are all given out.
        let limited = |a: &[Adjusted]| -> u32 { a[1..].iter().map(|a| a.current).sum() };
        assert!(limited(&idle).abs_diff(nominal_sum) <= 7, "{idle:?}");
        for (a, l) in idle.iter().zip(state(None)).skip(1) {
            assert!(a.current >= l.bounds.min, "{a:?} {l:?}");
        }
        // Every other level keeps only its lower bound; workload-low has the rest.
        let others_min: u32 = state(None)
            .iter()
            .enumerate()
            .filter(|(i, l)| *i != low && !l.bounds.exempt)
            .map(|(_, l)| l.bounds.min)
            .sum();
        assert_eq!(busy[low].current, nominal_sum - others_min);
        assert!(
            busy[low].current > state(None)[low].bounds.nominal,
            "{busy:?}"
        );
        assert!(fair > 0.0 && fair < 1.0, "{fair}");
        assert_eq!(busy[1].current, 13, "catch-all lends nothing");
    }
}
