//! The stochastic owner: alternating absent and present periods whose
//! lengths follow the time of day and the day of the week.
//!
//! # The model
//! Each host has its own owner and its own random stream (derived from the
//! seed and the host index, so adding hosts never changes the others). The
//! owner alternates between *present* and *absent*. Two regimes set the mean
//! length of each kind of period: *working hours* (by default Monday to
//! Friday, 08:00 to 18:00) and *off hours* (nights and weekends).
//!
//! A period that spans a regime boundary must feel both regimes, otherwise an
//! absence drawn at 17:59 would be a short working-hours absence lasting into
//! the night. So a period's length is drawn once with mean 1 (the *shape*)
//! and then consumed at the rate of the current regime: it ends when
//! `∫ dt / mean(t)` over the period reaches the draw. For exponential shapes
//! this is exactly a Markov process whose rates switch at the boundaries; for
//! a log-normal shape it is the same time change applied to a heavier tail.
//!
//! # Default parameters and why
//! Mutka and Livny, measuring private workstations over months, found them
//! idle (no owner activity, little load) about 70% of the time overall, with
//! much less availability during working hours than at night and on
//! weekends, and with idle periods whose lengths are far from exponential
//! (many short, a few very long). The defaults follow that shape:
//!
//! | regime | mean present | mean absent | present |
//! |---|---|---|---|
//! | working hours | 60 min | 30 min | 67% |
//! | off hours | 20 min | 5 h | 6% |
//!
//! Over a week this puts the owner at the machine about 24% of the time
//! (10 h × 67% + 14 h × 6% on each of five weekdays, 6% of the weekend).
//! A policy that starts jobs only after 15 idle minutes and keeps a machine
//! unavailable a while after each visit turns that into roughly 30% of the
//! time unavailable, i.e. the ~70% available that was measured. Periods are
//! log-normal with σ = 1 by default (a long right tail); `Shape::Exponential`
//! gives the memoryless version.
//!
//! Virtual time 0 is `start` seconds after Monday 00:00; the default, Monday
//! 09:00, makes a freshly started pool churn at once instead of idling
//! through its first simulated night.

use carmi_proto::msg::OwnerEvent;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Error;

const HOUR: f64 = 3600.0;
const DAY: f64 = 24.0 * HOUR;
const WEEK: f64 = 7.0 * DAY;

/// Mean period lengths in one regime, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Regime {
    /// Mean length of a visit of the owner.
    pub mean_present: f64,
    /// Mean length of an absence.
    pub mean_absent: f64,
}

impl Regime {
    /// Long-run fraction of time the owner is present under this regime alone.
    pub fn fraction_present(&self) -> f64 {
        self.mean_present / (self.mean_present + self.mean_absent)
    }
}

/// Distribution of a period's length, scaled to the regime's mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// Memoryless periods.
    Exponential,
    /// Log-normal periods with this σ of the underlying normal (mean kept).
    LogNormal {
        /// Spread; 0 makes every period exactly the mean.
        sigma: f64,
    },
}

/// Parameters of the stochastic owner model. See the module docs for the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Stochastic {
    /// Means during working hours.
    pub work: Regime,
    /// Means during nights (and weekends, if `weekends`).
    pub off: Regime,
    /// Hour of the day working hours begin (0..24).
    pub work_start_hour: f64,
    /// Hour of the day working hours end (after `work_start_hour`).
    pub work_end_hour: f64,
    /// Saturdays and Sundays are off hours all day.
    pub weekends: bool,
    /// Seconds after Monday 00:00 that virtual time 0 stands for.
    pub start: f64,
    /// Distribution of period lengths.
    pub shape: Shape,
}

impl Default for Stochastic {
    fn default() -> Self {
        Stochastic {
            work: Regime {
                mean_present: 60.0 * 60.0,
                mean_absent: 30.0 * 60.0,
            },
            off: Regime {
                mean_present: 20.0 * 60.0,
                mean_absent: 5.0 * HOUR,
            },
            work_start_hour: 8.0,
            work_end_hour: 18.0,
            weekends: true,
            start: 9.0 * HOUR,
            shape: Shape::LogNormal { sigma: 1.0 },
        }
    }
}

impl Stochastic {
    /// The same owner all day and all week (no rhythm): both regimes are `r`.
    pub fn flat(r: Regime) -> Stochastic {
        Stochastic {
            work: r,
            off: r,
            ..Stochastic::default()
        }
    }

