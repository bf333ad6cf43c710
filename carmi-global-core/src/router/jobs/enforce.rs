//! A job's requests enforced (issue 30): the global RM sends each process
//! its job's `request_memory` and `request_cpus` ([`Requests`], with every
//! `Spawn` and `SpawnMaster`), the local RM binds the process to them (a
//! cgroup), and reports with its exit what it used ([`ProcessUsage`]). Here
//! the router keeps each job's peak memory for `carmi q` and `carmi
//! history`, and holds a job one of whose processes went over its
//! `request_memory`, with the reason, as HTCondor does: the job keeps its
//! place, and `carmi release` (after raising nothing: the submit file is
//! the job's) starts it again from scratch.
//!
//! The peaks live in memory only: after a restart of the global RM, a
//! running job's peak counts from the processes that exit afterwards (an
//! ended job's is in its journaled history record).

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{ExitStatus, ProcessUsage, Requests};
use tracing::{info, warn};

use crate::router::Router;

/// The hold reason of a job whose `process` on `machine` went over its
/// `request_memory`, in HTCondor's terms: what it used and what it asked
/// for, both in MiB.
pub fn over_memory_reason(
    usage: &ProcessUsage,
    request_mib: u64,
    process: ProcessId,
    machine: &str,
) -> String {
    format!(
        "memory usage {} MiB exceeded request_memory {request_mib} MiB: process {process} on \
         {machine} was stopped at its limit; submit the job again with a higher request_memory",
        usage.memory_peak_mib()
    )
}

impl Router {
    /// What `job`'s processes are bound to: its submit file's requests
    /// (none for a job started by hand).
    pub(in crate::router) fn job_requests(&self, job: JobId) -> Requests {
        self.jobs
            .submitted
            .get(&job)
            .map(|s| s.spec.requests())
            .unwrap_or_default()
    }

    /// The highest peak memory (KiB) of `job`'s processes that exited, 0
    /// when none was measured.
    pub(in crate::router) fn memory_peak(&self, job: JobId) -> u64 {
        self.jobs.memory_peaks.get(&job).copied().unwrap_or(0)
    }

    /// `job`'s published attributes for `carmi q`, with HTCondor's
    /// `MemoryUsage` (MiB) and `ResidentSetSize` (KiB) once a process of it
    /// exited with its peak measured.
    pub(in crate::router) fn attrs_with_usage(&self, job: JobId) -> Vec<(String, String)> {
        let mut attrs = self.jobs.job_attrs.of(job);
        let peak = self.memory_peak(job);
        if peak > 0 {
            let usage = ProcessUsage {
                memory_peak_kib: peak,
                memory_exceeded_mib: None,
            };
            attrs.retain(|(n, _)| n != "MemoryUsage" && n != "ResidentSetSize");
            attrs.push(("MemoryUsage".into(), usage.memory_peak_mib().to_string()));
            attrs.push(("ResidentSetSize".into(), peak.to_string()));
            attrs.sort();
        }
        attrs
    }

    /// The usage an `Exited` of `process` from `machine` carried: the job's
    /// peak rises to it, and a process over its `request_memory` holds its
    /// job. True when the job was held: the exit needs nothing more (the
    /// process is marked exited, the job's others are killed and forgotten).
    pub(in crate::router) fn on_exit_usage(
        &mut self,
        machine: &str,
        process: ProcessId,
        status: &ExitStatus,
        cpu_seconds: f64,
        usage: ProcessUsage,
    ) -> bool {
        let master = self.jobs.master_on(process, machine);
        let job = master.or_else(|| {
            let live = self.procs.find(process).filter(|p| p.is_live())?;
            let job = live.job;
            self.runs_on(process, machine).then_some(job)
        });
        let Some(job) = job else {
            return false;
        };
        if usage.memory_peak_kib > 0 {
            let peak = self.jobs.memory_peaks.entry(job).or_default();
            *peak = (*peak).max(usage.memory_peak_kib);
        }
        let Some(request) = usage.memory_exceeded_mib else {
            return false;
        };
        let reason = over_memory_reason(&usage, request, process, machine);
        if !self.jobs.submitted.contains_key(&job) {
            warn!(job = %job, %process, machine, reason, "a process of a job started by hand went over its memory; it has no submit file to hold it for");
            return false;
        }
        self.exit_process(process, status.clone(), cpu_seconds);
        if master.is_some() {
            // It is gone already: holding must not send it a `Kill`.
            self.jobs.sent_masters.remove(&process);
            self.jobs.masters.remove(&process);
            if let Some(s) = self.jobs.submitted.get_mut(&job) {
                s.master = None;
            }
        }
        self.hold_over_request(job, &reason)
    }

    /// Holds `job` for going over what it asked for, like `carmi hold` with
    /// the policy's reason; false when it cannot be held (held already by
    /// another of its processes' exits).
    fn hold_over_request(&mut self, job: JobId, why: &str) -> bool {
        if let Err(f) = self.alloc.hold_job(job) {
            info!(job = %job, "not held again: {}", f.message);
            return true;
        }
        info!(job = %job, "job held: over its request");
        self.stop_job_processes(job);
        self.held_by_pool(job, why);
        true
    }
}
