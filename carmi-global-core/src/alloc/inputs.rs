//! Inputs from the pool (machines and their slots) and from the job
//! lifecycle (jobs, requesters and processes coming and going).

use std::collections::BTreeMap;

use carmi_proto::ids::{HostId, JobId, ProcessId};
use carmi_proto::msg::SlotActivity;
use classad::{ClassAd, Value};

use super::job::Job;
use super::{Allocator, Phase, ReleaseCause, SlotState};

impl Allocator {
    /// A machine advertised itself with `slots` slots: returns the host id of
    /// each slot, the same ids as before for a known name. A machine that was
    /// online keeps its claims; its unclaimed slots (idle, or taken by an
    /// owner without a job on them) are offered again under the new ad, as a
    /// local RM that registers anew reports afterwards every slot that is not
    /// available (a restarted one may have a new owner policy).
    pub fn on_machine_registered(&mut self, name: &str, ad: ClassAd, slots: u32) -> Vec<HostId> {
        let idx = self.pool.machine_named(name);
        let head_before = self.head();
        // Idle slots leave the idle set while the speed key changes, and are offered again below.
        let online_hosts = self.pool.machine(idx).online_hosts().to_vec();
        for &h in &online_hosts {
            if matches!(
                self.pool.get_slot(h).state,
                SlotState::Idle | SlotState::Owner | SlotState::Suspended(None)
            ) {
                self.set_state(h, SlotState::Offline);
            }
        }
        // Slots beyond the new count are withdrawn.
        for &h in online_hosts.iter().skip(slots as usize) {
            self.release(h, ReleaseCause::Withdrawn);
            self.set_state(h, SlotState::Offline);
        }
        self.pool.bring_online(idx, ad, slots);
        let hosts = self.pool.machine(idx).online_hosts().to_vec();
        let fresh = self
            .pool
            .hosts_where(idx, |state| *state == SlotState::Offline);
        // Hosts a job held before a restart go back to it before anyone else is offered them.
        let fresh = self.restore_recorded_claims(fresh);
        self.offer_all(fresh);
        // Only now are its slots online again: fewer of them, or another
        // ad, may leave a job that kept slots unable to ever start.
        self.pool_changed();
        self.recheck_reserving();
        self.recheck_head(head_before);
        hosts
    }

    /// Dynamic attributes of an online machine changed (from a heartbeat).
    /// Returns false for an unknown or lost machine.
    pub fn on_machine_updated(&mut self, name: &str, update: &ClassAd) -> bool {
        let Some(&idx) = self.pool.by_name.get(name) else {
            return false;
        };
        let m = self.pool.machine(idx);
        if !m.online {
            return false;
        }
        let changed = update.iter().any(|(n, e)| m.ad.get(n) != Some(e));
        if !changed {
            return true;
        }
        let head_before = self.head();
        let idle = self
            .pool
            .hosts_where(idx, |state| *state == SlotState::Idle);
        let reserving_before = self.reserving_membership(idx);
        let kept_before = self.kept_membership(idx);
        for &h in &idle {
            self.set_state(h, SlotState::Offline);
        }
        self.pool.update_ad(idx, update);
        // Membership may have changed: the idle slots meet the pending requests
        // again (settling the queue), and the head of the queue, which alone may
        // take hosts from running jobs, may now want one of this machine's. Only
        // then does a busy machine's heartbeat settle the queue: a pass costs time
        // per kind of waiting job, and heartbeats are many.
        let claimed = self
            .pool
            .hosts_where(idx, |state| matches!(state, SlotState::Claimed(_)));
        self.offer_all(idle);
        // With its slots back online: a new ad may leave a job that kept
        // slots unable to ever start. Heartbeats are many: only when the ad
        // changed what this machine is to such a job is that judged now
        // (other jobs are judged again when next tried, and a cluster's
        // kept verdict only if the machine is a member of other classes of
        // it now).
        self.ad_changed(idx, kept_before);
        if self.reserving_membership(idx) != reserving_before {
            self.recheck_reserving();
        }
        if let Some(head) = self.head()
            && claimed.iter().any(|&h| self.needs_for_minimum(head, h))
        {
            self.dirty = true;
        }
        self.recheck_head(head_before);
        true
    }

    /// A machine stopped answering: every slot goes offline and every job
    /// holding one is told. Returns false for an unknown or already lost machine.
    pub fn on_machine_lost(&mut self, name: &str) -> bool {
        let Some(&idx) = self.pool.by_name.get(name) else {
            return false;
        };
        let m = self.pool.machine(idx);
        if !m.online {
            return false;
        }
        for h in m.online_hosts().to_vec() {
            self.release(h, ReleaseCause::Lost);
            self.set_state(h, SlotState::Offline);
        }
        self.pool.machine_mut(idx).online = false;
        // A job that kept slots from the jobs behind it may need this machine.
        self.pool_changed();
        self.recheck_reserving();
        true
    }

