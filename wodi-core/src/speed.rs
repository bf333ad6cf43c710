//! Host speed: where it comes from and how observed step times refine it.
//!
//! The scheduler core places long steps on fast hosts and normalizes its
//! history by host speed, so it needs a relative speed per host. The master
//! chooses one of three sources ([`SpeedSource`]), as in the paper:
//! - [`SpeedSource::Class`]: a speed per resource class, given by the master
//!   (`ClassSpec::speed`);
//! - [`SpeedSource::MachineAd`]: a benchmark score the pool advertises in the
//!   machine ad (`Mips`, `KFlops` or an attribute the master names), relative
//!   to a reference score or to the median of the hosts seen so far;
//! - [`SpeedSource::Benchmark`]: a step the master registers, run on each new
//!   worker before any real step; its wall time, relative to a reference
//!   time or to the median of the workers measured so far, gives the speed.
//!
//! Whatever the source, [`SpeedBook::observe`] compares each step's observed
//! time with what the history predicted for that host and nudges a bounded
//! per-host correction, so a wrong or missing speed is mended after a few steps.
//!
//! What is learned about a host (its score, its correction) is kept by its
//! name (`slotN@machine`) for the whole run: a host given back (an idle tail,
//! fewest hosts) and granted again, under the same or another host id,
//! starts with what the run knew, and is not benchmarked again.
//!
//! Everything here is pure (no I/O, no clock): the server feeds it what it
//! measured and pushes the resulting speeds into the core.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use carmi_proto::ids::HostId;
use serde::{Deserialize, Serialize};

use crate::ids::{StepId, WorkerId};
use crate::sched::{Sched, Time};

/// Where hosts' relative speeds come from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum SpeedSource {
    /// No a-priori speed: every host counts as speed 1 until observed step
    /// times correct it (when refinement is on).
    #[default]
    Unknown,
    /// The speed each class spec (`proto::ClassSpec`) names (1 where it names none).
    Class,
    /// A score in the machine ad, relative to `reference` (the score of a
    /// speed-1 host) or, without one, to the median score of the hosts seen.
    MachineAd {
        /// The ad attribute (`Mips`, `KFlops`, ...).
        attribute: String,
        /// Score of a host of speed 1.
        reference: Option<f64>,
    },
    /// A benchmark step (its data sent by the master after `Init`) run on
    /// every new worker; speed = `reference_s` / its time, or, without a
    /// reference, the median time of the workers measured so far / its time.
    /// Its time is measured as the history measures steps: CPU time, or
    /// wall time with `learn_from_wall` (a benchmark that sleeps or waits
    /// needs wall time). A failed benchmark leaves the speed unknown.
    Benchmark {
        /// Time of the benchmark on a host of speed 1, seconds.
        reference_s: Option<f64>,
    },
}

impl SpeedSource {
    /// The machine-ad source on `Mips` relative to the pool's median.
    pub fn mips() -> SpeedSource {
        SpeedSource::MachineAd {
            attribute: "Mips".into(),
            reference: None,
        }
    }
}

