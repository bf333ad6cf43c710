//! Workers the run let go of before they connected (their host suspended
//! past its grace while they started) are churn, not a broken executable.

use super::*;

/// Grants host `host` to the newest request for hosts and starts the worker
/// the run spawns on it, unconnected: its spawn request, process and id.
fn grant_newest(b: &mut Bench, host: u64) -> (RequestId, ProcessId, WorkerId) {
    let request = b
        .calls
        .iter()
        .rev()
        .find_map(|(id, c)| matches!(c, CarmiCall::AddHosts { .. }).then_some(*id))
        .expect("the run asks for hosts");
    b.grant_to_unconnected(request, "a", host)
}

#[test]
fn workers_let_go_of_before_they_connected_do_not_end_the_run_as_early_deaths() {
    let mut b = Bench::new();
    let policies = Policies {
        release_suspended: true,
        ..Policies::default()
    };
    let mut msg = init(&[("a", 1)], 3, policies);
    if let FromMaster::Init {
        suspend_timeout_ms, ..
    } = &mut msg
    {
        *suspend_timeout_ms = 100;
    }
    let m = b.master(msg, "init");
    b.drain();
    b.send(m, FromMaster::Step { step: StepId(1) }, "data");
    b.drain();
    let mut t = 0.0;
    for host in 1..=(MAX_EARLY_DEATHS as u64 + 3) {
        let (spawn, process, worker) = grant_newest(&mut b, host);
        // Its owner comes back while it starts, past the grace: the run
        // gives the host back and asks for another.
        let suspended = Event::HostSuspended {
            request: RequestId(1),
            host: HostId(host),
        };
        b.run.carmi_event(suspended, b.now);
        t += 1.0;
        b.at(t);
        b.drain();
        // It connects late, is turned away, and exits as the server closes it.
        assert!(!b.run.worker_connected(worker, b.now), "host {host}");
        let exited = Event::ProcessExited {
            request: spawn,
            process,
            status: carmi_proto::msg::ExitStatus::Code(0),
            cpu_seconds: 0.0,
        };
        b.run.carmi_event(exited, b.now);
        t += 1.0;
        b.at(t);
        let out = b.drain();
        let fatal: Vec<_> = to_master(&out, m)
            .into_iter()
            .filter(|x| matches!(x, ToMaster::Fatal { .. }))
            .collect();
        assert!(fatal.is_empty(), "host {host}: {fatal:?}");
    }
}
