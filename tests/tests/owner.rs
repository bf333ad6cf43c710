//! Owners coming back, end to end: a real pool, job processes with children,
//! owner events sent over the local RM's control connection, and the job
//! told through its suspend, resume and delete notifications.
//!
//! The policy minute is 0.4 s, so that with the default expressions the jobs
//! resume 2 s after the owner leaves and are vacated 4 s after suspension.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::control::OwnerLink;
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, FromLocalControl, OwnerEvent, SpawnTarget};
use carmi_tests::{Inbox, Pool, PoolOptions, write_script};

const POLICY: &str = "[policy]\nminute = 0.4\n";
const WAIT: Duration = Duration::from_secs(20);

/// Hosts named in notifications of `request` until all of `hosts` were named.
async fn notified(inbox: &mut Inbox, request: RequestId, hosts: &[HostId], what: &str) {
    let mut left: BTreeSet<HostId> = hosts.iter().copied().collect();
    while !left.is_empty() {
        let host = inbox
            .take(what, |x| match x {
                Incoming::Rm(
                    Event::HostSuspended { request: r, host }
                    | Event::HostResumed { request: r, host }
                    | Event::HostDeleted {
                        request: r, host, ..
                    },
                ) if *r == request => Some(*host),
                _ => None,
            })
            .await;
        assert!(
            left.remove(&host),
            "{what} named host {host}, not one of {hosts:?} still expected"
        );
    }
}

/// One job process (a shell) and its child (a sleep), with their pids.
struct Family {
    process: ProcessId,
    pids: [u32; 2],
}

/// A pool of one machine with `slots` slots, an application on it holding
/// every slot, and one family of processes per slot.
struct Setup {
    pool: Pool,
    carmi: Carmi,
    inbox: Inbox,
    hosts: Vec<HostId>,
    families: Vec<Family>,
}

impl Setup {
    async fn start(name: &str, slots: u32) -> Setup {
        let pool = Pool::start_with(
            name,
            slots,
            &[vec![]],
            PoolOptions {
                local_config: POLICY.to_string(),
                ..PoolOptions::default()
            },
        );
        let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
        let (carmi, events) = connect(opts)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}\n{}", pool.logs()));
        let mut inbox = Inbox::new(events).with_patience(WAIT);
        inbox.done(carmi.define_class("any", "true")).await;
        let add = carmi.addhosts("any", slots, slots);
        let infos = inbox
            .take("hosts", |x| match x {
                Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                    Some(hosts.clone())
                }
                _ => None,
            })
            .await;
        assert_eq!(infos.len(), slots as usize);
        for h in &infos {
            assert!(h.name.ends_with("@m0"), "host {} is on m0", h.name);
        }
        let hosts: Vec<HostId> = infos.iter().map(|h| h.host).collect();
        let exe = script(
            &pool,
            "family.sh",
            "echo $$ > \"$1\"; sleep 300 & echo $! >> \"$1\"; wait",
        );
        let mut families = Vec::new();
        for (i, host) in hosts.iter().enumerate() {
            let pidfile = pool.dir.join(format!("family{i}.pids"));
            let spawn = carmi.class_spawn(
                &exe,
                vec![pidfile.display().to_string()],
                SpawnTarget::Host(*host),
            );
            let process = inbox
                .take("process started", |x| match x {
                    Incoming::Rm(Event::ProcessStarted {
                        request, process, ..
                    }) if *request == spawn => Some(*process),
                    _ => None,
                })
                .await;
            let pids = read_pids(&pidfile).await;
            families.push(Family { process, pids });
        }
        Setup {
            pool,
            carmi,
            inbox,
            hosts,
            families,
        }
    }

    async fn owner(&self) -> OwnerLink {
        OwnerLink::connect(&self.pool.locals[0].app_addr, &self.pool.secret)
            .await
            .unwrap_or_else(|e| panic!("control connection: {e}"))
    }

    fn all_pids(&self) -> Vec<u32> {
        self.families.iter().flat_map(|f| f.pids).collect()
    }

    fn sandbox(&self, process: ProcessId) -> PathBuf {
        self.pool.dir.join("m0/sandbox").join(process.0.to_string())
    }
}

