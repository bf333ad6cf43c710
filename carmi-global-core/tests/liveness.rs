//! Nothing stuck (issue 15, item 1): random sequences of submits, removals,
//! holds, releases, masters starting, machines arriving, leaving, coming
//! back with another slot count, owners taking slots and giving them back,
//! running jobs' requests (`AddHosts`, `DelHosts`, a class defined and
//! removed at run time), time passing (usage changes users' priorities) and
//! priority factors set, driven through the allocator's public inputs in
//! virtual time.
//! After each input, once its effects are taken (a quiet point), an oracle
//! that knows the pool only from the test's own model (which machine is of
//! which kind, what each job asked for) checks that
//! - no waiting job could start on the idle slots that no job ahead of it
//!   in pass order could use for a minimum (the queue order of
//!   `alloc/queue.rs`: users by priority, each user's jobs in submit order;
//!   a job that cannot start keeps back what it could use, unless no set of
//!   machines in the pool could meet its minimums),
//! - no running job lacks a minimum, or (once its master runs) is below a
//!   maximum, while an idle slot of that class is not kept for the first
//!   waiting job that could ever start,
//! - a job flagged as impossible is one whose minimums no set of online
//!   slots meets, and every such waiting job is flagged.
//!
//! The oracle decides feasibility by Hall's condition over the classes' kinds,
//! not by the allocator's augmenting paths.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use carmi_global_core::alloc::{Allocator, ClassLimits, Phase, ReqRef, SlotState};
use carmi_proto::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::SlotActivity;
use classad::ClassAd;
use proptest::prelude::*;

const KINDS: [&str; 3] = ["a", "b", "c"];
/// Machine names `m0`..: the kind is fixed by the name.
const MACHINES: usize = 7;

/// Class expressions and the kinds each accepts.
const EXPRS: [(&str, &[usize]); 5] = [
    ("Kind == \"a\"", &[0]),
    ("Kind == \"b\"", &[1]),
    ("Kind == \"a\" || Kind == \"b\"", &[0, 1]),
    ("Kind == \"c\"", &[2]),
    ("true", &[0, 1, 2]),
];

fn kind_of(machine: &str) -> usize {
    machine[1..]
        .parse::<usize>()
        .expect("machine names are m<n>")
        % KINDS.len()
}

