//! The namespaces harness cleans up after itself: on drop (also while a
//! test panics) and, for a run killed outright, at the next run's start.
//! Needs root and `ip` (SKIP otherwise, as in `carmi_tests::netns::ready`).

use std::path::Path;
use std::process::Command;

use carmi_testkit::netns::{self, Net};

fn namespace_exists(name: &str) -> bool {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn gone(pid: u32) -> bool {
    // Reaped, or a zombie of this test (its namespace is released).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_net_is_removed_with_its_processes_when_a_test_panics() {
    if !netns::ready("a_net_is_removed_with_its_processes_when_a_test_panics") {
        return;
    }
    let mut seen = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let net = Net::create(2);
        let child = net.command(1, "sleep").arg("600").spawn().unwrap();
        // The child enters the namespace as it starts: give it a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !net.pids(1).contains(&child.id()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never entered its namespace"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        seen = Some((net.k, net.hosts.clone(), net.bridge(), child));
        panic!("the test fails here");
    }));
    assert!(result.is_err());
    let (k, hosts, bridge, mut child) = seen.unwrap();
    let pid = child.id();
    for h in &hosts {
        assert!(!namespace_exists(&h.ns), "namespace {} left", h.ns);
    }
    assert!(!link_exists(&bridge), "bridge {bridge} left");
    let claim = netns::registry().join(k.to_string());
    assert!(!claim.exists(), "{} left", claim.display());
    assert!(gone(pid), "process {pid} in a namespace outlived its net");
    child.wait().unwrap();
}

#[test]
fn a_net_whose_owner_died_is_swept_by_the_next_one() {
    if !netns::ready("a_net_whose_owner_died_is_swept_by_the_next_one") {
        return;
    }
    // A process that is gone by now stands for a test run killed by SIGKILL.
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let stale = Net::create_for(1, &dead.id().to_string());
    let child = stale.command(0, "sleep").arg("600").spawn().unwrap();
    let (k, ns, bridge) = (stale.k, stale.hosts[0].ns.clone(), stale.bridge());
    // Its owner never drops it.
    std::mem::forget(stale);
    assert!(namespace_exists(&ns));
    let fresh = Net::create(1);
    // The sweep killed what ran in it (the fresh net may reuse its number).
    let mut child = child;
    let killed = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        child.try_wait().unwrap().is_some()
    });
    assert!(killed, "the stale net's process still runs");
    if fresh.k != k {
        assert!(!namespace_exists(&ns), "stale namespace {ns} was not swept");
        assert!(!link_exists(&bridge), "stale bridge {bridge} was not swept");
        let claim = netns::registry().join(k.to_string());
        assert!(
            !Path::new(&claim).exists(),
            "the stale claim was not removed"
        );
    }
    drop(fresh);
}
