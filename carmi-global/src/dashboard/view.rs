//! What the dashboard shows, built from the router's answers to `Status` and
//! `Queue` (a [`Snapshot`]): pure, so that its rules (which machine is lost,
//! how the pool's held-and-busy curve is sampled) are tested without a
//! server.
//!
//! The router forgets a machine once it is lost; the dashboard remembers
//! every machine it has seen and shows one that disappeared as `lost`, as a
//! person looking at a pool wants to see it, until it comes back.

use std::collections::{BTreeMap, VecDeque};

use carmi_api::ids::JobId;
use carmi_api::msg::{ClassAnalysis, JobStatus, MachineStatus};
use serde::Serialize;

/// Most samples of the pool curve kept (at one per [`CURVE_STEP_S`] while
/// nothing changes, fifty minutes).
pub const CURVE_SAMPLES: usize = 600;

/// Seconds between two samples of the curve while the counts stay the same:
/// a quiet pool sends its pages a new view only this often.
pub const CURVE_STEP_S: u64 = 5;

/// Most machines remembered as lost: a pool whose machines come and go under
/// fresh names must not grow the dashboard's memory without limit.
pub const MAX_LOST: usize = 1000;

/// Most waiting jobs explained per snapshot (each costs a pass over the
/// pool's slots on the router's task; a large pool gets fewer, see
/// `server/handle.rs`).
pub const MAX_EXPLAINED: usize = 20;

/// Why a waiting job waits: its classes as `carmi q -analyze` explains them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Waiting {
    /// The job.
    pub job: JobId,
    /// One entry per class.
    pub classes: Vec<ClassAnalysis>,
}

/// The router's view of the pool and its queue at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Every machine online, as `carmi status` gets them (shared with the
    /// global RM's pool, which keeps each until it changes).
    pub machines: Vec<std::sync::Arc<MachineStatus>>,
    /// Every job in the queue, as `carmi q` gets them.
    pub jobs: Vec<JobStatus>,
    /// The first [`MAX_EXPLAINED`] waiting jobs, explained.
    pub waiting: Vec<Waiting>,
    /// The core's counters, for `/metrics`.
    pub counters: crate::metrics::CoreCounters,
    /// `Some(ids of the queued jobs)` in a light snapshot, taken when nobody
    /// watches nor asked: `jobs` is then left empty, as building every
    /// job's status (a router step of 190 ms at 50,000 jobs) would serve
    /// only the job timelines, which need the ids.
    pub light: Option<Vec<carmi_api::ids::JobId>>,
}

impl Snapshot {
    /// The jobs in the queue, from a full snapshot or a light one.
    pub fn queued(&self) -> Box<dyn Iterator<Item = carmi_api::ids::JobId> + '_> {
        match &self.light {
            Some(ids) => Box::new(ids.iter().copied()),
            None => Box::new(self.jobs.iter().map(|j| j.job)),
        }
    }
}

/// One machine as the page shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MachineView {
    /// Its name.
    pub name: String,
    /// `lent` (a job holds a slot and none is suspended), `suspended` (an
    /// owner came back on a held slot), `owner` (its owner uses it),
    /// `idle`, or `lost` (it was seen, and is gone).
    pub state: String,
    /// The machine's main attributes (ClassAd text), as `carmi status`.
    pub attributes: std::sync::Arc<[(String, String)]>,
    /// Its slots (none once lost), as `carmi status --json`.
    pub slots: Vec<carmi_api::msg::SlotStatus>,
}

/// One sample of the pool's curve: slots by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Seconds since the Unix epoch.
    pub t: u64,
    /// Slots held by a job (claimed or suspended).
    pub held: u32,
    /// Held slots running (claimed, not suspended).
    pub busy: u32,
    /// Held slots suspended by their owners.
    pub suspended: u32,
    /// Slots taken by their owners.
    pub owner: u32,
    /// Free slots.
    pub idle: u32,
}

/// Everything the page draws, as the JSON of `/api/view` and of each
/// server-sent event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct View {
    /// Every machine seen, lost ones included, by name.
    pub machines: Vec<MachineView>,
    /// The queue.
    pub jobs: Vec<JobStatus>,
    /// Why the first waiting jobs wait.
    pub waiting: Vec<Waiting>,
    /// The pool's curve, oldest first.
    pub curve: Vec<Sample>,
}

