//! The asynchronous client library that applications link.
//!
//! [`connect`] attaches this process to its local RM and returns a [`Carmi`]
//! handle and an [`EventStream`]. Every request method of the handle returns a
//! [`RequestId`] at once, without touching the network: the request is queued
//! to a writer task, and its outcome arrives later on the event stream as an
//! [`Incoming::Rm`] event carrying the same id. Application messages
//! ([`Carmi::send`]) go directly to the peer process over a connection of
//! their own, never through the RMs, and arrive on the same stream.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use carmi_api::client::{connect, ConnectOptions, Incoming};
//! let (carmi, mut events) = connect(ConnectOptions::from_env()?).await?;
//! let asked = carmi.addhosts("fast", 4, 1);
//! while let Some(incoming) = events.next().await {
//!     match incoming {
//!         Incoming::Rm(event) if event.request() == asked => println!("{event:?}"),
//!         Incoming::Message { from, tag, data } => println!("{from} sent {tag}: {} bytes", data.len()),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Tasks
//! One writer task owns the write half of the RM connection (requests,
//! executable uploads), one reader task its read half (events), one task
//! accepts direct connections from peers and from the local RMs forwarding
//! spawned processes' output (one receiving task each; see `output.rs`), and one
//! writer task per peer this process sends to (on a connection in clear with
//! nothing queued, [`Carmi::send`] writes to the socket itself; see
//! `link.rs`). All of them stop when the last
//! [`Carmi`] clone is dropped; queued requests and messages are still written
//! first. Call [`Carmi::flush`] before the process exits so that nothing
//! queued is lost when the runtime stops.

mod attach;
mod link;
mod options;
mod output;
mod peer;
mod rm;

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::conn::Conn;
use crate::frame::FrameReader;
use crate::handshake::{self, HandshakeError, Secret};
use crate::ids::{HostId, JobId, ProcessId, RequestId};
use crate::msg::{
    Event, Failure, FailureCode, FromLocal, OutputMode, Reply, Request, Role, SpawnTarget,
    StdStream, ToLocal,
};

/// How long `connect` waits for the local RM to accept the TCP connection.
pub const CONNECT_TIMEOUT: Duration = crate::net::CONNECT_TIMEOUT;

/// How long `connect` waits for `Attached` after the handshake: the local RM
/// asks the global RM first, so this is longer than the handshake timeout.
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a first message to a peer waits for the RM to say where the peer listens.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);

pub use attach::connect;
pub use options::{
    ConnectError, ConnectOptions, ENV_ENDPOINT_HOST, ENV_JOB, ENV_LOCAL, ENV_PLAIN_PEERS,
    ENV_PROCESS, ENV_SECRET_FILE,
};
pub use output::{OUTPUT_BUFFER, SpawnOutput};

/// What arrives on the [`EventStream`].
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// An RM event: the outcome of a request, or a notification for a subscription.
    Rm(Event),
    /// A message from a peer process, with its body exactly as sent.
    Message {
        /// The sender.
        from: ProcessId,
        /// The sender's tag.
        tag: u32,
        /// The body.
        data: Bytes,
    },
    /// Messages to a peer could not be delivered: its address could not be
    /// looked up, it could not be reached or refused us, or the connection
    /// broke. `unsent` messages queued for it were dropped (messages written
    /// before the failure may or may not have arrived). A later `send` to the
    /// same peer tries again.
    SendFailed {
        /// The peer.
        to: ProcessId,
        /// Why.
        reason: String,
        /// Queued messages dropped.
        unsent: usize,
    },
    /// Bytes a process spawned with [`SpawnOutput::Events`] wrote to its
    /// standard output or error, in the order written (per stream). Output
    /// waiting on the stream is bounded ([`OUTPUT_BUFFER`]): while it is full
    /// the spawned process blocks in `write`, so read the stream.
    Output {
        /// The spawned process.
        process: ProcessId,
        /// The `class_spawn` that started it.
        request: RequestId,
        /// Which stream.
        stream: StdStream,
        /// The bytes, verbatim.
        data: Bytes,
    },
    /// The output of a process spawned with [`SpawnOutput::Events`] or
    /// [`SpawnOutput::Files`] is over. `complete` is true when both streams
    /// reached end of file and every byte was delivered (or written to the
    /// files); false when the connection from its machine broke (its local RM
    /// then keeps the rest in its own output folder).
    OutputEnd {
        /// The spawned process.
        process: ProcessId,
        /// The `class_spawn` that started it.
        request: RequestId,
        /// Whether every byte arrived.
        complete: bool,
    },
    /// The connection to the local RM is gone. Outstanding requests will not
    /// be answered; later requests fail at once with
    /// [`FailureCode::Unavailable`]. Direct messages still flow.
    Disconnected(String),
}

