//! Application requests forwarded by local RMs: one function per request
//! that needs the process table; the rest go straight to the allocator.

use carmi_proto::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    Event, ExecutableRef, Failure, FailureCode, FromGlobal, OutputMode, OutputRoute, ProcessState,
    Reply, Request, SpawnTarget,
};

use crate::alloc::ReqRef;
use crate::journal::Record;
use crate::procs::Proc;
use crate::router::{LinkId, Output, Router};

impl Router {
    /// A request from the process attached at `conn` of machine `name`.
    pub(in crate::router) fn forward(
        &mut self,
        link: LinkId,
        name: &str,
        conn: ConnId,
        id: RequestId,
        body: Request,
    ) {
        let Some(process) = self.procs.attached_at(name, conn) else {
            let failure = Failure {
                code: FailureCode::UnknownProcess,
                message: format!(
                    "connection {conn} at machine `{name}` has not attached; the local RM must send AppAttach first"
                ),
            };
            let event = Event::Failed {
                request: id,
                failure,
            };
            return self.send(link, FromGlobal::Deliver { conn, event });
        };
        let job = self
            .procs
            .find(process)
            .expect("attached process exists")
            .job;
        let req = ReqRef { process, id };
        // Before any request reaches the allocator: counts and lists sized by
        // the client are refused above their limits, naming the limit.
        if let Err(failure) = carmi_proto::limits::check_request(&body) {
            tracing::warn!(job = %job, %process, "request refused: {}", failure.message);
            return self.answer(req, Err(failure));
        }
        let kind = Self::outstanding_kind(&body);
        self.dispatch(job, req, body);
        self.note_outstanding(job, req, kind);
    }

    /// Hands an accepted request to the allocator or to the router's own handler.
    pub(in crate::router) fn dispatch(&mut self, job: JobId, req: ReqRef, body: Request) {
        let a = &mut self.alloc;
        match body {
            Request::CancelRequest { request } => a.cancel(job, req, request),
            Request::Config => a.config(job, req),
            Request::GetHostInfo { host } => a.get_host_info(job, req, host),
            Request::AddHosts {
                class,
                count,
                increment,
            } => a.add_hosts(job, req, &class, count, increment),
            Request::DelHosts { hosts } => a.del_hosts(job, req, &hosts),
            Request::AddNotify { class } => a.add_notify(job, req, &class),
            Request::DeleteNotify { hosts } => a.delete_notify(job, req, &hosts),
            Request::SuspendNotify { hosts } => a.suspend_notify(job, req, &hosts),
            Request::ResumeNotify { hosts } => a.resume_notify(job, req, &hosts),
            Request::GetClassDefinitions => a.class_definitions(job, req),
            Request::DefineClass { .. }
            | Request::RemoveClass { .. }
            | Request::ExcludeHosts { .. } => self.change_classes(job, req, body),
            Request::ClassSpawn {
                executable,
                args,
                target,
                output,
            } => self.class_spawn(job, req, executable, args, target, output),
            Request::ProcessInfo { process: other } => {
                let result = self
                    .same_job(job, other)
                    .map(|p| Reply::Process(self.process_info(other, p)));
                self.answer(req, result);
            }
            Request::SetJobAttrs { attrs } => {
                let result = self.jobs.job_attrs.set(job, attrs).map(|()| Reply::Ok);
                self.answer(req, result);
            }
            Request::Processes => {
                let reply = self.processes_of(job);
                self.answer(req, Ok(reply));
            }
            Request::LookupProcess { process: other } => self.lookup_process(job, req, other),
        }
    }

    /// `DefineClass`, `RemoveClass`, `ExcludeHosts`: the job's classes
    /// change at the allocator, and the change is journaled to be replayed
    /// after a restart (so that recovered processes find their class, and an
    /// exclusion that failed fails again).
    fn change_classes(&mut self, job: JobId, req: ReqRef, body: Request) {
        let record = match body {
            Request::DefineClass {
                name,
                expression,
                rank,
                replace,
            } => {
                if let Err(failure) = self.check_define(job, &name, replace) {
                    return self.answer(req, Err(failure));
                }
                let a = &mut self.alloc;
                a.define_class_ranked(job, req, &name, &expression, rank.as_deref());
                Record::ClassDefined {
                    job,
                    name,
                    expression,
                    rank,
                }
            }
            Request::RemoveClass { name } => {
                self.alloc.remove_class(job, req, &name);
                Record::ClassRemoved { job, name }
            }
            Request::ExcludeHosts { class, hosts } => {
                self.alloc.exclude_hosts(job, req, &class, &hosts);
                Record::Excluded { job, class, hosts }
            }
            _ => return,
        };
        self.out.push(Output::Journal(record));
    }