#[derive(Clone, Debug)]
enum Op {
    Submit {
        owner: u8,
        /// (expression index, min, max above min) per class.
        classes: Vec<(usize, u32, u32)>,
    },
    Remove(usize),
    Hold(usize),
    Release(usize),
    MasterRuns(usize),
    Register {
        machine: usize,
        slots: u32,
        mips: u32,
    },
    Lose(usize),
    Slot {
        machine: usize,
        slot: u32,
        activity: u8,
    },
    /// `AddHosts` of a running job: of its first class, or of a class
    /// defined at run time (`r`, kind b or c).
    AddHosts {
        job: usize,
        runtime: bool,
        count: u32,
    },
    /// `DelHosts` of one of a job's hosts.
    DelHosts {
        job: usize,
        host: usize,
    },
    /// `RemoveClass` of the run-time class (refused while it holds hosts).
    RemoveClass(usize),
    /// A heartbeat changes an online machine's kind.
    Retype {
        machine: usize,
        kind: usize,
    },
    /// Time passes (seconds): users' usage grows with the hosts they hold,
    /// and with it the order in which their waiting jobs are tried.
    Wait(u64),
    /// An admin sets an owner's priority factor.
    Factor {
        owner: u8,
        factor: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let class = (0..EXPRS.len(), 0u32..=4, 0u32..=2);
    prop_oneof![
        4 => (0u8..2, prop::collection::vec(class, 1..=2)).prop_map(|(owner, mut classes)| {
            // The first class has a minimum: a job with none starts at once.
            classes[0].1 = classes[0].1.max(1);
            Op::Submit { owner, classes }
        }),
        2 => (0usize..64).prop_map(Op::Remove),
        1 => (0usize..64).prop_map(Op::Hold),
        1 => (0usize..64).prop_map(Op::Release),
        2 => (0usize..64).prop_map(Op::MasterRuns),
        3 => (0..MACHINES, 0u32..=3, 1u32..4).prop_map(|(machine, slots, mips)| Op::Register {
            machine,
            slots,
            mips
        }),
        2 => (0..MACHINES).prop_map(Op::Lose),
        2 => (0..MACHINES, 0u32..3, 0u8..3).prop_map(|(machine, slot, activity)| Op::Slot {
            machine,
            slot,
            activity
        }),
        1 => (0usize..64, any::<bool>(), 1u32..4).prop_map(|(job, runtime, count)| Op::AddHosts {
            job,
            runtime,
            count
        }),
        1 => (0usize..64, 0usize..8).prop_map(|(job, host)| Op::DelHosts { job, host }),
        1 => (0usize..64).prop_map(Op::RemoveClass),
        1 => (0..MACHINES, 0..KINDS.len()).prop_map(|(machine, kind)| Op::Retype { machine, kind }),
        1 => (1u64..=1800).prop_map(Op::Wait),
        1 => (0u8..2, 1u8..=4).prop_map(|(owner, factor)| Op::Factor { owner, factor }),
    ]
}

/// What a job asked for: per class, the kinds it accepts, its minimum and maximum.
struct Asked {
    owner: &'static str,
    classes: BTreeMap<String, (&'static [usize], u32, u32)>,
    submit: Vec<ClassLimits>,
    master_runs: bool,
}

struct Harness {
    a: Allocator,
    now: Duration,
    jobs: BTreeMap<JobId, Asked>,
    next_job: u64,
    next_request: u64,
    machines: BTreeSet<String>,
    /// Each machine's kind now (by its name until a heartbeat changes it).
    kinds: BTreeMap<String, usize>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            a: Allocator::new(),
            now: Duration::ZERO,
            jobs: BTreeMap::new(),
            next_job: 1,
            next_request: 1,
            kinds: BTreeMap::new(),
            machines: BTreeSet::new(),
        }
    }

    /// The live job the `i`th pick names, if any.
    fn pick(&self, i: usize) -> Option<JobId> {
        let live: Vec<JobId> = self.jobs.keys().copied().collect();
        (!live.is_empty()).then(|| live[i % live.len()])
    }

