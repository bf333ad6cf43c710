//! The pool view: every machine ever seen, its ad and slots, and the idle
//! slots by speed. It decides nothing about jobs or requests: the allocator's
//! inputs change it through [`Pool::set_state`] and the machine methods, and
//! read it through the lookups. A slot's lifecycle ([`SlotState`]) and a job's hold
//! on one ([`Claim`]) are defined here, and re-exported by `alloc`.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use carmi_proto::ids::{HostId, JobId, ProcessId};
use carmi_proto::msg::{HostInfo, MachineStatus, SlotStatus};
use classad::ClassAd;

/// A job's hold on a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job: JobId,
    /// The class the slot was allocated for.
    pub class: String,
    /// When it was claimed.
    pub since: Duration,
}

/// Lifecycle of a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// The machine is not registered (lost, or the slot was withdrawn).
    Offline,
    /// Available and unclaimed.
    Idle,
    /// Allocated to a job.
    Claimed(Claim),
    /// The owner is back; a job's claim, if any, survives until resume or vacate.
    Suspended(Option<Claim>),
    /// The owner vacated it; withdrawn from the pool until available again.
    Owner,
}

impl SlotState {
    /// The claim, whether running or suspended.
    pub fn claim(&self) -> Option<&Claim> {
        match self {
            SlotState::Claimed(c) | SlotState::Suspended(Some(c)) => Some(c),
            _ => None,
        }
    }

    /// The name `carmi status` shows.
    pub fn name(&self) -> &'static str {
        match self {
            SlotState::Offline => "offline",
            SlotState::Idle => "idle",
            SlotState::Claimed(_) => "claimed",
            SlotState::Suspended(_) => "suspended",
            SlotState::Owner => "owner",
        }
    }
}

/// Index of a machine in [`Pool::machines`]; machines are never removed,
/// so that a returning name finds its host ids again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct MachineIdx(pub(super) u32);

/// Sort key of an idle slot: fastest first (`Mips`, then `KFlops`).
pub(super) type SpeedKey = (Reverse<i64>, Reverse<i64>);

pub(super) struct Machine {
    pub(super) name: String,
    pub(super) ad: ClassAd,
    /// The ad in new syntax, printed once per change rather than per grant.
    pub(super) ad_text: Arc<str>,
    /// The attributes `carmi status` shows, printed once per change.
    shown: Arc<[(String, String)]>,
    pub(super) has_requirements: bool,
    /// Every host id this name was ever given; the first `slots` are online.
    pub(super) hosts: Vec<HostId>,
    pub(super) slots: u32,
    pub(super) online: bool,
    /// Bumped on every change of the ad, invalidating cached class membership.
    pub(super) generation: u32,
    pub(super) speed: SpeedKey,
    /// What `carmi status` shows of it, made when first asked after a
    /// change: a whole-pool `Status` (or the dashboard's snapshot) at
    /// 50,000 machines shares 50,000 of these instead of building them on
    /// the router task each time (25-130 ms a step). Emptied by
    /// [`Pool::machine_mut`] and [`Pool::set_state`], the only ways to
    /// change what it shows.
    status: OnceLock<Arc<MachineStatus>>,
}

impl Machine {
    /// The online hosts (none while the machine is lost).
    pub(super) fn online_hosts(&self) -> &[HostId] {
        if self.online {
            &self.hosts[..self.slots as usize]
        } else {
            &[]
        }
    }

    /// Works out again what is derived from the ad, after it changed.
    fn ad_changed(&mut self) {
        self.has_requirements = self.ad.get("Requirements").is_some();
        self.speed = speed_of(&self.ad);
        self.ad_text = self.ad.to_string().into();
        self.shown = shown_attributes(&self.ad);
        self.generation = self.generation % (u32::MAX >> 2) + 1;
    }
}

pub(super) struct Slot {
    pub(super) machine: MachineIdx,
    pub(super) index: u32,
    pub(super) state: SlotState,
    /// The pending request (by sequence number) this slot is a partial host of.
    pub(super) group: Option<u64>,
    /// Live processes of the claiming job on this slot.
    pub(super) busy: BTreeSet<ProcessId>,
}

fn speed_of(ad: &ClassAd) -> SpeedKey {
    let num = |n: &str| ad.eval_attr(n).as_f64().unwrap_or(0.0);
    // `as` saturates and maps NaN to 0, which is what a nonsense speed deserves.
    (
        Reverse(num("Mips") as i64),
        Reverse((num("KFlops") * 1000.0) as i64),
    )
}

