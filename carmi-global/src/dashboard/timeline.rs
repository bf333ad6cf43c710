//! Each job's hosts over time, for the dashboard's job view: when each of
//! its hosts was held, suspended by its owner, and lost, as WoDi's SVG
//! timeline draws a finished run, but built live from the snapshots the
//! dashboard takes anyway, for any job.
//!
//! Pure: the rules (a slot seen held opens a span, a change of state starts
//! the next, a slot gone closes it, and a machine gone too marks a loss)
//! are tested without a server. Memory is bounded per job and in jobs.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use carmi_api::ids::{HostId, JobId};
use serde::Serialize;

use super::view::Snapshot;

/// Most spans kept per host row (the oldest go first).
pub const MAX_SPANS: usize = 200;

/// Most host rows kept per job (the rows closed longest ago go first).
pub const MAX_ROWS: usize = 2000;

/// Jobs that left the queue whose timeline is still served.
pub const MAX_ENDED: usize = 20;

/// What a host was doing for the job during a span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// Held by the job and running.
    Held,
    /// Held, its owner back: the job's processes there are stopped.
    Suspended,
    /// Taken away with its machine (a mark: `start == end`).
    Lost,
}

/// One span of a host row, in seconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Span {
    /// What the host did.
    pub kind: SpanKind,
    /// When the dashboard first saw it so.
    pub start: u64,
    /// When it stopped; `None` while it lasts.
    pub end: Option<u64>,
}

/// One host of the job, with its spans oldest first.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostRow {
    /// The host (a slot of `machine`).
    pub host: HostId,
    /// Its machine.
    pub machine: String,
    /// What it did for the job.
    pub spans: Vec<Span>,
}

/// A job's timeline, as `/api/timeline?job=ID` serves it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobTimeline {
    /// The job.
    pub job: JobId,
    /// When the dashboard first saw it in the queue.
    pub since: u64,
    /// When it left the queue, if it did.
    pub ended: Option<u64>,
    /// Its hosts, in the order they came.
    pub hosts: Vec<HostRow>,
}

/// Every job's timeline, updated from successive snapshots.
#[derive(Debug, Default)]
pub struct Timelines {
    jobs: BTreeMap<JobId, JobTimeline>,
    ended: VecDeque<JobId>,
}

impl Timelines {
    /// Takes the snapshot `snap`, taken at `now` (Unix seconds).
    pub fn update(&mut self, snap: &Snapshot, now: u64) {
        let online: HashSet<&str> = snap.machines.iter().map(|m| m.name.as_str()).collect();
        let mut seen: HashMap<(JobId, HostId), (&str, SpanKind)> = HashMap::new();
        for m in &snap.machines {
            for s in &m.slots {
                let kind = match &*s.state {
                    "claimed" => SpanKind::Held,
                    "suspended" => SpanKind::Suspended,
                    _ => continue,
                };
                if let Some(job) = s.job {
                    seen.insert((job, s.host), (m.name.as_str(), kind));
                }
            }
        }
        let queued: HashSet<JobId> = snap.queued().collect();
        for &j in &queued {
            self.timeline(j, now);
        }
        for (&(job, host), &(machine, kind)) in &seen {
            self.timeline(job, now).observe(host, machine, kind, now);
        }
        for t in self.jobs.values_mut() {
            t.close_unseen(&seen, &online, now);
            if t.ended.is_none() && !queued.contains(&t.job) {
                t.ended = Some(now);
                self.ended.push_back(t.job);
            }
        }
        while self.ended.len() > MAX_ENDED {
            if let Some(old) = self.ended.pop_front() {
                self.jobs.remove(&old);
            }
        }
    }

    /// `job`'s timeline, begun at `now` if the dashboard had none.
    fn timeline(&mut self, job: JobId, now: u64) -> &mut JobTimeline {
        self.jobs.entry(job).or_insert_with(|| JobTimeline {
            job,
            since: now,
            ended: None,
            hosts: Vec::new(),
        })
    }

    /// The timeline of `job`, if the dashboard knows it.
    pub fn get(&self, job: JobId) -> Option<&JobTimeline> {
        self.jobs.get(&job)
    }
}

impl JobTimeline {
    /// `host` of `machine` seen held or suspended at `now`.
    fn observe(&mut self, host: HostId, machine: &str, kind: SpanKind, now: u64) {
        let at = match self.hosts.iter().rposition(|r| r.host == host) {
            Some(i) => i,
            None => {
                self.hosts.push(HostRow {
                    host,
                    machine: machine.to_string(),
                    spans: Vec::new(),
                });
                self.trim_rows();
                self.hosts.len() - 1
            }
        };
        let row = &mut self.hosts[at];
        match row.spans.last_mut() {
            Some(last) if last.end.is_none() && last.kind == kind => return,
            Some(last) if last.end.is_none() => last.end = Some(now),
            _ => {}
        }
        row.spans.push(Span {
            kind,
            start: now,
            end: None,
        });
        if row.spans.len() > MAX_SPANS {
            row.spans.remove(0);
        }
    }

    /// Closes the open spans of hosts not seen held any more; a host whose
    /// machine is gone from the pool was lost, not given back.
    fn close_unseen(
        &mut self,
        seen: &HashMap<(JobId, HostId), (&str, SpanKind)>,
        online: &HashSet<&str>,
        now: u64,
    ) {
        for row in &mut self.hosts {
            let Some(last) = row.spans.last_mut() else {
                continue;
            };
            if last.end.is_some() || seen.contains_key(&(self.job, row.host)) {
                continue;
            }
            last.end = Some(now);
            if !online.contains(row.machine.as_str()) {
                row.spans.push(Span {
                    kind: SpanKind::Lost,
                    start: now,
                    end: Some(now),
                });
            }
        }
    }

    /// Drops the rows closed longest ago above [`MAX_ROWS`].
    fn trim_rows(&mut self) {
        while self.hosts.len() > MAX_ROWS {
            let closed_at = |r: &HostRow| r.spans.last().and_then(|s| s.end).unwrap_or(u64::MAX);
            let oldest = (0..self.hosts.len()).min_by_key(|&i| closed_at(&self.hosts[i]));
            match oldest {
                Some(i) => {
                    self.hosts.remove(i);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
