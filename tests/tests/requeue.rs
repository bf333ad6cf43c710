//! End to end, jobs that survive their owners (issue 30, item 1 and the
//! requeue of item 3): a master is placed only on a machine whose owner
//! policy lets it start now; a start the machine fails puts the job back in
//! the queue and it completes elsewhere; a job whose executable cannot run
//! is held after `max_start_failures` with the reason; a master vacated by
//! its machine's owner is requeued and completes elsewhere, its history
//! showing both starts and the vacate.
//!
//! Jobs are submitted from a directory of no pool machine (as from a
//! laptop), so that the global RM places their masters. The policy minute
//! is 0.4 s: `START` holds 0.8 s after the owner left, and a suspended
//! machine is vacated 4 s after its owner came back.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use carmi_api::control::OwnerLink;
use carmi_api::msg::OwnerEvent;
use carmi_tests::{Pool, PoolOptions, text, write_script};

const POLICY: &str = "[policy]\nminute = 0.4\nstart = \"KeyboardIdle > 2 * Minute\"\n";

fn pool(name: &str) -> Pool {
    let pool = Pool::start_with(
        name,
        4,
        &[vec![], vec![]],
        PoolOptions {
            local_config: POLICY.into(),
            ..PoolOptions::default()
        },
    );
    pool.wait_registered();
    pool
}

/// A submit directory on no machine of the pool, holding `master.sh`.
fn laptop(pool: &Pool, master: &str) -> PathBuf {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(
        !matches!(host.trim(), "m0" | "m1"),
        "this test needs a host name that is not a machine of its pool"
    );
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    write_script(&dir.join("master.sh"), master);
    dir
}

fn carmi(pool: &Pool, dir: &Path, args: &[&str]) -> Output {
    pool.carmi_in(dir).args(args).output().unwrap()
}

/// Submits `file` (as `job.sub`) from `dir`; the job ids.
fn submit(pool: &Pool, dir: &Path, file: &str) -> Vec<String> {
    std::fs::write(dir.join("job.sub"), file).unwrap();
    // The job id of every proc of the cluster.
    let out = pool.run_ok(pool.carmi_in(dir).args(["submit", "--json", "job.sub"]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("submit --json parses");
    let jobs = v["jobs"].as_array().expect("the procs' job ids");
    jobs.iter().map(|j| j.to_string()).collect()
}

/// `carmi wait JOB`: its exit code.
fn wait(pool: &Pool, dir: &Path, job: &str, seconds: u32) -> Option<i32> {
    pool.wait_job(dir, job, seconds).status.code()
}

/// Sends one owner event to machine `i` over its control connection.
fn owner(pool: &Pool, i: usize, event: OwnerEvent) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut link = OwnerLink::connect(&pool.locals[i].app_addr, &pool.secret)
            .await
            .unwrap_or_else(|e| panic!("control connection: {e}"));
        link.send(event).await.expect("owner event applied");
    });
}

/// Waits until `carmi q` of `job` satisfies `ok`; its text.
fn q_until(pool: &Pool, dir: &Path, what: &str, ok: impl Fn(&str) -> bool) -> String {
    pool.wait_for(what, Duration::from_secs(30), || {
        let q = text(&carmi(pool, dir, &["q"]).stdout);
        if ok(&q) { Ok(q) } else { Err(q) }
    })
}

