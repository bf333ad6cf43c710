//! End to end, over real daemons and the `carmi` command: one submit is one
//! cluster, as in HTCondor. `queue 3` makes procs C.0, C.1 and C.2, which
//! `carmi q` lists by those ids; `$(ClusterId).$(ProcId)` in an output name
//! becomes each proc's own; `carmi rm C` removes all three; `hold C` and
//! `release C` act on all; `C.P` names one.

use std::time::Duration;

use carmi_tests::{Pool, TempDir};

/// A master that waits for its stop file (so the procs stay queued).
const MASTER: &str = "#!/bin/sh\nwhile [ ! -e \"$2\" ]; do sleep 0.1; done\n";

fn q_json(pool: &Pool, dir: &std::path::Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = pool.run_ok(pool.carmi_in(dir).arg("q").args(args).arg("--json"));
    serde_json::from_str(&out).expect("q --json parses")
}

/// (cluster, proc, state) of every job `q` lists.
fn procs(jobs: &[serde_json::Value]) -> Vec<(u64, u64, String)> {
    let mut v: Vec<_> = jobs
        .iter()
        .map(|j| {
            (
                j["cluster"].as_u64().unwrap_or_default(),
                j["proc"].as_u64().unwrap_or_default(),
                j["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn queue_3_is_one_cluster_of_three_procs_that_rm_of_the_cluster_removes() {
    let pool = Pool::start("clusters", 4, &[vec![]]);
    let dir = TempDir::new("clusters");
    let stop = dir.path().join("stop");
    let submit = format!(
        "executable = master.sh\narguments = $(ProcId) {}\nqueue 3\n",
        stop.display()
    );
    let out = pool.submit_script(dir.path(), MASTER, &submit);
    let cluster: u64 = out
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "carmi submit printed `{out}`, not a cluster id\n{}",
                pool.logs()
            )
        });
    // All three procs run (4 slots), each writing its own output file.
    pool.wait_until("three procs running", Duration::from_secs(30), || {
        let jobs = q_json(&pool, dir.path(), &[]);
        procs(&jobs)
            .iter()
            .filter(|(_, _, s)| s == "running")
            .count()
            == 3
    });
    let jobs = q_json(&pool, dir.path(), &[]);
    let ids: Vec<(u64, u64)> = procs(&jobs).iter().map(|(c, p, _)| (*c, *p)).collect();
    assert_eq!(ids, vec![(cluster, 0), (cluster, 1), (cluster, 2)]);
    // The table shows C.P, as condor_q does.
    let table = pool.run_ok(pool.carmi_in(dir.path()).arg("q"));
    for p in 0..3 {
        assert!(table.contains(&format!("{cluster}.{p} ")), "{table}");
    }
    // `q C.1` lists one proc; `hold C.1` holds only it.
    let one = q_json(&pool, dir.path(), &[&format!("{cluster}.1")]);
    assert_eq!(procs(&one).len(), 1, "{one:?}");
    pool.run_ok(
        pool.carmi_in(dir.path())
            .args(["hold", &format!("{cluster}.1")]),
    );
    let held: Vec<_> = procs(&q_json(&pool, dir.path(), &["-hold"]));
    assert_eq!(held, vec![(cluster, 1, "held".to_string())]);
    // `rm C` removes every proc of the cluster, held or running.
    let said = pool.run_ok(pool.carmi_in(dir.path()).args(["rm", &cluster.to_string()]));
    assert!(
        said.contains(&format!("cluster {cluster} removed")),
        "{said}"
    );
    assert!(q_json(&pool, dir.path(), &[]).is_empty());
    let history =
        pool.run_ok(
            pool.carmi_in(dir.path())
                .args(["history", &cluster.to_string(), "--json"]),
        );
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    let mut ended: Vec<u64> = history
        .iter()
        .map(|r| r["proc"].as_u64().unwrap())
        .collect();
    ended.sort();
    assert_eq!(ended, vec![0, 1, 2], "{history:?}");
    // `$(ClusterId).$(ProcId)` names each proc's output; `wait C` waits for
    // every proc and brings their output back.
    std::fs::write(
        dir.path().join("quick.sub"),
        "executable = quick.sh\narguments = $(ProcId)\noutput = out.$(ClusterId).$(ProcId)\nqueue 2\n",
    )
    .unwrap();
    carmi_tests::write_script(
        &dir.path().join("quick.sh"),
        "#!/bin/sh\necho \"proc $1\"\n",
    );
    let out = pool.run_ok(pool.carmi_in(dir.path()).args(["submit", "quick.sub"]));
    let quick = out.trim().to_string();
    let done = pool.wait_job(dir.path(), &quick, 60);
    pool.assert_exit(&done, 0);
    for p in 0..2 {
        let f = dir.path().join(format!("out.{quick}.{p}"));
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        assert_eq!(text, format!("proc {p}\n"), "{}", f.display());
    }
}