    fn apply(&mut self, op: &Op) {
        self.now += Duration::from_millis(10);
        self.a.advance_to(self.now);
        match op {
            Op::Submit { owner, classes } => {
                let job = JobId(self.next_job);
                self.next_job += 1;
                let owner = ["alice", "bob"][*owner as usize];
                let mut asked = Asked {
                    owner,
                    classes: BTreeMap::new(),
                    submit: Vec::new(),
                    master_runs: false,
                };
                for (i, &(e, min, extra)) in classes.iter().enumerate() {
                    let name = format!("c{i}");
                    let max = min.max(1) + extra;
                    asked.classes.insert(name.clone(), (EXPRS[e].1, min, max));
                    asked.submit.push(ClassLimits {
                        name,
                        expression: EXPRS[e].0.into(),
                        min,
                        max,
                        rank: None,
                    });
                }
                self.a
                    .submit_job(job, owner, &asked.submit)
                    .expect("the test's jobs are valid");
                self.jobs.insert(job, asked);
            }
            Op::Remove(i) => {
                if let Some(job) = self.pick(*i) {
                    self.a.on_job_ended(job);
                    self.jobs.remove(&job);
                }
            }
            Op::Hold(i) => {
                if let Some(job) = self.pick(*i)
                    && self.a.hold_job(job).is_ok()
                {
                    // A released job starts a new master.
                    self.jobs.get_mut(&job).expect("live").master_runs = false;
                }
            }
            Op::Release(i) => {
                if let Some(job) = self.pick(*i) {
                    let submit = self.jobs[&job].submit.clone();
                    let _ = self.a.release_job(job, &submit);
                }
            }
            Op::MasterRuns(i) => {
                if let Some(job) = self.pick(*i)
                    && matches!(self.a.job_phase(job), Some(Phase::Running { .. }))
                {
                    self.a.on_master_running(job);
                    self.jobs.get_mut(&job).expect("live").master_runs = true;
                }
            }
            Op::Register {
                machine,
                slots,
                mips,
            } => {
                let name = format!("m{machine}");
                let ad = ClassAd::parse(&format!(
                    "[ Name = \"{name}\"; Kind = \"{}\"; Mips = {mips} ]",
                    KINDS[self.kind(&name)]
                ))
                .expect("test ad");
                self.a.on_machine_registered(&name, ad, *slots);
                self.machines.insert(name);
            }
            Op::Lose(m) => {
                self.a.on_machine_lost(&format!("m{m}"));
            }
            Op::Slot {
                machine,
                slot,
                activity,
            } => {
                let activity = [
                    SlotActivity::Available,
                    SlotActivity::Suspended,
                    SlotActivity::Vacated,
                ][*activity as usize];
                self.a
                    .on_slot_state(&format!("m{machine}"), *slot, activity);
            }
            Op::AddHosts {
                job,
                runtime,
                count,
            } => self.add_hosts(*job, *runtime, *count),
            Op::DelHosts { job, host } => {
                if let Some(job) = self.running(*job) {
                    let hosts = self.a.job_hosts(job);
                    if !hosts.is_empty() {
                        let host = hosts[*host % hosts.len()];
                        let class = self.a.host_class(job, host).expect("a host of the job");
                        // The allocator lowers the class's maximum by the host given back.
                        if let Some(c) = self
                            .jobs
                            .get_mut(&job)
                            .expect("live")
                            .classes
                            .get_mut(&class)
                        {
                            c.2 = c.2.saturating_sub(1).max(c.1);
                        }
                        let req = self.request(job);
                        self.a.del_hosts(job, req, &[host]);
                    }
                }
            }
            Op::Retype { machine, kind } => {
                let name = format!("m{machine}");
                let update = ClassAd::parse(&format!("[ Kind = \"{}\" ]", KINDS[*kind]))
                    .expect("test update");
                if self.a.on_machine_updated(&name, &update) {
                    self.kinds.insert(name, *kind);
                }
            }
            Op::Wait(secs) => {
                self.now += Duration::from_secs(*secs);
                self.a.advance_to(self.now);
            }
            Op::Factor { owner, factor } => {
                self.a
                    .set_user_factor(["alice", "bob"][*owner as usize], f64::from(*factor));
            }
            Op::RemoveClass(job) => {
                if let Some(job) = self.running(*job) {
                    let req = self.request(job);
                    self.a.remove_class(job, req, "r");
                }
            }
        }
        let _ = self.a.take_effects();
        let _ = self.a.take_host_changes();
        self.a.sanity_check();
    }

    fn kind(&self, machine: &str) -> usize {
        self.kinds
            .get(machine)
            .copied()
            .unwrap_or_else(|| kind_of(machine))
    }

    /// The running job the `i`th pick names, if it runs.
    fn running(&self, i: usize) -> Option<JobId> {
        self.pick(i)
            .filter(|&j| matches!(self.a.job_phase(j), Some(Phase::Running { .. })))
    }

    /// A fresh request of the job's master (process id = job id here).
    fn request(&mut self, job: JobId) -> ReqRef {
        self.next_request += 1;
        ReqRef {
            process: ProcessId(job.0),
            id: RequestId(self.next_request),
        }
    }

