//! Tests of `cgroup`: parsing what `/proc` says, and (as root) the v2
//! way of entering, killing and removing.

use super::*;

#[test]
fn mounts_and_own_paths_are_read_from_proc() {
    let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
                35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    let m = parse_mounts(info);
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].point, Path::new("/sys/fs/cgroup/cpu"));
    assert!(m[0].options.iter().any(|o| o == "cpu"));
    assert_eq!(
        (m[2].fstype.as_str(), m[1].fstype.as_str()),
        ("cgroup2", "cgroup")
    );
    let own = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n";
    assert_eq!(own_path(own, "memory"), Some("/process_api/abc"));
    assert_eq!(own_path(own, "cpu"), Some("/"));
    assert_eq!(own_path(own, "pids"), None);
}

/// Root and a cgroup2 mount (with or without controllers): the v2 way
/// of entering, killing and removing, wherever the tests run as root.
#[test]
fn a_v2_cgroup_holds_what_entered_it_setsid_or_not_and_kills_it_all() {
    use std::os::unix::process::CommandExt;
    let mount = mounts()
        .ok()
        .and_then(|m| m.into_iter().find(|m| m.fstype == "cgroup2"));
    let (Some(mount), true) = (mount, nix::unistd::geteuid().is_root()) else {
        eprintln!("SKIP: needs root and a cgroup2 mount");
        return;
    };
    let parent = mount
        .point
        .join(format!("carmi-test.{}", std::process::id()));
    make_dir(&parent).unwrap();
    let cg = ProcessCgroup {
        version: Version::V2,
        memory: parent.join("p1"),
        cpu: None,
    };
    fs::create_dir(&cg.memory).unwrap();
    let files = cg.entry_files().unwrap();
    let fds = raw(&files);
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "setsid sleep 600 & sleep 600"]);
    // SAFETY: `enter` only writes to descriptors kept open by `files`.
    unsafe { cmd.pre_exec(move || enter(&fds)) };
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cg.pids().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = cg.pids();
    assert!(
        pids.contains(&(child.id() as i32)) && pids.len() == 3,
        "{pids:?}"
    );
    assert!(cg.kill_all(), "everything in it is gone");
    let _ = child.wait();
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}/cmdline")).exists() || pid_is_zombie(pid));
    }
    cg.remove();
    assert!(!cg.memory.exists());
    fs::remove_dir(&parent).unwrap();
}

fn pid_is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[test]
fn parents_of_two_local_rms_differ_and_counters_parse() {
    let a = parent_name("m0", Path::new("/var/lib/carmi/a"));
    let b = parent_name("m0", Path::new("/var/lib/carmi/b"));
    assert_ne!(a, b);
    assert!(a.starts_with("carmi-local.m0."), "{a}");
    assert_eq!(
        parent_name("a/b c", Path::new("/")).split('.').nth(1),
        Some("a_b_c")
    );
    let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
    assert_eq!(keyed(events, "oom_kill"), Some(1));
    assert_eq!(keyed("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), None);
}
