//! The waiting queue in clusters: a pass tries one job per cluster, keeps
//! pass order (users by priority, then submit order) across clusters, and
//! reacts to the head leaving; a submit or a removal tries at most the job
//! itself.

use super::tests::Sim;
use super::*;

fn limits(expr: &str, min: u32) -> ClassLimits {
    ClassLimits {
        name: "c".into(),
        expression: expr.into(),
        min,
        max: min,
        rank: None,
    }
}

/// `n` one-slot X86_64 machines.
fn pool(s: &mut Sim, n: u32) {
    for i in 0..n {
        s.machine(&format!("m{i}"), "Arch = \"X86_64\"; Mips = 100", 1);
    }
}

/// `n` one-slot AARCH64 machines.
fn arm(s: &mut Sim, n: u32) {
    for i in 0..n {
        s.machine(&format!("arm{i}"), "Arch = \"AARCH64\"; Mips = 100", 1);
    }
}

/// Submits `job` of `owner` with one class `c` of `expr` and minimum (and
/// maximum) `min`.
fn submit(s: &mut Sim, job: JobId, owner: &str, expr: &str, min: u32) {
    s.step(|a| a.submit_job(job, owner, &[limits(expr, min)]))
        .unwrap();
}

/// The jobs started, forgetting the hosts released (preempted) for them.
fn take_started(s: &mut Sim) -> Vec<JobId> {
    s.log.retain(|e| !matches!(e, Effect::Released { .. }));
    s.take_started()
}

#[test]
fn a_submit_into_a_long_queue_tries_one_job_per_cluster() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    arm(&mut s, 2);
    // A running job holds every X86_64 machine.
    submit(&mut s, JobId(3000), "dave", "Arch == \"X86_64\"", 4);
    assert_eq!(take_started(&mut s), [JobId(3000)]);
    // A thousand jobs that wait for one of them: each pass would try every
    // one (idle slots stay free for the jobs behind), were they not clustered.
    let busy = [limits("Arch == \"X86_64\"", 1)];
    for i in 1..=1000 {
        s.step(|a| a.submit_job(JobId(i), "alice", &busy)).unwrap();
    }
    assert_eq!(s.a.waiting_clusters(), 1);
    let before = s.a.start_attempts();
    for i in 1001..=1010 {
        s.step(|a| a.submit_job(JobId(i), "alice", &busy)).unwrap();
    }
    let per_submit = (s.a.start_attempts() - before) as f64 / 10.0;
    assert!(per_submit <= 1.0, "{per_submit} start attempts per submit");
    // A job behind them that fits still starts on the free slots.
    let fits = [limits("Arch == \"AARCH64\"", 2)];
    s.step(|a| a.submit_job(JobId(2000), "bob", &fits)).unwrap();
    assert_eq!(take_started(&mut s), [JobId(2000)]);
    assert_eq!(s.a.waiting_clusters(), 1);
    // Removing a job with an identical one ahead of it settles nothing;
    // removing the first of them tries the next one.
    let before = s.a.start_attempts();
    s.step(|a| a.on_job_ended(JobId(500)));
    assert_eq!(s.a.start_attempts(), before);
    s.step(|a| a.on_job_ended(JobId(1)));
    assert_eq!(s.a.start_attempts(), before + 1);
    s.quiet();
}

#[test]
fn clusters_start_in_submit_order() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let two = [limits("true", 2)];
    let (a1, b1, a2) = (JobId(1), JobId(2), JobId(3));
    s.step(|a| a.submit_job(a1, "alice", &two)).unwrap();
    s.step(|a| a.submit_job(b1, "bob", &two)).unwrap();
    s.step(|a| a.submit_job(a2, "alice", &two)).unwrap();
    assert_eq!(take_started(&mut s), [a1]);
    assert_eq!(s.a.waiting_clusters(), 2);
    // Alice's second job is behind Bob's: Bob goes first.
    s.step(|a| a.on_job_ended(a1));
    assert_eq!(take_started(&mut s), [b1]);
    s.step(|a| a.on_job_ended(b1));
    assert_eq!(take_started(&mut s), [a2]);
    assert_eq!(s.a.waiting_clusters(), 0);
    s.quiet();
}

#[test]
fn removing_a_waiting_head_lets_the_job_behind_it_start() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // One slot runs a job; the head needs both and keeps the idle one for
    // itself; the job behind it may not take it.
    submit(&mut s, JobId(1), "carol", "true", 1);
    assert_eq!(take_started(&mut s), [JobId(1)]);
    submit(&mut s, JobId(2), "alice", "true", 2);
    submit(&mut s, JobId(3), "bob", "true", 1);
    assert_eq!(take_started(&mut s), []);
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    s.quiet();
}

