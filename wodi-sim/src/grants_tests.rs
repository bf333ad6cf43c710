use carmi_proto::ids::HostId;
use wodi_core::CycleId;
use wodi_core::stats::{CycleTime, HostTimeline, Period};

use super::*;

fn row(host: u64, periods: &[(PeriodKind, f64, f64)]) -> HostTimeline {
    HostTimeline {
        host: HostId(host),
        class: "c".into(),
        periods: periods
            .iter()
            .map(|&(kind, start_s, end_s)| Period {
                kind,
                start_s,
                end_s,
            })
            .collect(),
    }
}

#[test]
fn grants_split_into_start_owner_replacements_and_policy_regrowth() {
    use PeriodKind::{Allocated, Lost, Suspended};
    let stats = Stats {
        execution_time_s: 100.0,
        cycles: vec![CycleTime {
            cycle: CycleId(0),
            begin_s: 0.0,
            end_s: Some(10.0),
        }],
        timeline: vec![
            // Two hosts at the start; host 0 is taken by its owner at 20.
            row(0, &[(Allocated, 0.0, 20.0), (Lost, 20.0, 20.0)]),
            row(1, &[(Allocated, 1.0, 100.0)]),
            // Host 0's replacement, given back while suspended at 50.
            row(2, &[(Allocated, 21.0, 50.0), (Suspended, 40.0, 50.0)]),
            // That one's replacement, given back idle at 70 (policy).
            row(3, &[(Allocated, 51.0, 70.0)]),
            // Asked for again later: nothing of the owner's to replace.
            row(4, &[(Allocated, 80.0, 100.0)]),
        ],
        ..Stats::default()
    };
    assert_eq!(
        split_grants(&stats),
        GrantSplit {
            first_cycle: 2,
            after_owner: 2,
            policy: 1,
        }
    );
}

#[test]
fn a_loss_in_the_first_cycle_is_replaced_not_started() {
    use PeriodKind::{Allocated, Lost};
    let stats = Stats {
        execution_time_s: 100.0,
        cycles: vec![CycleTime {
            cycle: CycleId(0),
            begin_s: 0.0,
            end_s: Some(30.0),
        }],
        timeline: vec![
            row(0, &[(Allocated, 0.0, 5.0), (Lost, 5.0, 5.0)]),
            row(1, &[(Allocated, 6.0, 100.0)]),
        ],
        ..Stats::default()
    };
    let split = split_grants(&stats);
    assert_eq!(
        (split.first_cycle, split.after_owner, split.policy),
        (1, 1, 0)
    );
}
