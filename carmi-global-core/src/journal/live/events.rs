//! Jobs' events kept by the journal: the last [`EVENTS_PER_JOB`] of each
//! live job, and of the last [`ENDED_LOGS`] jobs to end.

use std::collections::{BTreeMap, VecDeque};

use carmi_proto::events::JobEvent;
use carmi_proto::ids::JobId;

use crate::bounds::{ENDED_LOGS, EVENTS_PER_JOB};

/// Jobs' events (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct KeptEvents {
    /// Live jobs' events, the last [`EVENTS_PER_JOB`] of each.
    pub live: BTreeMap<JobId, VecDeque<JobEvent>>,
    /// Ended jobs' events, for the last [`ENDED_LOGS`] jobs to end, in the
    /// order they ended.
    pub ended: VecDeque<(JobId, VecDeque<JobEvent>)>,
}

impl KeptEvents {
    /// Keeps an event: with its live job's if `live`, else with its ended
    /// job's (the `ended` event comes after the job's `Ended`).
    pub fn keep(&mut self, e: &JobEvent, live: bool) {
        let list = if live {
            self.live.entry(e.job).or_default()
        } else {
            if !self.ended.iter().rev().any(|(j, _)| *j == e.job) {
                self.end_job(e.job, Default::default());
            }
            match self.ended.iter_mut().rev().find(|(j, _)| *j == e.job) {
                Some((_, list)) => list,
                None => return,
            }
        };
        if list.len() == EVENTS_PER_JOB {
            list.pop_front();
        }
        list.push_back(e.clone());
    }

    /// `job` ended: its events move among the ended ones.
    pub fn job_ended(&mut self, job: JobId) {
        if let Some(events) = self.live.remove(&job) {
            self.end_job(job, events);
        }
    }

    /// Moves an ended job's events among the ended ones, forgetting the
    /// oldest job's beyond [`ENDED_LOGS`].
    fn end_job(&mut self, job: JobId, events: VecDeque<JobEvent>) {
        if self.ended.len() == ENDED_LOGS {
            self.ended.pop_front();
        }
        self.ended.push_back((job, events));
    }

    /// How many records these are (one per job).
    pub fn len(&self) -> usize {
        self.live.len() + self.ended.len()
    }
}
