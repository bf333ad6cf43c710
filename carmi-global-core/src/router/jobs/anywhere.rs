//! Where a submitted job's master runs, and what it sends back: placing a
//! master submitted from outside the pool on a machine its
//! `master_requirements` accept (fewest masters first; waiting while none
//! matches), starting it again elsewhere when its machine is lost, and the
//! files (output, error, `transfer_output_files`) its local RM sends back
//! as it exits, kept with the job's history record for `carmi wait` and
//! `carmi fetch`. The master's life itself is in `jobs`.

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{ExitStatus, FailureCode, FromGlobal, JobFiles, JobRecord, ReturnedFile};
use tracing::{info, warn};

use super::Submitted;
use super::requeue::may_start;
use super::return_plan;
use crate::journal::Record;
use crate::router::{LinkId, Output, Router};

impl Router {
    /// The online machine for the master of `sub`: one its
    /// `master_requirements` accept and whose owner policy lets it start
    /// now (not passed over after a failed start), running the fewest
    /// masters (then the first by name, so that the choice is reproducible).
    pub(in crate::router) fn pick_master_machine(&self, sub: &Submitted) -> Option<String> {
        let mut load: std::collections::HashMap<&str, usize> = Default::default();
        for (_, m) in self.jobs.masters.values() {
            *load.entry(m.as_str()).or_default() += 1;
        }
        self.alloc
            .online_ads()
            .filter(|(name, ad)| {
                sub.master_ad
                    .as_ref()
                    .is_none_or(|m| classad::matching::accepts(m, ad))
                    && may_start(ad, sub.master_ad.as_ref())
                    && !sub.tries.avoids(name, self.now)
            })
            .map(|(name, _)| (load.get(name).copied().unwrap_or(0), name))
            .min()
            .map(|(_, name)| name.to_string())
    }

    /// Places the masters that found no machine that may start them when
    /// their job started, now that a machine registered or changed its ad
    /// (or one passed over is eligible again): a pinned master on its own
    /// machine once its owner policy allows, the others where
    /// [`Router::pick_master_machine`] says.
    pub(in crate::router) fn place_masters(&mut self) {
        let waiting: Vec<ProcessId> = self.jobs.unplaced.iter().copied().collect();
        for process in waiting {
            let Some(&(job, _)) = self.jobs.masters.get(&process) else {
                self.jobs.unplaced.remove(&process);
                continue;
            };
            let Some(sub) = self.jobs.submitted.get(&job) else {
                continue;
            };
            let placed = sub.placed;
            let machine = if sub.anywhere {
                self.pick_master_machine(sub)
            } else {
                self.may_place(&sub.machine, sub)
                    .then(|| sub.machine.clone())
            };
            let Some(machine) = machine else {
                continue;
            };
            self.jobs.unplaced.remove(&process);
            info!(job = %job, machine, "the master is placed");
            self.jobs.masters.insert(process, (job, machine.clone()));
            if let Some(s) = self.jobs.submitted.get_mut(&job) {
                s.machine = machine.clone();
            }
            self.out.push(Output::Journal(Record::Started {
                job,
                master: process,
                placed: placed.then(|| machine.clone()),
            }));
            if let Some(link) = self.registry.ready_link(&machine) {
                self.send_master(link, process, job);
            }
        }
    }