    fn add_hosts(&mut self, job: usize, runtime: bool, count: u32) {
        let Some(job) = self.running(job) else {
            return;
        };
        let class = if runtime {
            let req = self.request(job);
            self.a
                .define_class(job, req, "r", "Kind == \"b\" || Kind == \"c\"");
            "r"
        } else {
            "c0"
        };
        let req = self.request(job);
        self.a.add_hosts(job, req, class, count, 1);
    }

    /// Online hosts (in any state but offline) with their machine's kind.
    fn online(&self) -> Vec<(HostId, usize)> {
        let mut out = Vec::new();
        for name in &self.machines {
            for &h in self.a.machine_hosts(name) {
                if self.a.host_state(h) != Some(&SlotState::Offline) {
                    out.push((h, self.kind(name)));
                }
            }
        }
        out
    }

    fn idle(&self) -> Vec<(HostId, usize)> {
        self.online()
            .into_iter()
            .filter(|&(h, _)| self.a.host_state(h) == Some(&SlotState::Idle))
            .collect()
    }

    /// Hall's condition: every set of classes with a minimum finds, among
    /// `hosts`, at least as many of its kinds as their minimums add up to.
    fn fits(&self, job: JobId, hosts: &[(HostId, usize)]) -> bool {
        let needs: Vec<(&[usize], u32)> = self.jobs[&job]
            .classes
            .values()
            .filter(|c| c.1 > 0)
            .map(|c| (c.0, c.1))
            .collect();
        (1u32..1 << needs.len()).all(|set| {
            let chosen = needs
                .iter()
                .enumerate()
                .filter(|(i, _)| set & (1 << i) != 0);
            let need: u32 = chosen.clone().map(|(_, c)| c.1).sum();
            let kinds: BTreeSet<usize> = chosen.flat_map(|(_, c)| c.0.iter().copied()).collect();
            let have = hosts.iter().filter(|(_, k)| kinds.contains(k)).count() as u32;
            need <= have
        })
    }

    /// True when `host` (of kind `kind`) could serve a minimum of `job`.
    fn wanted(&self, job: JobId, kind: usize) -> bool {
        self.jobs[&job]
            .classes
            .values()
            .any(|c| c.1 > 0 && c.0.contains(&kind))
    }

    /// The waiting jobs in the allocator's pass order, checked against
    /// what the test knows: every waiting job once, each user's jobs
    /// together and in submit order (job ids are given in submit order).
    fn waiting_in_pass_order(&self, history: &[Op]) -> Vec<JobId> {
        let order = self.a.pass_order();
        let waiting: BTreeSet<JobId> = self
            .jobs
            .keys()
            .copied()
            .filter(|&j| self.a.job_phase(j) == Some(Phase::Waiting))
            .collect();
        assert_eq!(
            order.iter().copied().collect::<BTreeSet<_>>(),
            waiting,
            "pass order {order:?}\nafter {history:?}"
        );
        assert_eq!(order.len(), waiting.len(), "pass order {order:?}");
        let mut done: BTreeSet<&str> = BTreeSet::new();
        for pair in order.windows(2) {
            let (a, b) = (self.jobs[&pair[0]].owner, self.jobs[&pair[1]].owner);
            if a == b {
                assert!(pair[0] < pair[1], "pass order {order:?}\nafter {history:?}");
            } else {
                done.insert(a);
                assert!(
                    !done.contains(b),
                    "{b}'s jobs are split in pass order {order:?}\nafter {history:?}"
                );
            }
        }
        order
    }

