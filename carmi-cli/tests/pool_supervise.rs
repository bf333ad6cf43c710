//! `carmi pool up` keeps its pool up: SIGKILL of the process that runs the
//! pool's daemons brings them back, recorded where `pool up` recorded them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn carmi(config: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_carmi"));
    let tmp = config.parent().unwrap().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    cmd.env_remove("CARMI_SECRET")
        .env_remove("CARMI_POOL")
        .env("CARMI_CONFIG", config)
        .env("XDG_STATE_HOME", config.parent().unwrap().join("state"))
        .env("TMPDIR", tmp);
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The live children of `parent` whose command line holds `--child`.
fn pool_children(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<i32>().ok());
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent) && text(&cmd).contains("--child") && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// What `pool up` recorded (beside, never in, the user's config).
fn recorded(config: &Path) -> toml::Table {
    let record = config.parent().unwrap().join("state/carmi/pool-up.toml");
    std::fs::read_to_string(record).unwrap().parse().unwrap()
}

/// Hosts that `carmi status --json` lists, or `None` if it fails.
fn hosts(config: &Path) -> Option<usize> {
    let out = carmi(config).args(["status", "--json"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        v.as_array()?
            .iter()
            .filter(|m| m["name"].as_str().is_some_and(|n| n.starts_with("host")))
            .count(),
    )
}

#[test]
fn a_sigkilled_pool_process_is_restarted_and_recorded_again() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let out = carmi(&config)
        .args(["pool", "up", "--hosts", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = recorded(&config);
    let supervisor = t["pool_pid"].as_integer().unwrap() as i32;
    let first_addr = t["pool"].as_str().unwrap().to_string();
    let secret = PathBuf::from(t["secret"].as_str().unwrap());
    let dir = secret.parent().unwrap().to_path_buf();
    assert_eq!(hosts(&config), Some(3));
    let children = pool_children(supervisor);
    assert_eq!(children.len(), 1, "one pool process under {supervisor}");
    let victim = children[0];

    // SAFETY: a signal to the pool process this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = recorded(&config);
        let moved = now["pool"].as_str() != Some(first_addr.as_str());
        if moved && hosts(&config) == Some(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not come back; log:\n{}",
            std::fs::read_to_string(dir.join("pool.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive(supervisor), "the supervisor keeps running");
    let now = pool_children(supervisor);
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], victim);
    assert_eq!(
        recorded(&config)["pool_pid"].as_integer(),
        Some(i64::from(supervisor))
    );
    let log = std::fs::read_to_string(dir.join("pool.log")).unwrap_or_default();
    assert!(log.contains("died (signal 9); restarted"), "{log}");

    let out = carmi(&config).args(["pool", "down"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!alive(supervisor) && !alive(now[0]));
    assert!(!dir.exists(), "{} is left", dir.display());
}

/// A pool that keeps dying is not restarted forever: after the sixth death
/// within a minute the supervisor gives up and says so, and `pool down`
/// still cleans up.
#[test]
fn a_pool_that_keeps_dying_is_given_up_on() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let out = carmi(&config)
        .args(["pool", "up", "--hosts", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = recorded(&config);
    let supervisor = t["pool_pid"].as_integer().unwrap() as i32;
    let dir = PathBuf::from(t["secret"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let log = || std::fs::read_to_string(dir.join("pool.log")).unwrap_or_default();
    let mut killed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(50);
    while alive(supervisor) {
        assert!(
            Instant::now() < deadline,
            "still restarting after {killed:?}:\n{}",
            log()
        );
        if let Some(&child) = pool_children(supervisor).first()
            && !killed.contains(&child)
        {
            // SAFETY: a signal to the pool process this test started.
            unsafe { libc::kill(child, libc::SIGKILL) };
            killed.push(child);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(killed.len(), 6, "five restarts, then none:\n{}", log());
    assert!(
        log().contains("for the 6th time in 60 s; not restarting it"),
        "{}",
        log()
    );
    let out = carmi(&config).args(["pool", "down"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.exists(), "{} is left", dir.display());
}
