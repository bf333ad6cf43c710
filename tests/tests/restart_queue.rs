//! End to end, over real daemons (issue 15 item 3): SUBMITTED jobs across
//! SIGKILLs of the global RM. Alice's job A runs (its master on m0, class `w`
//! of two hosts from the submit file); the test speaks for A's master (it
//! attaches as the master's process, whose shell never connects) and gives
//! it a class defined at run time (`extra`), an exclusion that bites (a free
//! machine excluded from `extra`, so one `AddHosts` stays pending), hosts
//! with and without processes. Behind A wait B (bob), C and D (alice), each
//! asking for the whole pool; bob's priority factor is 10, so C, submitted
//! after B, starts first when A ends.
//!
//! The global RM is killed at these moments: right after A's submit, while
//! the queue waits behind A, right after a grant, and while a process
//! starts. After each restart: `carmi q --json` shows the same jobs in the
//! same order and states, A keeps its hosts, its classes and its exclusion,
//! its pending request is served later, every master ran once, and nothing
//! the master was told came twice.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::authz::Power;
use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{Event, FailureCode, JobStatus, Reply, SpawnTarget};
use carmi_tests::{Pool, PoolOptions, Recorder, text, write_script};

/// Within this a loaded CI machine answers.
const PATIENCE: Duration = Duration::from_secs(60);

/// The master's events, every one logged, so that the end can check that
/// nothing came twice.
struct Master {
    carmi: Carmi,
    rec: Recorder,
    /// Requests whose failure is checked where they are sent.
    probes: HashSet<RequestId>,
    /// The worker started before the restarts.
    first: Option<ProcessId>,
}

impl std::ops::Deref for Master {
    type Target = Recorder;
    fn deref(&self) -> &Recorder {
        &self.rec
    }
}

impl std::ops::DerefMut for Master {
    fn deref_mut(&mut self) -> &mut Recorder {
        &mut self.rec
    }
}

impl Master {
    fn first_worker(&self) -> ProcessId {
        self.first.expect("a worker was started")
    }

