//! Issue 34's rules for fewer grants, on the simulator: the first cycle
//! grown from what is known, a history restored before it, and the
//! loss-rate-aware count (docs/results.md, "Fewer grants").

use std::time::Duration;

use super::*;
use owner_model::OwnerModel;
use wodi_core::order::Ordering;
use wodi_core::plan::fewest_hosts;
use wodi_core::profile::materials;

/// `hosts` identical hosts, the keep preset, `cycles` cycles of the
/// materials profile.
fn keep(hosts: usize, owners: OwnerModel, cycles: u32) -> SimConfig {
    let mut cfg = super::tests::config(hosts, owners, 3);
    cfg.cycles = cycles;
    cfg.sched = Default::default();
    Preset::Keep.apply(&mut cfg);
    cfg
}

#[test]
fn growing_the_first_cycle_asks_for_what_the_known_steps_need_not_all_hosts() {
    let mut cfg = keep(24, OwnerModel::None, 4);
    let all = simulate(&cfg, Ordering::LongestFirst).summary;
    cfg.grants.grow_first_cycle = true;
    let grown = simulate(&cfg, Ordering::LongestFirst).summary;
    assert_eq!(grown.cycle_s.len(), 4);
    // Without owners every host is free: the plain run takes all 24.
    assert_eq!(all.grants.first_cycle, 24);
    let means: Vec<f64> = materials().iter().map(|s| s.mean).collect();
    let k = fewest_hosts(&means, &[1.0; 24], KEEP_TOLERANCE) as u32;
    assert!(
        grown.grants.first_cycle <= k + 1,
        "{} first-cycle grants, {k} needed",
        grown.grants.first_cycle
    );
    assert!(grown.adds < all.adds, "{} vs {}", grown.adds, all.adds);
    assert!(grown.efficiency > all.efficiency);
}

#[test]
fn a_restored_history_plans_the_first_cycle_at_once() {
    let mut cfg = keep(24, OwnerModel::None, 3);
    cfg.grants.grow_first_cycle = true;
    cfg.grants.warm_history = true;
    let run = simulate(&cfg, Ordering::LongestFirst).summary;
    let means: Vec<f64> = materials().iter().map(|s| s.mean).collect();
    let k = fewest_hosts(&means, &[1.0; 24], KEEP_TOLERANCE) as u32;
    assert_eq!(run.grants.first_cycle, k);
    assert_eq!(run.adds, k, "no host asked for again");
}

#[test]
fn pricing_losses_holds_fewer_hosts_while_owners_come_and_go() {
    // Monday from 09:00, owners busy: a grant priced at an hour of host
    // time makes every loss dear, and the run holds fewer hosts.
    let owners =
        OwnerModel::from_spec_with("stochastic", std::fs::read_to_string).expect("a known model");
    let mut cfg = keep(24, owners, 8);
    cfg.sched.grant_cost = Duration::from_secs(3600);
    let plain = simulate(&cfg, Ordering::LongestFirst).summary;
    cfg.grants.loss_aware = true;
    let aware = simulate(&cfg, Ordering::LongestFirst).summary;
    assert_eq!(aware.cycle_s.len(), 8);
    assert!(
        aware.mean_hosts < plain.mean_hosts - 1.0,
        "{:.1} vs {:.1} hosts",
        aware.mean_hosts,
        plain.mean_hosts
    );
}