    /// Files a master's local RM sent back before its exit: kept with the
    /// job (their bytes are already in the store under the master's id),
    /// each given its destination in the submit directory. Files from a
    /// process that is no master there, or not asked for, are dropped.
    pub(in crate::router) fn master_files(
        &mut self,
        machine: &str,
        process: ProcessId,
        files: Vec<ReturnedFile>,
    ) {
        let Some(job) = self.jobs.master_on(process, machine) else {
            warn!(machine, %process, "files sent back by a process that is no master there; dropped");
            self.out.push(Output::DropFiles { process });
            return;
        };
        let Some(sub) = self.jobs.submitted.get(&job) else {
            self.out.push(Output::DropFiles { process });
            return;
        };
        let plan = return_plan(sub);
        let mut kept = Vec::with_capacity(files.len());
        for mut f in files {
            match plan.iter().find(|(n, _)| *n == f.name) {
                Some((_, dest)) => {
                    f.dest = dest.clone();
                    kept.push(f);
                }
                None => {
                    warn!(machine, %process, name = f.name, "a file that was not asked for was sent back; ignored")
                }
            }
        }
        info!(job = %job, %process, files = kept.len(), "the master's files are back");
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.returned = Some(JobFiles {
                process,
                files: kept,
            });
        }
    }

    /// `carmi fetch` (and `carmi wait`): the files an ended job's master
    /// sent back, read from the store by the driver.
    pub(in crate::router) fn fetch_files(&mut self, link: LinkId, job: JobId) {
        if self.alloc.has_job(job) {
            let message = format!(
                "job {} has not ended yet; its files come back when its master exits",
                job.0
            );
            return self.admin_fail(link, FailureCode::Unavailable, message);
        }
        match self.reports.history.select(Some(job)).pop() {
            Some(JobRecord {
                files: Some(files), ..
            }) => self.out.push(Output::SendFiles { link, files }),
            Some(_) => {
                let message = format!(
                    "job {} has no files to bring back (none were asked for, or they were dropped to keep the store within its limit)",
                    job.0
                );
                self.admin_fail(link, FailureCode::Invalid, message);
            }
            None => {
                let message = format!(
                    "job {} is not in the history (never submitted, or older than the jobs kept)",
                    job.0
                );
                self.admin_fail(link, FailureCode::Invalid, message);
            }
        }
    }

    /// The master `process` of `job` is gone with its machine (declared
    /// lost, or its local RM came back without it). A job whose master the
    /// global RM may place starts a new master, on another machine if need
    /// be, from the hosts the job holds (as a first master starts: its
    /// minimums held); the old master's processes are killed, as no new
    /// master knows them. A job pinned to a machine ends, as before.
    pub(in crate::router) fn master_lost(&mut self, process: ProcessId, job: JobId) {
        self.exit_process(process, ExitStatus::HostLost, 0.0);
        if !self.jobs.submitted.get(&job).is_some_and(|s| s.anywhere) {
            return self.master_report(process, job, Err(ExitStatus::HostLost));
        }
        self.jobs.forget_master(process);
        for p in self.procs.of_job(job) {
            let Some(proc) = self.procs.find(p) else {
                continue;
            };
            if !proc.is_live() || p == process {
                continue;
            }
            let link = proc
                .host
                .and_then(|h| self.alloc.host_machine(h))
                .and_then(|m| self.registry.ready_link(m));
            match (proc.host, link) {
                // Still live until its local RM reports how it ended.
                (Some(_), Some(link)) => self.send(link, FromGlobal::Kill { process: p }),
                (Some(_), None) => self.exit_process(p, ExitStatus::HostLost, 0.0),
                // Started by hand: not ours to kill.
                (None, _) => {}
            }
        }
        warn!(job = %job, %process, "the master's machine is gone; the job starts a new master");
        let machine = self
            .jobs
            .submitted
            .get(&job)
            .map(|s| s.machine.clone())
            .unwrap_or_default();
        self.log_event(job, EventKind::MasterLost { machine });
        self.start_master(job);
    }

    /// The masters whose returned files are still wanted (their job's
    /// history record, or a job that has not ended yet, refers to them): the
    /// driver deletes the others' at start.
    pub fn kept_files(&self) -> std::collections::HashSet<ProcessId> {
        let live = self
            .jobs
            .submitted
            .values()
            .filter_map(|s| s.returned.as_ref());
        self.reports
            .history
            .file_owners()
            .chain(live.map(|f| f.process))
            .collect()
    }
}