#[test]
fn masters_go_only_where_the_owner_lets_them_start_and_wait_for_an_owner_to_leave() {
    let pool = pool("requeue-policy");
    let dir = laptop(
        &pool,
        "#!/bin/sh\nsleep 0.5\necho \"ran on $CARMI_MACHINE\"\n",
    );
    // m0's owner is at the keyboard: its START is false. Before, m0 (first
    // by name, running no master) got every master and all four failed.
    owner(&pool, 0, OwnerEvent::Arrive);
    q_until(&pool, &dir, "m0 shows its owner", |_| {
        let owned = ["status", "-constraint", "State == \"Owner\"", "-af", "Name"];
        text(&carmi(&pool, &dir, &owned).stdout).trim() == "m0"
    });
    let jobs = submit(&pool, &dir, "executable = master.sh\nqueue 4\n");
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    for job in &jobs {
        assert_eq!(
            wait(&pool, &dir, job, 60),
            Some(0),
            "job {job}\n{}",
            pool.logs()
        );
    }
    let history = pool.run_ok(pool.carmi_in(&dir).args(["history", "--json"]));
    let records: serde_json::Value = serde_json::from_str(&history).unwrap();
    let machines: Vec<String> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["usage"]["machines"].to_string())
        .collect();
    assert!(
        machines.iter().all(|m| m == "[\"m1\"]"),
        "every master ran on m1: {machines:?}"
    );

    // A job only m0 may run waits, saying why, until m0's owner leaves.
    let only_m0 = "executable = master.sh\nmaster_requirements = Name == \"m0\"\nqueue\n";
    let job = submit(&pool, &dir, only_m0).remove(0);
    let q = q_until(&pool, &dir, "the master waits for m0's owner", |q| {
        q.contains("owner policy lets it start")
    });
    assert!(!q.contains("failed"), "{q}");
    owner(&pool, 0, OwnerEvent::Leave);
    assert_eq!(wait(&pool, &dir, &job, 60), Some(0), "{}", pool.logs());
}

#[test]
fn a_start_the_machine_fails_puts_the_job_back_and_it_completes_elsewhere() {
    let pool = pool("requeue-machine");
    let dir = laptop(&pool, "#!/bin/sh\necho done\n");
    // m0's disk is broken: it cannot store the executable it must fetch.
    let cache = pool.dir.join("m0").join("cache");
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::write(&cache, "not a directory").unwrap();
    let job = submit(
        &pool,
        &dir,
        "executable = master.sh\nlog = job.log\nqueue\n",
    )
    .remove(0);
    assert_eq!(wait(&pool, &dir, &job, 60), Some(0), "{}", pool.logs());
    let log = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
    assert!(log.contains(" requeued m0 "), "job.log: {log}");
    assert!(log.contains(" master-started m1"), "job.log: {log}");
    let history = pool.run_ok(pool.carmi_in(&dir).args(["history"]));
    assert!(
        history.contains("completed, exit 0 (2 starts)"),
        "{history}"
    );
}

#[test]
fn a_job_whose_executable_cannot_run_is_held_after_three_tries() {
    let pool = pool("requeue-exec");
    // Its interpreter does not exist: exec refuses it everywhere (a file
    // with no `#!` at all would be run by /bin/sh, as execvp does).
    let dir = laptop(&pool, "#!/nonexistent/carmi-interpreter\nexit 0\n");
    let job = submit(&pool, &dir, "executable = master.sh\nqueue\n").remove(0);
    let q = q_until(&pool, &dir, "the job is held", |q| {
        q.contains("failed to start 3 times")
    });
    assert!(q.contains(" held "), "{q}");
    assert!(
        q.contains("failed to start 3 times") && q.contains("No such file or directory"),
        "{q}"
    );
    let events = pool.run_ok(pool.carmi_in(&dir).args(["events", &job]));
    assert_eq!(events.matches(" requeued ").count(), 2, "{events}");
    assert!(!events.contains(" ended "), "held, not ended: {events}");
}

#[test]
fn a_master_vacated_by_its_owner_is_requeued_and_completes_elsewhere() {
    let pool = pool("requeue-vacate");
    // Runs 8 s: on its first machine the owner comes back after 1 s, and
    // the machine is vacated 4 s later.
    let dir = laptop(&pool, "#!/bin/sh\nsleep 8\necho finished\n");
    let job = submit(
        &pool,
        &dir,
        "executable = master.sh\nlog = job.log\nqueue\n",
    )
    .remove(0);
    let log = || text(&carmi(&pool, &dir, &["events", &job]).stdout);
    pool.wait_until("a start", Duration::from_secs(20), || {
        log().contains(" master-started ")
    });
    let first = if log().contains(" master-started m0") {
        0
    } else {
        1
    };
    std::thread::sleep(Duration::from_secs(1));
    owner(&pool, first, OwnerEvent::Arrive);
    assert_eq!(wait(&pool, &dir, &job, 60), Some(0), "{}", pool.logs());
    let log = log();
    let other = format!(" master-started m{}", 1 - first);
    assert!(
        log.contains(&format!(" requeued m{first} vacated by the owner")) && log.contains(&other),
        "job.log: {log}"
    );
    let history = pool.run_ok(pool.carmi_in(&dir).args(["history"]));
    assert!(
        history.contains("completed, exit 0 (2 starts, 1 vacated by their owner)"),
        "{history}"
    );
}