/// Builds [`View`]s from successive snapshots (the dashboard's memory).
#[derive(Debug, Default)]
pub struct Viewer {
    lost: BTreeMap<String, std::sync::Arc<[(String, String)]>>,
    online: BTreeMap<String, std::sync::Arc<[(String, String)]>>,
    curve: VecDeque<Sample>,
}

/// The state a machine is shown in, from its slots' states.
pub fn machine_state(m: &MachineStatus) -> &'static str {
    let has = |s: &str| m.slots.iter().any(|x| x.state == s);
    if has("suspended") {
        "suspended"
    } else if has("claimed") {
        "lent"
    } else if has("owner") {
        "owner"
    } else {
        "idle"
    }
}

impl Viewer {
    /// A viewer that has seen nothing.
    pub fn new() -> Viewer {
        Viewer::default()
    }

    /// Takes `snap`, taken at `now_unix`, and returns what to show (see
    /// [`Viewer::observe`]).
    pub fn update(&mut self, snap: Snapshot, now_unix: u64) -> View {
        self.observe(&snap, now_unix);
        let mut machines: Vec<MachineView> = snap
            .machines
            .into_iter()
            .map(|m| MachineView {
                name: m.name.clone(),
                state: machine_state(&m).to_string(),
                attributes: m.attributes.clone(),
                slots: m.slots.clone(),
            })
            .collect();
        machines.extend(self.lost.iter().map(|(name, attrs)| MachineView {
            name: name.clone(),
            state: "lost".into(),
            attributes: attrs.clone(),
            slots: Vec::new(),
        }));
        machines.sort_by(|a, b| a.name.cmp(&b.name));
        View {
            machines,
            jobs: snap.jobs,
            waiting: snap.waiting,
            curve: self.curve.iter().copied().collect(),
        }
    }

    /// Takes what `snap` (taken at `now_unix`) tells of machines lost and
    /// back and of the curve, without making a view: all a light snapshot
    /// is for. The curve gains a sample when a count changed or
    /// [`CURVE_STEP_S`] passed since its last one (a changed count within
    /// the same second replaces it).
    pub fn observe(&mut self, snap: &Snapshot, now_unix: u64) {
        let mut online = BTreeMap::new();
        for m in &snap.machines {
            online.insert(m.name.clone(), m.attributes.clone());
            self.lost.remove(&m.name);
        }
        for (name, attrs) in std::mem::take(&mut self.online) {
            if !online.contains_key(&name) {
                self.lost.insert(name, attrs);
            }
        }
        while self.lost.len() > MAX_LOST {
            self.lost.pop_first();
        }
        self.online = online;
        let sample = sample(&snap.machines, now_unix);
        let same = |a: &Sample, b: &Sample| Sample { t: 0, ..*a } == Sample { t: 0, ..*b };
        match self.curve.back() {
            Some(last) if same(last, &sample) && now_unix < last.t + CURVE_STEP_S => {}
            Some(last) if last.t == now_unix => *self.curve.back_mut().expect("a last") = sample,
            _ => self.curve.push_back(sample),
        }
        while self.curve.len() > CURVE_SAMPLES {
            self.curve.pop_front();
        }
    }
}