    /// The owner policy changed slot `slot` of machine `name`. Returns the
    /// host, or `None` when the machine or slot is unknown.
    pub fn on_slot_state(
        &mut self,
        name: &str,
        slot: u32,
        activity: SlotActivity,
    ) -> Option<HostId> {
        let host = self.host_of_slot(name, slot)?;
        let state = self.pool.get_slot(host).state.clone();
        match (activity, state) {
            (SlotActivity::Available, SlotState::Suspended(Some(c))) => {
                let job = c.job;
                self.set_state(host, SlotState::Claimed(c));
                self.notify_hosts(host, job, false);
            }
            (SlotActivity::Available, SlotState::Suspended(None) | SlotState::Owner) => {
                self.offer(host);
            }
            (SlotActivity::Available, _) => {}
            (SlotActivity::Suspended, SlotState::Claimed(c)) => {
                if self.is_partial(host) {
                    // The job never saw it; it simply leaves the group.
                    self.release(host, ReleaseCause::Vacated);
                    self.set_state(host, SlotState::Suspended(None));
                } else {
                    let job = c.job;
                    self.set_state(host, SlotState::Suspended(Some(c)));
                    self.notify_hosts(host, job, true);
                }
            }
            (SlotActivity::Suspended, SlotState::Idle | SlotState::Owner) => {
                self.set_state(host, SlotState::Suspended(None));
            }
            (SlotActivity::Suspended, _) => {}
            (SlotActivity::Vacated, SlotState::Claimed(_) | SlotState::Suspended(Some(_))) => {
                self.release(host, ReleaseCause::Vacated);
                self.set_state(host, SlotState::Owner);
            }
            (SlotActivity::Vacated, SlotState::Idle | SlotState::Suspended(None)) => {
                self.set_state(host, SlotState::Owner);
            }
            (SlotActivity::Vacated, _) => {}
        }
        Some(host)
    }

    // ------------------------------------------------------------- job inputs

    /// A job was created; `owner` goes into its ad as `Owner`, beside `JobId`.
    pub fn on_job_created(&mut self, job: JobId, owner: &str) {
        let mut ad = ClassAd::with_capacity(2);
        ad.insert_value("Owner", Value::str(owner));
        ad.insert_value("JobId", Value::Int(job.0 as i64));
        let seq = self.next_job_seq;
        self.next_job_seq += 1;
        self.jobs.entry(job).or_insert(Job {
            ad,
            owner: owner.to_string(),
            user: owner.to_string(),
            concurrency: Ok(Vec::new()),
            classes: BTreeMap::new(),
            hosts: BTreeMap::new(),
            subs: Vec::new(),
            sub_reqs: Default::default(),
            seq,
            limits: BTreeMap::new(),
            ranks: BTreeMap::new(),
            phase: Phase::Attached,
            possible: None,
        });
    }

    /// Adds a submitted job's own attributes (`+Name = value`, `JobBatchName`,
    /// `RequestCpus`...) to its ad, where machines' `Requirements` and `Rank`
    /// read them as `TARGET.Name`. `Owner` and `JobId` stay the pool's, and
    /// an expression that does not parse (the door checked it) is skipped.
    pub fn set_job_attributes(&mut self, job: JobId, attributes: &[(String, String)]) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        for (name, text) in attributes {
            if name.eq_ignore_ascii_case("Owner") || name.eq_ignore_ascii_case("JobId") {
                continue;
            }
            if let Ok(expr) = classad::parse_expr(text) {
                j.ad.insert(name, expr);
            }
        }
        self.read_share_attributes(job);
    }

    /// A job ended: its pending requests are dropped and its hosts go back to
    /// the pool ([`super::Effect::Released`] with [`ReleaseCause::JobEnded`] for each).
    pub fn on_job_ended(&mut self, job: JobId) {
        if !self.jobs.contains_key(&job) {
            return;
        }
        let (freed, suspended) = self.strip_job(job, ReleaseCause::JobEnded);
        if self.running.contains(&job) {
            self.give_back_limits(job);
        }
        if let Some(j) = self.jobs.remove(&job) {
            self.out.requests_ended += 1;
            self.running.remove(&job);
            if j.phase == Phase::Waiting {
                self.drop_waiting(job, j.seq);
            }
        }
        self.give_back(freed, suspended);
    }

    /// A process went away: its pending requests and subscriptions are dropped
    /// (nobody is left to tell), and hosts held for them go back to the pool.
    pub fn on_requester_gone(&mut self, process: ProcessId) {
        let mut freed = Vec::new();
        let seqs: Vec<u64> = self
            .pending
            .by_req
            .iter()
            .filter(|(r, _)| r.process == process)
            .map(|(_, &seq)| seq)
            .collect();
        for seq in seqs {
            freed.extend(self.remove_pending(seq).partial);
        }
        for j in self.jobs.values_mut() {
            self.out.requests_ended += j.retain_subs(|s| s.req.process != process);
        }
        self.offer_all(freed);
    }

    /// A process was started on a host of its job (it is busy until it exits).
    pub fn on_process_spawned(&mut self, host: HostId, process: ProcessId) {
        if self
            .pool
            .find_slot(host)
            .is_some_and(|s| s.state.claim().is_some())
        {
            self.pool.get_slot_mut(host).busy.insert(process);
        }
    }

    /// A process on a host ended.
    pub fn on_process_exited(&mut self, host: HostId, process: ProcessId) {
        if self.pool.find_slot(host).is_some() {
            self.pool.get_slot_mut(host).busy.remove(&process);
        }
    }
}
