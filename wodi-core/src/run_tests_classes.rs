//! The run with several classes, each with its own speed and worker
//! command, and with speeds from a benchmark step.

use bytes::Bytes;
use carmi_proto::ids::HostId;

use super::*;

fn class_init(classes: Vec<ClassSpec>, policies: Policies) -> FromMaster {
    let FromMaster::Init {
        executable,
        args,
        prefetch,
        max_attempts,
        suspend_timeout_ms,
        ordering,
        refine_speed,
        learn_from_wall,
        ..
    } = init(&[], 3, Policies::default())
    else {
        unreachable!()
    };
    FromMaster::Init {
        classes,
        executable,
        args,
        prefetch,
        prefetch_max: 0,
        max_attempts,
        suspend_timeout_ms,
        ordering,
        speed: crate::speed::SpeedSource::Class,
        refine_speed,
        learn_from_wall,
        policies,
    }
}

fn spec(name: &str, count: u32, speed: f64) -> ClassSpec {
    ClassSpec {
        speed: Some(speed),
        ..ClassSpec::new(name, "true", count)
    }
}

#[test]
fn fewest_hosts_across_classes_keeps_the_fast_class_and_gives_back_the_slow_one() {
    let mut b = Bench::new();
    let policies = Policies {
        fewest_hosts: Some(0.0),
        hysteresis: 0,
        ..Policies::default()
    };
    let classes = vec![spec("slow", 2, 0.5), spec("fast", 2, 2.0)];
    let m = b.master(class_init(classes, policies), "");
    b.drain();
    // 4 s of work is 2 s on a fast host, the best cycle; the two 2 s steps
    // fit on the second fast host in the same time.
    cycle(&mut b, m, 1, &[4.0, 2.0, 2.0]);
    assert_eq!(b.run.sched().class_desired("fast"), 2);
    assert_eq!(b.run.sched().class_desired("slow"), 0);
    // One fast host held now; the other (not held yet) counts as fast as it.
    let _ = b.grant("fast", 1);
    // With six steps of 2 s, two fast hosts need 3 s against the best 1 s:
    // every host asked for is kept, the fast ones first.
    cycle(&mut b, m, 2, &[2.0; 6]);
    assert_eq!(b.run.sched().class_desired("fast"), 2);
    assert_eq!(b.run.sched().class_desired("slow"), 2);
}

#[test]
fn fewest_hosts_with_one_class_matches_the_single_class_rule() {
    // The per-class rule gives what the one-class rule gave: the count,
    // clamped to at least one and at most what was asked.
    let mut b = Bench::new();
    let policies = Policies {
        fewest_hosts: Some(0.0),
        hysteresis: 0,
        ..Policies::default()
    };
    let m = b.master(init(&[("a", 5)], 3, policies), "");
    b.drain();
    for (n, work) in [vec![1.0], vec![3.0, 1.0, 1.0, 1.0], vec![1.0; 12]]
        .into_iter()
        .enumerate()
    {
        let steps: Vec<StepId> = (0..work.len())
            .map(|i| StepId(100 * (n as u64 + 1) + i as u64))
            .collect();
        let wanted = cycle(&mut b, m, n as u64 + 1, &work);
        let single = b.run.sched().fewest_hosts(&steps, 0.0).unwrap().clamp(1, 5);
        assert_eq!(wanted, single, "cycle {n}: {work:?}");
    }
}

#[test]
fn each_class_spawns_its_own_worker_command() {
    let mut b = Bench::new();
    let classes = vec![
        ClassSpec {
            args: Some(vec!["--arch=a".into()]),
            ..ClassSpec::new("a", "true", 1)
        },
        ClassSpec {
            executable: Some("/bin/worker-b".into()),
            ..ClassSpec::new("b", "true", 1)
        },
    ];
    b.master(class_init(classes, Policies::default()), "");
    b.drain();
    b.grant("a", 1);
    b.grant("b", 2);
    let spawns: Vec<(HostId, String, Vec<String>)> = b
        .calls
        .iter()
        .filter_map(|(_, c)| match c {
            CarmiCall::Spawn {
                executable,
                args,
                host,
            } => Some((*host, executable.clone(), args[..args.len() - 1].to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(
        spawns,
        vec![
            (
                HostId(1),
                "/bin/worker".into(),
                vec!["--arch=a".to_string()]
            ),
            (HostId(2), "/bin/worker-b".into(), vec!["--x".to_string()]),
        ]
    );
}

#[test]
fn a_second_master_naming_a_class_with_another_command_is_refused() {
    let mut b = Bench::new();
    b.master(init(&[("a", 1)], 3, Policies::default()), "");
    b.drain();
    let classes = vec![ClassSpec {
        executable: Some("/bin/other".into()),
        ..ClassSpec::new("a", "true", 1)
    }];
    let second = b.master(class_init(classes, Policies::default()), "");
    let out = b.drain();
    let told = to_master(&out, second);
    assert!(
        matches!(told.as_slice(), [ToMaster::Fatal { reason }] if reason.contains("class a")),
        "{told:?}"
    );
    assert_eq!(b.run.sched().class_desired("a"), 1);
}

#[test]
fn a_new_worker_runs_the_benchmark_step_before_any_real_step() {
    let mut b = Bench::new();
    let FromMaster::Init {
        classes,
        executable,
        args,
        prefetch,
        max_attempts,
        suspend_timeout_ms,
        ordering,
        refine_speed,
        learn_from_wall,
        policies,
        ..
    } = init(&[("a", 1)], 3, Policies::default())
    else {
        unreachable!()
    };
    let msg = FromMaster::Init {
        classes,
        executable,
        args,
        prefetch,
        prefetch_max: 0,
        max_attempts,
        suspend_timeout_ms,
        ordering,
        speed: crate::speed::SpeedSource::Benchmark {
            reference_s: Some(0.2),
        },
        refine_speed,
        learn_from_wall,
        policies,
    };
    let m = b.master(msg, "the-init");
    b.send(m, FromMaster::Benchmark, "bench");
    b.send(m, FromMaster::Step { step: StepId(1) }, "real");
    b.drain();
    let w = b.grant("a", 1);
    b.at(1.0);
    let out = b.drain();
    use crate::speed::{BENCHMARK_STEP, BENCHMARK_TICKET};
    assert_eq!(
        to_worker(&out, w),
        vec![
            (ToWorker::Init, "the-init".into()),
            (
                ToWorker::Step {
                    ticket: BENCHMARK_TICKET,
                    step: StepId(BENCHMARK_STEP)
                },
                "bench".into()
            ),
        ]
    );
    // 100 ms where a speed-1 host takes 200: speed 2, then the real step.
    b.at(1.1);
    let answer = FromWorker::Result {
        ticket: BENCHMARK_TICKET,
        cpu_us: 100_000,
        wall_us: 100_000,
    };
    b.run.worker_message(w, answer, Bytes::new(), b.now);
    let out = b.drain();
    assert_eq!(b.run.sched().host_speed(HostId(1)), Some(2.0));
    assert_eq!(
        step_tickets(&out, w)
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        vec![StepId(1)],
        "{out:?}"
    );
}
