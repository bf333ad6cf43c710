//! The allocator alone on a large simulated pool: 10,000 machines with varied
//! ads, 100 jobs with class requests, then owner churn, returns and new
//! requests in virtual time. Every input and the collection of its effects is
//! one *decision*; each is timed, and the distribution is printed (decisions
//! per second, p50, p99, max, and p99 per kind of input). Then criterion
//! times the two hottest inputs on the full pool.
//!
//! `cargo bench -p carmi-global --bench alloc` (add `-- --quick` to shorten criterion).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use carmi_api::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{SlotActivity, SpawnTarget};
use carmi_global::alloc::{Allocator, ReqRef};
use classad::ClassAd;
use criterion::Criterion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MACHINES: usize = 10_000;
const JOBS: u64 = 100;
const CHURN: usize = 200_000;

fn machine_ad(i: usize, rng: &mut StdRng) -> ClassAd {
    const ARCH: [&str; 4] = ["X86_64", "X86_64", "AARCH64", "PPC64LE"];
    const OS: [&str; 4] = ["LINUX", "LINUX", "WINDOWS", "MACOS"];
    let mut text = format!(
        "[ Name = \"host{i}.pool\"; Arch = \"{}\"; OpSys = \"{}\"; Memory = {}; Cpus = {}; \
         Mips = {}; KFlops = {}.{}; LoadAvg = 0.{:02}; Disk = {}; KeyboardIdle = {}",
        ARCH[rng.random_range(0..4)],
        OS[rng.random_range(0..4)],
        512 << rng.random_range(0..7),
        1 << rng.random_range(0..5),
        rng.random_range(500..4500),
        rng.random_range(100_000..2_000_000),
        rng.random_range(0..1000),
        rng.random_range(0..100),
        rng.random_range(1_000_000..9_000_000),
        rng.random_range(0..7200),
    );
    // A fifth of the owners refuse some users.
    if rng.random_range(0..5) == 0 {
        text.push_str(&format!(
            "; Requirements = TARGET.Owner != \"user{}\"",
            rng.random_range(0..20)
        ));
    }
    text.push_str(" ]");
    ClassAd::parse(&text).expect("benchmark ads parse")
}

fn class_expr(rng: &mut StdRng) -> String {
    match rng.random_range(0..5) {
        0 => format!(
            "Arch == \"X86_64\" && Memory >= {}",
            512 << rng.random_range(0..5)
        ),
        1 => format!(
            "OpSys == \"LINUX\" && Mips > {}",
            rng.random_range(500..3000)
        ),
        2 => "Memory >= 4096 && LoadAvg < 0.5".to_string(),
        3 => format!(
            "KFlops > {} && (Arch == \"X86_64\" || Arch == \"AARCH64\")",
            rng.random_range(100_000..1_500_000)
        ),
        _ => format!(
            "Cpus >= {} && KeyboardIdle > {}",
            1 << rng.random_range(0..3),
            rng.random_range(0..3600)
        ),
    }
}