/// The numeric value of `attribute` in a machine ad (new or old ClassAd
/// syntax); `None` if the ad does not parse, lacks it, or it is not a
/// positive finite number.
pub fn score_from_ad(ad: &str, attribute: &str) -> Option<f64> {
    let ad = classad::ClassAd::parse_any(ad).ok()?;
    let v = ad.eval_attr(attribute).as_f64()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// Smallest and largest correction observations may apply to a host's speed:
/// a factor of 4 either way mends any plausible mistake, while one absurd
/// measurement (a step that hung in I/O) cannot make a host look useless.
pub const CORRECTION_BOUNDS: (f64, f64) = (0.25, 4.0);

/// How far one observation moves the correction, in log space: half-way,
/// so a wrong speed is mostly mended in three steps and a noisy step moves
/// it by half its noise. A host's first observation moves it all the way:
/// the history learns from the host's steps normalized by its speed, so a
/// speed left half-wrong would teach the history half-wrong estimates, and
/// the two would then agree on the mistake.
const CORRECTION_WEIGHT: f64 = 0.5;

/// Steps shorter than this (seconds, either predicted or observed) say more
/// about overheads than about speed, and are not used to correct it.
pub const MIN_OBSERVED_S: f64 = 0.005;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry {
    /// Higher is faster: a benchmark score, the inverse of a benchmark time,
    /// or a class speed. `None` while unknown (benchmark not done yet).
    score: Option<f64>,
    /// Multiplies the source's speed; 1 until observations say otherwise.
    correction: f64,
    /// Still held (gone hosts keep their score for the median).
    held: bool,
    /// Observations that corrected it so far.
    observed: u32,
}

/// Per-host speeds: a source score relative to a reference, times a bounded
/// correction learned from observed step times.
#[derive(Clone, Debug)]
pub struct SpeedBook {
    /// A speed-1 host's score; `None`: the median of the scores seen.
    reference: Option<f64>,
    /// Whether observations correct the speeds.
    refine: bool,
    hosts: BTreeMap<HostId, Entry>,
    /// The host id each host name was last held under, so that a host
    /// granted again finds its entry.
    names: HashMap<String, HostId>,
}

impl SpeedBook {
    /// A book whose scores are relative to `reference` (or to the median of
    /// scores seen, if `None`), corrected by observations if `refine`.
    pub fn new(reference: Option<f64>, refine: bool) -> SpeedBook {
        SpeedBook {
            reference: reference.filter(|r| r.is_finite() && *r > 0.0),
            refine,
            hosts: BTreeMap::new(),
            names: HashMap::new(),
        }
    }

    /// A host joined with `score` (higher is faster), if known yet. A host
    /// `name` seen before in the run (given back, now granted again) keeps
    /// its learned correction, and its score unless a new one is given; an
    /// empty name is not remembered.
    pub fn add_host(&mut self, host: HostId, name: &str, score: Option<f64>) {
        let score = score.filter(|s| s.is_finite() && *s > 0.0);
        let before = if name.is_empty() {
            None
        } else {
            self.names
                .insert(name.to_string(), host)
                .and_then(|old| match self.hosts.get(&old) {
                    // Still held under another id: two hosts, not one back.
                    Some(e) if e.held && old != host => None,
                    Some(_) => self.hosts.remove(&old),
                    None => None,
                })
        };
        let entry = match before {
            Some(e) => Entry {
                score: score.or(e.score),
                held: true,
                ..e
            },
            None => Entry {
                score,
                correction: 1.0,
                held: true,
                observed: 0,
            },
        };
        self.hosts.insert(host, entry);
    }

    /// Whether the host's score is known (from its source or a benchmark).
    pub fn has_score(&self, host: HostId) -> bool {
        self.hosts.get(&host).is_some_and(|e| e.score.is_some())
    }

    /// The score of a host became known (its benchmark finished).
    pub fn set_score(&mut self, host: HostId, score: f64) {
        if let Some(e) = self.hosts.get_mut(&host)
            && score.is_finite()
            && score > 0.0
        {
            e.score = Some(score);
        }
    }

    /// The host is gone; its score still counts towards the median, so the
    /// speeds of the others do not jump when a host leaves.
    pub fn remove_host(&mut self, host: HostId) {
        if let Some(e) = self.hosts.get_mut(&host) {
            e.held = false;
        }
    }

    /// The score a speed-1 host has: the given reference, or the median
    /// (lower middle) of every score seen so far.
    pub fn reference(&self) -> Option<f64> {
        if self.reference.is_some() {
            return self.reference;
        }
        let mut scores: Vec<f64> = self.hosts.values().filter_map(|e| e.score).collect();
        if scores.is_empty() {
            return None;
        }
        scores.sort_by(f64::total_cmp);
        Some(scores[(scores.len() - 1) / 2])
    }

    /// The speed of a held host as the source alone gives it (1 if unknown).
    fn base(&self, e: &Entry, reference: Option<f64>) -> f64 {
        match (e.score, reference) {
            (Some(s), Some(r)) => s / r,
            _ => 1.0,
        }
    }

    /// The host's relative speed now: source times correction. `None` for
    /// hosts not held, and while neither the source nor an observation has
    /// said anything about it.
    pub fn speed(&self, host: HostId) -> Option<f64> {
        let e = self.hosts.get(&host).filter(|e| e.held)?;
        if e.score.is_none() && e.correction == 1.0 {
            return None;
        }
        Some(self.base(e, self.reference()) * e.correction)
    }

    /// Every held host with its speed (see [`SpeedBook::speed`]).
    pub fn speeds(&self) -> Vec<(HostId, Option<f64>)> {
        self.hosts
            .iter()
            .filter(|(_, e)| e.held)
            .map(|(h, _)| (*h, self.speed(*h)))
            .collect()
    }

    /// A step the history predicted to take `expected_s` on this host (its
    /// work estimate over the host's current speed) took `observed_s`: move
    /// the host's correction towards what that ratio says, within
    /// [`CORRECTION_BOUNDS`]. Returns whether the speed changed.
    pub fn observe(&mut self, host: HostId, expected_s: f64, observed_s: f64) -> bool {
        if !(self.refine && expected_s.is_finite() && observed_s.is_finite())
            || expected_s < MIN_OBSERVED_S
            || observed_s < MIN_OBSERVED_S
        {
            return false;
        }
        let Some(e) = self.hosts.get_mut(&host).filter(|e| e.held) else {
            return false;
        };
        let ratio = expected_s / observed_s;
        let weight = if e.observed == 0 {
            1.0
        } else {
            CORRECTION_WEIGHT
        };
        e.observed += 1;
        let next =
            (e.correction * ratio.powf(weight)).clamp(CORRECTION_BOUNDS.0, CORRECTION_BOUNDS.1);
        let changed = (next - e.correction).abs() > 1e-9;
        e.correction = next;
        changed
    }
}

/// The server's host-speed bookkeeping around a [`SpeedBook`]: which source
/// applies, the benchmark step and the workers running it, and the speeds
/// pushed into the scheduler core. Pure: the driver tells it what happened
/// and carries out what it answers.
pub struct HostSpeeds {
    source: SpeedSource,
    book: SpeedBook,
    class_speed: HashMap<String, f64>,
    benchmark: Option<Bytes>,
    /// Workers running the benchmark: their host and when it was sent.
    pending: HashMap<WorkerId, (HostId, Time)>,
    /// Benchmarks completed.
    pub benchmarks: u32,
    /// Time from sending each benchmark to its answer, summed.
    pub benchmark_time: Duration,
}

/// What [`HostSpeeds::observe_result`] needs from before a result is given to the core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expectation {
    host: HostId,
    expected_s: f64,
}

