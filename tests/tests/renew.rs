//! End to end, daemon tokens that renew themselves (issue 37 item 3), over a
//! real `carmi-global` (with the pool's signing key) and `carmi-local`: a
//! machine whose daemon token lasts 6 s (the test's clock: a pool's lasts 30
//! days) stays in the pool across three token lifetimes, its link and a job
//! on it untouched, the global RM sending it a new token before each one
//! expires, which its local RM writes to its token file; revoking the token
//! of the moment takes the machine out, and it is not let back in.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use carmi_api::control::OwnerLink;
use carmi_api::handshake::Secret;
use carmi_api::msg::{FromLocalControl, OwnerEvent};
use carmi_api::token::{Claims, Power, claims_unchecked, now_unix, read_token_file};
use carmi_tests::{Pool, PoolOptions};
use serde_json::Value;

/// The machines' token lifetime, in seconds.
const LIFETIME_S: u64 = 6;

/// `carmi ARGS` (as the pool's admin, masters pinned to m0), asserting
/// success; its standard output.
fn ok(pool: &Pool, args: &[&str]) -> String {
    pool.run_ok(carmi(pool).args(args))
}

fn carmi(pool: &Pool) -> Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

/// Polls `check` until it holds (the deadline only bounds a broken run).
fn until(pool: &Pool, what: &str, check: impl FnMut() -> bool) {
    pool.wait_until(what, Duration::from_secs(60), check);
}

/// Whether `carmi status` lists m0 with its slot.
fn registered(pool: &Pool) -> bool {
    let status: Value = serde_json::from_str(&ok(pool, &["status", "--json"])).unwrap();
    (status.as_array().unwrap().iter())
        .any(|m| m["name"] == "m0" && m["slots"].as_array().is_some_and(|s| !s.is_empty()))
}

/// What the token in `file` says.
fn claims(file: &Path) -> Claims {
    claims_unchecked(&read_token_file(file).expect("the token file reads"))
        .expect("the token file holds a token")
}

/// Waits for the next renewal: the new token in `file` (then the next is
/// seconds away).
fn fresh(pool: &Pool, file: &Path) -> Claims {
    let before = claims(file);
    until(pool, "one more renewal", || claims(file).id != before.id);
    claims(file)
}

/// The job's state and its events' text.
fn job(pool: &Pool, id: &str) -> (String, String) {
    let q: Value = serde_json::from_str(&ok(pool, &["q", "--json"])).unwrap();
    let state = (q.as_array().unwrap().iter())
        .find(|j| j["job"].as_u64().map(|n| n.to_string()).as_deref() == Some(id))
        .map_or("gone".into(), |j| j["state"].as_str().unwrap().to_string());
    (state, ok(pool, &["events", id]))
}

/// `carmi token list`: each token's id and whether it is revoked.
fn token_list(pool: &Pool) -> Vec<(String, bool)> {
    let list: Value = serde_json::from_str(&ok(pool, &["token", "list", "--json"])).unwrap();
    (list.as_array().unwrap().iter())
        .filter(|t| t["identity"] == "m0")
        .map(|t| (t["id"].as_str().unwrap().to_string(), t["revoked"] == true))
        .collect()
}

