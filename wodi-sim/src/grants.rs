//! Why each host was granted to a run, read off the core's own timeline:
//! the measurement behind issue 34's "fewer grants" (docs/results.md).
//!
//! A grant is one host stay (a row of the timeline). A stay ends for its
//! owner when it carries a loss mark (the pool took the host back) or ends
//! inside a suspended period (the run gave back a host its owner was
//! using); any other end before the run's own end is the run's policy
//! giving back a host (an idle one in a cycle's tail, or one more than the
//! fewest-hosts rule keeps). Grants are then matched, in time order,
//! against those ends: a grant while an owner-caused end is still
//! unmatched replaces it; any other grant during the first cycle is the
//! run's start; any later one is the policy growing the run again.

use serde::{Deserialize, Serialize};
use wodi_core::stats::{PeriodKind, Stats};

/// A run's grants by cause; the three add up to `hosts_added`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GrantSplit {
    /// Granted during the first cycle, replacing nothing.
    pub first_cycle: u32,
    /// Granted to replace a host its owner took (lost or suspended).
    pub after_owner: u32,
    /// Granted after the first cycle with no owner loss to replace: the
    /// run asked again for hosts its own policy had given back.
    pub policy: u32,
}

/// Splits the grants of the run `stats` describes; see the module doc.
pub fn split_grants(stats: &Stats) -> GrantSplit {
    let first_end = stats
        .cycles
        .first()
        .and_then(|c| c.end_s)
        .unwrap_or(f64::INFINITY);
    let run_end = stats.execution_time_s;
    // (time, 0 = an end for the owner, 1 = a grant): ends sort first.
    let mut events: Vec<(f64, u8)> = Vec::new();
    for row in &stats.timeline {
        let Some(stay) = row.periods.iter().find(|p| p.kind == PeriodKind::Allocated) else {
            continue;
        };
        events.push((stay.start_s, 1));
        let lost = row.periods.iter().any(|p| p.kind == PeriodKind::Lost);
        let while_suspended = row
            .periods
            .iter()
            .any(|p| p.kind == PeriodKind::Suspended && p.end_s >= stay.end_s);
        if stay.end_s < run_end && (lost || while_suspended) {
            events.push((stay.end_s, 0));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut split = GrantSplit::default();
    let mut owner_pending = 0u32;
    for (at, kind) in events {
        if kind == 0 {
            owner_pending += 1;
        } else if owner_pending > 0 {
            owner_pending -= 1;
            split.after_owner += 1;
        } else if at <= first_end {
            split.first_cycle += 1;
        } else {
            split.policy += 1;
        }
    }
    split
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
