//! End to end, over real daemons: a job's requests are enforced (issue 30,
//! item 2). Each process runs in a cgroup of its own bound to its job's
//! `request_memory`: a job that goes over it is held with both numbers in
//! the reason, one within it completes with its peak memory in `carmi
//! history`; whatever a job's process starts, `setsid` or not, ends with
//! it; a local RM that cannot use cgroups (not root) runs the same job
//! unbound and says so in its ad.
//!
//! The cgroup tests need root and a writable memory controller; the
//! non-root test needs root to start a local RM as `nobody`. Elsewhere they
//! print `SKIP ...` and pass, unless `CARMI_CI_REQUIRE_SERVICES=1` (CI,
//! which runs as root), where they fail.

use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_tests::{Pool, PoolOptions, text, write_script};

/// The unprivileged account the non-root local RM runs as.
const NOBODY: u32 = 65534;

/// True when the test may run; prints the skip line (or panics in CI).
fn ready(test: &str, need_cgroup: bool) -> bool {
    let missing = carmi_tests::skip::not_root().or_else(|| {
        (need_cgroup && !memory_controller())
            .then(|| "no writable cgroup memory controller (v2 or v1)".to_string())
    });
    carmi_tests::skip::ready_unless(test, missing)
}

/// Whether a memory controller is mounted where the local RM looks.
fn memory_controller() -> bool {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
    v2 || Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists()
}

fn pool(name: &str, machines: usize) -> Pool {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    // Enough CPUs for `request_cpus = 2` on any test machine.
    Pool::start_with(name, 2, &vec![vec!["Cpus=4".into()]; machines], options)
}

/// A submit directory with the memory hog and `script` (a shell master).
fn submit_dir(pool: &Pool, script: &str) -> PathBuf {
    let dir = pool.dir.join("submit");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_carmi-memhog"), dir.join("memhog")).unwrap();
    write_script(&dir.join("master.sh"), script);
    dir
}

/// Submits `body` (a submit file) from `dir` to `machine`; the job id.
fn submit(pool: &Pool, dir: &Path, machine: &str, name: &str, body: &str) -> String {
    std::fs::write(dir.join(name), body).unwrap();
    let mut pinned = pool.carmi_in(dir);
    pinned.env("CARMI_MACHINE", machine).args(["submit", name]);
    pool.run_ok(&mut pinned).trim().to_string()
}

/// The job's `carmi q --json` entry once `done` holds of it, at most 90 s.
fn wait_queued(
    pool: &Pool,
    job: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let what = format!("job {job} to get there");
    pool.wait_for(&what, Duration::from_secs(90), || {
        let out = pool.carmi().args(["q", "--json"]).output().unwrap();
        let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let found = jobs.as_array().and_then(|js| {
            js.iter()
                .find(|j| j["job"].to_string().trim_matches('"') == job)
                .cloned()
        });
        found.filter(|j| done(j)).ok_or_else(|| text(&out.stdout))
    })
}

/// The job's `carmi history --json` record once it ended, at most 90 s.
fn wait_history(pool: &Pool, job: &str) -> serde_json::Value {
    pool.wait_history_json(job, Duration::from_secs(90))
        .remove(0)
}

/// `MemoryLimitEnforced` and `CgroupVersion` of `machine`'s ad, as `carmi status` prints them.
fn enforced_attrs(pool: &Pool, machine: &str) -> String {
    let constraint = format!("Name == \"{machine}\"");
    let mut out = pool.carmi();
    out.args(["status", "-constraint", &constraint, "-af"])
        .args(["MemoryLimitEnforced", "CgroupVersion"]);
    pool.run_ok(&mut out).trim().to_string()
}