#[test]
fn a_machine_stays_registered_across_three_token_lifetimes_and_a_revoked_one_leaves() {
    let options = PoolOptions {
        daemon_token_s: LIFETIME_S,
        ..PoolOptions::default()
    };
    // Two slots: one for a job that runs throughout, one for a later job.
    let pool = Pool::start_with("renew", 2, &[vec![]], options);
    let file = pool.dir.join("m0.token");
    let first = claims(&file);
    assert_eq!(first.expires_unix - first.issued_unix, LIFETIME_S);
    pool.wait_registered();

    // A job on m0: its master runs there and it holds a slot of m0.
    let dir = &pool.dir;
    let script = format!(
        "#!/bin/sh\necho $$ > {d}/master.pid\nwhile [ ! -e {d}/go ]; do sleep 0.1; done\n",
        d = dir.display()
    );
    std::fs::write(dir.join("hold.sh"), script).unwrap();
    let sub = dir.join("hold.sub");
    std::fs::write(&sub, "executable = hold.sh\nmachine_count = 1\nqueue\n").unwrap();
    let id = ok(&pool, &["submit", sub.to_str().unwrap()])
        .trim()
        .to_string();
    until(&pool, "the job runs on m0", || {
        job(&pool, &id).0 == "running" && dir.join("master.pid").exists()
    });
    let pid = std::fs::read_to_string(dir.join("master.pid")).unwrap();

    // Three lifetimes of the first token, and three renewals at least: each
    // a newer token in the file, with the machine registered all along.
    let mut seen = vec![first.clone()];
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < 4 || now_unix() <= first.issued_unix + 3 * LIFETIME_S {
        let last = seen.last().unwrap();
        let now = claims(&file);
        if now.id != last.id {
            assert!(
                now.issued_unix >= last.issued_unix && now.expires_unix > last.expires_unix,
                "a newer token each time: {last:?} then {now:?}"
            );
            assert_eq!(
                (now.identity.as_str(), now.power, now.machine.as_deref()),
                ("m0", Power::Daemon, Some("m0")),
                "{now:?}"
            );
            assert_eq!(now.expires_unix - now.issued_unix, LIFETIME_S);
            seen.push(now);
        }
        assert!(
            registered(&pool),
            "m0 left the pool after {} renewal(s)\n{}",
            seen.len() - 1,
            pool.logs()
        );
        assert!(
            Instant::now() < deadline,
            "{} renewal(s) only\n{}",
            seen.len() - 1,
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(now_unix() > first.expires_unix + LIFETIME_S);
    // One link all along: never closed at an expiry, never refused.
    let log = std::fs::read_to_string(dir.join("m0.log")).unwrap();
    assert_eq!(
        log.matches("connected to the global RM").count(),
        1,
        "{log}"
    );
    let (state, events) = job(&pool, &id);
    assert_eq!(state, "running", "{events}");
    assert!(
        !events.contains("host-lost") && !events.contains("master-lost"),
        "{events}"
    );
    assert!(
        Path::new("/proc").join(pid.trim()).exists(),
        "the master runs"
    );

    // The local RM presents the token of the moment elsewhere too: a new
    // executable is staged to m0 from the global RM's store (a staging
    // connection with its daemon token), and the owner's control connection
    // with the token in the file is its own.
    let exe = format!("#!/bin/sh\n# {}\nexit 7\n", now_unix());
    std::fs::write(dir.join("seven.sh"), exe).unwrap();
    let sub = dir.join("seven.sub");
    std::fs::write(&sub, "executable = seven.sh\nqueue\n").unwrap();
    let seven = ok(&pool, &["submit", sub.to_str().unwrap()]);
    let out = (carmi(&pool).args(["wait", seven.trim(), "--timeout", "60"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", pool.logs());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Just renewed: seconds before the next renewal.
    fresh(&pool, &file);
    let own = read_token_file(&file).unwrap();
    let secret = Secret::from_file(&pool.secret_path)
        .unwrap()
        .with_token(Some(own));
    let control = runtime.block_on(async {
        let mut link = OwnerLink::connect(&pool.locals[0].app_addr, &secret).await?;
        link.send(OwnerEvent::Leave).await
    });
    assert!(
        matches!(control, Ok(FromLocalControl::OwnerApplied { .. })),
        "the renewed token opens m0's control connection: {control:?}"
    );

    // `carmi token list` shows the renewed tokens: the replaced ones
    // revoked once the local RM saved their successors (the newest two may
    // be in the middle of that).
    let list = token_list(&pool);
    for c in &seen[1..seen.len() - 2] {
        assert!(
            list.contains(&(c.id.clone(), true)),
            "{} replaced and revoked: {list:?}",
            c.id
        );
    }
    assert!(list.iter().any(|(id, _)| *id == seen.last().unwrap().id));

    // Right after a renewal, revoke the token of the moment: the machine
    // leaves the pool and is not let back in with it.
    let current = fresh(&pool, &file);
    assert!(token_list(&pool).contains(&(current.id.clone(), false)));
    ok(&pool, &["token", "revoke", &current.id]);
    until(&pool, "m0 leaves the pool", || !registered(&pool));
    until(&pool, "m0 is refused again with the revoked token", || {
        let log = std::fs::read_to_string(dir.join("m0.log")).unwrap();
        log.matches("was revoked").count() >= 2
    });
    assert!(!registered(&pool), "{}", pool.logs());
    assert_eq!(
        claims(&file).id,
        current.id,
        "no token after the revoked one"
    );
    until(&pool, "the job learns it lost m0", || {
        job(&pool, &id).1.contains("lost")
    });
}
