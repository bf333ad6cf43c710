//! A submitted job's master: started when the allocator starts its job
//! (pinned, at the submit machine, or placed by the global RM), sent to its
//! machine once that machine is ready, reported started or exited by its
//! local RM, and killed when its job ends.

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{ExitStatus, FromGlobal, JobEnd, ProcessState};
use tracing::info;

use super::{Submitted, return_plan};
use crate::journal::Record;
use crate::router::{LinkId, Output, Router, new_proc};

impl Router {
    /// The allocator started `job`: its master goes to the machine it is
    /// pinned to, the submit machine if that is in the pool, else to one the
    /// global RM picks (or waits for one, see [`Router::place_masters`]).
    pub(in crate::router) fn start_master(&mut self, job: JobId) {
        let Some(sub) = self.jobs.submitted.get(&job) else {
            return;
        };
        let at_submit = !sub.anywhere
            || (self.alloc.is_online(&sub.submit_machine)
                && self.may_place(&sub.submit_machine, sub));
        let (machine, placed) = if at_submit {
            (sub.submit_machine.clone(), false)
        } else {
            (self.pick_master_machine(sub).unwrap_or_default(), true)
        };
        // Pinned to a machine that is there but may not start it now.
        let waits =
            !machine.is_empty() && self.alloc.is_online(&machine) && !self.may_place(&machine, sub);
        let process = self.procs.fresh_id();
        let mut proc = new_proc(job, true);
        proc.state = ProcessState::Starting;
        self.procs.insert(process, proc);
        self.jobs.masters.insert(process, (job, machine.clone()));
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.master = Some(process);
            s.machine = machine.clone();
            s.placed = placed;
            // A master started again (after a hold) sends its own files.
            s.returned = None;
        }
        self.out.push(Output::Journal(Record::Started {
            job,
            master: process,
            placed: placed.then(|| machine.clone()),
        }));
        if machine.is_empty() {
            info!(job = %job, "no machine matches the master's requirements and may start it now; the master waits for one");
            self.jobs.unplaced.insert(process);
            return;
        }
        if waits {
            info!(job = %job, machine, "the owner policy of the master's machine does not let it start now; the master waits");
            self.jobs.unplaced.insert(process);
            return;
        }
        match self.registry.ready_link(&machine) {
            Some(link) => self.send_master(link, process, job),
            None => {
                // Sent when the machine advertises again (`unsent_masters`).
                info!(job = %job, machine, "the master's machine is away; the master starts when it is back");
            }
        }
    }

    /// Sends `SpawnMaster` for `process`, the master of `job`, on `link`.
    pub(in crate::router) fn send_master(&mut self, link: LinkId, process: ProcessId, job: JobId) {
        let Some(sub) = self.jobs.submitted.get(&job).cloned() else {
            return;
        };
        if self.jobs.sent_masters.contains(&process)
            || self
                .procs
                .find(process)
                .is_some_and(|p| p.state != ProcessState::Starting)
        {
            return;
        }
        self.jobs.sent_masters.insert(process);
        let now = self.config.started_unix + self.now.as_secs();
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.started_unix = now;
            s.tries.starts += 1;
        }
        info!(job = %job, %process, machine = sub.machine, "starting the master");
        let env = sub.spec.environment.clone();
        let requests = sub.spec.requests();
        let return_files = return_plan(&sub).into_iter().map(|(n, _)| n).collect();
        // Away from the submit machine its paths mean nothing: the sandbox's
        // files are written and sent back instead.
        let (output, error) = if sub.placed {
            (None, None)
        } else {
            (sub.spec.output, sub.spec.error)
        };
        // Input files by path on the submit machine, or (placed elsewhere,
        // when the client uploaded them) by content from the pool's store.
        let (mut input_files, mut inputs) = if sub.placed && !sub.spec.input_refs.is_empty() {
            (Vec::new(), sub.spec.input_refs)
        } else {
            (sub.spec.transfer_input_files, Vec::new())
        };
        // Its last checkpoint, over the input files of the same name.
        let checkpoint = self.checkpoint_inputs(job);
        let shadowed = |name: &str| checkpoint.iter().any(|c| c.name == name);
        inputs.retain(|i| !shadowed(&i.name));
        input_files.retain(|f| {
            let base = std::path::Path::new(f).file_name();
            !base.is_some_and(|b| shadowed(&b.to_string_lossy()))
        });
        inputs.extend(checkpoint);
        self.send(
            link,
            FromGlobal::SpawnMaster {
                process,
                job,
                executable: sub.executable,
                args: sub.spec.arguments,
                env,
                output,
                error,
                input_files,
                return_files,
                inputs,
                requests,
            },
        );
    }

    /// A master reported by its local RM: started, or exited (which ends its
    /// job, unless its `on_exit_*` expressions keep it, `policy.rs`).
    pub(in crate::router) fn master_report(
        &mut self,
        process: ProcessId,
        job: JobId,
        outcome: Result<(), ExitStatus>,
    ) {
        match outcome {
            Ok(()) => {
                if self
                    .procs
                    .find(process)
                    .is_some_and(|p| p.state == ProcessState::Starting)
                {
                    self.procs.set_state(process, ProcessState::Running);
                    // A restart then knows it ran: absent from its machine, it was lost.
                    self.out.push(Output::Journal(Record::Running { process }));
                    if let Some((_, machine)) = self.jobs.masters.get(&process) {
                        let machine = machine.clone();
                        self.log_event(job, EventKind::MasterStarted { machine });
                    }
                }
                self.alloc.on_master_running(job);
            }
            Err(status) => {
                if self.on_exit_policy(process, job, &status) {
                    return;
                }
                info!(job = %job, %process, ?status, "the master ended; so does its job");
                self.record_end(job, JobEnd::Completed(status));
                self.jobs.masters.remove(&process);
                self.jobs.sent_masters.remove(&process);
                self.end_job(job);
            }
        }
    }

    /// Why a started job's master is not running yet: its machine is away,
    /// so `SpawnMaster` waits for it (while the job holds its hosts).
    pub(in crate::router) fn master_unsent(&self, sub: &Submitted) -> Option<String> {
        let p = sub.master?;
        if sub.machine.is_empty() {
            let wanted = sub.spec.master_requirements.as_deref().unwrap_or("true");
            return Some(format!(
                "the master waits for a machine of the pool that matches master_requirements = {wanted} and whose owner policy lets it start now"
            ));
        }
        if self.jobs.unplaced.contains(&p) {
            return Some(format!(
                "the master waits for the owner policy of machine `{}` to let it start",
                sub.machine
            ));
        }
        (!self.jobs.sent_masters.contains(&p) && self.registry.ready_link(&sub.machine).is_none())
            .then(|| format!("the master waits for machine `{}` to connect", sub.machine))
    }

    /// Kills the master of `job` if it runs (called as the job ends).
    pub(in crate::router) fn kill_master(&mut self, job: JobId) {
        let Some(sub) = self.jobs.submitted.remove(&job) else {
            return;
        };
        self.close_event_log(job);
        self.out.push(Output::Journal(Record::Ended { job }));
        if let Some(p) = sub.master {
            self.jobs.unplaced.remove(&p);
        }
        if let Some(p) = sub.master
            && self.jobs.masters.remove(&p).is_some()
            && self.jobs.sent_masters.remove(&p)
            && let Some(link) = self.registry.ready_link(&sub.machine)
        {
            self.send(link, FromGlobal::Kill { process: p });
        }
    }
}