#[test]
fn jobs_whose_classes_name_their_job_id_are_clusters_of_their_own() {
    let mut s = Sim::new();
    pool(&mut s, 1);
    // The same text, but only job 2 is a member: job 1 failing says nothing of job 2.
    let only_two = [limits("TARGET.JobId == 2", 1)];
    s.step(|a| a.submit_job(JobId(1), "alice", &only_two))
        .unwrap();
    s.step(|a| a.submit_job(JobId(2), "alice", &only_two))
        .unwrap();
    assert_eq!(take_started(&mut s), [JobId(2)]);
    assert_eq!(s.a.waiting_clusters(), 1);
    s.quiet();
}

#[test]
fn jobs_that_all_differ_are_tried_one_per_submit_and_not_again_on_removal() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    arm(&mut s, 2);
    // A running job holds every X86_64 machine, which all the jobs below wait for.
    submit(&mut s, JobId(3000), "dave", "Arch == \"X86_64\"", 4);
    assert_eq!(take_started(&mut s), [JobId(3000)]);
    for i in 1..=300 {
        let differs = [limits(&format!("Arch == \"X86_64\" && {i} > 0"), 1)];
        let before = s.a.start_attempts();
        s.step(|a| a.submit_job(JobId(i), "alice", &differs))
            .unwrap();
        assert_eq!(s.a.start_attempts() - before, 1, "submit of job {i}");
    }
    assert_eq!(s.a.waiting_clusters(), 300);
    // A job behind them that fits starts on the slots none of them can use.
    submit(&mut s, JobId(1000), "bob", "Arch == \"AARCH64\"", 2);
    assert_eq!(take_started(&mut s), [JobId(1000)]);
    // Removing a job that kept no slot from anyone tries nothing; removing
    // the head (which may take hosts from running jobs) settles the queue.
    let before = s.a.start_attempts();
    s.step(|a| a.on_job_ended(JobId(150)));
    assert_eq!(s.a.start_attempts(), before);
    s.step(|a| a.on_job_ended(JobId(1)));
    assert!(s.a.start_attempts() > before);
    s.quiet();
}

#[test]
fn a_job_tried_alone_keeps_its_slots_from_the_jobs_behind_it() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // One slot runs a job.
    submit(&mut s, JobId(10), "dave", "true", 1);
    assert_eq!(take_started(&mut s), [JobId(10)]);
    // A head that cannot start keeps nothing from a job that fits elsewhere...
    submit(&mut s, JobId(1), "alice", "Arch == \"PPC\"", 1);
    // ...then one that needs both slots keeps the idle one,
    submit(&mut s, JobId(2), "bob", "true", 2);
    // so a small job behind it waits,
    submit(&mut s, JobId(3), "carol", "true", 1);
    assert_eq!(take_started(&mut s), []);
    // and starts once the job that kept the slots is removed.
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    s.quiet();
}

/// Whether `job` could start now as a settling pass tries it: on `free`
/// when it waits behind jobs that could not, else on the idle slots and
/// the hosts running jobs hold above their minimums. Changes nothing.
fn could_start(a: &mut Allocator, job: JobId, free: Option<&[HostId]>) -> bool {
    let places: Vec<String> = a.jobs[&job]
        .limits
        .iter()
        .flat_map(|(c, &(min, _))| std::iter::repeat_n(c.clone(), min as usize))
        .collect();
    let adj = |a: &mut Allocator, cands: &[HostId]| -> Vec<Vec<usize>> {
        places
            .iter()
            .map(|class| {
                (0..cands.len())
                    .filter(|&i| {
                        let m = a.pool.get_slot(cands[i]).machine;
                        member(&mut a.jobs, &a.pool.machines, a.clock.unix, job, class, m)
                    })
                    .collect()
            })
            .collect()
    };
    let mut cands: Vec<HostId> = match free {
        Some(f) => f.to_vec(),
        None => a.pool.idle_hosts(),
    };
    let matched = |lists: &[Vec<usize>], n: usize| {
        let one_each: Vec<usize> = (0..lists.len()).collect();
        super::matching::match_all(lists, &one_each, n).is_some()
    };
    if matched(&adj(a, &cands), cands.len()) {
        return true;
    }
    if free.is_some() {
        return false;
    }
    cands.extend(a.surplus_hosts(job));
    matched(&adj(a, &cands), cands.len())
}