impl HostSpeeds {
    /// Speeds from `source`, corrected by observed step times if `refine`.
    pub fn new(source: SpeedSource, refine: bool) -> HostSpeeds {
        let reference = match &source {
            SpeedSource::Unknown | SpeedSource::Class => Some(1.0),
            SpeedSource::MachineAd { reference, .. } => *reference,
            SpeedSource::Benchmark { reference_s } => reference_s.map(|r| 1.0 / r),
        };
        HostSpeeds {
            source,
            book: SpeedBook::new(reference, refine),
            class_speed: HashMap::new(),
            benchmark: None,
            pending: HashMap::new(),
            benchmarks: 0,
            benchmark_time: Duration::ZERO,
        }
    }

    /// The speed a class's hosts have under [`SpeedSource::Class`].
    pub fn set_class_speed(&mut self, class: &str, speed: Option<f64>) {
        if let Some(s) = speed.filter(|s| s.is_finite() && *s > 0.0) {
            self.class_speed.insert(class.to_string(), s);
        }
    }

    /// The benchmark step's data (for [`SpeedSource::Benchmark`]).
    pub fn set_benchmark(&mut self, data: Bytes) {
        self.benchmark = Some(data);
    }

    /// The benchmark step's data, when new workers must run it first.
    pub fn benchmark(&self) -> Option<&Bytes> {
        match self.source {
            SpeedSource::Benchmark { .. } => self.benchmark.as_ref(),
            _ => None,
        }
    }

