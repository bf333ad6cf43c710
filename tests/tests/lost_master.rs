//! End to end over real daemons (issue 15, "nothing stuck"): a machine is
//! declared lost for a moment's silence and comes back at once, with the
//! master of a submitted job still running there. The loss ended the job;
//! the master, announced again by its local RM, must hear that its job
//! ended and why (and its connection close), not be quietly attached to a
//! new job and wait forever. The master ignores SIGTERM, as a master busy
//! saving its work might, so that it lives long enough to report what it
//! was told.

use std::path::Path;
use std::time::Duration;

use carmi_tests::{Pool, PoolOptions};

/// How long a wait may take on a loaded CI machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_job_ended_while_its_machine_was_away_is_told_why() {
    // A short heartbeat, so that a moment's silence loses the machine.
    let options = PoolOptions {
        heartbeat_ms: 100,
        missed_heartbeats: 3,
        ..Default::default()
    };
    let pool = Pool::start_with("lost-master", 1, &[vec![], vec![]], options);
    pool.wait_registered();
    let echo = env!("CARGO_BIN_EXE_carmi-echo");
    let (mark, report) = (pool.dir.join("mark"), pool.dir.join("report"));
    let master = format!(
        "#!/bin/sh\ntrap '' TERM\necho started > {}\nexec {echo}\n",
        mark.display()
    );
    let text = format!(
        "executable = master.sh\nenvironment = CARMI_ECHO_REPORT={}\nmachine_count = 1\nqueue\n",
        report.display()
    );
    pool.submit_admin(&master, &text).await;
    pool.wait_until("the master to start", PATIENCE, || {
        read(&mark).contains("started")
    });
    // Give the master a moment to attach (if it attaches only after the
    // machine is back, it must be told just the same).
    tokio::time::sleep(Duration::from_millis(500)).await;

    // m0 falls silent until the global RM declares it lost, then comes back.
    pool.pause_local(0);
    let global_log = pool.dir.join("global.log");
    pool.wait_until("m0 to be declared lost", PATIENCE, || {
        read(&global_log).contains("machine `m0` sent nothing")
    });
    pool.resume_local(0);

    pool.wait_until("the master to hear that its job ended", PATIENCE, || {
        read(&report).contains("disconnected")
    });
    let told = read(&report);
    assert!(
        told.contains("job j1 ended") && told.contains("declared lost"),
        "the master was told {told:?}\n{}",
        pool.logs()
    );
    // Its old job's master was never turned into a new job.
    assert!(!read(&global_log).contains("job=j2"), "{}", pool.logs());
}
