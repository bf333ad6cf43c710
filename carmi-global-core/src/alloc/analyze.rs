//! `carmi q -analyze`: why a job's classes are not (fully) satisfied.

use carmi_proto::ids::{HostId, JobId};
use carmi_proto::msg::ClassAnalysis;

use super::{Allocator, SlotState};

impl Allocator {
    /// Why each class of `job` is not (fully) satisfied: every online slot in
    /// the first category that applies. Evaluates afresh (no caches), as it is
    /// asked by people, rarely; but once per machine, not per slot: a
    /// machine's slots share its ad, and its slots mostly follow each other.
    pub fn analyze(&self, job: JobId) -> Vec<ClassAnalysis> {
        let Some(j) = self.jobs.get(&job) else {
            return Vec::new();
        };
        let surplus: std::collections::BTreeSet<HostId> =
            self.surplus_hosts(job).into_iter().collect();
        self.class_status(job)
            .into_iter()
            .map(|status| {
                let class = &j.classes[&status.name];
                let mut a = ClassAnalysis {
                    class: status,
                    slots: 0,
                    rejected_by_class: 0,
                    rejecting_job: 0,
                    held_by_job: 0,
                    claimed_by_others: 0,
                    preemptible: 0,
                    owner: 0,
                    idle: 0,
                    owner_reasons: Vec::new(),
                };
                // The last machine judged, and its verdict.
                let mut judged = None;
                for (i, slot) in self.pool.slots.iter().enumerate() {
                    if slot.state == SlotState::Offline {
                        continue;
                    }
                    let host = HostId(i as u64 + 1);
                    a.slots += 1;
                    let m = self.pool.machine(slot.machine);
                    let verdict = match judged {
                        Some((machine, verdict)) if machine == slot.machine => verdict,
                        _ => {
                            let verdict = if class.excluded.contains(&slot.machine)
                                || !m.ad.eval_expr(&class.expr, Some(&j.ad)).is_true()
                            {
                                Verdict::RejectedByClass
                            } else if m.has_requirements
                                && !classad::matching::accepts(&m.ad, &j.ad)
                            {
                                Verdict::RejectsJob
                            } else {
                                Verdict::Fits
                            };
                            judged = Some((slot.machine, verdict));
                            verdict
                        }
                    };
                    if verdict == Verdict::RejectedByClass {
                        a.rejected_by_class += 1;
                    } else if verdict == Verdict::RejectsJob {
                        a.rejecting_job += 1;
                    } else {
                        match &slot.state {
                            SlotState::Idle => a.idle += 1,
                            SlotState::Claimed(c) if c.job == job => a.held_by_job += 1,
                            SlotState::Claimed(_) => {
                                a.claimed_by_others += 1;
                                a.preemptible += surplus.contains(&host) as u32;
                            }
                            SlotState::Suspended(Some(c)) if c.job == job => a.held_by_job += 1,
                            _ => {
                                a.owner += 1;
                                explain_owner(&mut a.owner_reasons, m, &j.ad);
                            }
                        }
                    }
                }
                a
            })
            .collect()
    }
}

/// What a machine makes of a job's class, whatever its slots' states.
#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    RejectedByClass,
    RejectsJob,
    Fits,
}

/// Adds why `m`'s owner holds it (its `Start` clause that fails), once per
/// machine and for the first few only: `-analyze` stays readable on a big pool.
fn explain_owner(
    reasons: &mut Vec<(String, String)>,
    m: &super::pool::Machine,
    job: &classad::ClassAd,
) {
    if reasons.len() >= super::why::MAX_EXPLAINED || reasons.iter().any(|(n, _)| *n == m.name) {
        return;
    }
    if let Some(why) = super::why::start_blocker(&m.ad, job) {
        reasons.push((m.name.clone(), why));
    }
}