/// The queue is settled: going through every waiting job in pass order,
/// as a pass that skipped nothing would, none could start.
fn assert_settled(a: &mut Allocator) {
    let mut waiting: Vec<JobId> = a.waiting.queue.values().copied().collect();
    waiting.sort_by_key(|&w| a.pass_key(w));
    let mut free: Option<Vec<HostId>> = None;
    for job in waiting {
        if free.as_ref().is_some_and(|f| f.is_empty()) {
            return;
        }
        assert!(
            !could_start(a, job, free.as_deref()),
            "job {job} waits but could start (free: {free:?})"
        );
        // A job no set of online slots could start keeps nothing back.
        if a.impossible(job).is_some() {
            continue;
        }
        let mut f = free.take().unwrap_or_else(|| a.pool.idle_hosts());
        f.retain(|&h| !a.needs_for_minimum(job, h));
        free = Some(f);
    }
}

/// A job that just started took no host that a job still waiting ahead of
/// it could use for a minimum (backfill never delays an earlier job that
/// could ever start).
fn assert_started_in_turn(a: &mut Allocator, started: &[JobId]) {
    for &job in started {
        let Some(j) = a.jobs.get(&job) else {
            continue;
        };
        let hosts: Vec<HostId> = j.hosts.keys().copied().collect();
        // Jobs ahead in pass order that could ever start (one that cannot
        // keeps nothing).
        let key = a.pass_key(job);
        let ahead: Vec<JobId> = a
            .waiting
            .queue
            .values()
            .copied()
            .filter(|&w| a.pass_key(w) < key && a.impossible(w).is_none())
            .collect();
        for w in ahead {
            for &h in &hosts {
                assert!(
                    !a.needs_for_minimum(w, h),
                    "job {job} started on {h}, which {w}, waiting ahead of it, could use"
                );
            }
        }
    }
}

/// The liveness test of issue 15 (item 1): random submits, removals,
/// masters starting, machine ads changing, machines lost and coming back
/// (2,000 sequences of 60 inputs) on a small pool: after every input, no
/// waiting job could have started (no job waits while the machines to
/// meet its minimum are free), and no job started out of turn, though
/// passes skip identical jobs and submits and removals mostly run none.
#[test]
fn the_queue_is_always_settled_as_if_every_job_were_tried() {
    const EXPRS: [&str; 5] = [
        "true",
        "Arch == \"X86_64\"",
        "Arch == \"AARCH64\"",
        "Memory >= 2048",
        "Arch == \"PPC\"",
    ];
    for seed in 1..=2000u64 {
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut s = Sim::new();
        let arch = ["X86_64", "AARCH64"];
        let mut ads = Vec::new();
        for i in 0..4 {
            // One owner refuses Bob's jobs: jobs alike but for their owner differ.
            let refuses = if i == 3 {
                "; Requirements = TARGET.Owner != \"bob\""
            } else {
                ""
            };
            let ad = format!(
                "Arch = \"{}\"; Memory = {}; Mips = {}{refuses}",
                arch[i % 2],
                1024 << (i % 3),
                100 + i
            );
            s.machine(&format!("m{i}"), &ad, 1 + (i as u32 % 2));
            ads.push(ad);
        }
        let mut jobs: Vec<JobId> = Vec::new();
        for step in 0..60u64 {
            // Claims made by different inputs differ in age, as in a real
            // pool: which hosts are above a minimum depends on it.
            s.sleep(1);
            match next(12) {
                0..=4 => {
                    let job = JobId(step + 1);
                    let owner = ["alice", "bob"][next(2) as usize];
                    let classes: Vec<ClassLimits> = (0..1 + next(2))
                        .map(|c| {
                            // A second class may have no minimum: it counts for
                            // growth, not for the start.
                            let min = if c == 0 { 1 + next(3) } else { next(4) } as u32;
                            ClassLimits {
                                name: format!("c{c}"),
                                expression: EXPRS[next(EXPRS.len() as u64) as usize].into(),
                                min,
                                max: min.max(1) + next(3) as u32,
                                rank: None,
                            }
                        })
                        .collect();
                    s.step(|a| a.submit_job(job, owner, &classes)).unwrap();
                    jobs.push(job);
                }
                5 | 6 if !jobs.is_empty() => {
                    let job = jobs.swap_remove(next(jobs.len() as u64) as usize);
                    s.step(|a| a.on_job_ended(job));
                }
                7 if !jobs.is_empty() => {
                    let job = jobs[next(jobs.len() as u64) as usize];
                    s.step(|a| a.on_master_running(job));
                }
                8 => {
                    let m = next(4);
                    let update = ClassAd::parse(&format!("[ Memory = {} ]", 1024 << next(3)))
                        .expect("update parses");
                    s.step(|a| a.on_machine_updated(&format!("m{m}"), &update));
                }
                // A machine lost, or one that was lost coming back.
                10 | 11 => {
                    let m = next(4) as usize;
                    let name = format!("m{m}");
                    if s.a.is_online(&name) {
                        s.step(|a| a.on_machine_lost(&name));
                    } else {
                        s.machine(&name, &ads[m], 1 + (m as u32 % 2));
                    }
                }
                _ => {}
            }
            let started: Vec<JobId> = s
                .log
                .drain(..)
                .filter_map(|e| match e {
                    Effect::JobStarted { job } => Some(job),
                    _ => None,
                })
                .collect();
            assert_started_in_turn(&mut s.a, &started);
            assert_settled(&mut s.a);
        }
    }
}

