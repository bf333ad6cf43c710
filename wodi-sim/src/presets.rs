//! The sets of policies `wodi-sim` compares (`--policies`), in one place so
//! that the command, the tests and `docs/results.md` run the same ones.

use std::time::Duration;

use serde::Serialize;

use crate::config::SimConfig;

/// A set of WoDi's policies, applied over a [`SimConfig`]'s scheduler
/// settings and host count rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// The cost-aware rule (the default): hold the fewest hosts that end a
    /// cycle within 40% of its longest step (packed, so few hosts idle in
    /// the tail), keep an idle host through a tail shorter than getting one
    /// back plus a grant's cost (five minutes of host time), give back a
    /// suspended host after 15 s, straggler copies on idle hosts: what a
    /// master asks for with `wodi_core::proto::Policies::keep_hosts()`.
    Keep,
    /// Session 8's defaults: every host idle in a tail longer than getting
    /// it back goes back (about ten grants per cycle), suspended hosts after
    /// two minutes, straggler copies, fast abort.
    Churn,
    /// The paper's WoDi: none of the policies; hosts are held until their
    /// owners take them.
    Paper,
}

/// What a grant costs the pool under [`Preset::Keep`], in host time.
pub const KEEP_GRANT_COST: Duration = Duration::from_secs(300);

/// The fewest-hosts tolerance of [`Preset::Keep`].
pub const KEEP_TOLERANCE: f64 = 0.4;

impl Preset {
    /// Sets the preset's policies in `cfg` (its `reacquire`, the measured
    /// cost of getting a host back, stays as given).
    pub fn apply(self, cfg: &mut SimConfig) {
        let s = &mut cfg.sched;
        match self {
            Preset::Keep => {
                s.release_idle = true;
                s.grant_cost = KEEP_GRANT_COST;
                s.release_suspended = true;
                s.suspend_timeout = Duration::from_secs(15);
                s.stragglers = true;
                s.fast_abort = None;
                cfg.fewest_hosts = Some(KEEP_TOLERANCE);
                cfg.hysteresis = 5;
            }
            Preset::Churn => {
                s.release_idle = true;
                s.grant_cost = Duration::ZERO;
                s.release_suspended = true;
                s.suspend_timeout = Duration::from_secs(120);
                s.stragglers = true;
                s.fast_abort = Some(3.0);
                cfg.fewest_hosts = None;
            }
            Preset::Paper => {
                s.release_idle = false;
                s.grant_cost = Duration::ZERO;
                s.release_suspended = false;
                s.suspend_timeout = Duration::from_secs(120);
                s.stragglers = false;
                s.fast_abort = None;
                cfg.fewest_hosts = None;
            }
        }
    }
}
