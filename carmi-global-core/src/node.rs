//! The global RM's whole core as its driver runs it: the [`Router`] and the
//! [`Staging`] core behind one input, and the rules on what leaves the daemon
//! in which order, which the driver used to apply itself:
//!
//! - **Group commit.** The driver feeds up to [`BATCH`] inputs that are
//!   already waiting, then takes one [`Batch`]: its journal records are
//!   written with one fsync before anything else of the batch goes out (a
//!   submit is acknowledged only once it is on disk), and the job-id mark is
//!   kept ahead of [`Batch::next_job_id`] before any message names a new id.
//! - **A credential before every spawn.** A `Spawn`, `SpawnMaster` or
//!   `Attached` is preceded on its link by its job's credential
//!   ([`Effect::Credential`]); the driver only signs it (the key is the
//!   driver's, a core holds no secret).
//! - **A peer that stops reading is disconnected**, not waited for: the
//!   driver reports a full outgoing queue ([`GlobalCore::on_unread`]), the core
//!   answers with one [`Effect::Kick`] and sends nothing more on that link
//!   until it is closed.
//! - **Staging is fed here**: a local RM's link opening or closing, a file
//!   stored or dropped reach the staging core along with the router, so the
//!   driver cannot forget one of the two.
//!
//! A pure state machine like its parts: inputs and `now` in, outputs out.

use std::collections::HashSet;
use std::time::Duration;

use carmi_proto::authz::Identity;
use carmi_proto::ids::{ConnId, JobId};
use carmi_proto::msg::{ExecutableRef, FromGlobal, Role};

use crate::alloc_queue::BatchState;
use crate::journal::Record;
use crate::router::{Decoded, LinkId, Output, Router};
use crate::staging::{StageInput, Staging};

/// Inputs the driver may feed, beyond the one it waited for, before it
/// takes the [`Batch`]: their journal records then share one fsync. With a
/// hundred applications asking at once, an fsync each (7 ms on a loaded
/// disk) queued every request behind all the others'.
pub const BATCH: usize = 256;

/// What happened, as the driver saw it.
pub enum Input {
    /// A connection finished its handshake as `role`, having proved
    /// `identity` with a token (`None` in a pool without tokens).
    Opened {
        /// The connection.
        link: LinkId,
        /// What it connected as.
        role: Role,
        /// Boxed: inputs stay small.
        identity: Option<Box<Identity>>,
    },
    /// What a new job's token proved, before its `AppAttach`.
    AppIdentity(LinkId, ConnId, Result<Identity, String>),
    /// A decoded message of `link`, read at `at` (the driver's clock).
    Message {
        /// The connection.
        link: LinkId,
        /// Boxed: a parsed ad is large.
        msg: Box<Decoded>,
        /// When its frame was read: a heartbeat counts from its arrival,
        /// not from when the router got to it.
        at: Duration,
    },
    /// Unchanged heartbeats of these machines' links, folded by a relay,
    /// read at `at`.
    Alive {
        /// The machines' links.
        links: Vec<LinkId>,
        /// When the relay's message was read.
        at: Duration,
    },
    /// An executable is in the store.
    Stored(ExecutableRef),
    /// A staging message of a local RM, or the store serving a copy.
    Stage(StageInput),
    /// A job's checkpoint was copied into the store (or not).
    CheckpointSaved(JobId, Result<Vec<ExecutableRef>, String>),
    /// The batch system's answer to a pilot's submission.
    PilotSubmitted {
        /// The allocation.
        alloc: u64,
        /// The batch job id, or why not.
        result: Result<String, String>,
    },
    /// The batch system's answer to a poll.
    BatchStates(Vec<(String, BatchState)>),
    /// A connection ended.
    Closed {
        /// The connection.
        link: LinkId,
    },
}

impl Input {
    /// What kind of input it is, for logs (a message by its variant).
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Opened { .. } => "Opened",
            Input::AppIdentity(..) => "AppIdentity",
            Input::Message { msg, .. } => msg.name(),
            Input::Alive { .. } => "Alive",
            Input::Stored(_) => "Stored",
            Input::Stage(_) => "Stage",
            Input::CheckpointSaved(..) => "CheckpointSaved",
            Input::PilotSubmitted { .. } => "PilotSubmitted",
            Input::BatchStates(_) => "BatchStates",
            Input::Closed { .. } => "Closed",
        }
    }
}

/// What the driver must do, beyond the router's own outputs.
#[derive(Clone, Debug, PartialEq)]
// Nearly every effect is a router output: boxing it would cost an
// allocation per message to save room only in the rare credential or kick.
#[allow(clippy::large_enum_variant)]
pub enum Effect {
    /// One of the router's outputs (never `Output::Journal`: records travel
    /// in [`Batch::records`]).
    Router(Output),
    /// Send job `job`'s credential on `link`, signed with the job key, before
    /// the effect that follows.
    Credential {
        /// The connection.
        link: LinkId,
        /// The job.
        job: JobId,
    },
    /// Disconnect `link` at once, without a word (it reads none).
    Kick {
        /// The connection.
        link: LinkId,
    },
}

/// What the driver carries out after a round of inputs, in this order.
#[derive(Debug, Default)]
pub struct Batch {
    /// Journal records, to append with one fsync before anything below.
    pub records: Vec<Record>,
    /// The next job id: the id mark must be past it before any effect goes out.
    pub next_job_id: u64,
    /// The rest, in order.
    pub effects: Vec<Effect>,
}

impl Batch {
    /// True when there is nothing to carry out.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.effects.is_empty()
    }
}

