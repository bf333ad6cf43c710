//! End to end over real daemons (issue 15, item 7): `carmi userprio`
//! lists the users of the fair share, and `--set-factor USER F` (admin
//! only, as HTCondor's `condor_userprio -setfactor`) sets a user's priority
//! factor: refused to a submitter, checked, journaled across a restart of
//! the global RM, and shown by `carmi q`.

use std::time::{Duration, Instant};

use carmi_api::authz::Power;
use carmi_tests::{Pool, text, write_script};

/// `carmi userprio --json` as (user, factor, priority).
fn listed(pool: &Pool) -> Vec<(String, f64, f64)> {
    let out = pool.carmi().args(["userprio", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            let f = |k: &str| u[k].as_f64().unwrap_or(f64::NAN);
            (
                u["user"].as_str().unwrap_or_default().to_string(),
                f("factor"),
                f("priority"),
            )
        })
        .collect()
}

#[test]
fn an_admin_sets_a_user_s_priority_factor_which_is_kept_and_shown() {
    let mut pool = Pool::start("userprio", 2, &[vec![]]);
    pool.wait_registered();
    // A submitter may look, not set.
    let bob = pool.dir.join("bob.token");
    pool.token_file(&bob, "bob", Power::Submit, None, 3600);
    let out = pool
        .carmi()
        .env("CARMI_TOKEN", &bob)
        .args(["userprio", "--set-factor", "alice", "2.5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("needs power admin"),
        "{}",
        text(&out.stderr)
    );
    let out = pool
        .carmi()
        .env("CARMI_TOKEN", &bob)
        .arg("userprio")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Nonsense is refused, naming what is wrong.
    let out = pool
        .carmi()
        .args(["userprio", "--set-factor", "alice", "-1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("positive"),
        "{}",
        text(&out.stderr)
    );

    let out = pool
        .carmi()
        .args(["userprio", "--set-factor", "alice", "2.5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("alice"), "{}", text(&out.stdout));
    assert_eq!(listed(&pool), [("alice".to_string(), 2.5, 2.5)]);

    // Journaled: a restarted global RM still has it.
    pool.restart_global();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let out = pool.carmi().args(["userprio", "--json"]).output().unwrap();
        if out.status.success() {
            break listed(&pool);
        }
        assert!(Instant::now() < deadline, "{}", pool.logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(after, [("alice".to_string(), 2.5, 2.5)]);

    // `carmi q` shows it beside alice's job.
    pool.wait_registered();
    let alice = pool.dir.join("alice.token");
    pool.token_file(&alice, "alice", Power::Submit, None, 3600);
    let exe = pool.dir.join("nap.sh");
    write_script(&exe, "#!/bin/sh\nsleep 60\n");
    let sub = pool.dir.join("nap.sub");
    std::fs::write(&sub, "executable = nap.sh\nmachine_count = 1\nqueue\n").unwrap();
    let out = pool
        .carmi()
        .env("CARMI_TOKEN", &alice)
        .env("CARMI_MACHINE", "m0")
        .arg("submit")
        .arg(&sub)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Above every id given before the restart (`carmi-global/src/idmark.rs`).
    let job = text(&out.stdout).trim().to_string();
    let out = pool.carmi().arg("q").output().unwrap();
    let q = text(&out.stdout);
    let row: Vec<&str> = q
        .lines()
        .skip_while(|l| !l.starts_with("USER"))
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        (row.first(), row.last()),
        (Some(&"alice"), Some(&"2.50")),
        "{q}"
    );
    let out = pool.carmi().args(["rm", &job]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
