//! Jobs at the router: those submitted with `carmi submit` (with their
//! master, which runs outside the slots of a machine and whose exit ends the
//! job), and those started by hand, whose first process attached. This file
//! holds the part's state ([`Jobs`], [`Submitted`]) and what every file
//! below reads of a submit; the decisions are in
//! - `admin.rs`: the admin requests (`submit`, `rm`, `q`, `q -analyze`, `history`),
//! - `master.rs`: a master's start, report and kill,
//! - `anywhere.rs`: placing a master on a machine the global RM picks, and its returned files,
//! - `requeue.rs`: a master that failed to start or was evicted, queued again,
//! - `hold.rs`, `shrink.rs`: holds (`carmi hold`, and by the pool),
//! - `checkpoint.rs`: a vacated master's checkpoint,
//! - `enforce.rs`, `job_attrs.rs`: requests enforced, and attributes jobs publish,
//! - `policy.rs`, `job_ad.rs`: the job's `periodic_*` and `on_exit_*`
//!   expressions, and the job ad they are evaluated against.
//!
//! Replaying the journal after a restart is in `router/recover.rs`.

use std::collections::{BTreeSet, HashMap, HashSet};

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{ExecutableRef, ExitStatus, JobFiles, SubmitRequest};
use carmi_proto::submit::JobSpec;
use classad::ClassAd;

use crate::alloc::ClassLimits;

mod admin;
mod anywhere;
mod checkpoint;
mod cluster;
mod enforce;
mod hold;
mod job_ad;
mod job_attrs;
mod master;
mod materialize;
mod policy;
pub(super) mod requeue;
mod shrink;

pub(super) use checkpoint::leaves_checkpoint;
pub(super) use materialize::Pending;

/// Jobs and their masters (see the module documentation).
pub(super) struct Jobs {
    /// Jobs submitted with `carmi submit`, until they end.
    pub submitted: HashMap<JobId, Submitted>,
    /// Live masters of submitted jobs: their job and the machine running them.
    pub masters: HashMap<ProcessId, (JobId, String)>,
    /// Processes replayed from the journal whose host is not held again yet:
    /// their job and class, until their machine re-reports them.
    pub recovered: HashMap<ProcessId, (JobId, String)>,
    /// Root processes of hand-started jobs replayed from the journal, with
    /// their job and machine, until they attach again; one that is not back
    /// by its machine's first heartbeat after registering is gone, and so is
    /// its job.
    pub awaiting_roots: HashMap<ProcessId, (JobId, String)>,
    /// Masters whose `SpawnMaster` went out (the others wait for their machine).
    pub sent_masters: HashSet<ProcessId>,
    /// Masters waiting for a machine that may start them (none matched, or
    /// their machine's owner policy says no): placed when a machine
    /// registers or changes its ad, or one passed over is eligible again.
    pub unplaced: BTreeSet<ProcessId>,
    /// Masters their machine's owner is vacating (`Vacating`): their end
    /// puts their job back in the queue (`requeue.rs`).
    pub vacating: HashSet<ProcessId>,
    /// The next job id to give.
    pub next_job: u64,
    /// Each queued job's highest peak memory of its exited processes, KiB
    /// (`enforce.rs`).
    pub memory_peaks: HashMap<JobId, u64>,
    /// Attributes running jobs published (`job_attrs.rs`).
    pub job_attrs: job_attrs::JobAttrs,
    /// Clusters' procs not materialized yet, by cluster (`materialize.rs`).
    pub pending: std::collections::BTreeMap<JobId, materialize::Pending>,
    /// The `periodic_*` and `on_exit_*` policies of queued jobs (`policy.rs`).
    pub policies: policy::Policies,
}

impl Jobs {
    /// No job yet; job ids start at 1.
    pub fn new() -> Jobs {
        Jobs {
            submitted: HashMap::new(),
            masters: HashMap::new(),
            recovered: HashMap::new(),
            awaiting_roots: HashMap::new(),
            sent_masters: HashSet::new(),
            unplaced: BTreeSet::new(),
            vacating: HashSet::new(),
            next_job: 1,
            memory_peaks: HashMap::new(),
            job_attrs: Default::default(),
            pending: Default::default(),
            policies: Default::default(),
        }
    }

    /// The job a master process leads, if `process` is one and runs on `machine`.
    pub fn master_on(&self, process: ProcessId, machine: &str) -> Option<JobId> {
        self.masters
            .get(&process)
            .filter(|(_, m)| m == machine)
            .map(|(j, _)| *j)
    }

    /// Forgets master `process` as a master (its job keeps its record).
    pub fn forget_master(&mut self, process: ProcessId) {
        self.masters.remove(&process);
        self.sent_masters.remove(&process);
        self.unplaced.remove(&process);
    }

    /// Forgets the master `process` of `job`, which is gone already (so
    /// that nothing kills it again), and that it was being vacated.
    pub fn forget_gone_master(&mut self, job: JobId, process: ProcessId) {
        self.forget_master(process);
        self.vacating.remove(&process);
        if let Some(s) = self.submitted.get_mut(&job)
            && s.master == Some(process)
        {
            s.master = None;
        }
    }
}