/// The first number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[test]
fn a_job_over_its_request_memory_is_held_and_one_within_it_completes_with_its_peak() {
    let test = "a_job_over_its_request_memory_is_held_and_one_within_it_completes_with_its_peak";
    if !ready(test, true) {
        return;
    }
    let pool = pool("enforce-memory", 1);
    pool.wait_registered();
    let attrs = enforced_attrs(&pool, "m0");
    eprintln!("m0 advertises MemoryLimitEnforced CgroupVersion: {attrs}");
    assert!(
        attrs.starts_with("true "),
        "the ad says the limit holds: {attrs}"
    );

    // Twice its request: stopped at 100 MiB, and held.
    let dir = submit_dir(&pool, "#!/bin/sh\nexec ./memhog \"$@\"\n");
    let over = submit(
        &pool,
        &dir,
        "m0",
        "over.sub",
        "executable = master.sh\narguments = 200 30\ntransfer_input_files = memhog\n\
         request_memory = 100\nqueue\n",
    );
    let held = wait_queued(&pool, &over, |j| j["state"] == "held");
    let reason = held["note"].as_str().unwrap_or_default().to_string();
    eprintln!("held: {reason}");
    assert!(
        reason.contains("exceeded request_memory 100 MiB"),
        "the reason names the request: {reason}"
    );
    let used = number_after(&reason, "memory usage ").expect("the reason names the usage");
    assert!((90..=110).contains(&used), "stopped at its limit: {reason}");
    pool.run_ok(pool.carmi().args(["rm", &over]));

    // Within its request: runs to the end, its peak in the history.
    let within = submit(
        &pool,
        &dir,
        "m0",
        "within.sub",
        "executable = master.sh\narguments = 40\ntransfer_input_files = memhog\n\
         request_memory = 100\nrequest_cpus = 1\nqueue\n",
    );
    let record = wait_history(&pool, &within);
    assert_eq!(
        record["end"],
        serde_json::json!({"Completed": {"Code": 0}}),
        "{record}\n{}",
        pool.logs()
    );
    let peak_kib = record["usage"]["memory_peak_kib"].as_u64().unwrap_or(0);
    eprintln!("completed with a peak of {peak_kib} KiB");
    assert!(
        (40 * 1024..100 * 1024).contains(&peak_kib),
        "its peak is what it touched, under its request: {record}"
    );
    let table = pool.run_ok(pool.carmi().arg("history"));
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{within}.0 ")))
        .unwrap_or_default();
    assert!(
        line.contains(&format!(" {}M ", peak_kib.div_ceil(1024))),
        "`carmi history` shows the peak: {table}"
    );
    let constraint = format!("ClusterId == {within} && MemoryUsage >= 40");
    let found = pool.run_ok(pool.carmi().args(["history", "-constraint", &constraint]));
    assert!(found.contains("1 job,"), "MemoryUsage reads as HTCondor's");
}

#[test]
fn a_local_rm_that_is_not_root_runs_the_job_unbound_and_says_so() {
    let test = "a_local_rm_that_is_not_root_runs_the_job_unbound_and_says_so";
    if !ready(test, false) {
        return;
    }
    let pool = pool("enforce-nonroot", 0);
    let _local = pool.start_extra_local_as("u0", NOBODY, NOBODY);
    pool.wait_until("u0 to come up", Duration::from_secs(30), || {
        enforced_attrs(&pool, "u0").starts_with("false")
    });
    let log = std::fs::read_to_string(pool.dir.join("u0.log")).unwrap_or_default();
    assert!(
        log.contains("no usable cgroup") && log.contains("MemoryLimitEnforced = false"),
        "the local RM says why at its start: {log}"
    );
    let dir = submit_dir(&pool, "#!/bin/sh\nexec ./memhog \"$@\"\n");
    // Readable by the local RM's user, which copies it into the sandbox.
    let job = submit(
        &pool,
        &dir,
        "u0",
        "over.sub",
        "executable = master.sh\narguments = 200\ntransfer_input_files = memhog\n\
         request_memory = 100\nqueue\n",
    );
    let record = wait_history(&pool, &job);
    assert_eq!(
        record["end"],
        serde_json::json!({"Completed": {"Code": 0}}),
        "unbound, it runs to the end: {record}\n{}",
        pool.logs()
    );
}

#[test]
fn a_local_rm_told_not_to_use_cgroups_runs_the_job_unbound_and_says_so() {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        local_settings: "cgroups = false\n".into(),
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("enforce-off", 2, &[vec![]], options);
    pool.wait_registered();
    let attrs = enforced_attrs(&pool, "m0");
    assert!(attrs.starts_with("false"), "{attrs}");
    let dir = submit_dir(&pool, "#!/bin/sh\nexec ./memhog \"$@\"\n");
    let job = submit(
        &pool,
        &dir,
        "m0",
        "over.sub",
        "executable = master.sh\narguments = 150\ntransfer_input_files = memhog\n\
         request_memory = 100\nqueue\n",
    );
    let record = wait_history(&pool, &job);
    assert_eq!(
        record["end"],
        serde_json::json!({"Completed": {"Code": 0}}),
        "{record}\n{}",
        pool.logs()
    );
    assert_eq!(
        record["usage"]["memory_peak_kib"], 0,
        "nothing measured: {record}"
    );
}

/// Whether `pid` runs (a zombie waiting for its reaper does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

/// The pid a job wrote to `path`, once it did, at most 90 s.
fn wait_pid(pool: &Pool, path: &Path) -> i32 {
    let what = format!("a pid in {}", path.display());
    pool.wait_for(&what, Duration::from_secs(90), || {
        let pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        pid.ok_or_else(|| "none yet".to_string())
    })
}

/// Waits until the setsid child `pid` is gone, which it must be since
/// its job ended (`when` says how).
fn wait_gone(pool: &Pool, pid: i32, when: &str) {
    let what = format!("the setsid child {pid} to end with its job ({when})");
    pool.wait_until(&what, Duration::from_secs(30), || !running(pid));
}