/// The attributes of a machine `carmi status` shows, printed.
fn shown_attributes(ad: &ClassAd) -> Arc<[(String, String)]> {
    // `GPUs` is shown only by pools that have some (`carmi status` adds the column then).
    const SHOWN: [&str; 8] = [
        "Arch", "OpSys", "Memory", "Cpus", "GPUs", "Mips", "KFlops", "LoadAvg",
    ];
    SHOWN
        .iter()
        .filter_map(|&a| ad.get(a).map(|e| (a.to_string(), e.to_string())))
        .collect()
}

/// Machines, slots and the idle set.
#[derive(Default)]
pub(super) struct Pool {
    pub(super) machines: Vec<Machine>,
    pub(super) by_name: HashMap<String, MachineIdx>,
    /// `HostId(n)` is `slots[n - 1]`.
    pub(super) slots: Vec<Slot>,
    /// Idle slots, fastest first.
    pub(super) idle: BTreeSet<(SpeedKey, HostId)>,
}

impl Pool {
    pub(super) fn find_slot(&self, host: HostId) -> Option<&Slot> {
        let i = usize::try_from(host.0.checked_sub(1)?).ok()?;
        self.slots.get(i)
    }

    pub(super) fn get_slot(&self, host: HostId) -> &Slot {
        self.find_slot(host)
            .unwrap_or_else(|| panic!("allocator invariant: host {host} has a slot"))
    }

    pub(super) fn get_slot_mut(&mut self, host: HostId) -> &mut Slot {
        let i = host.0 as usize - 1;
        &mut self.slots[i]
    }

    pub(super) fn machine(&self, m: MachineIdx) -> &Machine {
        &self.machines[m.0 as usize]
    }

    pub(super) fn machine_mut(&mut self, m: MachineIdx) -> &mut Machine {
        let m = &mut self.machines[m.0 as usize];
        m.status.take();
        m
    }

    pub(super) fn machine_of(&self, host: HostId) -> &Machine {
        self.machine(self.get_slot(host).machine)
    }

    /// The machine named `name`, if it was ever seen.
    pub(super) fn find_machine(&self, name: &str) -> Option<&Machine> {
        Some(self.machine(*self.by_name.get(name)?))
    }

    /// The machine named `name`, made (offline, without hosts) when unknown.
    pub(super) fn machine_named(&mut self, name: &str) -> MachineIdx {
        if let Some(&idx) = self.by_name.get(name) {
            return idx;
        }
        let idx = MachineIdx(self.machines.len() as u32);
        self.machines.push(Machine {
            name: name.to_string(),
            ad: ClassAd::new(),
            ad_text: Arc::from(""),
            shown: Arc::new([]),
            has_requirements: false,
            hosts: Vec::new(),
            slots: 0,
            online: false,
            generation: 0,
            speed: (Reverse(0), Reverse(0)),
            status: OnceLock::new(),
        });
        self.by_name.insert(name.to_string(), idx);
        idx
    }

    /// Gives machine `idx` one more host id (the next free one), offline.
    pub(super) fn add_host(&mut self, idx: MachineIdx) -> HostId {
        let host = HostId(self.slots.len() as u64 + 1);
        let m = &mut self.machines[idx.0 as usize];
        self.slots.push(Slot {
            machine: idx,
            index: m.hosts.len() as u32,
            state: SlotState::Offline,
            group: None,
            busy: BTreeSet::new(),
        });
        m.hosts.push(host);
        host
    }

    /// Machine `idx` is online with `ad` and `slots` slots (host ids made
    /// as needed). Its idle slots must be out of the idle set, as their
    /// speed key may change.
    pub(super) fn bring_online(&mut self, idx: MachineIdx, ad: ClassAd, slots: u32) {
        let m = self.machine_mut(idx);
        m.ad = ad;
        m.ad_changed();
        m.online = true;
        m.slots = slots;
        while (self.machine(idx).hosts.len() as u32) < slots {
            self.add_host(idx);
        }
    }

    /// Merges `update` into machine `idx`'s ad. Its idle slots must be out
    /// of the idle set, as their speed key may change.
    pub(super) fn update_ad(&mut self, idx: MachineIdx, update: &ClassAd) {
        let m = self.machine_mut(idx);
        for (n, e) in update.iter() {
            m.ad.insert(n, e.clone());
        }
        m.ad_changed();
    }

