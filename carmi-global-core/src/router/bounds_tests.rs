//! A machine's merged ad keeps the limits of one message (issue 38,
//! "bounded by design"): fresh attribute names in every heartbeat are
//! refused once the ad would pass `max_ad_attributes`, with the reason, and
//! the machine stays registered.

use std::time::Duration;

use carmi_proto::msg::{FromGlobal, Role, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};

#[test]
fn fresh_names_in_every_heartbeat_stop_at_the_limit_of_one_ad() {
    let mut r = Router::new(RouterConfig {
        max_ad_attributes: 64,
        heartbeat: Duration::from_secs(3600),
        ..RouterConfig::default()
    });
    let m = LinkId(1);
    r.on_link_opened(m, Role::Local { name: "m".into() }, Duration::ZERO);
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"m\"; Memory = 1 ]".into(),
        slots: 1,
        running: vec![],
    };
    r.on_message(m, ad, Duration::ZERO);
    r.take_outputs();
    let mut refused = Vec::new();
    for beat in 0..10u64 {
        let update: String = (0..10)
            .map(|i| format!("Fresh{beat}x{i} = {i}\n"))
            .collect();
        r.on_message(m, ToGlobal::Heartbeat { update }, Duration::from_secs(beat));
        r.sanity_check();
        for o in r.take_outputs() {
            if let Output::Send {
                msg: FromGlobal::AdminFailed(f),
                ..
            } = o
            {
                refused.push(f.message);
            }
        }
    }
    let ads = r.allocator().machine_ads();
    let text = &ads
        .iter()
        .find(|(n, _)| n == "m")
        .expect("still registered")
        .1;
    let ad = classad::ClassAd::parse_any(text).unwrap();
    assert!(ad.len() <= 64, "the ad grew to {} attributes", ad.len());
    assert!(!refused.is_empty(), "nothing was refused");
    assert!(
        refused[0].contains("merged machine ad would have") && refused[0].contains("at most 64"),
        "{}",
        refused[0]
    );
}
