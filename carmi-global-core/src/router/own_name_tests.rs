//! A machine advertises under the name its link proved only: an ad or an
//! update whose `Name` says another machine is refused (issue 21), so that
//! a daemon token bound to one machine cannot draw the jobs that ask for
//! another by name.

use std::time::Duration;

use carmi_proto::msg::{FromGlobal, Role, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};

const M9: LinkId = LinkId(9);

/// Opens machine m9's link and sends it `msg`: the failures told to it, and
/// whether its link was closed.
fn from_m9(r: &mut Router, msg: ToGlobal) -> (Vec<String>, bool) {
    r.on_link_opened(M9, Role::Local { name: "m9".into() }, Duration::ZERO);
    r.on_message(M9, msg, Duration::ZERO);
    r.sanity_check();
    let (mut told, mut closed) = (Vec::new(), false);
    for o in r.take_outputs() {
        match o {
            Output::Send {
                link: M9,
                msg: FromGlobal::AdminFailed(f),
            } => told.push(f.message),
            Output::Close { link: M9, .. } => closed = true,
            _ => {}
        }
    }
    (told, closed)
}

fn advertise(name: &str) -> ToGlobal {
    ToGlobal::Advertise {
        ad: format!("[ Name = {name}; Arch = \"X86_64\" ]"),
        slots: 1,
        running: vec![],
    }
}

#[test]
fn an_ad_naming_another_machine_is_refused_and_its_link_closed() {
    let mut r = Router::new(RouterConfig::default());
    let (told, closed) = from_m9(&mut r, advertise("\"m0\""));
    assert!(closed);
    assert!(
        told.iter()
            .any(|t| t.contains("`m0`") && t.contains("machine `m9`'s")),
        "{told:?}"
    );
    assert!(r.alloc.pool_status().is_empty(), "nothing registered");

    let (told, closed) = from_m9(&mut r, advertise("42"));
    assert!(
        closed && told.iter().any(|t| t.contains("not a string")),
        "{told:?}"
    );
    assert!(r.alloc.pool_status().is_empty(), "nothing registered");
}

#[test]
fn an_update_naming_another_machine_is_dropped_and_the_ad_kept() {
    let mut r = Router::new(RouterConfig::default());
    let (told, closed) = from_m9(&mut r, advertise("\"m9\""));
    assert!(told.is_empty() && !closed, "{told:?}");
    let update = ToGlobal::Heartbeat {
        update: "Name = \"m0\"\n".into(),
    };
    r.on_message(M9, update, Duration::ZERO);
    let outputs = r.take_outputs();
    let refused = outputs.iter().any(|o| {
        matches!(o, Output::Send { link: M9, msg: FromGlobal::AdminFailed(f) }
            if f.message.contains("`m0`"))
    });
    assert!(refused, "the update was taken");
    let ads = r.alloc.machine_ads();
    assert_eq!(ads.len(), 1);
    assert!(
        ads[0].1.contains("\"m9\"") && !ads[0].1.contains("\"m0\""),
        "{ads:?}"
    );
}
