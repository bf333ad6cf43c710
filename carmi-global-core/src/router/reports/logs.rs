//! `carmi logs`: a running master's standard output or error, read by the
//! local RM that runs it. The router forwards the admin's request with a
//! number of its own, keeps the admin connection waiting for it, and
//! answers the admin when the local RM does, or with a clear failure when
//! the machine goes away or does not answer within [`LOG_READ_TIMEOUT`].

use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{FailureCode, FromGlobal, LogChunk, StdStream};
use tracing::warn;

use crate::router::{LinkId, Router};

/// How long a local RM has to answer a read of a master's output.
pub const LOG_READ_TIMEOUT: Duration = Duration::from_secs(15);

/// A read forwarded to a local RM, waiting for its answer.
#[derive(Clone, Debug)]
pub(in crate::router) struct PendingRead {
    /// The admin connection that asked.
    link: LinkId,
    job: JobId,
    /// The machine asked, and on which of its connections.
    machine: String,
    machine_link: LinkId,
    /// When the admin is told that no answer came.
    deadline: Duration,
}

/// The reads waiting for a local RM.
#[derive(Debug, Default)]
pub(in crate::router) struct LogReads {
    pending: std::collections::BTreeMap<u64, PendingRead>,
    next: u64,
}

impl LogReads {
    /// The earliest deadline of a waiting read.
    pub(in crate::router) fn next_deadline(&self) -> Option<Duration> {
        self.pending.values().map(|r| r.deadline).min()
    }

    /// Reads waiting.
    #[cfg(test)]
    pub(in crate::router) fn len(&self) -> usize {
        self.pending.len()
    }
}

impl Router {
    /// `carmi logs`: asks the machine running `job`'s master for its output.
    pub(in crate::router) fn read_log(
        &mut self,
        link: LinkId,
        job: JobId,
        stream: StdStream,
        offset: u64,
    ) {
        if !self.alloc.has_job(job) {
            if self.reports.history.select(Some(job)).pop().is_some() {
                // Ended: its output is what came back with it.
                return self.send(link, FromGlobal::Log { job, chunk: None });
            }
            let message = format!("job {} is not in the queue or the history", job.0);
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        if !self.jobs.submitted.contains_key(&job) {
            let message = format!(
                "job {} was started by hand, not submitted: its output is wherever it was started",
                job.0
            );
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        let master: Option<(ProcessId, String)> = self
            .jobs
            .masters
            .iter()
            .filter(|(p, (j, _))| *j == job && self.jobs.sent_masters.contains(p))
            .map(|(p, (_, m))| (*p, m.clone()))
            .min();
        let Some((process, machine)) = master else {
            let message = format!(
                "job {}'s master has not started yet (the job waits for machines, or is held)",
                job.0
            );
            return self.admin_fail(link, FailureCode::Unavailable, message);
        };
        let Some(machine_link) = self.registry.ready_link(&machine) else {
            let message = format!(
                "job {}'s master runs on `{machine}`, which is not connected now (reconnecting, or lost); try again",
                job.0
            );
            return self.admin_fail(link, FailureCode::Unavailable, message);
        };
        let request = self.reports.log_reads.next;
        self.reports.log_reads.next += 1;
        self.reports.log_reads.pending.insert(
            request,
            PendingRead {
                link,
                job,
                machine,
                machine_link,
                deadline: self.now + LOG_READ_TIMEOUT,
            },
        );
        let msg = FromGlobal::ReadLog {
            request,
            process,
            stream,
            offset,
        };
        self.send(machine_link, msg);
    }

    /// A local RM answered a read: passed on to the admin that asked. An
    /// answer from another machine than the one asked is dropped.
    pub(in crate::router) fn log_read(
        &mut self,
        machine: &str,
        request: u64,
        result: Result<LogChunk, String>,
    ) {
        let Some(r) = self.reports.log_reads.pending.get(&request) else {
            warn!(
                machine,
                request, "an answer to a log read that is not waiting; dropped"
            );
            return;
        };
        if r.machine != machine {
            warn!(
                machine,
                request,
                asked = r.machine,
                "a log read answered by another machine; dropped"
            );
            return;
        }
        let r = self
            .reports
            .log_reads
            .pending
            .remove(&request)
            .expect("found above");
        match result {
            Ok(chunk) => self.send(
                r.link,
                FromGlobal::Log {
                    job: r.job,
                    chunk: Some(chunk),
                },
            ),
            Err(why) => {
                let message = format!("job {}'s master on `{}`: {why}", r.job.0, r.machine);
                self.admin_fail(r.link, FailureCode::Unavailable, message);
            }
        }
    }

    /// Fails the reads for which no answer will come: the connection they
    /// were asked on is gone (closed, replaced, its machine lost), or their
    /// deadline passed.
    pub(in crate::router) fn settle_log_reads(&mut self) {
        let now = self.now;
        let dead: Vec<u64> = self
            .reports
            .log_reads
            .pending
            .iter()
            .filter(|(_, r)| {
                !self.registry.links.contains_key(&r.machine_link) || r.deadline <= now
            })
            .map(|(n, _)| *n)
            .collect();
        for n in dead {
            let r = self
                .reports
                .log_reads
                .pending
                .remove(&n)
                .expect("listed above");
            let why = if self.registry.links.contains_key(&r.machine_link) {
                format!("no answer within {} s", LOG_READ_TIMEOUT.as_secs())
            } else {
                "its connection closed before it answered (lost, or reconnecting); try again"
                    .to_string()
            };
            let message = format!("job {}'s master on `{}`: {why}", r.job.0, r.machine);
            self.admin_fail(r.link, FailureCode::Unavailable, message);
        }
    }

    /// Every waiting read is for an open admin connection and was asked
    /// of an open machine connection (else it would wait for nothing).
    pub(in crate::router) fn check_log_reads(&self) {
        for (n, r) in &self.reports.log_reads.pending {
            assert!(
                matches!(
                    self.registry.links.get(&r.link),
                    Some(crate::router::LinkRole::Admin)
                ),
                "log read {n}: its admin connection is gone"
            );
            assert!(
                matches!(self.registry.links.get(&r.machine_link), Some(crate::router::LinkRole::Machine(m)) if *m == r.machine),
                "log read {n}: its machine connection is gone"
            );
            assert!(
                r.deadline <= self.now + LOG_READ_TIMEOUT,
                "log read {n}: deadline"
            );
        }
    }

    /// An admin connection closed: its reads are forgotten.
    pub(in crate::router) fn forget_log_reads(&mut self, link: LinkId) {
        self.reports.log_reads.pending.retain(|_, r| r.link != link);
    }
}