    /// The job's hosts as the global RM says (`Config`), asked until it
    /// answers (the local RM holds requests while the global RM is away, and
    /// fails them after 30 s) and holds `want`.
    async fn hosts_become(&mut self, want: &BTreeSet<HostId>, pool: &Pool) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let probe = self.carmi.config();
            self.probes.insert(probe);
            let got = match self.answer("config", probe).await {
                Ok(Reply::Hosts(h)) => Some(h.iter().map(|h| h.host).collect::<BTreeSet<_>>()),
                Ok(other) => panic!("Config answered {other:?}"),
                Err((FailureCode::Unavailable, _)) => None,
                Err(f) => panic!("Config failed: {f:?}"),
            };
            if got.as_ref() == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the job holds {got:?}, not {want:?}, after the restart\n{}",
                pool.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The test's pool: four machines of one slot, alice and bob's tokens, and
/// bob's priority factor 10.
fn pool() -> Pool {
    // A machine lost meanwhile would change the hosts for another reason
    // than the restart: a loaded CI machine gets 10 s of silence.
    let options = PoolOptions {
        missed_heartbeats: 20,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with(
        "restart-queue",
        1,
        &[vec![], vec![], vec![], vec![]],
        options,
    );
    pool.wait_registered();
    for user in ["alice", "bob"] {
        let path = pool.dir.join(format!("{user}.token"));
        pool.token_file(&path, user, Power::Submit, None, 3600);
    }
    let out = pool
        .carmi()
        .args(["userprio", "--set-factor", "bob", "10"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    pool
}

/// Submits as `user` job `name` whose master, on m0, notes its job and
/// process in `<name>.started` and runs until `<name>.stop` exists.
fn submit(pool: &Pool, user: &str, name: &str, count: u32) -> JobId {
    let dir = &pool.dir;
    let exe = dir.join(format!("{name}.sh"));
    let (started, stop) = (started_file(pool, name), dir.join(format!("{name}.stop")));
    let script = format!(
        "#!/bin/sh\necho \"$CARMI_JOB $CARMI_PROCESS\" >> {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
        started.display(),
        stop.display()
    );
    write_script(&exe, &script);
    let sub = dir.join(format!("{name}.sub"));
    let spec = format!("executable = {name}.sh\nclass_name = w\nmachine_count = {count}\nqueue\n");
    std::fs::write(&sub, spec).unwrap();
    let out = pool
        .carmi()
        .env("CARMI_TOKEN", dir.join(format!("{user}.token")))
        .env("CARMI_MACHINE", "m0")
        .arg("submit")
        .arg(&sub)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    let said = text(&out.stdout);
    said.split_whitespace()
        .find_map(|w| w.trim_start_matches('j').trim_end_matches('.').parse().ok())
        .map(JobId)
        .unwrap_or_else(|| panic!("no job id in {said:?}"))
}

fn started_file(pool: &Pool, name: &str) -> PathBuf {
    pool.dir.join(format!("{name}.started"))
}

/// The `(job, process)` lines the master of job `name` wrote, one per start.
fn starts(pool: &Pool, name: &str) -> Vec<(JobId, ProcessId)> {
    let text = std::fs::read_to_string(started_file(pool, name)).unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut w = l.split_whitespace().map(|w| w.parse::<u64>().unwrap());
            (JobId(w.next().unwrap()), ProcessId(w.next().unwrap()))
        })
        .collect()
}

/// `carmi q --json`, retried while the global RM is away.
fn queue(pool: &Pool) -> Vec<JobStatus> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = pool.carmi().args(["q", "--json"]).output().unwrap();
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).expect("carmi q --json parses");
        }
        assert!(
            Instant::now() < deadline,
            "carmi q: {}\n{}",
            text(&out.stderr),
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What of the queue must survive a restart: each job's id, owner, state,
/// master, and per class its name, hosts held, minimum and maximum.
type Shape = Vec<(
    JobId,
    String,
    String,
    Option<ProcessId>,
    Vec<(String, u32, u32, u32)>,
)>;

fn shape(jobs: &[JobStatus]) -> Shape {
    jobs.iter()
        .map(|j| {
            let classes = j
                .classes
                .iter()
                .map(|c| (c.name.clone(), c.held, c.min, c.max))
                .collect();
            (j.job, j.owner.clone(), j.state.clone(), j.master, classes)
        })
        .collect()
}

/// Polls the queue until its shape is `want`.
async fn queue_becomes(pool: &Pool, want: &Shape, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = shape(&tokio::task::block_in_place(|| queue(pool)));
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the queue is\n{got:#?}\nnot\n{want:#?}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGKILL and restart of the global RM; then every machine is back, the
/// queue has the shape it had, and A holds `hosts` again.
async fn restart(pool: &mut Pool, master: &mut Master, hosts: &BTreeSet<HostId>, moment: &str) {
    let before = shape(&tokio::task::block_in_place(|| queue(pool)));
    eprintln!("restart at moment: {moment}");
    pool.restart_global();
    tokio::task::block_in_place(|| pool.wait_registered());
    master.hosts_become(hosts, pool).await;
    queue_becomes(pool, &before, moment).await;
}

/// Host id of the slot of each machine, and the job holding it.
async fn slots(pool: &Pool) -> HashMap<String, (HostId, Option<JobId>)> {
    let machines = carmi_api::admin::pool_status(&pool.global_addr, &pool.secret)
        .await
        .expect("pool status");
    machines
        .iter()
        .map(|m| (m.name.clone(), (m.slots[0].host, m.slots[0].job)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitted_jobs_and_their_queue_survive_sigkills_of_the_global_rm() {
    let mut pool = tokio::task::block_in_place(pool);

    // 1: killed right after A's submit: A is kept, and its master runs once.
    let a = tokio::task::block_in_place(|| submit(&pool, "alice", "a", 2));
    eprintln!("restart at moment: right after a submit");
    pool.restart_global();
    tokio::task::block_in_place(|| pool.wait_registered());
    let deadline = Instant::now() + PATIENCE;
    let root = loop {
        let jobs = tokio::task::block_in_place(|| queue(&pool));
        let running = shape(&jobs)
            .into_iter()
            .find(|j| j.0 == a && j.2 == "running");
        if let Some((_, _, _, Some(root), classes)) = running
            && classes == [("w".to_string(), 2, 2, 2)]
            && !starts(&pool, "a").is_empty()
        {
            break root;
        }
        assert!(Instant::now() < deadline, "{jobs:#?}\n{}", pool.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(starts(&pool, "a"), [(a, root)], "A's master ran once");

    let mut master = attach(&pool, a, root).await;
    let r = master.carmi.config();
    let Reply::Hosts(infos) = master.done("config", r).await else {
        panic!("Config answers with hosts");
    };
    let mut held: BTreeSet<HostId> = infos.iter().map(|h| h.host).collect();
    assert_eq!(held.len(), 2, "{infos:?}");
    let w_hosts: Vec<HostId> = held.iter().copied().collect();
    let (f1, f2) = runtime_state(&pool, &mut master, w_hosts[0]).await;

    // The queue behind A: bob's B, then alice's C and D, each wanting the whole pool.
    let behind: Vec<JobId> = [("bob", "b"), ("alice", "c"), ("alice", "d")]
        .iter()
        .map(|(user, name)| tokio::task::block_in_place(|| submit(&pool, user, name, 4)))
        .collect();
    let waiting = |j: JobId, owner: &str| {
        (
            j,
            owner.to_string(),
            "waiting".to_string(),
            None,
            vec![("w".to_string(), 0, 4, 4)],
        )
    };
    let mut want = vec![(
        a,
        "alice".to_string(),
        "running".to_string(),
        Some(root),
        vec![("extra".to_string(), 0, 0, 0), ("w".to_string(), 2, 2, 2)],
    )];
    want.extend([
        waiting(behind[0], "bob"),
        waiting(behind[1], "alice"),
        waiting(behind[2], "alice"),
    ]);
    queue_becomes(&pool, &want, "B, C and D waiting behind A").await;

    // 2: killed while the queue waits behind A.
    restart(&mut pool, &mut master, &held, "the queue waits").await;
    check_classes(&mut master, "extra", &f1.1).await;

    // 3: killed right after a grant: `extra` gets f2, never the excluded
    // f1 (free all along), and one host stays pending.
    let add = master.carmi.addhosts("extra", 2, 1);
    let (hosts, remaining) = master.added("extra's first host", add).await;
    assert_eq!((hosts, remaining), (vec![f2.0], 1), "{}", pool.logs());
    held.insert(f2.0);
    restart(&mut pool, &mut master, &held, "right after a grant").await;

    // 4: killed while a process starts on A's second `w` host.
    let echo = PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let spawn =
        master
            .carmi
            .class_spawn(&echo, Vec::<String>::new(), SpawnTarget::Host(w_hosts[1]));
    master.carmi.flush().await;
    restart(&mut pool, &mut master, &held, "a process starting").await;
    let second = started_or_failed(&mut master, spawn, &echo, w_hosts[1]).await;
    for p in [master.first_worker(), second] {
        master.carmi.send(p, 7, "ping");
        let from = master
            .take("echo", |x| match x {
                Incoming::Message { from, tag: 8, .. } if *from == p => Some(*from),
                _ => None,
            })
            .await;
        assert_eq!(from, p);
    }
    let slots_now = slots(&pool).await;
    assert_eq!(slots_now[&f1.1].1, None, "the excluded machine stays free");

    // The pending `AddHosts`, made before two restarts, takes the host
    // `extra` gives back, and nothing came twice.
    let del = master.carmi.delhosts(&[f2.0]);
    master.done("f2 given back", del).await;
    let (hosts, remaining) = master.added("the pending AddHosts served", add).await;
    assert_eq!((hosts, remaining), (vec![f2.0], 0));
    nothing_twice(&master, add, f2.0);

    // A ends: C (alice's) starts before B (bob's, submitted first).
    std::fs::write(pool.dir.join("a.stop"), "").unwrap();
    drop(master);
    let running = |j: JobId, owner: &str| (j, owner.to_string(), "running".to_string());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let jobs = tokio::task::block_in_place(|| queue(&pool));
        let s: Vec<_> = shape(&jobs)
            .into_iter()
            .map(|(j, o, st, _, c)| ((j, o, st), c))
            .collect();
        // Running, and its master has begun (it writes its start first).
        if s.len() == 3 && s[1].0 == running(behind[1], "alice") && !starts(&pool, "c").is_empty() {
            assert_eq!(s[1].1, [("w".to_string(), 4, 4, 4)], "{jobs:#?}");
            assert_eq!(
                (s[0].0.2.as_str(), s[2].0.2.as_str()),
                ("waiting", "waiting")
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "C never started: {jobs:#?}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, n) in [("a", 1), ("b", 0), ("c", 1), ("d", 0)] {
        assert_eq!(starts(&pool, name).len(), n, "masters of {name}");
    }
    let out = pool
        .carmi()
        .args([
            "rm",
            &behind[0].0.to_string(),
            &behind[1].0.to_string(),
            &behind[2].0.to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Connects as A's master (`root` of job `a`), whose shell never does.
async fn attach(pool: &Pool, a: JobId, root: ProcessId) -> Master {
    let mut opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    opts.job = Some(a);
    opts.process = Some(root);
    let (carmi, events) = connect(opts).await.expect("attach as A's master");
    assert_eq!((carmi.job(), carmi.process()), (a, root));
    Master {
        carmi,
        rec: Recorder::new(events, PATIENCE),
        probes: HashSet::new(),
        first: None,
    }
}

/// A's master defines class `extra` at run time, excludes the first free
/// machine from it, and starts a worker on `w_host`; returns the free
/// machines' hosts and names (the excluded one first).
async fn runtime_state(
    pool: &Pool,
    master: &mut Master,
    w_host: HostId,
) -> ((HostId, String), (HostId, String)) {
    let mut free: Vec<(String, HostId)> = slots(pool)
        .await
        .into_iter()
        .filter(|(_, (_, job))| job.is_none())
        .map(|(name, (host, _))| (name, host))
        .collect();
    free.sort();
    let [(n1, h1), (n2, h2)] = &free[..] else {
        panic!("two machines are free besides A's: {free:?}");
    };
    let r = master.carmi.define_class("extra", "true");
    master.done("extra defined", r).await;
    let r = master.carmi.exclude_hosts("extra", &[*h1]);
    master.done("excluded", r).await;
    check_classes(master, "extra", n1).await;
    let echo = PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let spawn = master
        .carmi
        .class_spawn(&echo, Vec::<String>::new(), SpawnTarget::Host(w_host));
    master.first = Some(started(master, spawn).await);
    ((*h1, n1.clone()), (*h2, n2.clone()))
}

/// The process `spawn` started.
async fn started(master: &mut Master, spawn: RequestId) -> ProcessId {
    master
        .take("process started", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(*process),
            _ => None,
        })
        .await
}

/// The process of a spawn sent just before a kill: started, or failed with
/// a clear reason (the killed global RM never read it) and then spawned again.
async fn started_or_failed(
    master: &mut Master,
    spawn: RequestId,
    exe: &Path,
    host: HostId,
) -> ProcessId {
    let outcome = master
        .take("the spawn answered", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(Ok(*process)),
            Incoming::Rm(Event::Failed { request, failure }) if *request == spawn => {
                Some(Err(failure.message.clone()))
            }
            _ => None,
        })
        .await;
    match outcome {
        Ok(p) => p,
        Err(message) => {
            eprintln!("the spawn in flight failed: {message}");
            assert!(!message.is_empty());
            master.probes.insert(spawn);
            let again =
                master
                    .carmi
                    .class_spawn(exe, Vec::<String>::new(), SpawnTarget::Host(host));
            started(master, again).await
        }
    }
}

/// `class` is defined, `true`, with `machine` excluded.
async fn check_classes(master: &mut Master, class: &str, machine: &str) {
    let r = master.carmi.get_class_definitions();
    let Reply::Classes(classes) = master.done("classes", r).await else {
        panic!("GetClassDefinitions answers with classes");
    };
    assert!(
        classes
            .iter()
            .any(|c| c.name == class && c.expression == "true" && c.excluded == [machine]),
        "{classes:?}"
    );
}

/// Nothing failed but probes, nothing came twice: each host told once per
/// request, `given` (given back, granted again) twice to `add`.
fn nothing_twice(master: &Master, add: RequestId, given: HostId) {
    let mut told: HashMap<(RequestId, HostId), u32> = HashMap::new();
    let mut seen = HashSet::new();
    for item in &master.log {
        match item {
            Incoming::Rm(Event::Failed { request, failure }) => assert!(
                master.probes.contains(request),
                "request {request} failed: {failure:?}"
            ),
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) => {
                for h in hosts {
                    *told.entry((*request, h.host)).or_default() += 1;
                }
            }
            other => assert!(seen.insert(format!("{other:?}")), "told twice: {other:?}"),
        }
    }
    for ((request, host), n) in told {
        let want = if (request, host) == (add, given) {
            2
        } else {
            1
        };
        assert_eq!(n, want, "host {host} told {n} times to request {request}");
    }
}
