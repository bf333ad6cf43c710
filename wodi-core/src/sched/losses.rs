//! The rate at which owners take the run's hosts back, measured by the run
//! from its own host stays, and what it makes a held host-second cost: the
//! loss-rate-aware host count of issue 34 (docs/results.md, "Fewer grants").

use std::time::Duration;

use super::{Sched, Time};

/// How far back the loss rate is measured: long enough to see a few losses
/// on a handful of hosts when owners come and go every half hour, short
/// against a working day, so that the rate follows the pool's rhythm
/// (owners busy by day, away at night) within a cycle or a few.
pub const LOSS_WINDOW: Duration = Duration::from_secs(3600);

impl Sched {
    /// Losses per held host-second over the `window` before `now`: hosts
    /// taken by their owners (or given back suspended, which the records
    /// count as losses) over the host time held in that window. `None`
    /// when no host was held in it.
    pub fn loss_rate(&self, now: Time, window: Duration) -> Option<f64> {
        let from = now.saturating_sub(window);
        let mut held = 0.0;
        let mut lost = 0u32;
        for r in &self.records.hosts {
            let (added, removed, was_lost) = r.stay();
            let end = removed.unwrap_or(now).min(now);
            let start = added.max(from);
            if end > start {
                held += (end - start).as_secs_f64();
            }
            if was_lost && removed.is_some_and(|t| t > from && t <= now) {
                lost += 1;
            }
        }
        (held > 0.0).then(|| f64::from(lost) / held)
    }

    /// What holding a host for a second costs the run, in host-seconds:
    /// the second itself, plus the loss rate measured over `window` times
    /// what a loss costs beyond the host time already counted: the grant
    /// that replaces the host (`grant_cost` to the pool, `reacquire` to the
    /// run). 1 when nothing was held in the window.
    pub fn host_cost(&self, now: Time, window: Duration) -> f64 {
        let per_loss = (self.cfg.grant_cost + self.cfg.reacquire).as_secs_f64();
        1.0 + self.loss_rate(now, window).unwrap_or(0.0) * per_loss
    }
}

#[cfg(test)]
#[path = "losses_tests.rs"]
mod tests;
