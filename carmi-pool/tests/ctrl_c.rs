//! A process that owns an embedded pool cleans up on Ctrl-C (SIGINT).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn sigint_stops_the_pool_and_removes_its_folder() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_owner-sim"))
        .args(["pool", "--hosts", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut dir = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(d) = line.strip_prefix("dir ") {
            dir = Some(PathBuf::from(d));
            break;
        }
    }
    let dir = dir.expect("the pool printed its folder");
    assert!(dir.join("pool.secret").is_file());
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[test]
fn schedule_prints_a_replayable_trace() {
    let out = Command::new(env!("CARGO_BIN_EXE_owner-sim"))
        .args(["schedule", "--hosts", "3", "--span", "36000", "--seed", "4"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let trace = carmi_pool::Trace::parse(&text).unwrap();
    assert!(!trace.events.is_empty());
    let again = carmi_pool::OwnerModel::Stochastic(carmi_pool::Stochastic::default())
        .schedule(3, 36000.0, 4);
    assert_eq!(trace.events.len(), again.len());
}