/// The single stream of everything addressed to this process, in arrival
/// order; messages from one sender stay in the order they were sent. It ends
/// once every [`Carmi`] clone has been dropped and the buffered items are read.
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Incoming>,
    /// Output bytes that may still be queued ([`OUTPUT_BUFFER`]); given back
    /// as the application takes [`Incoming::Output`] items.
    output_budget: Arc<Semaphore>,
}

impl EventStream {
    /// The next item, or `None` when the client has shut down.
    pub async fn next(&mut self) -> Option<Incoming> {
        let item = self.rx.recv().await;
        self.taken(item)
    }

    /// Gives back the output budget of an item the application now holds.
    fn taken(&self, item: Option<Incoming>) -> Option<Incoming> {
        if let Some(Incoming::Output { data, .. }) = &item {
            self.output_budget.add_permits(data.len());
        }
        item
    }
}

impl futures::Stream for EventStream {
    type Item = Incoming;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Incoming>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(item) => Poll::Ready(self.taken(item)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

/// A handle on this process's CARMI connection; clone it freely (clones share
/// one connection). Request methods return the request's id at once; the
/// outcome arrives as an event with that id.
#[derive(Clone)]
pub struct Carmi {
    inner: Arc<Handle>,
}

/// Owned by the [`Carmi`] clones only, never by a task, so that dropping the
/// last clone drops `_stop` and every task sees the shutdown signal.
struct Handle {
    shared: Arc<Shared>,
    _stop: watch::Sender<()>,
}

impl std::fmt::Debug for Carmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Carmi")
            .field("job", &self.job())
            .field("process", &self.process())
            .finish_non_exhaustive()
    }
}

/// State shared by the handle and the background tasks.
struct Shared {
    job: JobId,
    process: ProcessId,
    /// What direct connections prove: the job's credential (the pool secret
    /// only under a local RM that gave none).
    secret: Secret,
    /// Where this process accepts direct messages.
    endpoint: String,
    /// Direct connections in clear ([`ConnectOptions::plain_peers`]).
    plain_peers: bool,
    /// Where background tasks are spawned, so that [`Carmi::send`] works from any thread.
    runtime: tokio::runtime::Handle,
    /// Closed when the last [`Carmi`] clone is dropped.
    stop: watch::Receiver<()>,
    next_request: AtomicU64,
    commands: mpsc::UnboundedSender<rm::Command>,
    events: mpsc::UnboundedSender<Incoming>,
    /// Lookups made on behalf of peer writers: their answers go back to the
    /// writer instead of the event stream.
    lookups: Mutex<HashMap<RequestId, oneshot::Sender<Result<String, String>>>>,
    /// Why the RM connection is gone, once it is.
    rm_down: Mutex<Option<String>>,
    endpoints: Mutex<HashMap<ProcessId, String>>,
    /// One queue per peer this process sends to, each drained by its own task.
    peers: Mutex<HashMap<ProcessId, Arc<link::Link>>>,
    /// How the output of each `class_spawn` request is handled on arrival
    /// (absent: as events).
    output_files: Mutex<HashMap<RequestId, (PathBuf, PathBuf)>>,
    /// `class_spawn` requests not answered yet, kept to be sent again once
    /// if the pool says it never received the executable.
    spawns: Mutex<HashMap<RequestId, rm::SpawnCmd>>,
    /// See [`EventStream::output_budget`].
    output_budget: Arc<Semaphore>,
}

