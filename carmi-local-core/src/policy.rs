//! The owner policy: when jobs may start on this machine, and when they must
//! be suspended, continued, vacated or killed because the owner wants the
//! machine back. A pure state machine: no I/O and no clock inside.
//!
//! The five decisions are ClassAd expressions (`START`, `SUSPEND`,
//! `CONTINUE`, `PREEMPT`, `KILL`), evaluated against the machine's live ad:
//! the machine ad the daemon advertises, plus
//! - `State`: `"Owner"`, `"Unclaimed"`, `"Claimed"` or `"Preempting"`;
//! - `Activity`: `"Idle"`, `"Busy"`, `"Suspended"`, `"Vacating"` or `"Killing"`;
//! - `KeyboardIdle` (seconds since the owner last touched a terminal or an
//!   input device), `LoadAvg`, `NonPoolLoad` (load not caused by our jobs);
//! - `EnteredCurrentState`, `EnteredCurrentActivity` (policy clock, seconds),
//!   `StateTimer`, `ActivityTimer` (seconds in the current state/activity);
//! - `Minute` (seconds in one policy minute, so that expressions written as
//!   `10 * Minute` scale together) and `VacateGrace` (the scaled grace period).
//!
//! A result that is UNDEFINED or ERROR (or not a boolean) counts as false;
//! it is logged when the outcome of that expression changes, not every tick.
//!
//! The policy is per machine: all slots follow the one owner.
//!
//! # States (HTCondor's, reduced)
//! ```text
//! Owner/Idle --START--> Unclaimed/Idle --a process--> Claimed/Busy
//! Unclaimed/Idle --!START--> Owner/Idle        Claimed/Busy --no process--> Unclaimed/Idle
//! Claimed/Busy --SUSPEND--> Claimed/Suspended --CONTINUE--> Claimed/Busy
//! Claimed/Suspended, no process --CONTINUE--> Unclaimed/Idle (START) or Owner/Idle (!START)
//! Claimed/Busy or Suspended --PREEMPT--> Preempting/Vacating --KILL--> Preempting/Killing
//! Preempting/* --no process--> Owner/Idle
//! ```
//! New processes may start only in `Unclaimed`/`Claimed`+`Busy` while `START` holds.
//!
//! # Call order
//! [`Policy::observe`] when the owner's activity was measured or reported,
//! [`Policy::set_jobs`] when the number of job processes changes, then
//! [`Policy::step`] with the current time, which returns the [`PolicyEffect`]s
//! to carry out in order; call `step` again at [`Policy::next_deadline`] at
//! the latest. Time only moves forward.

use std::sync::LazyLock;

use classad::symbol::Name;
use classad::{ClassAd, Expr, Value, parse_expr};

/// The attributes [`Policy`] writes into the live ad, in the order of its
/// `fill`.
const FILLED: [&str; 11] = [
    "State",
    "Activity",
    "KeyboardIdle",
    "LoadAvg",
    "NonPoolLoad",
    "EnteredCurrentState",
    "EnteredCurrentActivity",
    "StateTimer",
    "ActivityTimer",
    "Minute",
    "VacateGrace",
];

/// [`FILLED`] interned once: every machine's policy is stepped every
/// interval (the simulator steps thousands of them), and interning a name
/// on each write was most of a step's cost.
static FILLED_NAMES: LazyLock<[Name; 11]> = LazyLock::new(|| FILLED.map(Name::new));

/// Default `START`: the keyboard has been idle 15 minutes and the owner's load is low.
pub const DEFAULT_START: &str = "KeyboardIdle > 15 * Minute && NonPoolLoad < 0.3";
/// Default `SUSPEND`: the owner is at the machine, or the owner's load is high.
pub const DEFAULT_SUSPEND: &str = "KeyboardIdle < Minute || NonPoolLoad > 0.7";
/// Default `CONTINUE`: the keyboard has been idle 5 minutes and the owner's load is low.
pub const DEFAULT_CONTINUE: &str = "KeyboardIdle > 5 * Minute && NonPoolLoad < 0.3";
/// Default `PREEMPT`: suspended for 10 minutes.
pub const DEFAULT_PREEMPT: &str = "Activity == \"Suspended\" && ActivityTimer > 10 * Minute";
/// Default `KILL`: vacating for longer than the grace period.
pub const DEFAULT_KILL: &str = "Activity == \"Vacating\" && ActivityTimer > VacateGrace";
/// Default seconds in a policy minute.
pub const DEFAULT_MINUTE: f64 = 60.0;
/// Default SIGTERM -> SIGKILL grace on vacate, in seconds (scaled by `minute / 60`).
pub const DEFAULT_VACATE_GRACE: f64 = 10.0;