/// How many lines of a job's events (`TIME job ID #SEQ KIND ...`) are of `kind`.
fn kinds(events: &str, kind: &str) -> usize {
    events
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(kind))
        .count()
}

/// The self-checkpointing job of the acceptance test: counts to 12, one
/// step a second, appending each step to `steps.txt`; on SIGTERM it writes
/// its counter and exits with its `checkpoint_exit_code`, 85.
const COUNTER: &str = r#"#!/bin/sh
n=$(cat counter 2>/dev/null || echo 0)
trap 'echo $n > counter; exit 85' TERM
while [ "$n" -lt 12 ]; do
    sleep 1 & wait $!
    n=$((n + 1))
    echo "$n" >> steps.txt
done
echo "finished at $n"
"#;

#[test]
fn a_self_checkpointing_job_vacated_twice_finishes_elsewhere_with_its_counter_continuous() {
    let pool = pool("requeue-checkpoint");
    let dir = laptop(&pool, COUNTER);
    // m1's owner is at the keyboard: the job starts on m0.
    owner(&pool, 1, OwnerEvent::Arrive);
    let owned = ["status", "-constraint", "State == \"Owner\"", "-af", "Name"];
    q_until(&pool, &dir, "m1 shows its owner", |_| {
        text(&carmi(&pool, &dir, &owned).stdout).trim() == "m1"
    });
    let file = "executable = master.sh\ncheckpoint_exit_code = 85\n\
                transfer_checkpoint_files = counter, steps.txt\n\
                transfer_output_files = steps.txt\nqueue\n";
    let job = submit(&pool, &dir, file).remove(0);
    let events = || text(&carmi(&pool, &dir, &["events", &job]).stdout);
    let until = |what: &str, ok: &dyn Fn(&str) -> bool| {
        pool.wait_for(what, Duration::from_secs(40), || {
            let e = events();
            if ok(&e) { Ok(e) } else { Err(e) }
        })
    };
    for visit in 1..=2 {
        until("the master runs on m0", &|e| {
            e.matches(" master-started m0").count() == visit
        });
        // Its owner comes back and stays: suspended, then vacated 4 s later.
        std::thread::sleep(Duration::from_secs(1));
        owner(&pool, 0, OwnerEvent::Arrive);
        until("the checkpoint is kept", &|e| {
            kinds(e, "checkpoint") == visit
        });
        if visit == 1 {
            // Back on m0 once its owner left: m1's is still there.
            owner(&pool, 0, OwnerEvent::Leave);
        }
    }
    owner(&pool, 1, OwnerEvent::Leave);
    assert_eq!(wait(&pool, &dir, &job, 90), Some(0), "{}", pool.logs());
    let events = events();
    assert!(events.contains(" master-started m1"), "{events}");
    // Every step once, in order, but the one a vacate may have cut
    // between writing it and the counter (one per vacate at most).
    let steps: Vec<u32> = std::fs::read_to_string(dir.join("steps.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let mut unique = steps.clone();
    unique.dedup();
    assert_eq!(unique, (1..=12).collect::<Vec<u32>>(), "steps: {steps:?}");
    assert!(steps.len() <= 12 + 2, "steps: {steps:?}");
    let history = pool.run_ok(pool.carmi_in(&dir).args(["history"]));
    assert!(
        history.contains("completed, exit 0 (3 starts, 2 vacated by their owner, 2 checkpoints)"),
        "{history}"
    );
}