/// Locks a mutex; a poisoned one still holds consistent maps (no code panics
/// while holding these locks), so poisoning is ignored.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn new_request_id(&self) -> RequestId {
        RequestId(self.next_request.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues a command for the RM writer.
    fn queue(&self, cmd: rm::Command) {
        if let Err(mpsc::error::SendError(cmd)) = self.commands.send(cmd) {
            // Only after shutdown has begun; answer rather than drop silently.
            if let Some(id) = cmd.request_id() {
                self.fail(id, FailureCode::Unavailable, "the client is shutting down");
            }
        }
    }

    /// Routes an RM event: to a waiting peer lookup, or to the event stream.
    fn deliver(&self, event: Event) {
        if self.spawn_again(&event) {
            return;
        }
        if let Event::Failed { request, .. } = &event {
            // A spawn that failed has no output coming: forget its files.
            lock(&self.output_files).remove(request);
        }
        let waiting = lock(&self.lookups).remove(&event.request());
        match waiting {
            Some(tx) => {
                let answer = match event {
                    Event::Done {
                        reply: Reply::Endpoint { address, .. },
                        ..
                    } => Ok(address),
                    Event::Failed { failure, .. } => Err(failure.message),
                    other => Err(format!("unexpected answer to a process lookup: {other:?}")),
                };
                let _ = tx.send(answer);
            }
            None => {
                let _ = self.events.send(Incoming::Rm(event));
            }
        }
    }

    /// Answers a request locally with a failure.
    fn fail(&self, request: RequestId, code: FailureCode, message: impl Into<String>) {
        self.deliver(Event::Failed {
            request,
            failure: Failure {
                code,
                message: message.into(),
            },
        });
    }

    /// Sends a `class_spawn` again, with its executable uploaded again, when
    /// the pool answered that it never received the executable: the upload
    /// was lost with a global RM killed or restarted while it was in flight
    /// (this connection had sent it, so it would not be sent again). Once
    /// per request; true if `event` was the answer that was replaced.
    fn spawn_again(&self, event: &Event) -> bool {
        let request = match event {
            Event::ProcessStarted { request, .. } | Event::Failed { request, .. } => *request,
            _ => return false,
        };
        let mut spawns = lock(&self.spawns);
        let Some(spawn) = spawns.remove(&request) else {
            return false;
        };
        let lost_upload = matches!(event, Event::Failed { failure, .. }
            if failure.code == FailureCode::BadExecutable);
        if !lost_upload || spawn.reupload {
            return false;
        }
        tracing::info!(
            %request,
            executable = %spawn.path.display(),
            "the pool does not have the executable (an upload lost with a restarted global RM?); uploading it again"
        );
        let again = rm::SpawnCmd {
            reupload: true,
            ..spawn
        };
        spawns.insert(request, again.clone());
        drop(spawns);
        self.queue(rm::Command::Spawn(again));
        true
    }

    /// Forgets a `class_spawn` that is answered without the pool.
    fn forget_spawn(&self, request: RequestId) {
        lock(&self.spawns).remove(&request);
    }

    /// Why the RM connection is gone, if it is.
    fn rm_down_reason(&self) -> Option<String> {
        lock(&self.rm_down).clone()
    }

    /// Records that the RM connection is gone (the first reason wins), fails
    /// the pending lookups and tells the application once.
    fn set_rm_down(&self, reason: String) {
        {
            let mut down = lock(&self.rm_down);
            if down.is_some() {
                return;
            }
            *down = Some(reason.clone());
        }
        // After the flag is set: a lookup registered later is failed by the
        // writer, which checks the flag before writing (see `rm::write_loop`).
        let pending = std::mem::take(&mut *lock(&self.lookups));
        for tx in pending.into_values() {
            let _ = tx.send(Err(reason.clone()));
        }
        let _ = self.events.send(Incoming::Disconnected(reason));
    }
}

impl Carmi {
    /// The job this process belongs to.
    pub fn job(&self) -> JobId {
        self.inner.shared.job
    }

    /// This process's id.
    pub fn process(&self) -> ProcessId {
        self.inner.shared.process
    }

    /// `host:port` where this process accepts direct messages from its peers.
    pub fn endpoint(&self) -> &str {
        &self.inner.shared.endpoint
    }

    fn request(&self, body: Request) -> RequestId {
        let shared = &self.inner.shared;
        let id = shared.new_request_id();
        shared.queue(rm::Command::Request { id, body });
        id
    }

    /// Makes a request built elsewhere, and returns its id: for a program
    /// that maps its own calls onto protocol requests in a pure core (WoDi's
    /// run does, for its server and its simulator alike). A
    /// `Request::ClassSpawn` goes through [`Carmi::class_spawn`] instead,
    /// which reads and uploads the executable the request names.
    pub fn send_request(&self, body: Request) -> RequestId {
        self.request(body)
    }