    /// Sets a slot's state, keeping the idle set in step; true when the
    /// slot became idle (the job queue is then settled again).
    pub(super) fn set_state(&mut self, host: HostId, state: SlotState) -> bool {
        let slot = self.get_slot(host);
        let key = self.machine(slot.machine).speed;
        let mut became_idle = false;
        if slot.state == SlotState::Idle {
            self.idle.remove(&(key, host));
        }
        if state == SlotState::Idle {
            self.idle.insert((key, host));
            became_idle = true;
        }
        let slot = self.get_slot_mut(host);
        if state.claim().is_none() {
            slot.busy.clear();
        }
        slot.state = state;
        let m = slot.machine;
        self.machine_mut(m);
        became_idle
    }

    /// The online hosts of machine `idx` whose state `keep` accepts.
    pub(super) fn hosts_where(
        &self,
        idx: MachineIdx,
        keep: impl Fn(&SlotState) -> bool,
    ) -> Vec<HostId> {
        self.machine(idx)
            .online_hosts()
            .iter()
            .copied()
            .filter(|&h| keep(&self.get_slot(h).state))
            .collect()
    }

    /// Online slots, in any state but offline.
    pub(super) fn online_hosts(&self) -> Vec<HostId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state != SlotState::Offline)
            .map(|(i, _)| HostId(i as u64 + 1))
            .collect()
    }

    /// The idle slots, fastest first.
    pub(super) fn idle_hosts(&self) -> Vec<HostId> {
        self.idle.iter().map(|&(_, h)| h).collect()
    }

    pub(super) fn host_name(&self, host: HostId) -> String {
        let slot = self.get_slot(host);
        format!("slot{}@{}", slot.index + 1, self.machine(slot.machine).name)
    }

    pub(super) fn host_info(&self, host: HostId, class: &str) -> HostInfo {
        HostInfo {
            host,
            name: self.host_name(host),
            class: class.to_string(),
            ad: self.machine_of(host).ad_text.to_string(),
        }
    }

    /// The machine name and 0-based slot number of a host of an online machine.
    pub(super) fn host_location(&self, host: HostId) -> Option<(&str, u32)> {
        let slot = self.find_slot(host)?;
        let m = self.machine(slot.machine);
        (m.online && slot.index < m.slots).then_some((m.name.as_str(), slot.index))
    }

    /// The host of slot `slot` of online machine `name`.
    pub(super) fn host_of_slot(&self, name: &str, slot: u32) -> Option<HostId> {
        self.find_machine(name)?
            .online_hosts()
            .get(slot as usize)
            .copied()
    }

    /// Number of online slots, and of idle ones.
    pub(super) fn slot_counts(&self) -> (usize, usize) {
        let online = self
            .slots
            .iter()
            .filter(|s| s.state != SlotState::Offline)
            .count();
        (online, self.idle.len())
    }

    /// The attributes and (roughly) the bytes of text machine `name`'s ad
    /// would have with `update` merged in (`None`: not online).
    pub(super) fn merged_size(&self, name: &str, update: &ClassAd) -> Option<(usize, usize)> {
        let m = self.find_machine(name)?;
        if !m.online {
            return None;
        }
        let (mut attrs, mut bytes) = (m.ad.len(), m.ad_text.len());
        for (n, e) in update.iter() {
            if m.ad.get(n).is_none() {
                attrs += 1;
                bytes += n.len() + e.to_string().len() + 4;
            }
        }
        Some((attrs, bytes))
    }

    /// The online machines, for `carmi status`.
    pub(super) fn status(&self) -> Vec<Arc<MachineStatus>> {
        self.online()
            .map(|m| m.status.get_or_init(|| self.machine_status(m)).clone())
            .collect()
    }

    /// What `carmi status` shows of machine `m` now.
    fn machine_status(&self, m: &Machine) -> Arc<MachineStatus> {
        Arc::new(MachineStatus {
            name: m.name.clone(),
            attributes: m.shown.clone(),
            slots: m
                .online_hosts()
                .iter()
                .map(|&h| {
                    let state = &self.get_slot(h).state;
                    SlotStatus {
                        host: h,
                        state: state.name().into(),
                        job: state.claim().map(|c| c.job),
                    }
                })
                .collect(),
        })
    }

    /// Every online machine.
    pub(super) fn online(&self) -> impl Iterator<Item = &Machine> {
        self.machines.iter().filter(|m| m.online)
    }
}
