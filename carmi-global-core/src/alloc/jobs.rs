//! Submitted jobs: each class has a minimum and a maximum number of hosts.
//!
//! # Policy
//! - **Start, all or nothing.** Waiting jobs are considered in submit order.
//!   A job starts when every class's minimum can be met *at once*, found as
//!   a bipartite matching of minimum places to slots (a slot may belong to
//!   several classes). Minimums are never held partially, so two jobs that
//!   each need more than half the pool cannot deadlock: the first takes its
//!   minimums whole, the second waits. The head of the queue uses idle slots
//!   first, then hosts that running jobs hold *above* their minimums, taken
//!   back ([`ReleaseCause::Preempted`]).
//! - **Backfill.** A job behind a head that cannot start may start out of
//!   order, but only on idle slots that no job ahead of it could use for a
//!   minimum: it cannot delay them (minimums are held until the job ends, so
//!   a slot an earlier job needs is never given away), and a pool with a
//!   waiting job that needs the whole pool still serves small jobs on the
//!   machines it cannot use. `carmi q -analyze` explains why a job waits.
//!   A job whose minimums no set of online slots meets cannot start
//!   whatever is kept for it: it waits, flagged, without holding back the
//!   jobs behind it (see `possible`).
//! - **Growth, fairly** (between users first, see `share`). Once a job's master runs ([`Allocator::on_master_running`]),
//!   idle slots go to running jobs below their maxima, one at a time to the
//!   job holding the fewest hosts (the older on ties), so a later job is not
//!   starved by an earlier one. Slots the head waiting job could use for its
//!   minimums are kept for it. When no idle slot is left, a host above its
//!   job's minimum moves to a job holding at least two fewer hosts that can
//!   use it, until shares are even.
//! - Within a class, machines its `rank` rates higher are taken first, the
//!   fastest among equals (a start prefers them where the matching allows).
//! - Hosts given by growth are announced to `AddNotify` subscribers of their
//!   class; `AddHosts` requests are served first and beyond the maxima.
//!   `DelHosts` lowers the class's maximum by the hosts given back.

use std::collections::BTreeMap;

use carmi_proto::ids::{HostId, JobId};
use carmi_proto::msg::{ClassStatus, Failure, FailureCode};
use serde::{Deserialize, Serialize};

use super::job::{Class, Rank, member, members};
use super::matching::match_all;
use super::share::Hungry;
use super::{Allocator, Claim, Effect, HostChangeKind, ReleaseCause, SlotState};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Started by hand (its first process attached): no submit file, no limits.
    Attached,
    /// Submitted, waiting for its minimums.
    Waiting,
    /// Submitted and started; `grow` once its master runs.
    Running {
        /// True once the master runs: only then does the job grow.
        grow: bool,
    },
    /// Held (`carmi hold`): keeps its place in the queue, holds no host and
    /// is not considered until it is released.
    Held,
}

impl Phase {
    /// The name `carmi q` shows.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Attached => "attached",
            Phase::Waiting => "waiting",
            Phase::Running { .. } => "running",
            Phase::Held => "held",
        }
    }
}

/// One class of a submitted job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassLimits {
    /// Class name.
    pub name: String,
    /// ClassAd expression over machine attributes.
    pub expression: String,
    /// Fewest hosts the job starts with.
    pub min: u32,
    /// Most hosts it grows to.
    pub max: u32,
    /// ClassAd expression over machine attributes: machines ranking higher
    /// are taken first (then the fastest); `None` for speed alone.
    pub rank: Option<String>,
}

/// A job's classes as the allocator keeps them: parsed expressions, (min,
/// max) limits and ranks, by class name. Fails on a bad expression, a class
/// defined twice, or limits that are empty or above the cap.
pub(super) type ParsedClasses = (
    BTreeMap<String, Class>,
    BTreeMap<String, (u32, u32)>,
    BTreeMap<String, Rank>,
);