fn script(pool: &Pool, name: &str, body: &str) -> PathBuf {
    let p = pool.dir.join(name);
    write_script(&p, &format!("#!/bin/sh\n{body}\n"));
    p
}

/// The shell's and its child's pids, once the script has written both.
async fn read_pids(path: &PathBuf) -> [u32; 2] {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if let [a, b] = pids[..] {
                return [a, b];
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never got two pids",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The state letter of `pid` in /proc/PID/stat (`None` once it is gone).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Waits until every pid satisfies `ok` (the kernel applies a signal soon,
/// but not necessarily before the sender's next system call).
async fn all_become(pids: &[u32], what: &str, ok: impl Fn(Option<char>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let states: Vec<(u32, Option<char>)> = pids.iter().map(|&p| (p, state(p))).collect();
        if states.iter().all(|(_, s)| ok(*s)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes never became {what}: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn applied(answer: FromLocalControl) -> (String, String) {
    let FromLocalControl::OwnerApplied {
        applied,
        state,
        activity,
    } = answer;
    assert!(applied, "a simulated owner's events are applied");
    (state, activity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_visit_suspends_every_process_and_leaving_resumes_them() {
    let mut s = Setup::start("owner-visit", 2).await;
    let suspend = s.carmi.suspend_notify(&s.hosts);
    s.inbox.done(suspend).await;
    let resume = s.carmi.resume_notify(&s.hosts);
    s.inbox.done(resume).await;
    let pids = s.all_pids();
    all_become(&pids, "running", |st| matches!(st, Some('S' | 'R'))).await;

    let mut owner = s.owner().await;
    let after = applied(owner.send(OwnerEvent::Arrive).await.unwrap());
    assert_eq!(after, ("Claimed".into(), "Suspended".into()));
    // Shells and their children alike: the whole process group stops.
    all_become(&pids, "stopped (T)", |st| st == Some('T')).await;
    let hosts = s.hosts.clone();
    notified(&mut s.inbox, suspend, &hosts, "suspend notifications").await;

    // Leaving before the preempt deadline: resumed after CONTINUE holds.
    applied(owner.send(OwnerEvent::Leave).await.unwrap());
    notified(&mut s.inbox, resume, &hosts, "resume notifications").await;
    all_become(&pids, "running again", |st| matches!(st, Some('S' | 'R'))).await;
    for f in &s.families {
        assert!(s.sandbox(f.process).is_dir(), "sandbox kept while running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_who_stays_vacates_the_machine() {
    let mut s = Setup::start("owner-stays", 1).await;
    let suspend = s.carmi.suspend_notify(&s.hosts);
    s.inbox.done(suspend).await;
    let delete = s.carmi.delete_notify(&s.hosts);
    s.inbox.done(delete).await;
    let pids = s.all_pids();
    let process = s.families[0].process;
    assert!(s.sandbox(process).is_dir());

    let mut owner = s.owner().await;
    applied(owner.send(OwnerEvent::Arrive).await.unwrap());
    all_become(&pids, "stopped (T)", |st| st == Some('T')).await;
    let hosts = s.hosts.clone();
    notified(&mut s.inbox, suspend, &hosts, "suspend notification").await;
    // The owner stays: after PREEMPT the processes are vacated.
    notified(&mut s.inbox, delete, &hosts, "delete notification").await;
    all_become(&pids, "gone", |st| st.is_none() || st == Some('Z')).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.sandbox(process).exists() {
        assert!(
            Instant::now() < deadline,
            "sandbox of {process} not removed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The owner is still there: nothing may start on the machine. The
    // daemon may still be counting the vacated processes out (Preempting)
    // when the sandbox is gone; once it has, the machine is the owner's.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (state, _) = applied(owner.send(OwnerEvent::Load(0.0)).await.unwrap());
        if state == "Preempting" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(state, "Owner");
        break;
    }
}