/// The global RM's core: router and staging, fed together.
pub struct GlobalCore {
    router: Router,
    staging: Staging,
    /// Links kicked for not reading, until their `Closed`.
    kicked: HashSet<LinkId>,
    /// Of those, the ones whose [`Effect::Kick`] is still to go out.
    to_kick: Vec<LinkId>,
}

impl GlobalCore {
    /// Wraps a recovered router and a staging core that knows the store.
    pub fn new(router: Router, staging: Staging) -> GlobalCore {
        GlobalCore {
            router,
            staging,
            kicked: HashSet::new(),
            to_kick: Vec::new(),
        }
    }

    /// The router, for queries (the dashboard's snapshot, which refreshes
    /// the allocator's judgement of waiting jobs first).
    pub fn router(&mut self) -> &mut Router {
        &mut self.router
    }

    /// The earliest time either part wants [`GlobalCore::on_tick`].
    pub fn next_deadline(&self) -> Option<Duration> {
        [self.router.next_deadline(), self.staging.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Time has passed to `now`.
    pub fn on_tick(&mut self, now: Duration) {
        self.router.on_tick(now);
        self.staging.on_tick(now);
    }

    /// One input at `now`.
    pub fn on_input(&mut self, input: Input, now: Duration) {
        self.staging.set_now(now);
        match input {
            Input::Opened {
                link,
                role,
                identity,
            } => {
                if let Role::Local { name } = &role {
                    self.staging.on_local_opened(link, name.clone());
                }
                self.router.on_link_opened(link, role, now);
                if let Some(identity) = identity {
                    self.router.on_link_identity(link, *identity);
                }
            }
            Input::AppIdentity(link, conn, verdict) => {
                self.router.on_app_identity(link, conn, verdict)
            }
            Input::Message { link, msg, at } => self.router.on_decoded(link, *msg, at),
            Input::Alive { links, at } => self.router.on_alive(&links, at),
            Input::Stored(exe) => {
                self.staging.on_stored(&exe.sha256);
                self.router.on_executable_stored(&exe);
            }
            Input::Stage(input) => self.staging.on_input(input),
            Input::CheckpointSaved(job, saved) => {
                for exe in saved.iter().flatten() {
                    self.staging.on_stored(&exe.sha256);
                }
                self.router.on_checkpoint_saved(job, saved);
            }
            Input::PilotSubmitted { alloc, result } => {
                self.router.on_pilot_submitted(alloc, result, now)
            }
            Input::BatchStates(states) => self.router.on_batch_states(&states, now),
            Input::Closed { link } => {
                self.kicked.remove(&link);
                self.staging.on_closed(link);
                self.router.on_link_closed(link, now);
            }
        }
    }

    /// A message of `link` that arrived at `now`, its ad (if any) checked
    /// and parsed here rather than off the core's task as the daemon does:
    /// for the simulator and tests.
    pub fn on_message(&mut self, link: LinkId, msg: carmi_proto::msg::ToGlobal, now: Duration) {
        let msg = Box::new(Decoded::new(msg, self.router.config()));
        self.on_input(Input::Message { link, msg, at: now }, now);
    }

    /// `link`'s outgoing queue is full: its peer stopped reading. A second
    /// report of the same full queue, while the first kick is on its way,
    /// adds nothing.
    pub fn on_unread(&mut self, link: LinkId) {
        if self.kicked.insert(link) {
            self.to_kick.push(link);
        }
    }

    /// What to carry out now, in order (see [`Batch`]).
    pub fn take_batch(&mut self) -> Batch {
        let mut batch = Batch {
            next_job_id: self.router.next_job_id(),
            ..Batch::default()
        };
        for out in self.router.take_outputs() {
            match out {
                Output::Journal(record) => batch.records.push(record),
                Output::DropStored { sha256 } => {
                    self.staging.on_dropped(&sha256);
                    batch
                        .effects
                        .push(Effect::Router(Output::DropStored { sha256 }));
                }
                other => self.push(&mut batch.effects, other),
            }
        }
        for (link, msg) in self.staging.take_outputs() {
            self.push(&mut batch.effects, Output::Send { link, msg });
        }
        let kicks = self.take_kicks().into_iter();
        batch
            .effects
            .extend(kicks.map(|link| Effect::Kick { link }));
        batch
    }

    /// The links found unread since the last batch, to kick now: carrying a
    /// batch out is what finds them, so the driver asks again after it.
    pub fn take_kicks(&mut self) -> Vec<LinkId> {
        std::mem::take(&mut self.to_kick)
    }

    /// Queues `out`, its credential first where it needs one; nothing for a
    /// kicked link.
    fn push(&self, effects: &mut Vec<Effect>, out: Output) {
        let link = match &out {
            Output::Send { link, .. }
            | Output::Close { link, .. }
            | Output::SendFiles { link, .. } => Some(*link),
            _ => None,
        };
        if link.is_some_and(|l| self.kicked.contains(&l)) {
            return;
        }
        if let Output::Send { link, msg } = &out
            && let Some(job) = needs_credential(msg)
        {
            effects.push(Effect::Credential { link: *link, job });
        }
        effects.push(Effect::Router(out));
    }
}

/// The job whose credential must precede `msg` on its link: a process is
/// started (`Spawn`, `SpawnMaster`) or an application attached (`Attached`)
/// only by a local RM that can show the job's credential to the job's
/// peers, so the credential must arrive first.
pub fn needs_credential(msg: &FromGlobal) -> Option<JobId> {
    match msg {
        FromGlobal::Spawn { job, .. }
        | FromGlobal::SpawnMaster { job, .. }
        | FromGlobal::Attached { job, .. } => Some(*job),
        _ => None,
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