/// Parses the classes of a submit file (for a submit, and again when a held
/// job is released and starts from scratch).
pub(super) fn parse_classes(classes: &[ClassLimits]) -> Result<ParsedClasses, Failure> {
    let fail = |code, message| Err(Failure { code, message });
    let mut parsed = BTreeMap::new();
    let mut limits = BTreeMap::new();
    let mut ranks = BTreeMap::new();
    for c in classes {
        // Refused here too, not only at the door: a journal written
        // before the limits existed is replayed through this.
        if let Err(e) = carmi_proto::limits::check_machine_count(
            &format!("class `{}`: machine_count", c.name),
            c.max,
        ) {
            return fail(FailureCode::Invalid, e.to_string());
        }
        if c.min > c.max || c.max == 0 {
            return fail(
                FailureCode::Invalid,
                format!(
                    "class `{}`: machine_count {}..{} is empty",
                    c.name, c.min, c.max
                ),
            );
        }
        let expr = match classad::parse_expr(&c.expression) {
            Ok(e) => e,
            Err(e) => {
                return fail(
                    FailureCode::BadExpression,
                    format!("class `{}`: column {}: {}", c.name, e.column, e.message),
                );
            }
        };
        let class = Class::new(&c.expression, expr);
        if parsed.insert(c.name.clone(), class).is_some() {
            return fail(
                FailureCode::Invalid,
                format!("class `{}` is defined twice", c.name),
            );
        }
        limits.insert(c.name.clone(), (c.min, c.max));
        if let Some(text) = &c.rank {
            match classad::parse_expr(text) {
                Ok(expr) => {
                    let text = text.clone();
                    ranks.insert(c.name.clone(), Rank { text, expr });
                }
                Err(e) => {
                    return fail(
                        FailureCode::BadExpression,
                        format!(
                            "class `{}`: rank: column {}: {}",
                            c.name, e.column, e.message
                        ),
                    );
                }
            }
        }
    }
    Ok((parsed, limits, ranks))
}

impl Allocator {
    /// A submitted job: it waits in the queue until its minimums can be met
    /// at once. Fails (creating nothing) on a bad expression, no class, a
    /// class with min > max, or a job id in use.
    pub fn submit_job(
        &mut self,
        job: JobId,
        owner: &str,
        classes: &[ClassLimits],
    ) -> Result<(), Failure> {
        let fail = |code, message| Err(Failure { code, message });
        if self.jobs.contains_key(&job) {
            return fail(FailureCode::Invalid, format!("job {job} exists already"));
        }
        if classes.is_empty() {
            return fail(
                FailureCode::Invalid,
                "a job needs at least one class".into(),
            );
        }
        let (parsed, limits, ranks) = parse_classes(classes)?;
        self.on_job_created(job, owner);
        let j = self.jobs.get_mut(&job).expect("just created");
        j.classes = parsed;
        j.limits = limits;
        j.ranks = ranks;
        self.enqueue(job);
        Ok(())
    }

    /// The master of a submitted job runs: from now on the job grows.
    pub fn on_master_running(&mut self, job: JobId) {
        if let Some(j) = self.jobs.get_mut(&job)
            && let Phase::Running { grow } = &mut j.phase
            && !*grow
        {
            *grow = true;
            self.dirty = true;
        }
    }

    /// The phase of a job.
    pub fn job_phase(&self, job: JobId) -> Option<Phase> {
        self.jobs.get(&job).map(|j| j.phase)
    }

    /// Jobs ahead of `job` in the queue, in pass order (users by priority,
    /// then submit order: see `queue.rs`); `None` unless it waits.
    pub fn queued_ahead(&self, job: JobId) -> Option<u32> {
        let seq = self.jobs.get(&job)?.seq;
        if !self.waiting.queue.contains_key(&seq) {
            return None;
        }
        let key = self.pass_key(job);
        let ahead = self
            .waiting
            .queue
            .values()
            .filter(|&&w| self.pass_key(w) < key);
        Some(ahead.count() as u32)
    }