/// Per-kind latency samples, in nanoseconds.
#[derive(Default)]
struct Samples(BTreeMap<&'static str, Vec<u64>>);

impl Samples {
    fn time<T>(
        &mut self,
        kind: &'static str,
        a: &mut Allocator,
        f: impl FnOnce(&mut Allocator) -> T,
    ) -> T {
        let t = Instant::now();
        let out = f(a);
        black_box(a.take_effects());
        self.0
            .entry(kind)
            .or_default()
            .push(t.elapsed().as_nanos() as u64);
        out
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn report(title: &str, samples: &Samples) {
    let mut all: Vec<u64> = samples.0.values().flatten().copied().collect();
    all.sort_unstable();
    let total: u64 = all.iter().sum();
    println!("{title}");
    println!(
        "  {} decisions in {:.1} ms: {:.0} decisions/s; latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
        all.len(),
        total as f64 / 1e6,
        all.len() as f64 / (total as f64 / 1e9),
        pct(&all, 0.50),
        pct(&all, 0.99),
        pct(&all, 0.999),
        *all.last().unwrap_or(&0) as f64 / 1000.0,
    );
    for (kind, v) in &samples.0 {
        let mut v = v.clone();
        v.sort_unstable();
        println!(
            "    {kind:<16} n={:<7} p50 {:>8.1} us  p99 {:>8.1} us  max {:>8.1} us",
            v.len(),
            pct(&v, 0.5),
            pct(&v, 0.99),
            *v.last().unwrap() as f64 / 1000.0
        );
    }
}

/// The request `id` of job `job`'s process (one process per job here).
fn req(job: u64, id: u64) -> ReqRef {
    ReqRef {
        process: ProcessId(job),
        id: RequestId(id),
    }
}

/// Registers the pool's machines and creates the jobs, each with two
/// classes and one `AddHosts`; returns the machine names and the last
/// request id used.
fn build(a: &mut Allocator, rng: &mut StdRng, setup: &mut Samples) -> (Vec<String>, u64) {
    let mut names = Vec::with_capacity(MACHINES);
    for i in 0..MACHINES {
        let ad = machine_ad(i, rng);
        let name = format!("host{i}.pool");
        setup.time("register", a, |a| a.on_machine_registered(&name, ad, 1));
        names.push(name);
    }
    let mut next_id = 1u64;
    for j in 1..=JOBS {
        let job = JobId(j);
        a.on_job_created(job, &format!("user{}", j % 20));
        for c in 0..2 {
            let expr = class_expr(rng);
            next_id += 1;
            setup.time("define_class", a, |a| {
                a.define_class(job, req(j, next_id), &format!("c{c}"), &expr)
            });
        }
        let (count, inc) = (rng.random_range(20..200), rng.random_range(1..10));
        next_id += 1;
        setup.time("add_hosts", a, |a| {
            a.add_hosts(job, req(j, next_id), "c0", count, inc)
        });
    }
    (names, next_id)
}

/// The churn after the setup: one random input per step, timed.
struct Churn {
    names: Vec<String>,
    next_id: u64,
    next_process: u64,
    samples: Samples,
}

impl Churn {
    /// One input to machine `m` or job `j`, of a kind drawn from `rng`.
    fn step(&mut self, a: &mut Allocator, rng: &mut StdRng, m: usize, j: u64) {
        let job = JobId(j);
        let name = &self.names[m];
        let id = self.next_id;
        let churn = &mut self.samples;
        match rng.random_range(0..100) {
            0..=39 => {
                let activity = [
                    SlotActivity::Suspended,
                    SlotActivity::Available,
                    SlotActivity::Vacated,
                    SlotActivity::Available,
                ][rng.random_range(0..4)];
                churn.time("slot_state", a, |a| a.on_slot_state(name, 0, activity));
            }
            40..=54 => {
                let hosts = a.job_hosts(job);
                if !hosts.is_empty() {
                    let k = rng.random_range(0..hosts.len());
                    let n = rng.random_range(1..=(hosts.len() - k).min(5));
                    let del: Vec<HostId> = hosts[k..k + n].to_vec();
                    churn.time("del_hosts", a, |a| a.del_hosts(job, req(j, id), &del));
                }
            }
            55..=69 => {
                let class = if rng.random_bool(0.5) { "c0" } else { "c1" };
                let (count, inc) = (rng.random_range(1..20), rng.random_range(1..5));
                churn.time("add_hosts", a, |a| {
                    a.add_hosts(job, req(j, id), class, count, inc)
                });
            }
            70..=79 => {
                let p = ProcessId(self.next_process);
                self.next_process += 1;
                churn.time("spawn_pick", a, |a| {
                    if let Ok(h) = a.pick_spawn_host(job, &SpawnTarget::Class("c0".into())) {
                        a.on_process_spawned(h, p);
                    }
                });
            }
            80..=89 => {
                let update = ClassAd::parse_old(&format!(
                    "LoadAvg = 0.{:02}\nKeyboardIdle = {}",
                    rng.random_range(0..100),
                    rng.random_range(0..7200)
                ))
                .expect("updates parse");
                churn.time("heartbeat_update", a, |a| {
                    a.on_machine_updated(name, &update)
                });
            }
            90..=93 => {
                churn.time("machine_lost", a, |a| a.on_machine_lost(name));
            }
            94..=97 => {
                let ad = machine_ad(m, rng);
                churn.time("register", a, |a| a.on_machine_registered(name, ad, 1));
            }
            _ => {
                let target = RequestId(rng.random_range(id.saturating_sub(500)..id));
                churn.time("cancel", a, |a| a.cancel(job, req(j, id), target));
            }
        }
    }
}

/// Builds the pool and the jobs, runs the churn, prints the numbers, and
/// returns the allocator in its final state for criterion.
fn simulate() -> (Allocator, StdRng) {
    let mut rng = StdRng::seed_from_u64(2024);
    let mut a = Allocator::new();
    let mut now = Duration::ZERO;
    let mut setup = Samples::default();
    let (names, next_id) = build(&mut a, &mut rng, &mut setup);
    let (online, idle) = a.slot_counts();
    println!(
        "pool: {online} slots, {idle} idle, {} pending requests after the first round",
        a.pending_requests()
    );
    report(
        "setup (register 10,000 machines, 200 class definitions, 100 AddHosts)",
        &setup,
    );

    let mut churn = Churn {
        names,
        next_id,
        next_process: 1_000,
        samples: Samples::default(),
    };
    for _ in 0..CHURN {
        now += Duration::from_millis(rng.random_range(0..20));
        a.advance_to(now);
        let m = rng.random_range(0..MACHINES);
        let j = rng.random_range(1..=JOBS);
        churn.next_id += 1;
        churn.step(&mut a, &mut rng, m, j);
    }
    let (online, idle) = a.slot_counts();
    println!(
        "after churn: {online} slots online, {idle} idle, {} pending requests",
        a.pending_requests()
    );
    report(
        "churn (owners, returns, new requests, spawns, heartbeats, losses)",
        &churn.samples,
    );
    (a, rng)
}

fn main() {
    let (mut a, _) = simulate();
    let mut c = Criterion::default().configure_from_args();
    // A slot is vacated and comes back: the return meets the whole pending queue.
    let names: Vec<String> = (0..MACHINES).map(|i| format!("host{i}.pool")).collect();
    let mut i = 0;
    c.bench_function("vacate_and_return_one_slot", |b| {
        b.iter(|| {
            let name = &names[i % MACHINES];
            i += 1;
            a.on_slot_state(name, 0, SlotActivity::Vacated);
            a.on_slot_state(name, 0, SlotActivity::Available);
            black_box(a.take_effects());
        })
    });
    let mut id = 10_000_000u64;
    c.bench_function("add_then_cancel_request", |b| {
        b.iter(|| {
            id += 1;
            let job = JobId(1 + id % JOBS);
            let r = ReqRef {
                process: ProcessId(job.0),
                id: RequestId(id),
            };
            a.add_hosts(job, r, "c1", 3, 1);
            a.cancel(
                job,
                ReqRef {
                    id: RequestId(id + 1),
                    ..r
                },
                RequestId(id),
            );
            id += 1;
            black_box(a.take_effects());
        })
    });
    c.final_summary();
}
