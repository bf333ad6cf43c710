//! Submit and removal cost against the length of the queue: the router core
//! as the daemon runs it for `carmi submit` and `carmi rm` (decode aside),
//! and the journal append the daemon makes before it answers.
//!
//! A pool of 4 machines of 2 slots; the queue is filled with `N` waiting
//! jobs of one of two kinds, then 300 jobs are submitted and removed again
//! one at a time (so the queue stays at `N`), each operation timed:
//! - `blocked`: every job needs 16 slots; the head keeps the idle slots for
//!   itself and nothing behind it may take them.
//! - `unservable`: every job asks for `Arch == "PPC"`, which no machine is:
//!   the idle slots stay free for the jobs behind, so a settling pass that
//!   visited every job would try them all.
//! - `distinct`: the same, but every job asks for something else
//!   (`Memory >= n`), so no two are alike.
//!
//! `cargo bench -p carmi-global --bench queue` (`-- 0,20000 distinct`
//! picks the queue lengths and the queues; by default 0, 20000, 100000 and
//! all three).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use carmi_api::ids::JobId;
use carmi_api::msg::{ExecutableRef, FromGlobal, Role, SubmitRequest, ToGlobal};
use carmi_global::journal::{Journal, Record};
use carmi_global::router::{LinkId, Output, Router, RouterConfig};

const ADMIN: LinkId = LinkId(100);
const SAMPLES: usize = 300;

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

fn submit(kind: &str) -> ToGlobal {
    let class = match kind {
        "blocked" => "machine_count = 16\n".to_string(),
        "distinct" => {
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            format!("requirements = Arch == \"PPC\" && Memory >= {n}\nmachine_count = 1\n")
        }
        _ => "requirements = Arch == \"PPC\"\nmachine_count = 1\n".to_string(),
    };
    let spec = carmi_api::submit::parse("j", &format!("executable = master\n{class}queue\n"))
        .expect("the benchmark's submit file parses");
    ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe(),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }))
}

/// Runs one input; returns the job id answered (if any) and the journal records.
fn run(r: &mut Router, msg: ToGlobal) -> (Option<JobId>, Vec<Record>) {
    r.on_message(ADMIN, msg, Duration::ZERO);
    let (mut job, mut records) = (None, Vec::new());
    for o in r.take_outputs() {
        match o {
            Output::Send {
                msg: FromGlobal::Submitted { job: j },
                ..
            } => job = Some(j),
            Output::Send {
                msg: FromGlobal::AdminFailed(f),
                ..
            } => panic!("the benchmark's request failed: {}", f.message),
            Output::Journal(rec) => records.push(rec),
            _ => {}
        }
    }
    (job, records)
}

fn router() -> Router {
    let mut r = Router::new(RouterConfig::default());
    for i in 0..4 {
        let link = LinkId(i + 1);
        let name = format!("m{i}");
        r.on_link_opened(link, Role::Local { name: name.clone() }, Duration::ZERO);
        let ad = format!("[ Name = \"{name}\"; Arch = \"X86_64\"; Mips = 1000 ]");
        r.on_message(
            link,
            ToGlobal::Advertise {
                ad,
                slots: 2,
                running: vec![],
            },
            Duration::ZERO,
        );
    }
    r.on_executable_stored(&exe());
    r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO);
    let _ = r.take_outputs();
    r
}

/// Median and 90th percentile.
fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn bench(kind: &str, queued: usize) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (mut journal, _, _) = Journal::open(dir.path()).expect("journal opens");
    let mut r = router();
    let mut batch = Vec::new();
    for _ in 0..queued {
        batch.extend(run(&mut r, submit(kind)).1);
        if batch.len() >= 5000 {
            journal.append(&batch).expect("journal append");
            batch.clear();
        }
    }
    journal.append(&batch).expect("journal append");
    let [sub_core, sub_all, rm_core, rm_all] = measure(kind, &mut r, &mut journal);
    let waiting = r.allocator().job_ids().len();
    assert_eq!(waiting, queued, "the queue stays at its length");
    for (op, core, all) in [("submit", sub_core, sub_all), ("rm", rm_core, rm_all)] {
        let (c50, c90) = stats(core);
        let (a50, a90) = stats(all);
        println!(
            "{kind:>10} {queued:>7} {op:>6}  core p50 {c50:>10.1?} p90 {c90:>10.1?}   +journal p50 {a50:>10.1?} p90 {a90:>10.1?}"
        );
    }
}

/// The timed part: submit and remove [`SAMPLES`] jobs; the submit times
/// (router core, then with the journal), then the same for the removals.
/// Kept out of line so that `valgrind --tool=callgrind
/// --collect-atstart=no --toggle-collect='queue::measure*'` counts the
/// instructions of these operations alone, which a loaded machine does
/// not change.
#[inline(never)]
fn measure(kind: &str, r: &mut Router, journal: &mut Journal) -> [Vec<Duration>; 4] {
    let (mut sub_core, mut sub_all, mut rm_core, mut rm_all) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let msg = submit(kind);
        let t = Instant::now();
        let (job, records) = run(r, msg);
        let core = t.elapsed();
        journal.append(&records).expect("journal append");
        sub_core.push(core);
        sub_all.push(t.elapsed());
        let job = job.expect("the submit is answered");
        let t = Instant::now();
        let (_, records) = run(
            r,
            ToGlobal::RemoveJob {
                job,
                cluster: false,
            },
        );
        let core = t.elapsed();
        journal.append(&records).expect("journal append");
        rm_core.push(core);
        rm_all.push(t.elapsed());
    }
    [sub_core, sub_all, rm_core, rm_all]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let sizes: Vec<usize> = match args.first() {
        Some(a) => a
            .split(',')
            .map(|n| n.parse().expect("queue lengths are numbers"))
            .collect(),
        None => vec![0, 20_000, 100_000],
    };
    let kinds: Vec<&str> = match args.get(1) {
        Some(a) => a.split(',').collect(),
        None => vec!["blocked", "unservable", "distinct"],
    };
    for kind in kinds {
        for &n in &sizes {
            bench(kind, n);
        }
    }
}
