//! Users' fair-share usage in the journal: written while it changes, kept
//! by a compaction, put back (decayed over the downtime) by a restart.

use std::time::Duration;

use super::{Output, Router, RouterConfig};
use crate::journal::{self, Live, Record};

const DAY: u64 = 24 * 3600;

fn usage_records(r: &mut Router) -> Vec<Record> {
    r.take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::Journal(rec @ Record::Usage { .. }) => Some(rec),
            _ => None,
        })
        .collect()
}

#[test]
fn usage_is_journaled_once_a_minute_and_a_restart_puts_it_back_decayed() {
    let config = RouterConfig {
        started_unix: 1_000_000,
        ..RouterConfig::default()
    };
    let mut r = Router::new(config.clone());
    r.alloc.restore_usage("alice", 7200.0);
    r.on_tick(Duration::from_secs(30));
    assert!(
        usage_records(&mut r).is_empty(),
        "too early: a minute apart"
    );
    r.on_tick(Duration::from_secs(61));
    let recs = usage_records(&mut r);
    let [Record::Usage { at_unix, users }] = &recs[..] else {
        panic!("one Usage record: {recs:?}");
    };
    assert_eq!(*at_unix, 1_000_061);
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].0, "alice");
    // A day's half-life: a minute keeps 99.95 % of it.
    assert!((users[0].1 - 7200.0).abs() < 5.0, "{users:?}");
    r.on_tick(Duration::from_secs(90));
    assert!(usage_records(&mut r).is_empty());
    // Through the journal's encoding, and kept (the last one) by a compaction.
    let written = users[0].1;
    let rec = recs[0].clone();
    let (back, damage) = journal::parse(journal::encode(&rec).as_bytes());
    assert_eq!((back, damage), (vec![rec.clone()], None));
    let older = Record::Usage {
        at_unix: 5,
        users: vec![("bob".into(), 1.0)],
    };
    let compacted = Live::of(&[older, rec.clone()]).records();
    assert_eq!(
        compacted
            .iter()
            .filter(|x| matches!(x, Record::Usage { .. }))
            .collect::<Vec<_>>(),
        [&rec]
    );
    // Restarted a day (one half-life) after the record was written.
    let mut again = Router::new(RouterConfig {
        started_unix: 1_000_061 + DAY,
        ..config
    });
    again.recover(compacted);
    let u = again.alloc.user_usage("alice");
    assert!((u.host_seconds - written / 2.0).abs() < 1e-6, "{u:?}");
    assert_eq!(again.alloc.user_usage("bob").host_seconds, 0.0);
}

#[test]
fn the_half_life_comes_from_the_configuration() {
    let config = RouterConfig {
        started_unix: 1_000_000 + 3600,
        priority_half_life: Duration::from_secs(3600),
        ..RouterConfig::default()
    };
    let mut r = Router::new(config);
    r.recover(vec![Record::Usage {
        at_unix: 1_000_000,
        users: vec![("alice".into(), 100.0)],
    }]);
    let u = r.alloc.user_usage("alice");
    assert!((u.host_seconds - 50.0).abs() < 1e-9, "{u:?}");
}

/// `carmi userprio --set-factor` (issue 15, item 7): an admin link sets a
/// user's factor, answered with the users; the `Factors` record survives a
/// compaction and a restart; nonsense is refused naming why.
#[test]
fn a_priority_factor_set_by_an_admin_is_journaled_and_put_back() {
    use carmi_proto::msg::{FromGlobal, Role, ToGlobal, UserPrioRequest};

    use super::LinkId;
    use super::hand_tests::step;

    let mut r = Router::new(RouterConfig::default());
    let admin = LinkId(7);
    step(&mut r, |r| {
        r.on_link_opened(admin, Role::Admin, Duration::ZERO)
    });
    let set = |user: &str, factor: f64| {
        ToGlobal::UserPrio(UserPrioRequest::SetFactor {
            user: user.into(),
            factor,
        })
    };
    let (sends, records) = step(&mut r, |r| {
        r.on_message(admin, set("alice", -1.0), Duration::ZERO)
    });
    assert!(records.is_empty());
    assert!(
        matches!(&sends[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("positive")),
        "{sends:?}"
    );
    let (sends, records) = step(&mut r, |r| {
        r.on_message(admin, set("alice", 2.5), Duration::ZERO)
    });
    let [(_, FromGlobal::Users(users))] = &sends[..] else {
        panic!("{sends:?}");
    };
    assert_eq!(users.len(), 1);
    assert_eq!((users[0].user.as_str(), users[0].factor), ("alice", 2.5));
    assert_eq!(users[0].priority, 2.5);
    let factors = Record::Factors {
        users: vec![("alice".into(), 2.5)],
    };
    assert_eq!(records, std::slice::from_ref(&factors));
    assert_eq!(r.alloc.user_usage("alice").factor, 2.5);
    let older = Record::Factors {
        users: vec![("bob".into(), 3.0)],
    };
    let compacted = Live::of(&[older, factors]).records();
    let mut again = Router::new(RouterConfig::default());
    again.recover(compacted);
    assert_eq!(again.alloc.user_usage("alice").factor, 2.5);
    assert_eq!(again.alloc.user_usage("bob").factor, 1.0);
}
