//! `carmi rm`, `hold` and `q` name jobs as HTCondor users do: a cluster,
//! a proc `C.P`, a user's jobs, `-all`, `-constraint`; against a fake global
//! RM that lists a queue and records what it is asked to remove.

use std::sync::{Arc, Mutex};

use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, JobStatus, ToGlobal};
use carmi_testkit::FakeGlobal;

const SECRET: &str = "the fake pool's secret, 0123456789";

/// Cluster 1 of alice (procs 0..2, job ids 1..3), cluster 4 of bob.
fn queue() -> Vec<JobStatus> {
    let job = |id: u64, cluster: u64, owner: &str, state: &str| JobStatus {
        job: JobId(id),
        cluster: Some(JobId(cluster)),
        proc: (id - cluster) as u32,
        owner: owner.into(),
        submitted_unix: 0,
        state: state.into(),
        executable: "m.sh".into(),
        master: None,
        classes: vec![],
        note: None,
        user: None,
        attrs: vec![],
    };
    vec![
        job(1, 1, "alice", "running"),
        job(2, 1, "alice", "waiting"),
        job(3, 1, "alice", "running"),
        job(4, 4, "bob", "waiting"),
    ]
}

/// A fake global RM with [`queue`]; what it was asked to remove, as
/// (job, names a cluster).
async fn pool() -> (String, Arc<Mutex<Vec<(u64, bool)>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let global = FakeGlobal::with_secret(SECRET.as_bytes()).await;
    let addr = global.addr();
    let seen = asked.clone();
    global.answer_admins(move |msg| match msg {
        ToGlobal::Queue => FromGlobal::Queue(queue()),
        ToGlobal::RemoveJob { job, cluster } => {
            seen.lock().unwrap().push((job.0, cluster));
            FromGlobal::Removed { job }
        }
        other => panic!("unexpected {other:?}"),
    });
    (addr, asked)
}

/// `carmi ARGS --pool POOL --secret FILE` as user alice: its stdout.
async fn carmi(addr: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("pool.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_carmi"));
    cmd.args(args)
        .args(["--pool", addr, "--secret"])
        .arg(&secret)
        .env("USER", "alice")
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .env("CARMI_CONFIG", "/nonexistent/carmi-test-config.toml");
    let out = cmd.output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command line, the removals it sends (job, names a cluster), what it prints.
type Case = (
    &'static [&'static str],
    &'static [(u64, bool)],
    &'static str,
);

#[tokio::test]
async fn rm_takes_clusters_procs_users_all_and_constraints() {
    let cases: [Case; 5] = [
        (&["rm", "1"], &[(1, true)], "cluster 1 removed\n"),
        (&["rm", "1.2"], &[(3, false)], "job 1.2 removed\n"),
        (&["rm", "bob"], &[(4, false)], "job 4.0 removed\n"),
        (
            &["rm", "-all"],
            &[(1, false), (2, false), (3, false)],
            "job 1.0 removed\njob 1.1 removed\njob 1.2 removed\n",
        ),
        (
            &["rm", "-constraint", "JobStatus == 1"],
            &[(2, false), (4, false)],
            "job 1.1 removed\njob 4.0 removed\n",
        ),
    ];
    for (args, sent, said) in cases {
        let (addr, asked) = pool().await;
        assert_eq!(carmi(&addr, args).await, said, "{args:?}");
        assert_eq!(asked.lock().unwrap().as_slice(), sent, "{args:?}");
    }
}

#[tokio::test]
async fn q_filters_by_cluster_proc_user_and_constraint_and_shows_c_dot_p() {
    let (addr, _) = pool().await;
    let table = carmi(&addr, &["q"]).await;
    for id in ["1.0", "1.1", "1.2", "4.0"] {
        assert!(table.contains(&format!("{id} ")), "{table}");
    }
    let ids = |out: String| -> Vec<u64> {
        let jobs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        jobs.iter().map(|j| j["job"].as_u64().unwrap()).collect()
    };
    assert_eq!(ids(carmi(&addr, &["q", "1", "--json"]).await), [1, 2, 3]);
    assert_eq!(ids(carmi(&addr, &["q", "1.1", "--json"]).await), [2]);
    assert_eq!(ids(carmi(&addr, &["q", "bob", "--json"]).await), [4]);
    let waiting = carmi(
        &addr,
        &[
            "q",
            "-constraint",
            "JobStatus == 1 && Owner == \"alice\"",
            "--json",
        ],
    );
    assert_eq!(ids(waiting.await), [2]);
}
