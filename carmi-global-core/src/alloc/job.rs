//! One job as the allocator keeps it: its ad, its classes (with their cached
//! membership per machine), the hosts it holds and its subscriptions; and
//! class membership, the test under every match.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use carmi_proto::ids::{HostId, JobId};
use classad::{ClassAd, Expr};

use super::effect::Outputs;
use super::pool::{Machine, MachineIdx};
use super::{Effect, HostChangeKind, Phase, ReleaseCause, ReqRef};

pub(super) struct Class {
    pub(super) expression: String,
    pub(super) expr: Expr,
    /// Machines the job excluded from this class's future grants
    /// (`ExcludeHosts`); they are never members, whatever the expression says.
    pub(super) excluded: BTreeSet<MachineIdx>,
    /// Per machine: 0 = not evaluated, else `generation << 1 | member`.
    /// Evaluated lazily, so defining a class costs nothing and a scan only
    /// evaluates the machines it looks at.
    cache: Vec<u32>,
    /// The expression calls `time()` (`PilotEndsAt - time() > 600`): its
    /// verdict changes with the clock, not only with the ad, so it is
    /// evaluated at the allocator's clock every time and never cached.
    pub(super) timed: bool,
}

impl Class {
    /// A class with nothing excluded and nothing evaluated yet.
    pub(super) fn new(expression: &str, expr: Expr) -> Class {
        Class {
            expression: expression.to_string(),
            expr,
            excluded: BTreeSet::new(),
            cache: Vec::new(),
            timed: mentions_time(expression),
        }
    }
}

impl Class {
    /// Whether machine `m` is a member for the job whose ad is `job_ad`,
    /// evaluated afresh, without the cache (for readers that only have
    /// `&self`: `carmi q` and the invariant walker).
    pub(super) fn admits(&self, m: MachineIdx, machine: &Machine, job_ad: &ClassAd) -> bool {
        !self.excluded.contains(&m)
            && machine.ad.eval_expr(&self.expr, Some(job_ad)).is_true()
            && (!machine.has_requirements || classad::matching::accepts(&machine.ad, job_ad))
    }
}

/// Whether a class expression may depend on the time (`time()`, in any
/// case): such a class is evaluated afresh at every look.
fn mentions_time(expression: &str) -> bool {
    expression.to_ascii_lowercase().contains("time(")
}

/// A class's rank: the text as given (for `GetClassDefinitions` and `carmi
/// q`) and its parsed form.
pub(super) struct Rank {
    pub(super) text: String,
    pub(super) expr: Expr,
}

pub(super) enum SubKind {
    Add(String),
    Delete(BTreeSet<HostId>),
    Suspend(BTreeSet<HostId>),
    Resume(BTreeSet<HostId>),
}

pub(super) struct Sub {
    pub(super) req: ReqRef,
    pub(super) kind: SubKind,
}

pub(super) struct Job {
    pub(super) ad: ClassAd,
    /// The ad's `Owner`, fixed when the job is created (`set_job_attributes`
    /// never replaces it).
    pub(super) owner: String,
    /// The user the fair share charges: the job's accounting group
    /// (`AccountingGroup`, `group.user`) when it has one, else `owner`
    /// (see `share`). Who may act on the job is still decided by `owner`.
    pub(super) user: String,
    /// The concurrency limits the job takes while it runs (see `concurrency`).
    pub(super) concurrency: super::concurrency::JobNeeds,
    pub(super) classes: BTreeMap<String, Class>,
    /// Announced hosts and the class each was allocated for.
    pub(super) hosts: BTreeMap<HostId, String>,
    pub(super) subs: Vec<Sub>,
    /// The requests of `subs`, so that a new request's id is checked for
    /// reuse in constant time however many subscriptions the job holds.
    pub(super) sub_reqs: HashSet<ReqRef>,
    /// Submit order (also for jobs started by hand): ties in fair sharing go to the older.
    pub(super) seq: u64,
    /// Per class from the submit file: (min, max). Empty for a job started by hand.
    pub(super) limits: BTreeMap<String, (u32, u32)>,
    /// Per class: the `rank` preferring some machines (higher first).
    pub(super) ranks: BTreeMap<String, Rank>,
    pub(super) phase: Phase,
    /// Whether some set of online slots meets its minimums, as of the
    /// pool generation (`possible`): `None` inside when it does, else why not.
    pub(super) possible: Option<(u64, Option<String>)>,
}

impl Job {
    /// Adds a subscription (its request id checked unused by the caller).
    pub(super) fn push_sub(&mut self, sub: Sub) {
        self.sub_reqs.insert(sub.req);
        self.subs.push(sub);
    }

