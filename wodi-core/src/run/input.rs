//! Every input of the run as one serde-able value, for drivers that queue,
//! record or replay inputs (a discrete-event simulator round-tripping them
//! through serde, a trace of a run); the methods it calls are the same the
//! server calls one by one.

use bytes::Bytes;
use carmi_proto::ids::RequestId;
use carmi_proto::msg::Event;
use serde::{Deserialize, Serialize};

use super::{CallId, MasterId, Run};
use crate::ids::WorkerId;
use crate::proto::{FromMaster, FromWorker};
use crate::time::Time;

/// One thing that happened to the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Input {
    /// A master connected ([`Run::master_connected`]).
    MasterConnected,
    /// A master's message ([`Run::master_message`]).
    FromMaster {
        /// The master.
        master: MasterId,
        /// The message.
        msg: FromMaster,
        /// Its payload.
        payload: Bytes,
    },
    /// A master's connection ended ([`Run::master_gone`]).
    MasterGone {
        /// The master.
        master: MasterId,
        /// Why, if it was not a clean close.
        why: Option<String>,
    },
    /// A worker connected ([`Run::worker_connected`]).
    WorkerConnected {
        /// The worker.
        worker: WorkerId,
    },
    /// A worker's message ([`Run::worker_message`]).
    FromWorker {
        /// The worker.
        worker: WorkerId,
        /// The message.
        msg: FromWorker,
        /// Its payload.
        payload: Bytes,
    },
    /// A worker's connection dropped ([`Run::worker_dropped`]).
    WorkerDropped {
        /// The worker.
        worker: WorkerId,
    },
    /// A CARMI request was made ([`Run::issued`]).
    Issued {
        /// The run's name for it.
        call: CallId,
        /// CARMI's.
        request: RequestId,
    },
    /// An event from CARMI ([`Run::carmi_event`]).
    Carmi(Event),
    /// The connection to CARMI was lost ([`Run::carmi_disconnected`]).
    CarmiDisconnected {
        /// Why.
        why: String,
    },
    /// The run must stop ([`Run::stop`]).
    Stop {
        /// Why, for the masters.
        reason: String,
    },
    /// Time passed ([`Run::tick`]).
    Tick,
}

/// What the run answered an [`Input`] with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Taken {
    /// Taken.
    Ok,
    /// The master connected under this id.
    Master(MasterId),
    /// Refused (a worker that is no live worker of the run): close its connection.
    Refused,
}

impl Run {
    /// Gives the run one input at `now`.
    pub fn handle(&mut self, input: Input, now: Time) -> Taken {
        match input {
            Input::MasterConnected => return Taken::Master(self.master_connected(now)),
            Input::FromMaster {
                master,
                msg,
                payload,
            } => self.master_message(master, msg, payload, now),
            Input::MasterGone { master, why } => self.master_gone(master, why, now),
            Input::WorkerConnected { worker } => {
                if !self.worker_connected(worker, now) {
                    return Taken::Refused;
                }
            }
            Input::FromWorker {
                worker,
                msg,
                payload,
            } => self.worker_message(worker, msg, payload, now),
            Input::WorkerDropped { worker } => self.worker_dropped(worker, now),
            Input::Issued { call, request } => self.issued(call, request),
            Input::Carmi(event) => self.carmi_event(event, now),
            Input::CarmiDisconnected { why } => self.carmi_disconnected(&why, now),
            Input::Stop { reason } => self.stop(&reason, now),
            Input::Tick => self.tick(now),
        }
        Taken::Ok
    }
}