/// The policy's expressions and time scale.
#[derive(Clone, Debug)]
pub struct PolicyConfig {
    /// Seconds in one policy minute (the `Minute` attribute).
    pub minute: f64,
    /// May a job start now.
    pub start: Expr,
    /// Stop the jobs now.
    pub suspend: Expr,
    /// Continue suspended jobs now.
    pub continue_: Expr,
    /// Give up and vacate now.
    pub preempt: Expr,
    /// Vacating takes too long: SIGKILL now.
    pub kill: Expr,
    /// SIGTERM -> SIGKILL grace in seconds, before scaling by `minute / 60`.
    pub vacate_grace: f64,
}

impl Default for PolicyConfig {
    fn default() -> PolicyConfig {
        let p = |s: &str| parse_expr(s).expect("default policy expressions parse");
        PolicyConfig {
            minute: DEFAULT_MINUTE,
            start: p(DEFAULT_START),
            suspend: p(DEFAULT_SUSPEND),
            continue_: p(DEFAULT_CONTINUE),
            preempt: p(DEFAULT_PREEMPT),
            kill: p(DEFAULT_KILL),
            vacate_grace: DEFAULT_VACATE_GRACE,
        }
    }
}

impl PolicyConfig {
    /// The vacate grace period in seconds, scaled: `vacate_grace * minute / 60`.
    pub fn grace_seconds(&self) -> f64 {
        self.vacate_grace * self.minute / 60.0
    }

    /// How often the expressions are evaluated without a new input: a
    /// twelfth of a policy minute (5 s by default), between 10 ms and 5 s.
    pub fn interval(&self) -> f64 {
        (self.minute / 12.0).clamp(0.01, 5.0)
    }
}

/// The machine's state, as HTCondor names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineState {
    /// The owner's: nothing may run.
    Owner,
    /// Open to the pool, no job process here.
    Unclaimed,
    /// Job processes here.
    Claimed,
    /// Job processes being removed.
    Preempting,
}

/// What the machine is doing within its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Nothing.
    Idle,
    /// Running jobs.
    Busy,
    /// Jobs stopped.
    Suspended,
    /// Jobs got SIGTERM.
    Vacating,
    /// Jobs got SIGKILL.
    Killing,
}

impl MachineState {
    /// The name used in the ad.
    pub fn name(self) -> &'static str {
        match self {
            MachineState::Owner => "Owner",
            MachineState::Unclaimed => "Unclaimed",
            MachineState::Claimed => "Claimed",
            MachineState::Preempting => "Preempting",
        }
    }
}

impl Activity {
    /// The name used in the ad.
    pub fn name(self) -> &'static str {
        match self {
            Activity::Idle => "Idle",
            Activity::Busy => "Busy",
            Activity::Suspended => "Suspended",
            Activity::Vacating => "Vacating",
            Activity::Killing => "Killing",
        }
    }
}

/// The owner's activity, as last measured or reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    /// Seconds since the owner last used a terminal or input device.
    pub keyboard_idle: f64,
    /// The machine's one-minute load average.
    pub load_avg: f64,
    /// Load not caused by job processes (floor 0).
    pub non_pool_load: f64,
}

/// What the driver must do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyEffect {
    /// Offer the slots to the pool and accept new processes.
    Open,
    /// Withdraw the (empty) slots and refuse new processes.
    Close,
    /// Stop every job process (SIGSTOP to each group); slots are Suspended.
    Suspend,
    /// Continue every job process (SIGCONT); slots are Available again.
    Resume,
    /// SIGTERM (and SIGCONT) to every job process; slots are Vacated.
    Vacate,
    /// SIGKILL to every job process still there.
    Kill,
}

/// The five expressions, for logging and the once-per-change bookkeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Start = 0,
    Suspend = 1,
    Continue = 2,
    Preempt = 3,
    Kill = 4,
}

impl Which {
    fn name(self) -> &'static str {
        ["START", "SUSPEND", "CONTINUE", "PREEMPT", "KILL"][self as usize]
    }
}

