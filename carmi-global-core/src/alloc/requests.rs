//! Application requests: each checks its arguments, changes the state, and
//! answers with effects; none fails in the Rust sense.

use carmi_proto::ids::{HostId, JobId, RequestId};
use carmi_proto::msg::{ClassDef, Failure, FailureCode, Reply, SpawnTarget};

use super::job::{Class, Rank, Sub, SubKind};
use super::pending::Pending;
use super::pool::SpeedKey;
use super::{Allocator, ReleaseCause, ReqRef, SlotState, host_list};

/// A `DefineClass`'s expression and rank, parsed; else what is wrong, with
/// the line and a caret under the column.
fn parse_class(
    name: &str,
    expression: &str,
    rank: Option<&str>,
) -> Result<(classad::Expr, Option<Rank>), String> {
    let bad = |what: &str, e: classad::ParseError| {
        format!(
            "class `{name}`: {what}line {}, column {}: {}\n  {}\n  {:>width$}",
            e.line,
            e.column,
            e.message,
            e.line_text,
            "^",
            width = e.column
        )
    };
    let expr = classad::parse_expr(expression).map_err(|e| bad("", e))?;
    let rank = match rank {
        Some(text) => {
            let expr = classad::parse_expr(text).map_err(|e| bad("rank: ", e))?;
            let text = text.to_string();
            Some(Rank { text, expr })
        }
        None => None,
    };
    Ok((expr, rank))
}

impl Allocator {
    /// True when the job exists; otherwise fails the request.
    fn check_job(&mut self, job: JobId, req: ReqRef) -> bool {
        if self.is_held(job) {
            // Its processes were killed as it was held; a request still in
            // flight must not claim hosts for it.
            let message = format!("job {job} is held");
            self.out.fail(job, req, FailureCode::Unavailable, message);
            return false;
        }
        if self.jobs.contains_key(&job) {
            return true;
        }
        self.out.fail(
            job,
            req,
            FailureCode::Invalid,
            format!("job {job} has ended"),
        );
        false
    }