    /// Cancels an outstanding request (a pending `addhosts`, a subscription).
    pub fn cancel_request(&self, request: RequestId) -> RequestId {
        self.request(Request::CancelRequest { request })
    }

    /// Asks for the hosts currently allocated to the job (`Reply::Hosts`).
    pub fn config(&self) -> RequestId {
        self.request(Request::Config)
    }

    /// Asks for every attribute of a host's machine ad (`Reply::Host`).
    pub fn get_host_info(&self, host: HostId) -> RequestId {
        self.request(Request::GetHostInfo { host })
    }

    /// Asks for `count` more hosts of `class`, reported `increment` at a time
    /// (`HostsAdded` events).
    pub fn addhosts(&self, class: impl Into<String>, count: u32, increment: u32) -> RequestId {
        self.request(Request::AddHosts {
            class: class.into(),
            count,
            increment,
        })
    }

    /// Gives hosts back to the pool; their processes are killed.
    pub fn delhosts(&self, hosts: &[HostId]) -> RequestId {
        self.request(Request::DelHosts {
            hosts: hosts.to_vec(),
        })
    }

    /// Subscribes to hosts of `class` being added to the job.
    pub fn add_notify(&self, class: impl Into<String>) -> RequestId {
        self.request(Request::AddNotify {
            class: class.into(),
        })
    }

    /// Subscribes to these hosts being taken away.
    pub fn delete_notify(&self, hosts: &[HostId]) -> RequestId {
        self.request(Request::DeleteNotify {
            hosts: hosts.to_vec(),
        })
    }

    /// Subscribes to these hosts being suspended.
    pub fn suspend_notify(&self, hosts: &[HostId]) -> RequestId {
        self.request(Request::SuspendNotify {
            hosts: hosts.to_vec(),
        })
    }

    /// Subscribes to these hosts resuming.
    pub fn resume_notify(&self, hosts: &[HostId]) -> RequestId {
        self.request(Request::ResumeNotify {
            hosts: hosts.to_vec(),
        })
    }

