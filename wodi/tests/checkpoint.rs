//! A master killed mid-run and started again resumes after its last
//! checkpointed cycle, with the history, and redoes no completed cycle.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::Pool;

fn master_cmd(pool: &Pool, checkpoint: &str, log: &str, cycles: u64) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wodi-test-master"));
    cmd.arg(&pool.locals[0].app_addr)
        .arg(&pool.secret_path)
        .arg(env!("CARGO_BIN_EXE_wodi-server"))
        .arg(env!("CARGO_BIN_EXE_wodi-test-worker"))
        .arg(checkpoint)
        .arg(log)
        .arg(cycles.to_string())
        .env("CARMI_TOKEN", &pool.admin_token)
        .stdin(Stdio::null());
    cmd
}

fn lines(log: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_master_killed_mid_run_resumes_after_its_last_completed_cycle() {
    let pool = Pool::start("wodi-checkpoint", 1, &vec![Vec::new(); 2]);
    let checkpoint = pool.dir.join("master.checkpoint");
    let log = pool.dir.join("master.log");
    let (checkpoint, log) = (checkpoint.to_str().unwrap(), log.to_str().unwrap());
    let mut first = master_cmd(&pool, checkpoint, log, 6).spawn().unwrap();
    // Kill it once cycle 1 is checkpointed and cycle 2 has begun.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !lines(log).iter().any(|l| l == "begin 2") {
        assert!(
            Instant::now() < deadline,
            "no cycle 2 within 90 s: {:?}",
            lines(log)
        );
        assert!(
            first.try_wait().unwrap().is_none(),
            "the master ended early"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let before = lines(log);
    // Normally cycle 2 is under way; a loaded machine may have finished it.
    let last_done = before
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("done "))
        .expect("cycles were checkpointed")
        .to_string();
    assert!(
        !before.iter().any(|l| l == "complete"),
        "killed too late: {before:?}"
    );

    let status = master_cmd(&pool, checkpoint, log, 6)
        .status()
        .expect("the master runs again");
    assert!(status.success(), "restarted master: {status}");
    let after = lines(log);
    let resumed = &after[before.len()..];
    // It resumed after its last checkpointed cycle with history for its 4
    // steps, and began the next one.
    let next = last_done.parse::<u64>().unwrap() + 1;
    assert_eq!(
        resumed.first(),
        Some(&format!("resume {last_done} 4")),
        "{after:?}"
    );
    assert_eq!(resumed.get(1), Some(&format!("begin {next}")), "{after:?}");
    // Each cycle completed exactly once over both runs, in order.
    let done: Vec<&str> = after
        .iter()
        .filter_map(|l| l.strip_prefix("done "))
        .collect();
    assert_eq!(done, vec!["0", "1", "2", "3", "4", "5"]);
    assert_eq!(after.last().map(String::as_str), Some("complete"));
}