    /// The pool granted `host` (named `name`, machine ad `ad`, possibly
    /// empty) to `class`: gives it to the core with the speed the source
    /// says, or what the run learned of it in an earlier grant. Returns true
    /// when the source needs the ad and it was missing: the driver should
    /// ask for the host's info and call [`HostSpeeds::host_ad`].
    pub fn host_added(
        &mut self,
        sched: &mut Sched,
        host: HostId,
        name: &str,
        class: &str,
        ad: &str,
        now: Time,
    ) -> bool {
        let mut need_ad = false;
        let score = match &self.source {
            SpeedSource::Unknown | SpeedSource::Benchmark { .. } => None,
            SpeedSource::Class => Some(self.class_speed.get(class).copied().unwrap_or(1.0)),
            SpeedSource::MachineAd { attribute, .. } => {
                need_ad = ad.trim().is_empty();
                score_from_ad(ad, attribute)
            }
        };
        self.book.add_host(host, name, score);
        // A host the core does not keep (class full) comes back as a
        // release, which the driver reports with `host_gone`.
        sched.host_added(host, class, self.book.speed(host), now);
        self.push(sched);
        need_ad
    }

    /// A host's machine ad arrived after it was added.
    pub fn host_ad(&mut self, sched: &mut Sched, host: HostId, ad: &str) {
        if let SpeedSource::MachineAd { attribute, .. } = &self.source
            && let Some(score) = score_from_ad(ad, attribute)
        {
            self.book.set_score(host, score);
            self.push(sched);
        }
    }

    /// The host is no longer the run's.
    pub fn host_gone(&mut self, host: HostId) {
        self.book.remove_host(host);
    }

    /// A worker connected on `host`. True if it must run the benchmark step
    /// before the core may give it work: the driver sends the step and
    /// calls [`HostSpeeds::benchmark_done`] with its answer. A host whose
    /// benchmark already ran in this run (an earlier worker, an earlier
    /// grant) is not benchmarked again.
    pub fn worker_connected(&mut self, worker: WorkerId, host: HostId, now: Time) -> bool {
        if self.benchmark().is_none() || self.book.has_score(host) {
            return false;
        }
        self.pending.insert(worker, (host, now));
        true
    }

    /// Whether the worker is running the benchmark.
    pub fn benchmarking(&self, worker: WorkerId) -> bool {
        self.pending.contains_key(&worker)
    }

    /// The worker answered the benchmark; `took` is the time it measured
    /// (`None` if the step failed). Sets the host's speed. Returns false if
    /// the worker was not benchmarking (a late or foreign answer).
    pub fn benchmark_done(
        &mut self,
        sched: &mut Sched,
        worker: WorkerId,
        took: Option<Duration>,
        now: Time,
    ) -> bool {
        let Some((host, sent)) = self.pending.remove(&worker) else {
            return false;
        };
        self.benchmarks += 1;
        self.benchmark_time += now.saturating_sub(sent);
        if let Some(t) = took.filter(|t| !t.is_zero()) {
            self.book.set_score(host, 1.0 / t.as_secs_f64());
            self.push(sched);
        }
        true
    }

    /// The worker is gone (a benchmark it was running is abandoned).
    pub fn worker_gone(&mut self, worker: WorkerId) {
        self.pending.remove(&worker);
    }

    /// Before the core takes a result of `step` from `worker`: what the
    /// history predicts it took there (nothing if the step has no history).
    pub fn expect(&self, sched: &Sched, worker: WorkerId, step: StepId) -> Option<Expectation> {
        let host = sched.find_worker_host(worker)?;
        let work = sched.history().estimate(&step)?;
        let speed = sched.host_speed(host).unwrap_or(1.0);
        Some(Expectation {
            host,
            expected_s: work / speed,
        })
    }

    /// A result came back and `took` is the time the core learns from:
    /// corrects the host's speed and tells the core. Call it before the core
    /// takes the result, so that the history learns with the corrected speed.
    pub fn observe_result(&mut self, sched: &mut Sched, exp: Expectation, took: Duration) {
        if self
            .book
            .observe(exp.host, exp.expected_s, took.as_secs_f64())
        {
            self.push(sched);
        }
    }

