//! Concurrency limits (HTCondor's `concurrency_limits`): pool-wide counted
//! resources such as software licences, named by jobs and capped by the
//! pool's admin.
//!
//! A job names limits in its `ConcurrencyLimits` attribute, a string of
//! comma-separated `name` or `name:amount` (amount 1 unless given; names
//! are case-insensitive). The admin caps each name (`carmi-global
//! --concurrency-limit NAME=N`, HTCondor's `NAME_LIMIT = N`) and may cap
//! every other name at once (`--concurrency-limit-default N`, HTCondor's
//! `CONCURRENCY_LIMIT_DEFAULT`); a name with neither is not limited.
//!
//! A job *holds* its amounts from the moment it starts (its minimums are
//! met) until it ends, is held, or goes back to the queue. A waiting job
//! starts only if, for every name it gives, the amounts held plus its own
//! stay within the cap; otherwise it waits, keeping no slot from the jobs
//! behind it, and `carmi q` says which limit it waits for. Limits count
//! jobs, not machines: a job of 1..20 machines holding `matlab` holds one
//! `matlab` however many machines it grows to.
//!
//! HTCondor's sub-limits (`name.sub`, counted against `name` too) are not
//! modelled: `a.b` is a name of its own here.
//!
//! Cheap on the hot path: a job that names no limit is let through on an
//! empty list, and the amounts in use are kept per name as jobs start and
//! stop, never recounted.

use std::collections::{BTreeMap, HashMap};

use carmi_proto::ids::JobId;
use serde::{Deserialize, Serialize};

use super::Allocator;

/// Most names one job may give (a submit file naming more is refused by
/// [`parse_concurrency_limits`]).
pub const MAX_LIMITS_PER_JOB: usize = 64;

/// Longest name of a limit, in bytes.
pub const MAX_LIMIT_NAME: usize = 128;

/// The admin's caps: per name (lower case), and for every other name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConcurrencyConfig {
    /// Cap per limit name, names in lower case (`--concurrency-limit NAME=N`).
    pub limits: BTreeMap<String, f64>,
    /// Cap of every name not in `limits` (`--concurrency-limit-default N`);
    /// `None`: such names are not limited.
    pub default: Option<f64>,
}

impl ConcurrencyConfig {
    /// The cap of `name` (lower case), if it has one.
    pub fn cap(&self, name: &str) -> Option<f64> {
        self.limits.get(name).copied().or(self.default)
    }
}

/// One name a job gives, in lower case, and the amount it takes.
pub type Need = (String, f64);

/// Reads a job's `ConcurrencyLimits` text (`"licA,licB:2"`): names lower
/// cased, amounts 1 unless given. Fails, naming the entry, on an empty
/// name, a name with other characters than letters, digits, `_`, `-` and
/// `.`, an amount that is not a positive number, or too many names.
pub fn parse_concurrency_limits(text: &str) -> Result<Vec<Need>, String> {
    let mut out: Vec<Need> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, amount) = match entry.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (entry, None),
        };
        if name.is_empty() || name.len() > MAX_LIMIT_NAME {
            return Err(format!(
                "concurrency_limits entry `{entry}`: a name of 1 to {MAX_LIMIT_NAME} bytes is needed"
            ));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(format!(
                "concurrency_limits entry `{entry}`: a name holds only letters, digits, `_`, `-` and `.`"
            ));
        }
        let amount = match amount {
            None => 1.0,
            Some(a) => match a.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => v,
                _ => {
                    return Err(format!(
                        "concurrency_limits entry `{entry}`: the amount `{a}` is not a positive number (write `{name}:2` for two)"
                    ));
                }
            },
        };
        let name = name.to_ascii_lowercase();
        // A name given twice takes both amounts, as one entry would.
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, a)) => *a += amount,
            None => out.push((name, amount)),
        }
    }
    if out.len() > MAX_LIMITS_PER_JOB {
        return Err(format!(
            "concurrency_limits names {} limits; at most {MAX_LIMITS_PER_JOB} are allowed",
            out.len()
        ));
    }
    Ok(out)
}

/// The limits a job takes: none, the parsed names, or why its
/// `ConcurrencyLimits` could not be read (such a job never starts, and `carmi
/// q` says why, rather than start ignoring what its owner asked for).
pub(super) type JobNeeds = Result<Vec<Need>, String>;

/// Reads the needs of a job from its ad's `ConcurrencyLimits` (absent or
/// undefined: none).
pub(super) fn needs_of(ad: &classad::ClassAd) -> JobNeeds {
    if ad.get("ConcurrencyLimits").is_none() {
        return Ok(Vec::new());
    }
    let v = ad.eval_attr("ConcurrencyLimits");
    match v.as_str() {
        Some(text) => parse_concurrency_limits(text),
        None if v.is_undefined() => Ok(Vec::new()),
        None => Err("ConcurrencyLimits is not a string: write it as \"name,other:2\"".into()),
    }
}