    /// Checks that every parameter makes sense.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::BadModel(what.to_string()));
        for (name, r) in [("working hours", self.work), ("off hours", self.off)] {
            for v in [r.mean_present, r.mean_absent] {
                if !(v.is_finite() && v > 0.0) {
                    return bad(&format!(
                        "{name}: mean period lengths must be positive seconds, got {v}"
                    ));
                }
            }
        }
        let (s, e) = (self.work_start_hour, self.work_end_hour);
        if !(0.0..=24.0).contains(&s) || !(0.0..=24.0).contains(&e) || s > e {
            return bad(&format!(
                "working hours must satisfy 0 <= start <= end <= 24, got {s}..{e}"
            ));
        }
        if !self.start.is_finite() {
            return bad("start must be finite");
        }
        if let Shape::LogNormal { sigma } = self.shape
            && !(sigma.is_finite() && sigma >= 0.0)
        {
            return bad(&format!("log-normal sigma must be >= 0, got {sigma}"));
        }
        Ok(())
    }

    /// Whether virtual time `t` falls in working hours.
    pub fn is_working_hours(&self, t: f64) -> bool {
        let w = (self.start + t).rem_euclid(WEEK);
        let day = (w / DAY).floor();
        let hour = (w - day * DAY) / HOUR;
        (!self.weekends || day < 5.0) && hour >= self.work_start_hour && hour < self.work_end_hour
    }

    fn regime(&self, t: f64) -> Regime {
        if self.is_working_hours(t) {
            self.work
        } else {
            self.off
        }
    }

    /// The first virtual time after `t` at which the regime changes
    /// (infinite if it never does).
    fn next_boundary(&self, t: f64) -> f64 {
        if self.work_start_hour >= self.work_end_hour {
            return f64::INFINITY;
        }
        let abs = self.start + t;
        let week0 = (abs / WEEK).floor() * WEEK;
        // Boundaries of this week and the next, in order: the first one after
        // `abs` is the answer (there is at least one per week).
        for week in [week0, week0 + WEEK] {
            for day in 0..7 {
                if self.weekends && day >= 5 {
                    continue;
                }
                let d = week + f64::from(day) * DAY;
                for h in [self.work_start_hour, self.work_end_hour] {
                    let b = d + h * HOUR;
                    if b > abs {
                        return b - self.start;
                    }
                }
            }
        }
        f64::INFINITY
    }

    /// Where a period that begins at `t` ends, given its unit-mean draw `d`.
    fn period_end(&self, mut t: f64, mut d: f64, present: bool) -> f64 {
        loop {
            let r = self.regime(t);
            let mean = if present {
                r.mean_present
            } else {
                r.mean_absent
            };
            let b = self.next_boundary(t);
            let room = (b - t) / mean;
            if d <= room {
                return t + d * mean;
            }
            d -= room;
            t = b;
        }
    }

    /// The owner events of one host, forever, in time order.
    pub fn host_events(&self, host: usize, seed: u64) -> HostOwner {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, host as u64));
        let present = rng.random::<f64>() < self.regime(0.0).fraction_present();
        HostOwner {
            model: self.clone(),
            rng,
            t: 0.0,
            present,
            started: false,
        }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        // In (0, 1], so that the logarithm is finite.
        let u = 1.0 - rng.random::<f64>();
        match self.shape {
            Shape::Exponential => -u.ln(),
            Shape::LogNormal { sigma } => {
                let v: f64 = rng.random();
                let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                (sigma * z - sigma * sigma / 2.0).exp()
            }
        }
    }
}

/// One host's owner as an endless iterator of `(virtual time, event)`.
///
/// An owner present at time 0 yields `Arrive` at time 0 first, so a consumer
/// that starts with every machine free sees the initial state.
pub struct HostOwner {
    model: Stochastic,
    rng: ChaCha8Rng,
    t: f64,
    present: bool,
    started: bool,
}

impl Iterator for HostOwner {
    type Item = (f64, OwnerEvent);

    fn next(&mut self) -> Option<(f64, OwnerEvent)> {
        if !self.started {
            self.started = true;
            if self.present {
                return Some((0.0, OwnerEvent::Arrive));
            }
        }
        let d = self.model.draw(&mut self.rng);
        self.t = self.model.period_end(self.t, d, self.present);
        if !self.t.is_finite() {
            return None;
        }
        self.present = !self.present;
        let event = if self.present {
            OwnerEvent::Arrive
        } else {
            OwnerEvent::Leave
        };
        Some((self.t, event))
    }
}

/// SplitMix64 finalizer over the seed and the host: independent streams per host.
fn mix(seed: u64, host: u64) -> u64 {
    let mut z = seed ^ host.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_hours_follow_the_clock_and_the_week() {
        let m = Stochastic {
            start: 0.0,
            ..Stochastic::default()
        };
        assert!(!m.is_working_hours(7.9 * HOUR));
        assert!(m.is_working_hours(8.0 * HOUR));
        assert!(m.is_working_hours(17.9 * HOUR));
        assert!(!m.is_working_hours(18.0 * HOUR));
        // Saturday 10:00.
        assert!(!m.is_working_hours(5.0 * DAY + 10.0 * HOUR));
        // Next Monday 10:00.
        assert!(m.is_working_hours(WEEK + 10.0 * HOUR));
        assert_eq!(m.next_boundary(0.0), 8.0 * HOUR);
        assert_eq!(m.next_boundary(8.0 * HOUR), 18.0 * HOUR);
        // Friday evening -> Monday morning.
        assert_eq!(m.next_boundary(4.0 * DAY + 19.0 * HOUR), WEEK + 8.0 * HOUR);
    }

    #[test]
    fn a_period_crossing_a_boundary_uses_both_means() {
        let m = Stochastic {
            start: 0.0,
            work: Regime {
                mean_present: 100.0,
                mean_absent: 60.0,
            },
            off: Regime {
                mean_present: 100.0,
                mean_absent: 600.0,
            },
            ..Stochastic::default()
        };
        // One minute before 08:00 an absence of unit draw 2 uses up 0.1 of
        // its draw in the off regime, the remaining 1.9 at 60 s per unit.
        let t0 = 8.0 * HOUR - 60.0;
        let end = m.period_end(t0, 2.0, false);
        assert!((end - (8.0 * HOUR + 1.9 * 60.0)).abs() < 1e-6, "{end}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut m = Stochastic::default();
        m.work.mean_absent = 0.0;
        assert!(m.check().is_err());
        let m = Stochastic {
            work_start_hour: 19.0,
            ..Stochastic::default()
        };
        assert!(m.check().is_err());
        assert!(Stochastic::default().check().is_ok());
    }

    #[test]
    fn lognormal_draws_keep_unit_mean() {
        let m = Stochastic::default();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| m.draw(&mut rng)).sum::<f64>() / f64::from(n);
        assert!((mean - 1.0).abs() < 0.03, "{mean}");
    }
}
