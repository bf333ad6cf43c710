//! The router's invariants, checked after every step in tests.

use super::{LinkRole, Router};

impl Router {
    /// Checks the invariants of the router and of its allocator; for tests.
    pub fn sanity_check(&self) {
        self.alloc.sanity_check();
        self.procs.sanity_check();
        self.check_log_reads();
        self.check_outstanding();
        let mut with_deadline = 0;
        for (name, p) in &self.registry.presence {
            if let Some(d) = p.deadline {
                with_deadline += 1;
                assert!(
                    self.registry.deadlines.contains(&(d, name.clone())),
                    "{name}: deadline not indexed"
                );
                assert!(self.alloc.is_online(name), "{name}: deadline but offline");
            } else {
                assert!(
                    !self.alloc.is_online(name),
                    "{name}: online without a deadline"
                );
            }
            assert!(
                p.link.is_some() || !p.ready,
                "{name}: ready without a connection"
            );
            if let Some(l) = p.link {
                assert!(
                    matches!(self.registry.links.get(&l), Some(LinkRole::Machine(n)) if n == name),
                    "{name}: link {l} not registered for it"
                );
            }
        }
        assert_eq!(
            with_deadline,
            self.registry.deadlines.len(),
            "stale deadlines"
        );
        for p in &self.jobs.unplaced {
            assert!(
                self.jobs.masters.contains_key(p),
                "unplaced {p} is not a live master"
            );
        }
        for p in &self.jobs.sent_masters {
            assert!(
                self.jobs.masters.contains_key(p),
                "sent master {p} is not a live master"
            );
        }
        for (p, (job, machine)) in &self.jobs.masters {
            assert_eq!(
                machine.is_empty(),
                self.jobs.unplaced.contains(p),
                "master {p}: unplaced exactly when it has no machine"
            );
            assert!(
                !(machine.is_empty() && self.jobs.sent_masters.contains(p)),
                "master {p} sent to no machine"
            );
            assert!(self.alloc.has_job(*job), "master {p} of ended job {job}");
            assert_eq!(
                self.jobs.submitted.get(job).and_then(|s| s.master),
                Some(*p),
                "master {p} is not its job's"
            );
        }
        for (p, waiting) in self.requests.lookups.iter() {
            let proc = self.procs.find(*p);
            assert!(
                proc.is_some_and(|pr| pr.is_live() && pr.endpoint.is_none()),
                "lookups wait for {p}, which is gone or already reachable"
            );
            assert!(!waiting.is_empty(), "empty lookup list for {p}");
        }
    }
}
