//! End to end on `--owner real` (issue 15 item 4): a job's process whose
//! CPU-bound children do the work is not suspended by its own load. The
//! local RM measures the owner's load as the machine's load average minus
//! the CPU of the job's processes; counting only the process-group leaders
//! (a shell that waits) would leave the children's CPU to the owner.
//!
//! A fixed threshold on `NonPoolLoad` cannot tell that apart on a loaded
//! 2-core CI machine (its load average is 20 with or without the job), so
//! the policy asks what the measurement must give: SUSPEND when what the
//! job used is next to nothing, `LoadAvg - NonPoolLoad < 0.03`, once the
//! job has run 6 s (two measurements, 2 s apart with a policy minute of
//! 24 s; the first one of a new process group only sets its baseline). Two
//! spinning children get far more than 0.03 of a CPU even at load 30
//! (about 0.13); a waiting shell gets exactly 0. Checked: with the
//! measure counting the group leaders only, the children were stopped
//! (suspended) and this test failed.

use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::msg::{Event, SpawnTarget};
use carmi_tests::{Inbox, Pool, PoolOptions, write_script};

/// The owner policy: open at once; suspend when the job's own processes
/// used almost no CPU since the last measurement; never continue, so that
/// a suspension stays visible.
const POLICY: &str = "[policy]\nminute = 24.0\nstart = \"true\"\n\
    suspend = \"ActivityTimer > 6 && LoadAvg - NonPoolLoad < 0.03\"\n\
    continue = \"false\"\n";

/// How long the job is watched: seven measurements past the 6 s grace.
const WATCH: Duration = Duration::from_secs(20);

/// The state letter of `pid` in /proc/PID/stat (`None` once it is gone).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// The pids of the processes whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit(')').next()?.to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_not_suspended_by_the_load_of_its_own_children() {
    let pool = Pool::start_with(
        "owner-real",
        1,
        &[vec![]],
        PoolOptions {
            local_config: POLICY.to_string(),
            local_args: vec!["--owner".into(), "real".into()],
            ..PoolOptions::default()
        },
    );
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", pool.logs()));
    let mut inbox = Inbox::new(events).with_patience(Duration::from_secs(60));
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", 1, 1);
    let host = inbox
        .take("the host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                Some(hosts[0].host)
            }
            _ => None,
        })
        .await;

    // The job's process is a shell that only waits; its two children spin.
    // It ends itself after a minute, whatever happens to the test.
    let exe = pool.dir.join("spin.sh");
    write_script(
        &exe,
        "#!/bin/sh\necho $$ > \"$1\"\nyes > /dev/null & yes > /dev/null & sleep 60; kill 0\n",
    );
    let pidfile = pool.dir.join("spin.pid");
    let spawn = carmi.class_spawn(
        &exe,
        vec![pidfile.display().to_string()],
        SpawnTarget::Host(host),
    );
    inbox
        .take("process started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (shell, spinners) = loop {
        let shell = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if let Some(shell) = shell {
            let spinners: Vec<u32> = children(shell)
                .into_iter()
                .filter(|&c| {
                    std::fs::read_to_string(format!("/proc/{c}/comm"))
                        .is_ok_and(|n| n.trim() == "yes")
                })
                .collect();
            if spinners.len() == 2 {
                break (shell, spinners);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the spinners never ran\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Watched well past the grace: never suspended, still spinning.
    let watch = Instant::now();
    while watch.elapsed() < WATCH {
        let suspended = inbox
            .try_take_within(Duration::from_millis(500), "a suspension", |x| match x {
                Incoming::Rm(Event::HostSuspended { host: h, .. }) if *h == host => Some(()),
                _ => None,
            })
            .await;
        assert!(
            suspended.is_err(),
            "the job was suspended by its own children's load after {:?}\n{}",
            watch.elapsed(),
            pool.logs()
        );
        for &pid in spinners.iter().chain([&shell]) {
            assert_ne!(
                state(pid),
                Some('T'),
                "process {pid} stopped\n{}",
                pool.logs()
            );
        }
    }
    let out = pool
        .carmi()
        .args(["status", "-af", "State", "Activity"])
        .output()
        .unwrap();
    assert_eq!(
        carmi_tests::text(&out.stdout).trim(),
        "Claimed Busy",
        "{}",
        pool.logs()
    );
}