/// What the router keeps of a submitted job.
#[derive(Clone, Debug)]
pub(super) struct Submitted {
    pub owner: String,
    /// The machine whose local RM runs the master (empty while a master the
    /// global RM places finds no machine).
    pub machine: String,
    /// The submit machine's name (or the machine the master is pinned to).
    pub submit_machine: String,
    /// The master may run elsewhere than `submit_machine` (not pinned).
    pub anywhere: bool,
    /// The global RM placed the master away from the submit machine: its
    /// output and error come back as files rather than being written in place.
    pub placed: bool,
    /// `[Requirements = master_requirements]`, for placing the master.
    pub master_ad: Option<ClassAd>,
    /// What the master sent back before it exited.
    pub returned: Option<JobFiles>,
    pub executable: ExecutableRef,
    /// Macros expanded.
    pub spec: JobSpec,
    pub submitted_unix: u64,
    /// The master, once started.
    pub master: Option<ProcessId>,
    /// When the master was sent to its machine (Unix seconds), for the
    /// job's wall time in `carmi history`; not journaled.
    pub started_unix: u64,
    /// Why it is held (`carmi hold`), while it is.
    pub held: Option<String>,
    /// Its masters' starts, failures and evictions (`router/requeue.rs`).
    pub tries: requeue::Tries,
    /// The cluster it is a proc of: the job id of the cluster's proc 0 (its
    /// own id for a cluster of one). Its proc number is `job - cluster`.
    pub cluster: JobId,
}

impl Submitted {
    /// A job accepted from `req` (at its submit or replayed from the
    /// journal), with its macros expanded in `spec`; its master not started yet.
    pub fn new(
        req: SubmitRequest,
        spec: JobSpec,
        master_ad: Option<ClassAd>,
        cluster: JobId,
    ) -> Submitted {
        Submitted {
            owner: req.owner,
            machine: req.machine.clone(),
            submit_machine: req.machine,
            anywhere: req.anywhere,
            placed: false,
            master_ad,
            returned: None,
            executable: req.executable,
            spec,
            submitted_unix: req.submitted_unix,
            master: None,
            started_unix: 0,
            held: None,
            tries: Default::default(),
            cluster,
        }
    }
}

/// `[Requirements = master_requirements]` for placing a job's master, or
/// why the expression is refused (a client other than `carmi` may send one).
pub(super) fn master_ad(spec: &JobSpec) -> Result<Option<ClassAd>, String> {
    let Some(text) = &spec.master_requirements else {
        return Ok(None);
    };
    let mut ad = ClassAd::new();
    ad.insert_expr_str("Requirements", text)
        .map_err(|e| format!("master_requirements: not a ClassAd expression: {e}"))?;
    Ok(Some(ad))
}

/// The files a job's master sends back, by their name in its sandbox, and
/// where each goes on the submit machine: its output and error when the
/// global RM placed it away from the submit machine, and its
/// `transfer_output_files` (by file name, into `initialdir`, as HTCondor
/// does) wherever it ran.
pub(super) fn return_plan(sub: &Submitted) -> Vec<(String, String)> {
    let mut plan = Vec::new();
    if sub.placed {
        for (name, path) in [("stdout", &sub.spec.output), ("stderr", &sub.spec.error)] {
            if let Some(p) = path {
                plan.push((name.to_string(), p.clone()));
            }
        }
    }
    let dir = std::path::Path::new(sub.spec.initial_dir.as_deref().unwrap_or(""));
    let remaps = output_remaps(&sub.spec);
    for f in &sub.spec.transfer_output_files {
        let Some(base) = std::path::Path::new(f).file_name() else {
            continue;
        };
        if plan.iter().any(|(n, _)| n == f) {
            continue;
        }
        // `transfer_output_remaps` names where a file goes instead, relative
        // to `initialdir` unless absolute.
        let to = remaps
            .iter()
            .find(|(from, _)| from == f || std::path::Path::new(from).file_name() == Some(base))
            .map_or(base, |(_, to)| std::ffi::OsStr::new(to.as_str()));
        plan.push((f.clone(), dir.join(to).to_string_lossy().into_owned()));
    }
    // A checkpoint comes back whenever the master exits (kept only when it
    // left one); at the job's end it lands beside the output files.
    for name in &sub.spec.transfer_checkpoint_files {
        if !plan.iter().any(|(n, _)| n == name) {
            plan.push((name.clone(), dir.join(name).to_string_lossy().into_owned()));
        }
    }
    plan.truncate(limits::MAX_RETURNED_FILES);
    plan
}

/// The `transfer_output_remaps` of `spec` (the job attribute
/// `TransferOutputRemaps = "from = to; ..."`), as (from, to) pairs.
fn output_remaps(spec: &JobSpec) -> Vec<(String, String)> {
    let Some((_, text)) = spec
        .attributes
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("TransferOutputRemaps"))
    else {
        return Vec::new();
    };
    let value = classad::parse_expr(text)
        .ok()
        .map(|e| ClassAd::new().eval_expr(&e, None));
    let Some(s) = value.as_ref().and_then(|v| v.as_str()) else {
        return Vec::new();
    };
    s.split(';')
        .filter_map(|pair| pair.split_once('='))
        .map(|(from, to)| (from.trim().to_string(), to.trim().to_string()))
        .filter(|(from, to)| !from.is_empty() && !to.is_empty())
        .collect()
}

/// What the allocator needs of a submit file's classes (for a new submit and
/// for one recovered from the journal alike).
pub(super) fn class_limits(spec: &carmi_proto::submit::JobSpec) -> Vec<ClassLimits> {
    spec.classes
        .iter()
        .map(|c| ClassLimits {
            name: c.name.clone(),
            expression: c.requirements.clone(),
            min: c.min,
            max: c.max,
            rank: c.rank.clone(),
        })
        .collect()
}

/// How a master ended, in words for a reason.
pub(super) fn exit_words(status: &ExitStatus) -> String {
    match status {
        ExitStatus::Code(c) => format!("exit {c}"),
        ExitStatus::Signal(s) => format!("signal {s}"),
        ExitStatus::HostLost => "its machine lost".into(),
        ExitStatus::FailedToStart(r) => format!("failed to start: {r}"),
    }
}
