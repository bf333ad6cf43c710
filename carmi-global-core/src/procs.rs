//! The process table: every process of every job, where it runs, through
//! which local RM connection it is attached, and which request started it.
//! Plain data with indexes kept in step; the router decides what happens.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId};
use carmi_proto::msg::ProcessState;

use crate::alloc::ReqRef;

/// Where a process is connected: an application connection at a local RM.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attachment {
    /// The local RM's machine name.
    pub machine: String,
    /// The connection at that local RM.
    pub conn: ConnId,
}

/// One process.
#[derive(Clone, Debug, PartialEq)]
pub struct Proc {
    /// Its job.
    pub job: JobId,
    /// Where CARMI started it; `None` for a process started by hand (a job's first).
    pub host: Option<HostId>,
    /// Where it accepts direct messages, once it has attached.
    pub endpoint: Option<String>,
    /// Its state.
    pub state: ProcessState,
    /// The connection it is attached through, if any.
    pub attached: Option<Attachment>,
    /// The `ClassSpawn` that created it: who asked, with which request id.
    pub origin: Option<ReqRef>,
    /// The job's first process: the job ends when it goes.
    pub root: bool,
    /// The name of the executable a `ClassSpawn` started (for `Processes`);
    /// `None` for a first process (its job's submit file names it).
    pub executable: Option<String>,
}

impl Proc {
    /// True until the process has exited.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, ProcessState::Exited { .. })
    }
}

/// All processes, indexed by id, by attachment and (live ones) by host.
#[derive(Default)]
pub struct ProcTable {
    procs: BTreeMap<ProcessId, Proc>,
    by_conn: HashMap<Attachment, ProcessId>,
    by_host: HashMap<HostId, BTreeSet<ProcessId>>,
    next: u64,
}

impl ProcTable {
    /// An empty table; ids start at 1.
    pub fn new() -> ProcTable {
        ProcTable {
            next: 1,
            ..ProcTable::default()
        }
    }

    /// A process id never used before.
    pub fn fresh_id(&mut self) -> ProcessId {
        let id = ProcessId(self.next);
        self.next += 1;
        id
    }

    /// Never hands out ids below `next` (ids an earlier run used).
    pub fn reserve_ids_below(&mut self, next: u64) {
        self.next = self.next.max(next);
    }

    /// True when `id` was never handed out (so it may be adopted as is).
    pub fn is_unused(&self, id: ProcessId) -> bool {
        id.0 >= self.next
    }

    /// Adds a process under an id from [`ProcTable::fresh_id`] or an adopted one.
    pub fn insert(&mut self, id: ProcessId, proc: Proc) {
        self.next = self.next.max(id.0 + 1);
        self.remove(id);
        if let (Some(h), true) = (proc.host, proc.is_live()) {
            self.by_host.entry(h).or_default().insert(id);
        }
        if let Some(a) = &proc.attached {
            self.unindex_conn(a);
            self.by_conn.insert(a.clone(), id);
        }
        self.procs.insert(id, proc);
    }

    /// Removes a process and its index entries.
    pub fn remove(&mut self, id: ProcessId) -> Option<Proc> {
        let proc = self.procs.remove(&id)?;
        if let Some(a) = &proc.attached {
            self.by_conn.remove(a);
        }
        if let Some(h) = proc.host {
            self.unindex_host(h, id);
        }
        Some(proc)
    }

    fn unindex_host(&mut self, host: HostId, id: ProcessId) {
        if let Some(set) = self.by_host.get_mut(&host) {
            set.remove(&id);
            if set.is_empty() {
                self.by_host.remove(&host);
            }
        }
    }

    /// Drops whatever process was attached at `a` (connection ids are reused).
    fn unindex_conn(&mut self, a: &Attachment) {
        if let Some(old) = self.by_conn.remove(a)
            && let Some(p) = self.procs.get_mut(&old)
        {
            p.attached = None;
        }
    }

    /// A process by id.
    pub fn find(&self, id: ProcessId) -> Option<&Proc> {
        self.procs.get(&id)
    }

    /// The process attached at a connection of a local RM.
    pub fn attached_at(&self, machine: &str, conn: ConnId) -> Option<ProcessId> {
        self.by_conn
            .get(&Attachment {
                machine: machine.to_string(),
                conn,
            })
            .copied()
    }

    /// The processes attached through `machine`'s local RM, by connection.
    pub fn attached_through(&self, machine: &str) -> Vec<(ConnId, ProcessId)> {
        self.by_conn
            .iter()
            .filter(|(a, _)| a.machine == machine)
            .map(|(a, &p)| (a.conn, p))
            .collect()
    }

    /// Records that `id` attached at `a` with direct-message endpoint `endpoint`.
    pub fn attach(&mut self, id: ProcessId, a: Attachment, endpoint: String) {
        self.unindex_conn(&a);
        let Some(p) = self.procs.get_mut(&id) else {
            return;
        };
        if let Some(old) = p.attached.take() {
            self.by_conn.remove(&old);
        }
        p.endpoint = Some(endpoint);
        p.attached = Some(a.clone());
        self.by_conn.insert(a, id);
    }

    /// The connection closed: returns the process that was attached there.
    pub fn detach(&mut self, a: &Attachment) -> Option<ProcessId> {
        let id = self.by_conn.remove(a)?;
        if let Some(p) = self.procs.get_mut(&id) {
            p.attached = None;
        }
        Some(id)
    }

    /// Changes a process's state, keeping the host index to live processes.
    pub fn set_state(&mut self, id: ProcessId, state: ProcessState) {
        let Some(p) = self.procs.get_mut(&id) else {
            return;
        };
        p.state = state;
        if let (Some(h), false) = (p.host, p.is_live()) {
            self.unindex_host(h, id);
        }
    }

    /// Live processes on a host, any job.
    pub fn live_on(&self, host: HostId) -> Vec<ProcessId> {
        self.by_host
            .get(&host)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Every process of a job.
    pub fn of_job(&self, job: JobId) -> Vec<ProcessId> {
        self.procs
            .iter()
            .filter(|(_, p)| p.job == job)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Number of processes (live or exited).
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// True when there are no processes.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Checks that the indexes agree with the table; panics naming the first disagreement.
    pub fn sanity_check(&self) {
        for (a, id) in &self.by_conn {
            let p = self
                .procs
                .get(id)
                .unwrap_or_else(|| panic!("attachment {a:?} names unknown process {id}"));
            assert_eq!(
                p.attached.as_ref(),
                Some(a),
                "process {id}: attachment index"
            );
        }
        for (id, p) in &self.procs {
            assert!(id.0 < self.next, "process {id} beyond the id counter");
            if let Some(a) = &p.attached {
                assert_eq!(
                    self.by_conn.get(a),
                    Some(id),
                    "process {id}: not indexed by its connection"
                );
            }
            if let (Some(h), true) = (p.host, p.is_live()) {
                assert!(
                    self.by_host.get(&h).is_some_and(|s| s.contains(id)),
                    "live process {id} not indexed on host {h}"
                );
            }
        }
        for (h, set) in &self.by_host {
            assert!(!set.is_empty(), "empty host index entry for {h}");
            for id in set {
                let p = &self.procs[id];
                assert!(
                    p.is_live() && p.host == Some(*h),
                    "host {h} index names {id} wrongly"
                );
            }
        }
    }
}