    /// Starts `executable` with `args` on `target` (`ProcessStarted`, later
    /// `ProcessExited`); its output arrives as events ([`SpawnOutput::Events`]).
    /// The file is read and hashed by the writer task, and its bytes are
    /// uploaded once per content per client; a file that cannot be read fails
    /// the request with [`FailureCode::BadExecutable`].
    pub fn class_spawn<I, S>(
        &self,
        executable: impl Into<PathBuf>,
        args: I,
        target: SpawnTarget,
    ) -> RequestId
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.class_spawn_with(executable, args, target, SpawnOutput::Events)
    }

    /// [`Carmi::class_spawn`] with a choice of what becomes of the process's
    /// standard output and error.
    pub fn class_spawn_with<I, S>(
        &self,
        executable: impl Into<PathBuf>,
        args: I,
        target: SpawnTarget,
        output: SpawnOutput,
    ) -> RequestId
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let shared = &self.inner.shared;
        let id = shared.new_request_id();
        let mode = match output {
            SpawnOutput::Events => OutputMode::Forward,
            SpawnOutput::Files { stdout, stderr } => {
                // Registered before the request leaves, so no output can beat it.
                lock(&shared.output_files).insert(id, (stdout, stderr));
                OutputMode::Forward
            }
            SpawnOutput::Keep => OutputMode::Keep,
            SpawnOutput::Discard => OutputMode::Discard,
        };
        let spawn = rm::SpawnCmd {
            id,
            path: executable.into(),
            args: args.into_iter().map(Into::into).collect(),
            target,
            output: mode,
            reupload: false,
        };
        lock(&shared.spawns).insert(id, spawn.clone());
        shared.queue(rm::Command::Spawn(spawn));
        id
    }

    /// Asks for the state of a process of the job (`Reply::Process`).
    pub fn process_info(&self, process: ProcessId) -> RequestId {
        self.request(Request::ProcessInfo { process })
    }

    /// The specification's `process_info`: asks for every process of the
    /// job, with host, parent, executable and state (`Reply::Processes`).
    pub fn processes(&self) -> RequestId {
        self.request(Request::Processes)
    }

    /// Publishes attributes of this job (name, ClassAd value text) for the
    /// people watching it: `carmi q --json` and the dashboard show them
    /// (`Reply::Ok`, or a failure naming a bad name or value).
    pub fn set_job_attrs(&self, attrs: Vec<(String, String)>) -> RequestId {
        self.request(Request::SetJobAttrs { attrs })
    }

    /// Asks for the job's class names and expressions (`Reply::Classes`).
    pub fn get_class_definitions(&self) -> RequestId {
        self.request(Request::GetClassDefinitions)
    }

    /// Defines a resource class of the job; a name the job already has
    /// fails with `FailureCode::ClassExists` (see [`Carmi::redefine_class`]).
    pub fn define_class(
        &self,
        name: impl Into<String>,
        expression: impl Into<String>,
    ) -> RequestId {
        self.request(Request::DefineClass {
            name: name.into(),
            expression: expression.into(),
            rank: None,
            replace: false,
        })
    }

    /// Defines a resource class, replacing the job's class of that name if
    /// it has one (its expression and rank; its exclusions stay).
    pub fn redefine_class(
        &self,
        name: impl Into<String>,
        expression: impl Into<String>,
        rank: Option<String>,
    ) -> RequestId {
        self.request(Request::DefineClass {
            name: name.into(),
            expression: expression.into(),
            rank,
            replace: true,
        })
    }

    /// Defines a resource class (failing on a name the job has) whose matching machines are
    /// preferred by `rank` (a ClassAd expression over machine attributes):
    /// `addhosts` and growth take higher-ranked machines first, the fastest
    /// among equals.
    pub fn define_class_ranked(
        &self,
        name: impl Into<String>,
        expression: impl Into<String>,
        rank: impl Into<String>,
    ) -> RequestId {
        self.request(Request::DefineClass {
            name: name.into(),
            expression: expression.into(),
            rank: Some(rank.into()),
            replace: false,
        })
    }

    /// Never grants the machines of `hosts` to this job for `class` again
    /// (`Reply::Ok`): for a machine that proved too slow. Send it before
    /// `delhosts` of the same hosts, so that a pending `addhosts` cannot take
    /// them straight back.
    pub fn exclude_hosts(&self, class: impl Into<String>, hosts: &[HostId]) -> RequestId {
        self.request(Request::ExcludeHosts {
            class: class.into(),
            hosts: hosts.to_vec(),
        })
    }

    /// Removes a resource class of the job.
    pub fn remove_class(&self, name: impl Into<String>) -> RequestId {
        self.request(Request::RemoveClass { name: name.into() })
    }

    /// Sends `data` with `tag` directly to process `to` of this job; it
    /// arrives there as [`Incoming::Message`], byte for byte. Returns at once,
    /// never waiting: on an open connection in clear with nothing queued
    /// before it, the message is written to the socket as far as the socket
    /// takes it without waiting; the rest, and any message behind others,
    /// is queued for the peer's connection, which is opened on first use
    /// (after asking the RM once where the peer listens). Messages
    /// to one peer arrive in the order sent; a failure is reported as
    /// [`Incoming::SendFailed`]. A message to this process itself goes
    /// straight to its own event stream.
    pub fn send(&self, to: ProcessId, tag: u32, data: impl Into<Bytes>) {
        let shared = &self.inner.shared;
        let data = data.into();
        if to == shared.process {
            let _ = shared.events.send(Incoming::Message {
                from: to,
                tag,
                data,
            });
            return;
        }
        peer::queue(shared, to, link::Outgoing::message(tag, data));
    }

    /// Waits until every request and message queued before this call has been
    /// handed to the operating system (or has failed). Call it before the
    /// process exits: tasks stop with the runtime, and a message still in a
    /// queue then would be lost.
    pub async fn flush(&self) {
        let shared = &self.inner.shared;
        let mut acks = Vec::new();
        let (tx, rx) = oneshot::channel();
        shared.queue(rm::Command::Flush(tx));
        acks.push(rx);
        let links: Vec<_> = lock(&shared.peers).values().cloned().collect();
        for link in links {
            let (tx, rx) = oneshot::channel();
            if link.offer(link::Outgoing::Flush(tx)).is_ok() {
                acks.push(rx);
            }
        }
        // A dropped acknowledgement means that queue failed: that is reported
        // on the event stream, and there is nothing more to wait for.
        for rx in acks {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests;
