//! End to end, over real daemons: root local RMs of one machine share a
//! slot-user prefix without sharing an account (`carmi_local::slot_users`,
//! issue 30 item 5). Two started at the same moment, with 2 slots each,
//! make 4 accounts each (8 in all) and both run a job; a third whose
//! accounts the first two hold refuses to start, naming the accounts and
//! their holders; `carmi-local --remove-slot-users` keeps the accounts of
//! running local RMs and removes them once those have stopped.
//!
//! Needs root: elsewhere it prints `SKIP ...` and passes, unless
//! `CARMI_CI_REQUIRE_SERVICES=1` (CI, which runs as root), where it fails.
//! The prefix is the test's own (with its pid), and its accounts are
//! removed at the end, also when the test fails.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::{Pool, PoolOptions, bin_dir, root_ready, text, write_script};

/// `carmi-local --remove-slot-users --slot-user-prefix PREFIX`.
fn remove_slot_users(prefix: &str) -> Output {
    Command::new(bin_dir().join("carmi-local"))
        .args(["--remove-slot-users", "--slot-user-prefix", prefix])
        .output()
        .expect("run carmi-local --remove-slot-users")
}

/// Removes the test's accounts when dropped (declared first, so that the
/// local RMs holding them are gone by then).
struct Accounts(String);

impl Drop for Accounts {
    fn drop(&mut self) {
        let _ = remove_slot_users(&self.0);
    }
}

/// The accounts of `prefix` in the account database.
fn accounts_of(prefix: &str) -> BTreeSet<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|n| {
            n.strip_prefix(prefix)
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(String::from)
        .collect()
}

/// The accounts local RM `name` says it runs jobs as.
fn accounts_in_log(pool: &Pool, name: &str) -> Vec<String> {
    let log = std::fs::read_to_string(pool.dir.join(format!("{name}.log"))).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("job processes run as slot users"))
        .unwrap_or_else(|| panic!("{name} names no slot users:\n{log}"));
    let list = line.rsplit("accounts=").next().unwrap().trim();
    list.split(',').map(String::from).collect()
}

fn wait_registered(pool: &Pool, names: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = pool.carmi().args(["status", "--json"]).output().unwrap();
        let machines: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let up = |name: &str| {
            machines.as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    m["name"] == name && m["slots"].as_array().is_some_and(|s| !s.is_empty())
                })
            })
        };
        if names.iter().all(|n| up(n)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{names:?} did not register\n{}",
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Submits a job whose master must run on `machine` and prints the account
/// it runs as; waits for it and returns that account.
fn run_job_on(pool: &Pool, dir: &Path, machine: &str) -> String {
    write_script(&dir.join("whoami.sh"), "#!/bin/sh\nid -un\n");
    let sub = format!("{machine}.sub");
    std::fs::write(
        dir.join(&sub),
        format!(
            "executable = whoami.sh\noutput = {machine}.out\nmaster_requirements = Name == \"{machine}\"\nqueue\n"
        ),
    )
    .unwrap();
    let carmi = || {
        let mut cmd = pool.carmi();
        cmd.current_dir(dir);
        cmd
    };
    let out = carmi().args(["submit", &sub]).output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    let job = text(&out.stdout).trim().to_string();
    let out = carmi()
        .args(["wait", &job, "--timeout", "120"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the job on {machine} ran to the end\n{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    std::fs::read_to_string(dir.join(format!("{machine}.out")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn root_local_rms_started_together_share_a_prefix_and_one_without_free_accounts_refuses() {
    if !root_ready(
        "root_local_rms_started_together_share_a_prefix_and_one_without_free_accounts_refuses",
    ) {
        return;
    }
    let prefix = format!("cst{}x", std::process::id());
    let _accounts = Accounts(prefix.clone());
    assert!(accounts_of(&prefix).is_empty(), "a prefix of its own");
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        local_settings: format!("slot_user_prefix = \"{prefix}\"\n"),
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("slot-users", 2, &[], options);

    // Two local RMs with 2 slots each, started at the same moment.
    let barrier = std::sync::Barrier::new(2);
    let start = |name: &'static str| {
        let (pool, barrier) = (&pool, &barrier);
        move || {
            barrier.wait();
            pool.start_extra_local(name, &pool.global_addr, &["--slots", "2"])
        }
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start("sa"));
        let b = s.spawn(start("sb"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (of_a, of_b) = (accounts_in_log(&pool, "sa"), accounts_in_log(&pool, "sb"));
    assert_eq!((of_a.len(), of_b.len()), (4, 4), "{of_a:?} {of_b:?}");
    let both: BTreeSet<String> = of_a.iter().chain(&of_b).cloned().collect();
    let first_eight: BTreeSet<String> = (1..=8).map(|i| format!("{prefix}{i}")).collect();
    assert_eq!(both, first_eight, "no account shared, none skipped");
    assert_eq!(accounts_of(&prefix), first_eight, "8 accounts in all");

    // Both run a job, each as one of its own accounts.
    wait_registered(&pool, &["sa", "sb"]);
    let submit_dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&submit_dir).unwrap();
    let on_a = run_job_on(&pool, &submit_dir, "sa");
    let on_b = run_job_on(&pool, &submit_dir, "sb");
    assert!(of_a.contains(&on_a), "the job on sa ran as {on_a:?}");
    assert!(of_b.contains(&on_b), "the job on sb ran as {on_b:?}");

    // A third, whose listed accounts the first two hold, refuses to start
    // and says which accounts and who holds them.
    let taken = [&of_a[0], &of_a[1], &of_b[0]];
    let list = taken
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let out = pool
        .extra_local_command("sc", &pool.global_addr, &["--slot-users", &list])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = text(&out.stderr);
    assert!(!out.status.success(), "the third started: {said}");
    assert!(!text(&out.stdout).contains("listening on"), "{said}");
    for (name, holder) in [(&of_a[0], &a), (&of_a[1], &a), (&of_b[0], &b)] {
        let want = format!("`{name}` (held by the local RM with pid {})", holder.pid());
        assert!(said.contains(&want), "{want}: {said}");
    }
    assert_eq!(accounts_of(&prefix).len(), 8, "the third made no account");

    // The accounts of running local RMs are kept; once they stop, removed.
    let out = remove_slot_users(&prefix);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("0 removed, 8 kept"), "{said}");
    let want = format!(
        "kept {}: held by the running local RM with pid {}",
        of_b[0],
        b.pid()
    );
    assert!(said.contains(&want), "{want}: {said}");
    drop((a, b));
    let out = remove_slot_users(&prefix);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("8 removed, 0 kept"), "{said}");
    assert!(accounts_of(&prefix).is_empty(), "{said}");
}