#[test]
fn a_child_that_left_its_session_ends_with_its_job() {
    let test = "a_child_that_left_its_session_ends_with_its_job";
    if !ready(test, true) {
        return;
    }
    let pool = pool("enforce-setsid", 1);
    pool.wait_registered();
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    // The child leaves the job's session, then the job goes on (or not).
    let script = format!(
        "#!/bin/sh\nsetsid sh -c 'echo $$ > {}/$1.pid.tmp; mv {0}/$1.pid.tmp {0}/$1.pid; \
         exec sleep 600' \"$0\" \"$1\" &\nsleep \"$2\"\n",
        pids.display()
    );
    let dir = submit_dir(&pool, &script);
    let sub = |name: &str, seconds: u32| {
        submit(
            &pool,
            &dir,
            "m0",
            &format!("{name}.sub"),
            &format!(
                "executable = master.sh\narguments = {name} {seconds}\n\
                 request_memory = 64\nrequest_cpus = 2\nqueue\n"
            ),
        )
    };

    let ends = sub("ends", 2);
    let child = wait_pid(&pool, &pids.join("ends.pid"));
    eprintln!("the job's setsid child is {child}");
    wait_history(&pool, &ends);
    wait_gone(&pool, child, "it ended");

    let removed = sub("removed", 600);
    let child = wait_pid(&pool, &pids.join("removed.pid"));
    assert!(running(child), "the child runs while its job does");
    let (memory, cpu) = limits_of(child);
    assert_eq!(
        (memory, cpu),
        (Some(64 << 20), Some(cpu_weight(2))),
        "the child's cgroup is bound to request_memory = 64 and request_cpus = 2"
    );
    pool.run_ok(pool.carmi().args(["rm", &removed]));
    wait_gone(&pool, child, "it was removed");
}

/// `cpu.shares` (v1) or `cpu.weight` (v2) for `cpus` requested CPUs.
fn cpu_weight(cpus: u64) -> u64 {
    if v2_memory() { 100 * cpus } else { 1024 * cpus }
}

fn v2_memory() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
}

/// The memory limit (bytes) and CPU weight of `pid`'s cgroup, read from
/// the cgroup files (`/proc/PID/cgroup` names it).
fn limits_of(pid: i32) -> (Option<u64>, Option<u64>) {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let path_of = |controller: &str| {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names
                .split(',')
                .any(|n| n == controller)
                .then(|| path.trim_start_matches('/').to_string())
        })
    };
    let read = |dir: PathBuf, file: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    };
    let root = Path::new("/sys/fs/cgroup");
    if v2_memory() {
        let dir = root.join(path_of("").unwrap_or_default());
        assert!(dir.to_string_lossy().contains("carmi-local.m0."), "{own}");
        (read(dir.clone(), "memory.max"), read(dir, "cpu.weight"))
    } else {
        let memory = root
            .join("memory")
            .join(path_of("memory").unwrap_or_default());
        let cpu = root.join("cpu").join(path_of("cpu").unwrap_or_default());
        assert!(
            memory.to_string_lossy().contains("carmi-local.m0."),
            "{own}"
        );
        (
            read(memory, "memory.limit_in_bytes"),
            read(cpu, "cpu.shares"),
        )
    }
}

#[test]
fn a_restarted_local_rm_kills_what_a_killed_one_left_in_its_cgroups() {
    let test = "a_restarted_local_rm_kills_what_a_killed_one_left_in_its_cgroups";
    if !ready(test, true) {
        return;
    }
    let mut pool = pool("enforce-restart", 1);
    pool.wait_registered();
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let script = format!(
        "#!/bin/sh\nsetsid sh -c 'echo $$ > {0}/c.tmp; mv {0}/c.tmp {0}/child.pid; \
         exec sleep 600' &\nsleep 600\n",
        pids.display()
    );
    let dir = submit_dir(&pool, &script);
    submit(
        &pool,
        &dir,
        "m0",
        "left.sub",
        "executable = master.sh\nqueue\n",
    );
    let child = wait_pid(&pool, &pids.join("child.pid"));
    // SIGKILLed, the local RM cannot kill it: it left the job's group, and
    // the record of that group names only the master.
    pool.kill_local(0);
    std::thread::sleep(Duration::from_secs(1));
    assert!(running(child), "the child outlives the killed local RM");
    pool.restart_local(0);
    wait_gone(&pool, child, "its local RM was killed and started again");
    let log = std::fs::read_to_string(pool.dir.join("m0.log")).unwrap_or_default();
    assert!(
        log.contains("killed processes an earlier run left in its cgroup"),
        "the restart says what it killed\n{}",
        pool.logs()
    );
}