    /// Keeps the subscriptions `keep` accepts, in order; returns how many
    /// ended, which the caller adds to [`Outputs::requests_ended`].
    #[must_use]
    pub(super) fn retain_subs(&mut self, mut keep: impl FnMut(&Sub) -> bool) -> u64 {
        let reqs = &mut self.sub_reqs;
        let before = self.subs.len();
        self.subs.retain(|s| {
            let k = keep(s);
            if !k {
                reqs.remove(&s.req);
            }
            k
        });
        (before - self.subs.len()) as u64
    }

    /// The `AddNotify` subscriptions of `class`.
    pub(super) fn add_watchers(&self, class: &str) -> Vec<ReqRef> {
        self.subs
            .iter()
            .filter(|s| matches!(&s.kind, SubKind::Add(c) if c == class))
            .map(|s| s.req)
            .collect()
    }

    /// Host `host` left job `id` for `cause` (the caller took it out of
    /// `hosts`): `DeleteNotify` subscriptions are told `reason` (unless the
    /// whole job goes: nobody is left to tell), host subscriptions forget
    /// it and end when no host is left to report, and the job's log and
    /// the driver hear of it ([`Effect::Released`]).
    pub(super) fn host_left(
        &mut self,
        id: JobId,
        host: HostId,
        cause: ReleaseCause,
        reason: String,
        out: &mut Outputs,
    ) {
        let tell = !matches!(cause, ReleaseCause::JobEnded | ReleaseCause::Held);
        for sub in &mut self.subs {
            match &mut sub.kind {
                SubKind::Delete(set) => {
                    if set.remove(&host) && tell {
                        out.effects.push(Effect::Deleted {
                            job: id,
                            request: sub.req,
                            host,
                            reason: reason.clone(),
                        });
                    }
                }
                SubKind::Suspend(set) | SubKind::Resume(set) => {
                    set.remove(&host);
                }
                SubKind::Add(_) => {}
            }
        }
        out.requests_ended += self.retain_subs(|s| match &s.kind {
            SubKind::Add(_) => true,
            SubKind::Delete(set) | SubKind::Suspend(set) | SubKind::Resume(set) => !set.is_empty(),
        });
        out.host_change(id, host, HostChangeKind::Removed(cause));
        out.effects.push(Effect::Released {
            job: id,
            host,
            cause,
        });
    }
}

/// Class membership of machine `m` for `job`'s class `class`, cached per
/// machine generation. A free function over the two parts it needs, so that
/// callers can hold borrows of the others.
pub(super) fn member(
    jobs: &mut BTreeMap<JobId, Job>,
    machines: &[Machine],
    clock: i64,
    job: JobId,
    class: &str,
    m: MachineIdx,
) -> bool {
    let Some(j) = jobs.get_mut(&job) else {
        return false;
    };
    let Job { classes, ad, .. } = j;
    classes
        .get_mut(class)
        .is_some_and(|c| verdict(c, ad, machines, clock, m))
}

/// [`member`] for many machines at once: the job and its class are looked
/// up once, not per machine (a waiting job is tried against every idle host
/// after each change, and the two map lookups per host were most of that).
pub(super) fn members(
    jobs: &mut BTreeMap<JobId, Job>,
    machines: &[Machine],
    clock: i64,
    job: JobId,
    class: &str,
    ms: &[MachineIdx],
) -> Vec<bool> {
    let Some(j) = jobs.get_mut(&job) else {
        return vec![false; ms.len()];
    };
    let Job { classes, ad, .. } = j;
    let Some(c) = classes.get_mut(class) else {
        return vec![false; ms.len()];
    };
    if c.cache.len() < machines.len() {
        c.cache.resize(machines.len(), 0);
    }
    ms.iter()
        .map(|&m| verdict(c, ad, machines, clock, m))
        .collect()
}

/// Whether machine `m` is in class `c` of the job whose ad is `job_ad`.
fn verdict(
    c: &mut Class,
    job_ad: &ClassAd,
    machines: &[Machine],
    clock: i64,
    m: MachineIdx,
) -> bool {
    if c.excluded.contains(&m) {
        return false;
    }
    let i = m.0 as usize;
    let mach = &machines[i];
    // A class that reads the clock changes its verdict with time, not only
    // with the ad: never cached.
    if c.timed {
        return mach.ad.eval_expr_at(&c.expr, Some(job_ad), clock).is_true()
            && (!mach.has_requirements || classad::matching::accepts(&mach.ad, job_ad));
    }
    if c.cache.len() <= i {
        c.cache.resize(machines.len().max(i + 1), 0);
    }
    let entry = c.cache[i];
    if entry != 0 && entry >> 1 == mach.generation {
        return entry & 1 == 1;
    }
    let ok = mach.ad.eval_expr_at(&c.expr, Some(job_ad), clock).is_true()
        && (!mach.has_requirements || classad::matching::accepts(&mach.ad, job_ad));
    c.cache[i] = (mach.generation << 1) | ok as u32;
    ok
}