    /// The speed of every held host into the core.
    fn push(&self, sched: &mut Sched) {
        for (host, speed) in self.book.speeds() {
            sched.set_host_speed(host, speed);
        }
    }
}

/// The step id a benchmark step is sent under (no master step may use it).
pub const BENCHMARK_STEP: u64 = u64::MAX;

/// The ticket a benchmark step is sent under (the core never issues it).
pub const BENCHMARK_TICKET: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> HostId {
        HostId(n)
    }

    #[test]
    fn ad_scores_read_new_and_old_syntax() {
        assert_eq!(
            score_from_ad("[ Mips = 6000; KFlops = 3000000 ]", "mips"),
            Some(6000.0)
        );
        assert_eq!(
            score_from_ad("Mips = 1500\nSpeed = 0.5\n", "Mips"),
            Some(1500.0)
        );
        assert_eq!(score_from_ad("[ Mips = 0 ]", "Mips"), None);
        assert_eq!(score_from_ad("[ Memory = 10 ]", "Mips"), None);
        assert_eq!(score_from_ad("[ garbage", "Mips"), None);
    }

    #[test]
    fn scores_are_relative_to_the_reference_or_the_median() {
        let mut b = SpeedBook::new(Some(3000.0), false);
        b.add_host(h(1), "", Some(6000.0));
        b.add_host(h(2), "", Some(1500.0));
        assert_eq!(b.speed(h(1)), Some(2.0));
        assert_eq!(b.speed(h(2)), Some(0.5));

        let mut m = SpeedBook::new(None, false);
        m.add_host(h(1), "", Some(1000.0));
        m.add_host(h(2), "", Some(2000.0));
        m.add_host(h(3), "", Some(4000.0));
        assert_eq!(m.speed(h(2)), Some(1.0));
        assert_eq!(m.speed(h(3)), Some(2.0));
        // A host that leaves keeps counting for the median.
        m.remove_host(h(3));
        assert_eq!(m.speed(h(3)), None);
        assert_eq!(m.speed(h(1)), Some(0.5));
    }

    #[test]
    fn unknown_scores_stay_unknown_until_set() {
        let mut b = SpeedBook::new(Some(1.0), true);
        b.add_host(h(1), "", None);
        assert_eq!(b.speed(h(1)), None);
        b.set_score(h(1), 2.5);
        assert_eq!(b.speed(h(1)), Some(2.5));
    }

    #[test]
    fn observations_correct_a_wrong_speed_within_bounds() {
        let mut b = SpeedBook::new(Some(1.0), true);
        // Told speed 1, really speed 2: a 1 s step (at speed 1) takes 0.5 s.
        b.add_host(h(1), "", Some(1.0));
        for _ in 0..8 {
            let speed = b.speed(h(1)).unwrap();
            b.observe(h(1), 1.0 / speed, 0.5);
        }
        let s = b.speed(h(1)).unwrap();
        assert!((s - 2.0).abs() < 0.02, "corrected to {s}");
        // One absurd observation cannot push past the bounds.
        b.observe(h(1), 1.0, 1000.0);
        b.observe(h(1), 1.0, 1000.0);
        b.observe(h(1), 1.0, 1000.0);
        let s = b.speed(h(1)).unwrap();
        assert!(s >= CORRECTION_BOUNDS.0 - 1e-9, "{s}");
        // Too-short steps and a book without refinement change nothing.
        assert!(!b.observe(h(1), 0.001, 0.5));
        let mut fixed = SpeedBook::new(Some(1.0), false);
        fixed.add_host(h(1), "", Some(1.0));
        assert!(!fixed.observe(h(1), 1.0, 0.5));
        assert_eq!(fixed.speed(h(1)), Some(1.0));
    }

    #[test]
    fn observation_alone_gives_an_unknown_host_a_speed() {
        let mut b = SpeedBook::new(None, true);
        b.add_host(h(1), "", None);
        assert!(b.observe(h(1), 1.0, 0.25));
        assert!(b.speed(h(1)).unwrap() > 1.5);
    }
}

#[cfg(test)]
#[path = "speed_tests.rs"]
mod speed_tests;
