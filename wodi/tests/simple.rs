//! `wodi::Pool`, the blocking facade, on a real pool (`carmi_tests::Pool`):
//! results in input order, a failing step named by its input, the
//! streaming form, several cycles on generated step ids.

use wodi::master::ServerCommand;

#[test]
fn map_returns_results_in_order_and_names_the_input_of_a_failed_step() {
    let carmi = carmi_tests::Pool::start("wodi-simple", 2, &vec![Vec::new(); 2]);
    let mut pool = wodi::Pool::builder()
        .hosts(3)
        .worker(env!("CARGO_BIN_EXE_wodi-test-worker"), Vec::new())
        .pool(&carmi.locals[0].app_addr, &carmi.secret_path)
        .pool_token(&carmi.admin_token)
        .init(&"i")
        .configure(|cfg| cfg.server = ServerCommand::Path(env!("CARGO_BIN_EXE_wodi-server").into()))
        .start()
        .expect("start");

    // Cycle 0: 40 inputs, answered in input order with ids 0..40 generated.
    let inputs: Vec<String> = (0..40).map(|i| format!("d{i}")).collect();
    let out: Vec<String> = pool.map(&inputs).expect("map");
    let expected: Vec<String> = (0..40).map(|i| format!("i|c0:|s{i}|d{i}")).collect();
    assert_eq!(out, expected);

    // Cycle 1: one step fails; the error names its index and its input, and
    // the pool goes on.
    let inputs = ["d0", "fail no convergence", "d2"];
    match pool.map::<_, String>(inputs) {
        Err(wodi::simple::Error::Step {
            index,
            input,
            reason,
        }) => {
            assert_eq!(index, 1);
            assert_eq!(input, "\"fail no convergence\"");
            assert!(reason.contains("no convergence"), "{reason}");
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    let e = pool.map::<_, String>(["fail x"]).unwrap_err().to_string();
    assert!(e.contains("\"fail x\""), "{e}");

    // Cycle 3, streamed: every index once, results as they come.
    let mut seen = vec![0; 10];
    let sleeps = (0..10).map(|i| format!("sleep {}", 10 * (i % 3)));
    for item in pool.stream::<_, String>(sleeps).expect("stream") {
        let (i, r) = item.expect("a result");
        assert!(r.ends_with(&format!("|s{i}|sleep {}", 10 * (i % 3))), "{r}");
        seen[i] += 1;
    }
    assert_eq!(seen, vec![1; 10]);
    // A stream dropped early leaves nothing behind for the next cycle.
    let first = pool
        .stream::<_, String>(["d0", "d1", "d2"])
        .expect("stream")
        .next();
    assert!(matches!(first, Some(Ok(_))), "{first:?}");
    let out: Vec<String> = pool.map(["d7"]).expect("map after a dropped stream");
    assert_eq!(out, vec!["i|c5:|s0|d7".to_string()]);

    // Cycle 6 has no steps: it ends at once. Cycle 7, raw bytes (as the
    // Python package sends them): every index once, the failure's message.
    let none: Vec<String> = pool.map(Vec::<String>::new()).expect("an empty map");
    assert!(none.is_empty());
    pool.begin_raw(vec!["\"d1\"".into(), "\"fail raw\"".into()]);
    let mut raw = Vec::new();
    while let Some(item) = pool.next_raw() {
        raw.push(item.expect("an outcome"));
    }
    raw.sort_by_key(|(i, _)| *i);
    assert_eq!(raw[0], (0, Ok("\"i|c7:|s0|d1\"".into())));
    assert!(
        matches!(&raw[1], (1, Err(why)) if why.contains("raw")),
        "{raw:?}"
    );

    let stats = pool.close().expect("close");
    assert_eq!(stats.steps_delivered, 40 + 3 + 1 + 10 + 3 + 1 + 2);
    assert_eq!(stats.cycles.iter().filter(|c| c.end_s.is_some()).count(), 8);
}

/// The surface the Python package's `wodi.Executor` drives: steps added one
/// at a time to the open cycle, a wait for results that a wake from another
/// thread ends, and results already in taken without waiting.
#[test]
fn steps_join_the_open_cycle_and_a_wake_from_another_thread_ends_a_wait() {
    let carmi = carmi_tests::Pool::start("wodi-extend", 2, &vec![Vec::new(); 2]);
    let mut pool = wodi::Pool::builder()
        .hosts(2)
        .worker(env!("CARGO_BIN_EXE_wodi-test-worker"), Vec::new())
        .pool(&carmi.locals[0].app_addr, &carmi.secret_path)
        .pool_token(&carmi.admin_token)
        .init(&"i")
        .configure(|cfg| cfg.server = ServerCommand::Path(env!("CARGO_BIN_EXE_wodi-server").into()))
        .start()
        .expect("start");

    // No step out: only a wake ends the wait, even one from another thread.
    let waker = pool.waker();
    let wake_later = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waker.wake();
    });
    assert!(matches!(pool.next_raw_or_wake(), Ok(None)));
    wake_later.join().expect("the waking thread");

    // A step out that takes a while: a wake still ends the wait at once.
    assert_eq!(pool.extend_raw(vec!["\"sleep 300\"".into()]), 0);
    pool.waker().wake();
    assert!(matches!(pool.next_raw_or_wake(), Ok(None)));
    // Steps added meanwhile join the same cycle, their indices following on.
    assert_eq!(pool.extend_raw(vec!["\"d1\"".into(), "\"d2\"".into()]), 1);
    let mut got = Vec::new();
    while got.len() < 3 {
        if let Some(outcome) = pool.next_raw_or_wake().expect("an outcome") {
            got.push(outcome);
            while let Some(more) = pool.try_next_raw() {
                got.push(more.expect("an outcome"));
            }
        }
    }
    got.sort_by_key(|(i, _)| *i);
    assert_eq!(got[0], (0, Ok("\"i|c0:|s0|sleep 300\"".into())));
    assert_eq!(got[1], (1, Ok("\"i|c0:|s1|d1\"".into())));
    assert_eq!(got[2], (2, Ok("\"i|c0:|s2|d2\"".into())));
    assert!(pool.try_next_raw().is_none());

    // The cycle ended with its last result: the next step begins another.
    assert_eq!(pool.extend_raw(vec!["\"d3\"".into()]), 0);
    let last = loop {
        if let Some(outcome) = pool.next_raw_or_wake().expect("an outcome") {
            break outcome;
        }
    };
    assert_eq!(last, (0, Ok("\"i|c1:|s0|d3\"".into())));

    let stats = pool.close().expect("close");
    assert_eq!(stats.steps_delivered, 4);
    assert_eq!(stats.cycles.iter().filter(|c| c.end_s.is_some()).count(), 2);
}