    /// Every job, in submit order.
    pub fn job_ids(&self) -> Vec<JobId> {
        let mut ids: Vec<(u64, JobId)> = self.jobs.iter().map(|(&id, j)| (j.seq, id)).collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    pub(super) fn held(&self, job: JobId, class: &str) -> u32 {
        self.jobs[&job]
            .hosts
            .values()
            .filter(|c| *c == class)
            .count() as u32
    }

    /// The classes of a job with hosts held and limits, for `carmi q`.
    pub fn class_status(&self, job: JobId) -> Vec<ClassStatus> {
        let Some(j) = self.jobs.get(&job) else {
            return Vec::new();
        };
        j.classes
            .iter()
            .map(|(name, c)| {
                let (min, max) = j.limits.get(name).copied().unwrap_or((0, 0));
                ClassStatus {
                    name: name.clone(),
                    requirements: c.expression.clone(),
                    rank: j.ranks.get(name).map(|r| r.text.clone()),
                    held: self.held(job, name),
                    min,
                    max,
                }
            })
            .collect()
    }

    /// Starts waiting jobs, grows running ones, evens shares out.
    pub(super) fn schedule(&mut self) {
        // Running jobs are owed their minimums (lost to owners, or after a
        // restart) before waiting jobs may start.
        self.grow(true);
        self.start_waiting();
        self.grow(false);
        // A host moved to a poorer job leaves room in the richer one, which
        // an idle slot it could use but the poorer could not may fill: the
        // next pass grows it (moves only ever even shares out, so passes end).
        if self.rebalance() {
            self.dirty = true;
        }
    }

    /// The machines `job` needs at once: its minimums added up.
    pub(super) fn minimum(&self, job: JobId) -> u64 {
        self.jobs[&job]
            .limits
            .values()
            .map(|&(min, _)| u64::from(min))
            .sum()
    }

    /// Hosts running jobs hold above their minimums, latest claimed first
    /// within each class: any subset of them can be taken without breaking a minimum.
    pub(super) fn surplus_hosts(&self, except: JobId) -> Vec<HostId> {
        let mut out = Vec::new();
        for &id in &self.running {
            let j = &self.jobs[&id];
            if id == except {
                continue;
            }
            for (class, &(min, _)) in &j.limits {
                let mut hosts: Vec<(std::time::Duration, HostId)> = j
                    .hosts
                    .iter()
                    .filter(|(_, c)| *c == class)
                    .map(|(&h, _)| {
                        (
                            self.pool
                                .get_slot(h)
                                .state
                                .claim()
                                .map_or(self.clock.now, |c| c.since),
                            h,
                        )
                    })
                    .collect();
                let surplus = (hosts.len() as u32).saturating_sub(min) as usize;
                hosts.sort_by(|a, b| b.cmp(a));
                out.extend(
                    hosts
                        .into_iter()
                        .take(surplus)
                        .map(|(_, h)| h)
                        // A suspended host is of no use to another job now.
                        .filter(|&h| matches!(self.pool.get_slot(h).state, SlotState::Claimed(_))),
                );
            }
        }
        out
    }

    /// Starts `job` if all its minimums can be met at once. When it waits
    /// behind jobs that could not start (`backfill`), only those idle slots,
    /// which none of them could use for a minimum, are candidates, and
    /// nothing is preempted.
    pub(super) fn try_start(&mut self, job: JobId, backfill: Option<&[HostId]>) -> bool {
        // One place is built per minimum machine: never more than the pool
        // has slots, whatever number the job asked for.
        if self.minimum(job) > self.pool.slots.len() as u64 {
            return false;
        }
        // One candidate list per class; each minimum place names its class.
        let (classes, class_of): (Vec<String>, Vec<usize>) = {
            let needed: Vec<(String, u32)> = self.jobs[&job]
                .limits
                .iter()
                .filter(|&(_, &(min, _))| min > 0)
                .map(|(c, &(min, _))| (c.clone(), min))
                .collect();
            let class_of = needed
                .iter()
                .enumerate()
                .flat_map(|(k, &(_, min))| std::iter::repeat_n(k, min as usize))
                .collect();
            (needed.into_iter().map(|(c, _)| c).collect(), class_of)
        };
        let mut cands: Vec<HostId> = match backfill {
            Some(free) => free.to_vec(),
            None => self.pool.idle_hosts(),
        };
        let n_idle = cands.len();
        let adj_for = |a: &mut Allocator, cands: &[HostId], ranked: bool| -> Vec<Vec<usize>> {
            let mut adj = Vec::with_capacity(classes.len());
            let ms: Vec<_> = cands.iter().map(|&h| a.pool.get_slot(h).machine).collect();
            for class in &classes {
                let mut list: Vec<(f64, usize)> = Vec::new();
                let ok = members(&mut a.jobs, &a.pool.machines, a.clock.unix, job, class, &ms);
                for (i, &h) in cands.iter().enumerate() {
                    if ok[i] {
                        let rank = if ranked { a.rank(job, class, h) } else { 0.0 };
                        list.push((rank, i));
                    }
                }
                // Augmenting paths try candidates in order: best ranked first,
                // the fastest among equals (the idle set's order; a stable sort).
                list.sort_by(|x, y| y.0.partial_cmp(&x.0).unwrap_or(std::cmp::Ordering::Equal));
                adj.push(list.into_iter().map(|(_, i)| i).collect());
            }
            adj
        };
        // Whether the minimums can be met at all depends on membership alone
        // (cached per machine); ranks, evaluated per candidate, are computed
        // only once they can, so a waiting job retried after every input
        // costs no rank evaluation.
        let fits = |a: &mut Allocator, cands: &[HostId]| {
            match_all(&adj_for(a, cands, false), &class_of, cands.len()).is_some()
        };
        if !fits(self, &cands) {
            if backfill.is_some() {
                return false;
            }
            cands.extend(self.surplus_hosts(job));
            if cands.len() == n_idle || !fits(self, &cands) {
                return false;
            }
        }
        let placed = match_all(&adj_for(self, &cands, true), &class_of, cands.len())
            .expect("the same edges in another order match as well");
        for (i, &k) in class_of.iter().enumerate() {
            let host = cands[placed[i]];
            if placed[i] >= n_idle {
                self.release(host, ReleaseCause::Preempted);
            }
            self.give(job, &classes[k], host, false);
        }
        self.jobs.get_mut(&job).expect("waiting job exists").phase = Phase::Running { grow: false };
        self.running.insert(job);
        self.take_limits(job);
        tracing::info!(job = %job, hosts = class_of.len(), "job started: its minimums are held");
        self.out.effects.push(Effect::JobStarted { job });
        true
    }

    /// Claims `host` for `job`'s `class` and announces it to the job (and to
    /// its `AddNotify` subscribers when `notify`).
    pub(super) fn give(&mut self, job: JobId, class: &str, host: HostId, notify: bool) {
        let claim = Claim {
            job,
            class: class.to_string(),
            since: self.clock.now,
        };
        self.set_state(host, SlotState::Claimed(claim));
        let j = self.jobs.get_mut(&job).expect("giving to a live job");
        j.hosts.insert(host, class.to_string());
        self.out.host_change(job, host, HostChangeKind::Added);
        if notify {
            let watchers = j.add_watchers(class);
            if !watchers.is_empty() {
                let info = self.pool.host_info(host, class);
                self.out.added(job, &watchers, &[info]);
            }
        }
    }

    /// The rank of `host` for `job`'s `class` (0 without a rank; a rank that
    /// is not a number counts as 0).
    pub(super) fn rank(&self, job: JobId, class: &str, host: HostId) -> f64 {
        let j = &self.jobs[&job];
        let Some(r) = j.ranks.get(class) else {
            return 0.0;
        };
        let v = self
            .pool
            .machine_of(host)
            .ad
            .eval_expr(&r.expr, Some(&j.ad))
            .as_f64();
        v.filter(|x| x.is_finite()).unwrap_or(0.0)
    }

    /// Jobs with room, as (hosts held, submit order, job, classes with
    /// room): below their minimums (any running job) when `to_min`, else
    /// below their maximums (jobs whose master runs).
    fn hungry(&self, to_min: bool) -> Vec<Hungry> {
        let mut out: Vec<_> = self
            .running
            .iter()
            .map(|id| (id, &self.jobs[id]))
            .filter(|(_, j)| match j.phase {
                Phase::Running { grow } => grow || to_min,
                _ => false,
            })
            .filter_map(|(&id, j)| {
                let room: Vec<String> = j
                    .limits
                    .iter()
                    .filter(|&(c, &(min, max))| {
                        let held = self.held(id, c) + self.recorded.count_for(id, c);
                        held < if to_min { min } else { max }
                    })
                    .map(|(c, _)| c.clone())
                    .collect();
                (!room.is_empty()).then_some((j.hosts.len() as u32, j.seq, id, room))
            })
            .collect();
        self.order_by_share(&mut out);
        out
    }

    /// True when `host` could serve a minimum of `job`.
    pub(super) fn needs_for_minimum(&mut self, job: JobId, host: HostId) -> bool {
        let m = self.pool.get_slot(host).machine;
        let classes: Vec<String> = self.jobs[&job]
            .limits
            .iter()
            .filter(|&(_, &(min, _))| min > 0)
            .map(|(c, _)| c.clone())
            .collect();
        classes.iter().any(|c| {
            member(
                &mut self.jobs,
                &self.pool.machines,
                self.clock.unix,
                job,
                c,
                m,
            )
        })
    }

    /// Gives idle slots, one at a time, to the job holding the fewest: up to
    /// minimums first (`to_min`, ahead of the queue), else up to maximums.
    fn grow(&mut self, to_min: bool) {
        'outer: loop {
            // Cheap checks first: this runs after every input that frees a slot.
            if self.pool.idle.is_empty() {
                return;
            }
            let hungry = self.hungry(to_min);
            if hungry.is_empty() {
                return;
            }
            let idle: Vec<HostId> = self.pool.idle_hosts();
            // Growth leaves alone the idle slots the head waiting job could
            // use for its minimums (not those of a job that can never start).
            let head = if to_min { None } else { self.head() };
            for (_, _, job, room) in hungry {
                // The best ranked idle host of a class with room; the fastest among equals.
                let mut best: Option<(f64, HostId, String)> = None;
                for &h in &idle {
                    if head.is_some_and(|head| self.needs_for_minimum(head, h)) {
                        continue;
                    }
                    let m = self.pool.get_slot(h).machine;
                    for c in &room {
                        if member(
                            &mut self.jobs,
                            &self.pool.machines,
                            self.clock.unix,
                            job,
                            c,
                            m,
                        ) {
                            let r = self.rank(job, c, h);
                            if best.as_ref().is_none_or(|b| r > b.0) {
                                best = Some((r, h, c.clone()));
                            }
                        }
                    }
                }
                if let Some((_, h, c)) = best {
                    self.give(job, &c, h, true);
                    continue 'outer;
                }
            }
            return;
        }
    }

