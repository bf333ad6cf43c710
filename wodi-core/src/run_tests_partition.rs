//! A worker cut off by a partition: CARMI reports its host lost while its
//! connection to the server stays open (nothing reaches either end), and
//! its answer arrives when the link comes back.

use carmi_proto::ids::{HostId, ProcessId, RequestId};
use carmi_proto::msg::{Event, ExitStatus};

use super::*;

#[test]
fn the_late_answer_of_a_worker_whose_host_was_lost_is_never_delivered() {
    let (mut b, m, w, ticket) = one_step_running(3);
    b.at(10.0);
    // The first worker's process is the bench's first (ProcessId(1)).
    let lost = Event::ProcessExited {
        request: RequestId(1),
        process: ProcessId(1),
        status: ExitStatus::HostLost,
        cpu_seconds: 0.0,
    };
    b.run.carmi_event(lost, b.now);
    let deleted = Event::HostDeleted {
        request: RequestId(1),
        host: HostId(1),
        reason: "the machine of slot1@m1 stopped answering".into(),
    };
    b.run.carmi_event(deleted, b.now);
    b.drain();
    // The step goes to a new worker at once: no loss grace for a lost host.
    let w2 = b.grant("a", 2);
    let out = b.drain();
    let resent = step_tickets(&out, w2);
    assert_eq!(resent.len(), 1, "{out:?}");
    assert_eq!(resent[0].1, StepId(7));
    // The link comes back before the new copy is done: the old answer
    // arrives first, and is dropped.
    b.at(12.0);
    b.result(w, ticket, "late");
    let out = b.drain();
    assert!(
        !to_master(&out, m)
            .iter()
            .any(|x| matches!(x, ToMaster::Result { .. })),
        "{out:?}"
    );
    b.at(13.0);
    b.result(w2, resent[0].0, "fresh");
    let out = b.drain();
    let delivered: Vec<String> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToMaster {
                master,
                msg: ToMaster::Result { step },
                payload,
            } if *master == m && *step == StepId(7) => {
                Some(String::from_utf8_lossy(payload).into_owned())
            }
            _ => None,
        })
        .collect();
    assert_eq!(delivered, vec!["fresh".to_string()]);
}