#[test]
fn the_job_behind_a_removed_head_may_take_hosts_above_minimums_as_the_new_head() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // A running job holds both slots, one above its minimum.
    s.step(|a| {
        a.submit_job(
            JobId(1),
            "alice",
            &[ClassLimits {
                max: 2,
                ..limits("true", 1)
            }],
        )
    })
    .unwrap();
    s.step(|a| a.on_master_running(JobId(1)));
    assert_eq!(take_started(&mut s), [JobId(1)]);
    s.log.clear();
    // A head that needs both slots, which the one surplus host cannot
    // serve (no idle slot to keep: it keeps nothing but its place), and
    // behind it a job that could take the surplus host, were it the head.
    submit(&mut s, JobId(2), "bob", "true", 2);
    submit(&mut s, JobId(3), "carol", "true", 1);
    assert_eq!(take_started(&mut s), []);
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    s.log.clear();
}

#[test]
fn a_busy_machine_s_new_ad_settles_the_queue_only_if_the_head_could_use_it() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let grows = [ClassLimits {
        max: 2,
        ..limits("true", 1)
    }];
    s.step(|a| a.submit_job(JobId(1), "alice", &grows)).unwrap();
    s.sleep(1);
    s.step(|a| a.on_master_running(JobId(1)));
    submit(&mut s, JobId(2), "bob", "Arch == \"PPC\"", 1);
    assert_eq!(take_started(&mut s), [JobId(1)]);
    s.log.clear();
    // Both machines are busy. A heartbeat that changes nothing the head
    // asks for settles nothing...
    let before = s.a.start_attempts();
    let memory = ClassAd::parse("[ Memory = 4096 ]").expect("parses");
    s.step(|a| a.on_machine_updated("m0", &memory));
    assert_eq!(s.a.start_attempts(), before);
    // ...one that makes the machine what the head wants does.
    let ppc = ClassAd::parse("[ Arch = \"PPC\" ]").expect("parses");
    s.step(|a| a.on_machine_updated("m1", &ppc));
    assert!(s.a.start_attempts() > before);
    s.log.clear();
}

/// Issue 15, item 7: waiting jobs start by user priority, not only in
/// submit order. Alice's two jobs hold the pool for a minute and ten more
/// of hers wait; bob's one job, submitted after all of them, starts at the
/// first free machine.
#[test]
fn a_user_s_one_job_starts_before_another_user_s_ten_older_waiting_jobs() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let one = [limits("true", 1)];
    for i in 1..=12 {
        s.step(|a| a.submit_job(JobId(i), "alice", &one)).unwrap();
    }
    assert_eq!(take_started(&mut s), [JobId(1), JobId(2)]);
    // A minute of alice holding the whole pool: her usage is above bob's none.
    for _ in 0..60 {
        s.sleep(1000);
        s.step(|_| {});
    }
    s.step(|a| a.submit_job(JobId(13), "bob", &one)).unwrap();
    assert!(take_started(&mut s).is_empty());
    // carmi q's analysis counts the jobs ahead in the same order.
    assert_eq!(s.a.queued_ahead(JobId(13)), Some(0));
    assert_eq!(s.a.queued_ahead(JobId(3)), Some(1));
    assert!(s.a.user_usage("alice").host_seconds > 100.0);
    s.step(|a| a.on_job_ended(JobId(1)));
    assert_eq!(take_started(&mut s), [JobId(13)]);
    // Then alice's jobs, in her submit order.
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    assert_settled(&mut s.a);
}