    /// Moves hosts above a job's minimum to jobs holding at least two fewer;
    /// true when it moved any.
    fn rebalance(&mut self) -> bool {
        let mut any = false;
        for _ in 0..self.pool.slots.len() {
            let mut moved = false;
            let users = self.held_by_user();
            'find: for (_, _, job, room) in self.hungry(false) {
                let donor = |a: &Allocator, h: HostId| {
                    a.pool
                        .get_slot(h)
                        .state
                        .claim()
                        .expect("surplus is claimed")
                        .job
                };
                let mut donors: Vec<(f64, usize, HostId)> = self
                    .surplus_hosts(job)
                    .into_iter()
                    .filter(|&h| self.may_move(&users, donor(self, h), job))
                    .map(|h| {
                        let d = donor(self, h);
                        let w = self.user_weight(&users, self.job_user(d), 0);
                        (w, self.jobs[&d].hosts.len(), h)
                    })
                    .collect();
                // The heaviest user's richest job first.
                donors.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
                let donors = donors.into_iter().map(|(_, _, h)| h);
                for h in donors {
                    let m = self.pool.get_slot(h).machine;
                    if let Some(c) = room.iter().find(|c| {
                        member(
                            &mut self.jobs,
                            &self.pool.machines,
                            self.clock.unix,
                            job,
                            c,
                            m,
                        )
                    }) {
                        let c = c.clone();
                        self.release(h, ReleaseCause::Preempted);
                        self.give(job, &c, h, true);
                        moved = true;
                        break 'find;
                    }
                }
            }
            if !moved {
                return any;
            }
            any = true;
        }
        any
    }
}