    fn check(&self, history: &[Op]) {
        let online = self.online();
        let idle = self.idle();
        let waiting = self.waiting_in_pass_order(history);
        let mut free: Option<Vec<(HostId, usize)>> = None;
        let mut head = None;
        for &job in &waiting {
            let possible = self.fits(job, &online);
            assert_eq!(
                self.a.impossible(job).is_some(),
                !possible,
                "job {job}: flagged {:?}, but possible = {possible}\nafter {history:?}",
                self.a.impossible(job)
            );
            let cands = free.clone().unwrap_or_else(|| idle.clone());
            assert!(
                !self.fits(job, &cands),
                "job {job} waits while free slots meet its minimums: {cands:?}\nafter {history:?}"
            );
            if !possible {
                continue;
            }
            head.get_or_insert(job);
            free = Some(
                cands
                    .into_iter()
                    .filter(|&(_, k)| !self.wanted(job, k))
                    .collect(),
            );
        }
        // Growth: idle slots go to running jobs with room in a class they fit.
        for (&job, asked) in &self.jobs {
            if !matches!(self.a.job_phase(job), Some(Phase::Running { .. })) {
                continue;
            }
            let held: BTreeMap<String, u32> = self
                .a
                .class_status(job)
                .into_iter()
                .map(|c| (c.name, c.held))
                .collect();
            for (name, &(kinds, min, max)) in &asked.classes {
                let held = held.get(name).copied().unwrap_or(0);
                let room = if held < min {
                    true
                } else {
                    asked.master_runs && held < max
                };
                if !room {
                    continue;
                }
                let kept = |k: usize| held >= min && head.is_some_and(|h| self.wanted(h, k));
                let unused: Vec<HostId> = idle
                    .iter()
                    .filter(|&&(_, k)| kinds.contains(&k) && !kept(k))
                    .map(|&(h, _)| h)
                    .collect();
                assert!(
                    unused.is_empty(),
                    "job {job} class {name} holds {held} of {min}..{max} while {unused:?} are idle\nafter {history:?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, max_shrink_iters: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn no_job_waits_while_the_machines_for_its_minimums_are_free(ops in prop::collection::vec(op(), 1..40)) {
        let mut h = Harness::new();
        for (i, op) in ops.iter().enumerate() {
            h.apply(op);
            h.check(&ops[..=i]);
        }
    }
}

/// Replays `ops`, checking after each as the random test does.
fn replay(ops: &[Op]) {
    let mut h = Harness::new();
    for (i, op) in ops.iter().enumerate() {
        h.apply(op);
        h.check(&ops[..=i]);
    }
}

fn submit(expr: usize, min: u32) -> Op {
    Op::Submit {
        owner: 0,
        classes: vec![(expr, min, 0)],
    }
}

/// Found by the random test: an owner took back a host of a running job,
/// leaving it below its minimum beside an idle slot it could use, and
/// nothing settled the queue (no slot became idle).
#[test]
fn a_job_below_its_minimum_after_a_vacate_takes_an_idle_slot() {
    replay(&[
        submit(0, 2),
        submit(0, 2),
        Op::Register {
            machine: 6,
            slots: 3,
            mips: 1,
        },
        submit(0, 1),
        Op::Slot {
            machine: 6,
            slot: 0,
            activity: 2,
        },
    ]);
}

/// Found by the random test: a machine registering again took its idle
/// slots offline for a moment, and a job's chances were judged in that moment.
#[test]
fn a_machine_registering_again_is_judged_with_its_slots_online() {
    let m5 = Op::Register {
        machine: 5,
        slots: 3,
        mips: 1,
    };
    replay(&[
        Op::Register {
            machine: 3,
            slots: 1,
            mips: 1,
        },
        submit(3, 1),
        m5.clone(),
        submit(3, 3),
        m5,
    ]);
}

/// Found by the random test: evening shares out moved a host from a job at
/// its maximum to a poorer one, and the room it left was not filled from an
/// idle slot only the richer job could use.
#[test]
fn room_left_by_a_share_moved_away_is_filled_from_idle_slots() {
    let reg = |machine| Op::Register {
        machine,
        slots: 2,
        mips: 1,
    };
    replay(&[
        submit(0, 1),
        reg(0),
        Op::Submit {
            owner: 0,
            classes: vec![(2, 1, 2)],
        },
        Op::Remove(20),
        reg(1),
        Op::MasterRuns(0),
        reg(3),
        submit(0, 1),
        submit(1, 3),
        Op::Submit {
            owner: 0,
            classes: vec![(0, 1, 1)],
        },
        Op::MasterRuns(27),
    ]);
}

/// Issue 15: a machine lost (or registering again with fewer slots) left
/// the head of the queue needing more than the pool has; it kept its slots
/// from the job behind it, which waited until some other input came.
#[test]
fn a_head_the_pool_shrank_under_lets_the_job_behind_it_start() {
    for shrink in [
        Op::Lose(3),
        Op::Register {
            machine: 3,
            slots: 0,
            mips: 1,
        },
    ] {
        replay(&[
            Op::Register {
                machine: 0,
                slots: 2,
                mips: 1,
            },
            Op::Register {
                machine: 3,
                slots: 1,
                mips: 1,
            },
            submit(0, 1),
            submit(0, 3),
            submit(0, 1),
            shrink,
        ]);
    }
}

/// Issue 15 item 2: a job asking for more machines of a class than the pool
/// has (3 of kind a; the pool has 2 of them among 4 slots) is flagged with
/// the class and the numbers, and neither the job behind it nor the growth
/// of a running job waits for it.
#[test]
fn an_impossible_class_is_flagged_and_blocks_nobody() {
    let mut h = Harness::new();
    let ops = [
        Op::Register {
            machine: 0,
            slots: 2,
            mips: 1,
        },
        Op::Register {
            machine: 1,
            slots: 2,
            mips: 1,
        },
        // j1: kind a or b, one to four hosts, its master runs.
        Op::Submit {
            owner: 0,
            classes: vec![(2, 1, 3)],
        },
        Op::MasterRuns(0),
        Op::Remove(0),
        // j2: three of kind a; j3: one of kind a.
        submit(0, 3),
        submit(0, 1),
        Op::Submit {
            owner: 1,
            classes: vec![(2, 1, 3)],
        },
        // The third live job: j4.
        Op::MasterRuns(2),
    ];
    for (i, op) in ops.iter().enumerate() {
        h.apply(op);
        h.check(&ops[..=i]);
    }
    assert_eq!(
        h.a.impossible(JobId(2)).as_deref(),
        Some("cannot start: class c0 needs 3, the pool has 2 matching")
    );
    assert_eq!(h.a.job_phase(JobId(2)), Some(Phase::Waiting));
    assert!(matches!(
        h.a.job_phase(JobId(3)),
        Some(Phase::Running { .. })
    ));
    // j4 grew over the slots j2 would want if it could ever start.
    let held: u32 = h.a.class_status(JobId(4)).iter().map(|c| c.held).sum();
    assert_eq!(held, 3);
}

/// Two classes that each fit but overlap on too few machines together.
#[test]
fn overlapping_classes_that_cannot_be_met_together_are_flagged() {
    let mut h = Harness::new();
    // Two slots of kind a, one of kind b.
    h.apply(&Op::Register {
        machine: 0,
        slots: 2,
        mips: 1,
    });
    h.apply(&Op::Register {
        machine: 1,
        slots: 1,
        mips: 1,
    });
    // Two of kind a and one more of kind a: each class fits alone.
    h.apply(&Op::Submit {
        owner: 0,
        classes: vec![(0, 2, 0), (0, 1, 0)],
    });
    assert_eq!(
        h.a.impossible(JobId(1)).as_deref(),
        Some(
            "cannot start: its classes need 3 machines at once, the pool has 2 matching one of them"
        )
    );
    // A third machine of kind a.
    h.apply(&Op::Register {
        machine: 3,
        slots: 1,
        mips: 1,
    });
    assert_eq!(h.a.impossible(JobId(1)), None);
    assert!(matches!(
        h.a.job_phase(JobId(1)),
        Some(Phase::Running { .. })
    ));
}

/// Found by the random test: a job gave back (`DelHosts`) a host of a class
/// at its minimum, a pending `AddHosts` of another class took that host at
/// once, and the class stayed below its minimum beside an idle slot.
#[test]
fn a_minimum_given_back_is_made_up_from_an_idle_slot() {
    replay(&[
        Op::Register {
            machine: 2,
            slots: 2,
            mips: 3,
        },
        submit(0, 1),
        Op::Register {
            machine: 0,
            slots: 1,
            mips: 1,
        },
        submit(0, 1),
        Op::Remove(0),
        Op::Submit {
            owner: 0,
            classes: vec![(0, 1, 0), (0, 0, 0)],
        },
        Op::Remove(0),
        Op::Submit {
            owner: 0,
            classes: vec![(3, 1, 0), (4, 1, 0)],
        },
        Op::Remove(20),
        Op::AddHosts {
            job: 0,
            runtime: false,
            count: 1,
        },
        Op::DelHosts { job: 0, host: 1 },
    ]);
}

/// Found by the random test: a heartbeat changed a machine's kind so that a
/// job that kept slots could never start; what it kept stayed kept from the
/// job submitted next.
#[test]
fn a_machine_changing_kind_under_a_job_that_kept_slots_frees_them() {
    let reg = |machine, slots| Op::Register {
        machine,
        slots,
        mips: 1,
    };
    let two = |a, b| Op::Submit {
        owner: 0,
        classes: vec![(a, 1, 0), (b, 1, 0)],
    };
    replay(&[
        reg(5, 3),
        reg(0, 2),
        submit(0, 1),
        reg(3, 1),
        submit(3, 3),
        Op::Hold(20),
        two(2, 3),
        Op::Retype {
            machine: 5,
            kind: 0,
        },
        submit(2, 1),
    ]);
}

/// Found by the random test once jobs started by user priority: alice's
/// oldest job (running) ranks her before bob, so her waiting j4 (three of
/// kind b) keeps the two idle b slots from bob's older j2 (two of kind a,
/// two of a or b), which waits beside them. In submit order j2 would have
/// started; in pass order it rightly waits, and nothing is stuck.
#[test]
fn a_user_ranked_first_keeps_slots_from_another_user_s_older_job() {
    let reg = |machine, slots| Op::Register {
        machine,
        slots,
        mips: 1,
    };
    let ops = [
        reg(4, 1),
        submit(1, 1),
        Op::Submit {
            owner: 1,
            classes: vec![(0, 2, 0), (2, 2, 0)],
        },
        submit(1, 1),
        reg(1, 3),
        submit(1, 3),
        reg(0, 2),
    ];
    let mut h = Harness::new();
    for (i, op) in ops.iter().enumerate() {
        h.apply(op);
        h.check(&ops[..=i]);
    }
    assert_eq!(h.a.pass_order(), [JobId(4), JobId(2)]);
    assert_eq!(h.idle().len(), 4);
}

/// Found by the random test (a growth bug older than user priority): a job
/// that could never start (j3, one of kind b) stood ahead of the head (j4,
/// two of kind a), for which the idle a slot was kept. A new machine of
/// kind b, whose one slot a pending `AddHosts` took at once (no slot became
/// idle), made j3 possible and the head; the a slot kept for j4 was then
/// kept from j2's growth for nobody, and no pass ran.
#[test]
fn a_job_ahead_becoming_possible_lets_growth_take_what_the_old_head_kept() {
    let reg = |machine, slots| Op::Register {
        machine,
        slots,
        mips: 1,
    };
    replay(&[
        reg(1, 2),
        reg(2, 2),
        submit(1, 1),
        Op::Submit {
            owner: 0,
            classes: vec![(1, 1, 0), (4, 2, 2)],
        },
        submit(1, 1),
        Op::MasterRuns(1),
        submit(0, 2),
        Op::AddHosts {
            job: 0,
            runtime: false,
            count: 1,
        },
        Op::Retype {
            machine: 1,
            kind: 0,
        },
        reg(1, 3),
        reg(4, 1),
    ]);
}