/// Counts slots by state.
fn sample(machines: &[std::sync::Arc<MachineStatus>], t: u64) -> Sample {
    let mut s = Sample {
        t,
        ..Sample::default()
    };
    for slot in machines.iter().flat_map(|m| &m.slots) {
        match &*slot.state {
            "claimed" => {
                s.held += 1;
                s.busy += 1;
            }
            "suspended" => {
                s.held += 1;
                s.suspended += 1;
            }
            "owner" => s.owner += 1,
            _ => s.idle += 1,
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::{HostId, JobId};
    use carmi_api::msg::SlotStatus;

    fn machine(name: &str, states: &[&str]) -> std::sync::Arc<MachineStatus> {
        std::sync::Arc::new(MachineStatus {
            name: name.into(),
            attributes: vec![("Cpus".into(), "1".into())].into(),
            slots: states
                .iter()
                .enumerate()
                .map(|(i, s)| SlotStatus {
                    host: HostId(i as u64),
                    state: s.to_string().into(),
                    job: (*s == "claimed" || *s == "suspended").then_some(JobId(1)),
                })
                .collect(),
        })
    }

    fn states(v: &View) -> Vec<(&str, &str)> {
        v.machines
            .iter()
            .map(|m| (m.name.as_str(), m.state.as_str()))
            .collect()
    }

    #[test]
    fn a_machine_shows_its_most_telling_slot() {
        let m = |s: &[&str]| machine_state(&machine("m", s));
        assert_eq!(m(&["claimed", "suspended", "idle"]), "suspended");
        assert_eq!(m(&["idle", "claimed"]), "lent");
        assert_eq!(m(&["owner", "idle"]), "owner");
        assert_eq!(m(&["idle"]), "idle");
        assert_eq!(m(&[]), "idle");
    }

    #[test]
    fn a_machine_that_disappears_is_lost_until_it_comes_back() {
        let mut v = Viewer::new();
        let snap = |ms: Vec<std::sync::Arc<MachineStatus>>| Snapshot {
            machines: ms,
            jobs: vec![],
            waiting: vec![],
            counters: Default::default(),
            light: None,
        };
        let both = v.update(
            snap(vec![machine("a", &["claimed"]), machine("b", &["idle"])]),
            10,
        );
        assert_eq!(states(&both), [("a", "lent"), ("b", "idle")]);
        let gone = v.update(snap(vec![machine("b", &["idle"])]), 11);
        assert_eq!(states(&gone), [("a", "lost"), ("b", "idle")]);
        assert_eq!(*gone.machines[0].attributes, [("Cpus".into(), "1".into())]);
        assert!(gone.machines[0].slots.is_empty());
        let still = v.update(snap(vec![machine("b", &["idle"])]), 12);
        assert_eq!(states(&still), [("a", "lost"), ("b", "idle")]);
        let back = v.update(snap(vec![machine("a", &["idle"]), machine("b", &[])]), 13);
        assert_eq!(states(&back), [("a", "idle"), ("b", "idle")]);
    }

    #[test]
    fn the_curve_samples_changes_and_every_few_seconds_and_keeps_the_last_ones() {
        let mut v = Viewer::new();
        let snap = Snapshot {
            machines: vec![
                machine("a", &["claimed", "suspended"]),
                machine("b", &["owner", "idle"]),
            ],
            jobs: vec![],
            waiting: vec![],
            counters: Default::default(),
            light: None,
        };
        let first = v.update(snap.clone(), 100);
        let want = Sample {
            t: 100,
            held: 2,
            busy: 1,
            suspended: 1,
            owner: 1,
            idle: 1,
        };
        assert_eq!(first.curve, [want]);
        // Nothing changed: no new sample until the step has passed.
        assert_eq!(v.update(snap.clone(), 100 + CURVE_STEP_S - 1).curve, [want]);
        let later = v.update(snap.clone(), 100 + CURVE_STEP_S).curve;
        assert_eq!(later.len(), 2);
        // A change is sampled at once, and replaces a sample of its second.
        let mut busier = snap.clone();
        std::sync::Arc::make_mut(&mut busier.machines[1]).slots[1].state = "claimed".into();
        let t = 101 + CURVE_STEP_S;
        assert_eq!(v.update(busier.clone(), t).curve.len(), 3);
        let again = v.update(snap.clone(), t).curve;
        assert_eq!((again.len(), again[2].held), (3, 2));
        let mut t = t;
        for _ in 0..CURVE_SAMPLES {
            t += CURVE_STEP_S;
            v.update(snap.clone(), t);
        }
        let last = v.update(snap, t).curve;
        assert_eq!(last.len(), CURVE_SAMPLES);
        assert_eq!(last[CURVE_SAMPLES - 1].t, t);
    }

    #[test]
    fn lost_machines_are_bounded() {
        let mut v = Viewer::new();
        let many: Vec<std::sync::Arc<MachineStatus>> = (0..MAX_LOST + 5)
            .map(|i| machine(&format!("m{i:05}"), &["idle"]))
            .collect();
        v.update(
            Snapshot {
                machines: many,
                jobs: vec![],
                waiting: vec![],
                counters: Default::default(),
                light: None,
            },
            1,
        );
        let view = v.update(Snapshot::default(), 2);
        assert_eq!(view.machines.len(), MAX_LOST);
        assert!(view.machines.iter().all(|m| m.state == "lost"));
    }
}