    /// `LookupProcess`: the direct-message endpoint of a process of the
    /// same job, answered at once, or once it attaches if it is starting.
    fn lookup_process(&mut self, job: JobId, req: ReqRef, other: ProcessId) {
        let result = self
            .same_job(job, other)
            .map(|p| (p.endpoint.clone(), p.is_live()));
        match result {
            Ok((Some(address), _)) => {
                let reply = Reply::Endpoint {
                    process: other,
                    address,
                };
                self.answer(req, Ok(reply));
            }
            // Started but not connected yet: the answer waits for its
            // `AppAttach` (or its end), so that a client can send to a
            // process as soon as it hears `ProcessStarted`.
            Ok((None, true)) => self.requests.lookups.wait(other, req),
            Ok((None, false)) => {
                let failure = Failure {
                    code: FailureCode::Unavailable,
                    message: format!("process {other} has exited"),
                };
                self.answer(req, Err(failure));
            }
            Err(failure) => self.answer(req, Err(failure)),
        }
    }

    /// The process `other`, if it belongs to `job`.
    fn same_job(&self, job: JobId, other: ProcessId) -> Result<&Proc, Failure> {
        self.procs
            .find(other)
            .filter(|p| p.job == job)
            .ok_or_else(|| Failure {
                code: FailureCode::UnknownProcess,
                message: format!("process {other} is not a process of job {job}"),
            })
    }

    pub(in crate::router) fn answer(&mut self, req: ReqRef, result: Result<Reply, Failure>) {
        let event = match result {
            Ok(reply) => Event::Done {
                request: req.id,
                reply,
            },
            Err(failure) => Event::Failed {
                request: req.id,
                failure,
            },
        };
        self.deliver(req.process, event);
    }

    /// `ClassSpawn`: the allocator picks the host, the machine's local RM
    /// starts the process; `Started` and `Exited` from it become
    /// `ProcessStarted` and `ProcessExited` events for the requester.
    fn class_spawn(
        &mut self,
        job: JobId,
        req: ReqRef,
        executable: ExecutableRef,
        args: Vec<String>,
        target: SpawnTarget,
        output: OutputMode,
    ) {
        if let Err(failure) = self.check_uploaded(&executable) {
            return self.answer(req, Err(failure));
        }
        // Kept while the job lives, whatever else refers to it.
        self.stored.spawned(job, &executable.sha256, self.now);
        let host = match self.alloc.pick_spawn_host(job, &target) {
            Ok(h) => h,
            Err(failure) => return self.answer(req, Err(failure)),
        };
        let machine = self
            .alloc
            .host_machine(host)
            .expect("a picked host has a machine")
            .to_string();
        let Some(link) = self.registry.ready_link(&machine) else {
            let failure = Failure {
                code: FailureCode::Unavailable,
                message: format!(
                    "the local RM of machine `{machine}` (host {host}) is not connected; try again shortly"
                ),
            };
            return self.answer(req, Err(failure));
        };
        let output = match self.output_route(req, output) {
            Ok(route) => route,
            Err(failure) => return self.answer(req, Err(failure)),
        };
        let process = self.procs.fresh_id();
        self.procs.insert(
            process,
            Proc {
                job,
                host: Some(host),
                endpoint: None,
                state: ProcessState::Starting,
                attached: None,
                origin: Some(req),
                root: false,
                executable: Some(executable.name.clone()),
            },
        );
        self.alloc.on_process_spawned(host, process);
        if let Some(class) = self.alloc.host_class(job, host) {
            self.out.push(Output::Journal(Record::Spawned {
                process,
                job,
                host,
                class,
                origin: Some(req),
                executable: Some(executable.name.clone()),
            }));
        }
        self.send(
            link,
            FromGlobal::Spawn {
                process,
                job,
                host,
                executable,
                args,
                output,
                requests: self.job_requests(job),
            },
        );
    }

    /// The executable a `ClassSpawn` names is in the store, with these contents.
    fn check_uploaded(&self, executable: &ExecutableRef) -> Result<(), Failure> {
        if self.stored.size(&executable.sha256) == Some(executable.size) {
            return Ok(());
        }
        Err(Failure {
            code: FailureCode::BadExecutable,
            message: format!(
                "executable `{}` ({} bytes, sha256 {}) was never uploaded, or with other contents; \
                 upload it before spawning",
                executable.name, executable.size, executable.sha256
            ),
        })
    }

    /// Where a spawned process's output goes: forwarded to the requester's
    /// direct-message endpoint, which it must have, or kept or discarded.
    fn output_route(&self, req: ReqRef, output: OutputMode) -> Result<OutputRoute, Failure> {
        match output {
            OutputMode::Keep => Ok(OutputRoute::Keep),
            OutputMode::Discard => Ok(OutputRoute::Discard),
            OutputMode::Forward => match self
                .procs
                .find(req.process)
                .and_then(|p| p.endpoint.clone())
            {
                Some(endpoint) => Ok(OutputRoute::Forward {
                    endpoint,
                    request: req.id,
                }),
                None => Err(Failure {
                    code: FailureCode::Invalid,
                    message: format!(
                        "process {} has no direct-message endpoint to forward output to; \
                         ask for OutputMode::Keep instead",
                        req.process
                    ),
                }),
            },
        }
    }
}