    fn unknown_class(&mut self, job: JobId, req: ReqRef, class: &str) {
        let known: Vec<String> = self.jobs[&job]
            .classes
            .keys()
            .map(|k| format!("`{k}`"))
            .collect();
        let known = if known.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", known.join(", "))
        };
        self.out.fail(
            job,
            req,
            FailureCode::UnknownClass,
            format!("job {job} has no class `{class}` ({known}); define it with DefineClass first"),
        );
    }

    /// True when `req` may become outstanding: its id is not outstanding
    /// already, and the job has room for one more; otherwise fails it.
    fn check_new_request(&mut self, job: JobId, req: ReqRef) -> bool {
        if self.is_outstanding(job, req) {
            let message = format!(
                "request id {} is already outstanding; use a fresh id",
                req.id
            );
            self.out.fail(job, req, FailureCode::Invalid, message);
            return false;
        }
        self.check_room(job, req)
    }

    /// Fails the request when the job already has
    /// [`MAX_OUTSTANDING_PER_JOB`](carmi_proto::limits::MAX_OUTSTANDING_PER_JOB)
    /// requests outstanding (pending `AddHosts` and subscriptions).
    fn check_room(&mut self, job: JobId, req: ReqRef) -> bool {
        let max = carmi_proto::limits::MAX_OUTSTANDING_PER_JOB;
        let pending = self.pending.count_of_job(job);
        let outstanding = pending + self.jobs[&job].subs.len();
        if outstanding < max {
            return true;
        }
        let e = carmi_proto::limits::check_count(
            "outstanding requests of the job",
            outstanding + 1,
            max,
            "requests",
        );
        let message = format!(
            "{}; cancel some (CancelRequest) first",
            e.err().map(|e| e.to_string()).unwrap_or_default()
        );
        self.out.fail(job, req, FailureCode::Invalid, message);
        false
    }

    /// True while `req` of `job` is a pending `AddHosts` or a live
    /// subscription: the driver journals such requests, so that a restart
    /// can tell their processes they were lost.
    pub fn is_outstanding_request(&self, job: JobId, req: ReqRef) -> bool {
        self.jobs.contains_key(&job) && self.is_outstanding(job, req)
    }

    /// Grows whenever a request may have stopped being outstanding (a
    /// pending `AddHosts` left the queue, a subscription ended, a job was
    /// forgotten): while it stands still, every request
    /// [`Allocator::is_outstanding_request`] said was outstanding still is,
    /// so that the router need not ask again after every input.
    pub fn requests_ended(&self) -> u64 {
        self.pending.removed + self.out.requests_ended
    }

    fn is_outstanding(&self, job: JobId, req: ReqRef) -> bool {
        self.pending.by_req.contains_key(&req) || self.jobs[&job].sub_reqs.contains(&req)
    }

    /// Checks that `hosts` is non-empty and all announced to the job; fails the request otherwise.
    fn check_own_hosts(&mut self, job: JobId, req: ReqRef, what: &str, hosts: &[HostId]) -> bool {
        if hosts.is_empty() {
            self.out.fail(
                job,
                req,
                FailureCode::Invalid,
                format!("{what} needs at least one host"),
            );
            return false;
        }
        let j = &self.jobs[&job];
        if let Some(bad) = hosts.iter().find(|h| !j.hosts.contains_key(h)) {
            let message = format!(
                "{what}: host {bad} is not allocated to job {job} (its hosts: {})",
                host_list(&j.hosts.keys().copied().collect::<Vec<_>>())
            );
            self.out.fail(job, req, FailureCode::NotYourHost, message);
            return false;
        }
        true
    }

    /// `AddHosts`: `count` more hosts of `class`, announced `increment` at a time.
    pub fn add_hosts(&mut self, job: JobId, req: ReqRef, class: &str, count: u32, increment: u32) {
        if !self.check_job(job, req) {
            return;
        }
        if count == 0 || increment == 0 {
            let message = format!(
                "AddHosts needs a count and an increment of at least 1 (got count {count}, increment {increment})"
            );
            return self.out.fail(job, req, FailureCode::Invalid, message);
        }
        if !self.jobs[&job].classes.contains_key(class) {
            return self.unknown_class(job, req, class);
        }
        if !self.check_new_request(job, req) {
            return;
        }
        let seq = self.pending.push(Pending {
            req,
            job,
            class: class.to_string(),
            remaining: count,
            increment: increment.min(count),
            partial: Vec::new(),
        });
        self.serve(seq);
    }

    /// `DelHosts`: gives hosts back (all or nothing), answered with the
    /// hosts freed, as the specification's `delhosts` is.
    pub fn del_hosts(&mut self, job: JobId, req: ReqRef, hosts: &[HostId]) {
        if !self.check_job(job, req) || !self.check_own_hosts(job, req, "DelHosts", hosts) {
            return;
        }
        let mut freed = Vec::new();
        let mut removed = Vec::new();
        for &h in hosts {
            if let Some(class) = self.jobs[&job].hosts.get(&h).cloned() {
                removed.push(h);
                // A submitted job giving a host back wants one fewer: growth
                // must not hand it straight back (never below the minimum).
                let j = self.jobs.get_mut(&job).expect("checked");
                if let Some((min, max)) = j.limits.get_mut(&class) {
                    *max = max.saturating_sub(1).max(*min);
                }
                self.release(h, ReleaseCause::Deleted);
                match self.pool.get_slot(h).state {
                    SlotState::Claimed(_) => freed.push(h),
                    _ => self.set_state(h, SlotState::Suspended(None)),
                }
            }
        }
        self.out.done(job, req, Reply::HostsRemoved(removed));
        self.offer_all(freed);
    }

    /// `CancelRequest`: cancels a pending `AddHosts` or a subscription of the same process.
    pub fn cancel(&mut self, job: JobId, req: ReqRef, target: RequestId) {
        if !self.check_job(job, req) {
            return;
        }
        let t = ReqRef {
            process: req.process,
            id: target,
        };
        if let Some(&seq) = self.pending.by_req.get(&t) {
            let p = self.remove_pending(seq);
            let message = format!(
                "AddHosts {target} was cancelled by request {} with {} of its hosts still to come",
                req.id, p.remaining
            );
            self.out.fail(p.job, t, FailureCode::Cancelled, message);
            self.out.done(job, req, Reply::Ok);
            self.offer_all(p.partial);
            return;
        }
        let j = self.jobs.get_mut(&job).expect("checked above");
        if j.sub_reqs.contains(&t) {
            self.out.requests_ended += j.retain_subs(|s| s.req != t);
            let message = format!("subscription {target} was cancelled by request {}", req.id);
            self.out.fail(job, t, FailureCode::Cancelled, message);
            self.out.done(job, req, Reply::Ok);
            return;
        }
        let message = format!(
            "request {target} is not outstanding: only a pending AddHosts or a notification subscription can be cancelled"
        );
        self.out.fail(job, req, FailureCode::Invalid, message);
    }

    /// `Config`: the job's hosts.
    pub fn config(&mut self, job: JobId, req: ReqRef) {
        if !self.check_job(job, req) {
            return;
        }
        let hosts = self.jobs[&job]
            .hosts
            .iter()
            .map(|(&h, c)| self.pool.host_info(h, c))
            .collect();
        self.out.done(job, req, Reply::Hosts(hosts));
    }

    /// `GetHostInfo`: one host of the job with its whole machine ad.
    pub fn get_host_info(&mut self, job: JobId, req: ReqRef, host: HostId) {
        if !self.check_job(job, req) || !self.check_own_hosts(job, req, "GetHostInfo", &[host]) {
            return;
        }
        let info = self.pool.host_info(host, &self.jobs[&job].hosts[&host]);
        self.out.done(job, req, Reply::Host(info));
    }

    /// `AddNotify`: be told of every host of `class` added to the job.
    pub fn add_notify(&mut self, job: JobId, req: ReqRef, class: &str) {
        if !self.check_job(job, req) {
            return;
        }
        if !self.jobs[&job].classes.contains_key(class) {
            return self.unknown_class(job, req, class);
        }
        self.subscribe(job, req, SubKind::Add(class.to_string()));
    }

    /// `DeleteNotify`: be told when any of these hosts leaves the job.
    pub fn delete_notify(&mut self, job: JobId, req: ReqRef, hosts: &[HostId]) {
        if self.check_job(job, req) && self.check_own_hosts(job, req, "DeleteNotify", hosts) {
            self.subscribe(job, req, SubKind::Delete(hosts.iter().copied().collect()));
        }
    }

    /// `SuspendNotify`: be told when any of these hosts is suspended.
    pub fn suspend_notify(&mut self, job: JobId, req: ReqRef, hosts: &[HostId]) {
        if self.check_job(job, req) && self.check_own_hosts(job, req, "SuspendNotify", hosts) {
            self.subscribe(job, req, SubKind::Suspend(hosts.iter().copied().collect()));
        }
    }

    /// `ResumeNotify`: be told when any of these hosts resumes.
    pub fn resume_notify(&mut self, job: JobId, req: ReqRef, hosts: &[HostId]) {
        if self.check_job(job, req) && self.check_own_hosts(job, req, "ResumeNotify", hosts) {
            self.subscribe(job, req, SubKind::Resume(hosts.iter().copied().collect()));
        }
    }

    fn subscribe(&mut self, job: JobId, req: ReqRef, kind: SubKind) {
        if !self.check_new_request(job, req) {
            return;
        }
        self.jobs
            .get_mut(&job)
            .expect("checked by the caller")
            .push_sub(Sub { req, kind });
        self.out.done(job, req, Reply::Ok);
    }

    /// `GetClassDefinitions`.
    pub fn class_definitions(&mut self, job: JobId, req: ReqRef) {
        if !self.check_job(job, req) {
            return;
        }
        let defs = self.jobs[&job]
            .classes
            .iter()
            .map(|(n, c)| ClassDef {
                name: n.clone(),
                expression: c.expression.clone(),
                rank: self.jobs[&job].ranks.get(n).map(|r| r.text.clone()),
                excluded: {
                    let mut names: Vec<String> = c
                        .excluded
                        .iter()
                        .map(|m| self.pool.machine(*m).name.clone())
                        .collect();
                    names.sort();
                    names
                },
            })
            .collect();
        self.out.done(job, req, Reply::Classes(defs));
    }

    /// `DefineClass` without a rank (see [`Allocator::define_class_ranked`]).
    pub fn define_class(&mut self, job: JobId, req: ReqRef, name: &str, expression: &str) {
        self.define_class_ranked(job, req, name, expression, None);
    }

    /// `DefineClass`: defines or redefines a class, with the `rank` that
    /// orders its matching machines (higher first; `None`: speed alone; a
    /// redefinition replaces the rank too). Pending requests of the class meet
    /// the idle slots again under the new expression.
    pub fn define_class_ranked(
        &mut self,
        job: JobId,
        req: ReqRef,
        name: &str,
        expression: &str,
        rank: Option<&str>,
    ) {
        if !self.check_job(job, req) {
            return;
        }
        if name.trim().is_empty() {
            let message = "DefineClass needs a class name".to_string();
            return self.out.fail(job, req, FailureCode::Invalid, message);
        }
        let classes = &self.jobs[&job].classes;
        if !classes.contains_key(name) {
            // Every class is evaluated against the machines it is asked of:
            // their number is bounded like a submit file's.
            let max = carmi_proto::limits::MAX_CLASSES_PER_JOB;
            if let Err(e) = carmi_proto::limits::check_count(
                "DefineClass: classes of the job",
                classes.len() + 1,
                max,
                "classes",
            ) {
                let message = format!("{e}; redefine or remove one (RemoveClass)");
                return self.out.fail(job, req, FailureCode::Invalid, message);
            }
        }
        let (expr, rank) = match parse_class(name, expression, rank) {
            Ok(parsed) => parsed,
            Err(message) => return self.out.fail(job, req, FailureCode::BadExpression, message),
        };
        let j = self.jobs.get_mut(&job).expect("checked");
        match rank {
            Some(rank) => j.ranks.insert(name.to_string(), rank),
            None => j.ranks.remove(name),
        };
        // Exclusions belong to the class name, not to one version of its expression.
        let mut class = Class::new(expression, expr);
        if let Some(old) = j.classes.remove(name) {
            class.excluded = old.excluded;
        }
        j.classes.insert(name.to_string(), class);
        self.out.done(job, req, Reply::Ok);
        for seq in self.pending.of_class(job, name) {
            self.serve(seq);
        }
    }

    /// `ExcludeHosts`: the machines of `hosts` (every slot of each) are never
    /// again granted to the job for `class`: not by `AddHosts`, not by growth.
    /// Hosts the job holds keep running (give them back with `DelHosts`,
    /// after this so that they are not granted again at once); hosts claimed
    /// for a group not yet announced are let go. A host need not be the job's:
    /// any host of the pool names its machine.
    pub fn exclude_hosts(&mut self, job: JobId, req: ReqRef, class: &str, hosts: &[HostId]) {
        if !self.check_job(job, req) {
            return;
        }
        if !self.jobs[&job].classes.contains_key(class) {
            return self.unknown_class(job, req, class);
        }
        if hosts.is_empty() {
            let message = "ExcludeHosts needs at least one host".to_string();
            return self.out.fail(job, req, FailureCode::Invalid, message);
        }
        let mut machines = Vec::with_capacity(hosts.len());
        for &h in hosts {
            match self.pool.find_slot(h) {
                Some(slot) => machines.push(slot.machine),
                None => {
                    let message = format!("ExcludeHosts: host {h} is not a host of this pool");
                    return self.out.fail(job, req, FailureCode::NotYourHost, message);
                }
            }
        }
        let c = self
            .jobs
            .get_mut(&job)
            .expect("checked")
            .classes
            .get_mut(class)
            .expect("checked");
        c.excluded.extend(machines.iter().copied());
        // Claimed for a group of this class but not yet announced: let go.
        let mut freed = Vec::new();
        for seq in self.pending.of_class(job, class) {
            for h in self.pending.by_seq[&seq].partial.clone() {
                if machines.contains(&self.pool.get_slot(h).machine) {
                    self.release(h, ReleaseCause::Deleted);
                    freed.push(h);
                }
            }
        }
        self.out.done(job, req, Reply::Ok);
        self.offer_all(freed);
    }

    /// `RemoveClass`: fails while hosts of the class are allocated or pending.
    pub fn remove_class(&mut self, job: JobId, req: ReqRef, name: &str) {
        if !self.check_job(job, req) {
            return;
        }
        let j = &self.jobs[&job];
        if !j.classes.contains_key(name) {
            return self.unknown_class(job, req, name);
        }
        let held: Vec<HostId> = j
            .hosts
            .iter()
            .filter(|(_, c)| *c == name)
            .map(|(&h, _)| h)
            .collect();
        if !held.is_empty() {
            let message = format!(
                "class `{name}` still has {} host(s) allocated ({}); give them back with DelHosts first",
                held.len(),
                host_list(&held)
            );
            return self.out.fail(job, req, FailureCode::ClassInUse, message);
        }
        if let Some(seqs) = self.pending.groups.get(&(job, name.to_string())) {
            let first = self.pending.by_seq[seqs.first().expect("groups are never empty")]
                .req
                .id;
            let message = format!(
                "class `{name}` has a pending AddHosts ({first}); cancel it with CancelRequest first"
            );
            return self.out.fail(job, req, FailureCode::ClassInUse, message);
        }
        let j = self.jobs.get_mut(&job).expect("checked");
        j.classes.remove(name);
        let mut ended = Vec::new();
        self.out.requests_ended += j.retain_subs(|s| match &s.kind {
            SubKind::Add(c) if c == name => {
                ended.push(s.req);
                false
            }
            _ => true,
        });
        for r in ended {
            let message = format!("class `{name}` was removed by request {}", req.id);
            self.out.fail(job, r, FailureCode::UnknownClass, message);
        }
        self.out.done(job, req, Reply::Ok);
    }

    /// Where `ClassSpawn` should run a process: for a class, the best ranked
    /// (then fastest) host of that class allocated to the job, running and
    /// without processes; for a
    /// named host, that host if it is the job's and not suspended.
    pub fn pick_spawn_host(&self, job: JobId, target: &SpawnTarget) -> Result<HostId, Failure> {
        let fail = |code, message| Err(Failure { code, message });
        let Some(j) = self.jobs.get(&job) else {
            return fail(FailureCode::Invalid, format!("job {job} has ended"));
        };
        match target {
            SpawnTarget::Class(class) => {
                if !j.classes.contains_key(class) {
                    return fail(
                        FailureCode::UnknownClass,
                        format!(
                            "job {job} has no class `{class}`; define it with DefineClass first"
                        ),
                    );
                }
                let (mut total, mut busy, mut suspended) = (0, 0, 0);
                // Highest class rank first, then the fastest (lowest speed key).
                let mut best: Option<(f64, (SpeedKey, HostId))> = None;
                for (&h, c) in &j.hosts {
                    if c != class {
                        continue;
                    }
                    total += 1;
                    let slot = self.pool.get_slot(h);
                    match &slot.state {
                        SlotState::Claimed(_) if slot.busy.is_empty() => {
                            let rank = self.rank(job, class, h);
                            let key = (self.pool.machine_of(h).speed, h);
                            if best.is_none_or(|(r, k)| rank > r || (rank == r && key < k)) {
                                best = Some((rank, key));
                            }
                        }
                        SlotState::Claimed(_) => busy += 1,
                        _ => suspended += 1,
                    }
                }
                match best {
                    Some((_, (_, h))) => Ok(h),
                    None => fail(
                        FailureCode::Unavailable,
                        format!(
                            "no host of class `{class}` allocated to job {job} is free: {total} allocated, \
                             {busy} running a process, {suspended} suspended; ask for more with AddHosts \
                             or name a host"
                        ),
                    ),
                }
            }
            SpawnTarget::Host(h) => {
                if !j.hosts.contains_key(h) {
                    return fail(
                        FailureCode::NotYourHost,
                        format!("host {h} is not allocated to job {job}"),
                    );
                }
                if matches!(self.pool.get_slot(*h).state, SlotState::Suspended(_)) {
                    return fail(
                        FailureCode::HostSuspended,
                        format!(
                            "host {h} ({}) is suspended: its owner is back; wait for it to resume",
                            self.pool.host_name(*h)
                        ),
                    );
                }
                Ok(*h)
            }
        }
    }
}