/// The owner policy of one machine.
#[derive(Debug)]
pub struct Policy {
    config: PolicyConfig,
    state: MachineState,
    activity: Activity,
    entered_state: f64,
    entered_activity: f64,
    obs: Observation,
    jobs: usize,
    may_start: bool,
    /// Last non-boolean outcome per expression (`None`: it was a boolean).
    odd: [Option<&'static str>; 5],
    next_deadline: f64,
}

impl Policy {
    /// A policy at time `now`, in `Unclaimed/Idle` (the slots start open;
    /// the first [`Policy::step`] closes them if `START` does not hold),
    /// with an owner idle for a long time until observed otherwise.
    pub fn new(config: PolicyConfig, now: f64) -> Policy {
        Policy {
            config,
            state: MachineState::Unclaimed,
            activity: Activity::Idle,
            entered_state: now,
            entered_activity: now,
            obs: Observation {
                keyboard_idle: 1e9,
                load_avg: 0.0,
                non_pool_load: 0.0,
            },
            jobs: 0,
            may_start: false,
            odd: [None; 5],
            next_deadline: now,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// The current state.
    pub fn state(&self) -> MachineState {
        self.state
    }

    /// The current activity.
    pub fn activity(&self) -> Activity {
        self.activity
    }

    /// True if a new process may start now (as of the last step).
    pub fn may_start(&self) -> bool {
        self.may_start
    }

    /// When `step` must be called again at the latest.
    pub fn next_deadline(&self) -> f64 {
        self.next_deadline
    }

    /// Records the owner's activity (used from the next step on).
    pub fn observe(&mut self, obs: Observation) {
        self.obs = obs;
    }

    /// Records how many job processes the machine has (starting, running or exiting).
    pub fn set_jobs(&mut self, jobs: usize) {
        self.jobs = jobs;
    }

    /// The live ad at `now`: `base` (the machine ad) plus the policy's attributes.
    pub fn ad(&self, now: f64, base: &ClassAd) -> ClassAd {
        let mut ad = base.clone();
        self.fill(now, &mut ad);
        ad
    }

    /// Writes the policy's attributes at `now` into `ad` (a copy of the
    /// machine ad), replacing those of an earlier `fill`: a step refills one
    /// copy between transitions instead of copying the machine ad again.
    fn fill(&self, now: f64, ad: &mut ClassAd) {
        let values = [
            Value::str(self.state.name()),
            Value::str(self.activity.name()),
            Value::Real(self.obs.keyboard_idle),
            Value::Real(self.obs.load_avg),
            Value::Real(self.obs.non_pool_load),
            Value::Real(self.entered_state),
            Value::Real(self.entered_activity),
            Value::Real(now - self.entered_state),
            Value::Real(now - self.entered_activity),
            Value::Real(self.config.minute),
            Value::Real(self.config.grace_seconds()),
        ];
        for (name, v) in FILLED_NAMES.iter().zip(values) {
            ad.insert_name(*name, Expr::Literal(v));
        }
    }

    /// What the global RM's copy of the machine ad carries of the policy at
    /// `now`, so that `carmi status -constraint 'State == "Owner"'` and
    /// `-analyze` see what the owner's machine sees: its state and activity,
    /// when it entered them (Unix seconds: `unix_epoch` is the Unix time of
    /// the policy's time zero) and the owner's activity. `LoadAvg` is left
    /// to the machine ad's own sample.
    pub fn public_values(&self, unix_epoch: f64) -> Vec<(&'static str, Value)> {
        vec![
            ("State", Value::str(self.state.name())),
            ("Activity", Value::str(self.activity.name())),
            (
                "EnteredCurrentState",
                Value::Int((unix_epoch + self.entered_state) as i64),
            ),
            (
                "EnteredCurrentActivity",
                Value::Int((unix_epoch + self.entered_activity) as i64),
            ),
            ("KeyboardIdle", Value::Int(self.advertised_keyboard_idle())),
            ("NonPoolLoad", Value::Real(self.obs.non_pool_load)),
            // What the expressions below are written in, so that whoever
            // evaluates them on the global RM's copy gets the owner's answer.
            ("Minute", Value::Real(self.config.minute)),
            ("VacateGrace", Value::Real(self.config.grace_seconds())),
        ]
    }

    /// `KeyboardIdle` for the global RM's copy, in whole policy minutes:
    /// it grows every second while the owner is away, and every changed
    /// heartbeat makes the global RM look at the machine's idle slots again,
    /// so the copy moves once a minute (at most one minute behind; the
    /// policy itself decides on the exact value).
    fn advertised_keyboard_idle(&self) -> i64 {
        let minute = self.config.minute.max(1.0);
        ((self.obs.keyboard_idle / minute).floor() * minute) as i64
    }

    /// The policy's expressions under HTCondor's names (`Start`, `Suspend`,
    /// `Continue`, `Preempt`, `Kill`), for the advertised ad: whoever reads
    /// the ad can tell why a machine does not start jobs.
    pub fn expressions(&self) -> [(&'static str, &Expr); 5] {
        let c = &self.config;
        [
            ("Start", &c.start),
            ("Suspend", &c.suspend),
            ("Continue", &c.continue_),
            ("Preempt", &c.preempt),
            ("Kill", &c.kill),
        ]
    }

    /// Evaluates the policy at `now` against `base` and moves as far as it
    /// goes; returns what to do, in order.
    pub fn step(&mut self, now: f64, base: &ClassAd) -> Vec<PolicyEffect> {
        let mut effects = Vec::new();
        // Each pass moves at most one transition; a chain is bounded by the
        // number of states, so the bound only guards against a logic error.
        let mut ad = base.clone();
        self.fill(now, &mut ad);
        for _ in 0..8 {
            let Some(effect) = self.transition(now, &ad) else {
                // Stable: nothing changed since the last fill, so `ad` is
                // already what `START` below is evaluated in.
                break;
            };
            if let Some(e) = effect {
                effects.push(e);
            }
            self.fill(now, &mut ad);
        }
        self.may_start = matches!(
            (self.state, self.activity),
            (MachineState::Unclaimed, _) | (MachineState::Claimed, Activity::Busy)
        ) && self.eval(Which::Start, &ad);
        self.next_deadline = now + self.config.interval();
        effects
    }

    /// One transition, if any applies: `Some(effect or none)`; `None` when stable.
    fn transition(&mut self, now: f64, ad: &ClassAd) -> Option<Option<PolicyEffect>> {
        use Activity as A;
        use MachineState as S;
        let jobs = self.jobs > 0;
        let (to, effect) = match (self.state, self.activity) {
            (S::Owner, _) => {
                if !self.eval(Which::Start, ad) {
                    return None;
                }
                ((S::Unclaimed, A::Idle), Some(PolicyEffect::Open))
            }
            (S::Unclaimed, _) if jobs => ((S::Claimed, A::Busy), None),
            (S::Unclaimed, _) => {
                if self.eval(Which::Start, ad) {
                    return None;
                }
                ((S::Owner, A::Idle), Some(PolicyEffect::Close))
            }
            // Processes gone while suspended: straight to where an empty
            // machine belongs, without offering the slots for a moment.
            (S::Claimed, A::Suspended) if !jobs && self.eval(Which::Continue, ad) => {
                if self.eval(Which::Start, ad) {
                    ((S::Unclaimed, A::Idle), Some(PolicyEffect::Resume))
                } else {
                    ((S::Owner, A::Idle), Some(PolicyEffect::Close))
                }
            }
            (S::Claimed, A::Suspended) => {
                if self.eval(Which::Continue, ad) {
                    ((S::Claimed, A::Busy), Some(PolicyEffect::Resume))
                } else if self.eval(Which::Preempt, ad) {
                    ((S::Preempting, A::Vacating), Some(PolicyEffect::Vacate))
                } else {
                    return None;
                }
            }
            (S::Claimed, _) if !jobs => ((S::Unclaimed, A::Idle), None),
            (S::Claimed, _) => {
                if self.eval(Which::Suspend, ad) {
                    ((S::Claimed, A::Suspended), Some(PolicyEffect::Suspend))
                } else if self.eval(Which::Preempt, ad) {
                    ((S::Preempting, A::Vacating), Some(PolicyEffect::Vacate))
                } else {
                    return None;
                }
            }
            (S::Preempting, _) if !jobs => ((S::Owner, A::Idle), None),
            (S::Preempting, A::Killing) => return None,
            (S::Preempting, _) => {
                if !self.eval(Which::Kill, ad) {
                    return None;
                }
                ((S::Preempting, A::Killing), Some(PolicyEffect::Kill))
            }
        };
        tracing::info!(
            from = %format_args!("{}/{}", self.state.name(), self.activity.name()),
            to = %format_args!("{}/{}", to.0.name(), to.1.name()),
            "owner policy transition"
        );
        if to.0 != self.state {
            self.entered_state = now;
        }
        if to.1 != self.activity || to.0 != self.state {
            self.entered_activity = now;
        }
        (self.state, self.activity) = to;
        Some(effect)
    }

    /// Evaluates one expression; anything but a boolean is false, logged once per change.
    fn eval(&mut self, which: Which, ad: &ClassAd) -> bool {
        let expr = match which {
            Which::Start => &self.config.start,
            Which::Suspend => &self.config.suspend,
            Which::Continue => &self.config.continue_,
            Which::Preempt => &self.config.preempt,
            Which::Kill => &self.config.kill,
        };
        let v = ad.eval_expr(expr, None);
        let (result, odd) = match v {
            Value::Bool(b) => (b, None),
            Value::Undefined => (false, Some("UNDEFINED")),
            Value::Error => (false, Some("ERROR")),
            ref other => (false, Some(other.type_name())),
        };
        let slot = &mut self.odd[which as usize];
        if *slot != odd {
            match odd {
                Some(kind) => tracing::warn!(
                    expression = which.name(),
                    text = %expr,
                    result = kind,
                    "owner policy expression is not a boolean; taken as false"
                ),
                None => tracing::info!(
                    expression = which.name(),
                    "owner policy expression is a boolean again"
                ),
            }
            *slot = odd;
        }
        result
    }

    /// How many expressions currently evaluate to something other than a boolean (tests, status).
    pub fn odd_expressions(&self) -> usize {
        self.odd.iter().filter(|o| o.is_some()).count()
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