/// The admin's caps and the amounts running jobs hold.
#[derive(Debug, Default)]
pub(super) struct Concurrency {
    pub(super) config: ConcurrencyConfig,
    /// Amount held per name by running jobs (names nobody holds are absent).
    pub(super) in_use: HashMap<String, f64>,
}

/// Amounts are compared with this slack, so that fractions added and taken
/// away again do not leave a cap looking exceeded by a rounding error.
const SLACK: f64 = 1e-9;

impl Concurrency {
    /// Why `needs` cannot be taken now (the first name that would go over
    /// its cap), or `None` when they all fit.
    fn blocker(&self, needs: &[Need]) -> Option<String> {
        for (name, amount) in needs {
            let Some(cap) = self.config.cap(name) else {
                continue;
            };
            let used = self.in_use.get(name).copied().unwrap_or(0.0);
            if *amount > cap + SLACK {
                return Some(format!(
                    "waits for concurrency limit {name}: it needs {} and the pool's limit is {} \
                     (it cannot start unless the admin raises the limit)",
                    num(*amount),
                    num(cap)
                ));
            }
            if used + amount > cap + SLACK {
                return Some(format!(
                    "waits for concurrency limit {name} ({} of {} in use{})",
                    num(used),
                    num(cap),
                    if *amount == 1.0 {
                        String::new()
                    } else {
                        format!(", it needs {}", num(*amount))
                    }
                ));
            }
        }
        None
    }

    fn take(&mut self, needs: &[Need]) {
        for (name, amount) in needs {
            *self.in_use.entry(name.clone()).or_default() += amount;
        }
    }

    fn give_back(&mut self, needs: &[Need]) {
        for (name, amount) in needs {
            if let Some(used) = self.in_use.get_mut(name) {
                *used -= amount;
                if *used <= SLACK {
                    self.in_use.remove(name);
                }
            }
        }
    }
}

/// A number as people write it: `2`, not `2.0`.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Allocator {
    /// Sets the admin's caps (the global RM's configuration). Jobs already
    /// running keep what they hold; waiting jobs are judged by the new caps.
    pub fn set_concurrency_limits(&mut self, config: ConcurrencyConfig) {
        self.concurrency.config = config;
        self.dirty = true;
    }

    /// The amounts running jobs hold per limit name (for tests and `carmi q`).
    pub fn concurrency_in_use(&self, name: &str) -> f64 {
        let name = name.to_ascii_lowercase();
        self.concurrency.in_use.get(&name).copied().unwrap_or(0.0)
    }

    /// Why waiting `job` may not start now for its concurrency limits
    /// (`carmi q` shows it); `None` when it may, or does not wait.
    pub fn concurrency_wait(&self, job: JobId) -> Option<String> {
        let j = self.jobs.get(&job)?;
        if j.phase != super::Phase::Waiting {
            return None;
        }
        match &j.concurrency {
            Ok(needs) if needs.is_empty() => None,
            Ok(needs) => self.concurrency.blocker(needs),
            Err(why) => Some(format!("waits forever: {why}")),
        }
    }

    /// True when `job` may start as far as its concurrency limits go: the
    /// first test of every start attempt, free for a job that names none.
    pub(super) fn limits_allow(&self, job: JobId) -> bool {
        match &self.jobs[&job].concurrency {
            Ok(needs) => needs.is_empty() || self.concurrency.blocker(needs).is_none(),
            Err(_) => false,
        }
    }

    /// `job` started (or was recovered running): it holds its amounts.
    pub(super) fn take_limits(&mut self, job: JobId) {
        if let Ok(needs) = &self.jobs[&job].concurrency
            && !needs.is_empty()
        {
            self.concurrency.take(needs);
        }
    }

    /// `job` stopped running (ended, held, requeued): its amounts are free,
    /// and a waiting job may now start on them.
    pub(super) fn give_back_limits(&mut self, job: JobId) {
        if let Some(Ok(needs)) = self.jobs.get(&job).map(|j| &j.concurrency)
            && !needs.is_empty()
        {
            self.concurrency.give_back(needs);
            self.dirty = true;
        }
    }

    /// The amounts running jobs hold, counted afresh (for the sanity check).
    pub(super) fn recount_limits(&self) -> HashMap<String, f64> {
        let mut out: HashMap<String, f64> = HashMap::new();
        for id in &self.running {
            if let Ok(needs) = &self.jobs[id].concurrency {
                for (name, amount) in needs {
                    *out.entry(name.clone()).or_default() += amount;
                }
            }
        }
        out
    }
}
