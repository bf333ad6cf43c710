//! End to end, over real daemons: a job's processes hold a credential of
//! their own, not the pool secret, and it opens that job only, while the
//! job lasts (`carmi_api::jobcred`).

use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::handshake::Secret;
use carmi_api::ids::HostId;
use carmi_api::msg::{Event, SpawnTarget};
use carmi_tests::{Inbox, Pool, PoolOptions};

/// A job's first process, connected with the pool secret.
async fn first_process(pool: &Pool) -> (carmi_api::client::Carmi, Inbox) {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect with the pool secret");
    (carmi, Inbox::new(events))
}

async fn a_host(carmi: &carmi_api::client::Carmi, inbox: &mut Inbox) -> HostId {
    let r = carmi.define_class("any", "true");
    inbox.done(r).await;
    let add = carmi.addhosts("any", 1, 1);
    inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                hosts.first().map(|h| h.host)
            }
            _ => None,
        })
        .await
}

/// A process of job A gets its job's credential, never the pool secret, and
/// can neither attach to job B nor open a direct connection to B's process;
/// once job A has left the machine its credential is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_credential_opens_that_job_only_and_dies_with_it() {
    // Patient heartbeats: a loaded test machine must not lose its only
    // local RM in the middle of the upload of the probe.
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("jobcred", 2, &[vec![]], options);
    let pool_secret = std::fs::read_to_string(&pool.secret_path).expect("the pool secret");
    let pool_secret = pool_secret.trim();
    let (a, mut a_inbox) = first_process(&pool).await;
    let (b, _b_inbox) = first_process(&pool).await;
    assert_ne!(a.job(), b.job());

    let host = a_host(&a, &mut a_inbox).await;
    let probe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_carmi-probe"));
    let args = [
        a.process().to_string(),
        b.job().to_string(),
        b.endpoint().to_string(),
    ];
    let spawn = a.class_spawn(&probe, args, SpawnTarget::Host(host));
    let report = a_inbox
        .take_within(
            Duration::from_secs(120),
            "the probe's report",
            |x| match x {
                Incoming::Message { tag: 1, data, .. } => Some(data.clone()),
                Incoming::Rm(Event::ProcessExited {
                    request, status, ..
                }) if *request == spawn => panic!("the probe exited ({status:?}) without a report"),
                _ => None,
            },
        )
        .await;
    let report: serde_json::Value = serde_json::from_slice(&report).expect("a JSON report");
    let field = |k: &str| report[k].as_str().unwrap_or_default().to_string();
    let whole = report.to_string();

    // What the job was given: its own credential, nothing of the pool's.
    let credential = field("secret_text");
    assert!(
        credential.starts_with(&format!("carmi-job-credential {} ", a.job())),
        "the secret file holds the job's credential: {report:#}"
    );
    assert!(
        !whole.contains(pool_secret),
        "the pool secret reached the job: {report:#}"
    );
    let secret_path = pool.secret_path.display().to_string();
    assert!(
        !whole.contains(&secret_path) && !whole.contains("CARMI_TOKEN="),
        "the pool's secret or token file is named to the job: {report:#}"
    );

    // What it cannot do with it.
    for key in ["as_other_job", "as_new_job"] {
        assert!(
            field(key).starts_with("refused") && field(key).contains("credential of job"),
            "{key}: {report:#}"
        );
    }
    assert!(
        field("control").starts_with("refused") && field("control").contains("credential of job"),
        "control: {report:#}"
    );
    for key in ["peer_as_other_job", "peer_as_own_job"] {
        assert!(field(key).starts_with("refused"), "{key}: {report:#}");
    }

    // Once job A has no process nor application left on the machine, its
    // credential is refused.
    a_inbox
        .take_within(Duration::from_secs(30), "the probe's exit", |x| match x {
            Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let job = a.job();
    drop(a);
    drop(a_inbox);
    let secret = Secret::new(credential.as_bytes()).expect("the credential reads");
    let mut opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), secret);
    opts.job = Some(job);
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        match connect(opts.clone()).await {
            Err(e) if e.to_string().contains("no longer") => break e.to_string(),
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the ended job's credential still works: {:?}\n{}",
                    other.map(|_| ()),
                    pool.logs()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(refusal.contains(&job.to_string()), "{refusal}");
    drop(b);
}

#[test]
fn after_a_journal_cut_a_new_job_gets_an_id_and_so_a_credential_never_given() {
    let mut pool = Pool::start("jobcred-cut", 1, &[vec![]]);
    pool.wait_registered();
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("job.sub"),
        "executable = /bin/true\nmachine_count = 99\nqueue\n",
    )
    .unwrap();
    let submit = |pool: &Pool| {
        pool.run_ok(pool.carmi_in(&dir).args(["submit", "job.sub"]))
            .trim()
            .parse::<u64>()
            .expect("a job id")
    };
    let given: Vec<u64> = (0..3).map(|_| submit(&pool)).collect();
    // The journal is damaged after its first line: a restart cuts it there
    // and forgets the jobs after it (and the counters).
    pool.kill_global();
    let journal = pool.dir.join("global-state/journal.log");
    let text = std::fs::read_to_string(&journal).unwrap();
    let first = text.lines().next().unwrap_or_default();
    std::fs::write(&journal, format!("{first}\n{{ damaged\n")).unwrap();
    pool.restart_global();
    let next = submit(&pool);
    // Before, ids went back to 1 or 2: bob's new job got the credential of
    // alice's job of that id, still running on its machines.
    assert!(
        given.iter().all(|&g| next > g),
        "job {next} reuses an id given before {given:?}"
    );
}
