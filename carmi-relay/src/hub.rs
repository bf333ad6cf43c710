//! What the relay's tasks share: the link to the global RM of the moment,
//! the machines' sessions by channel, the admissions waiting for the global
//! RM's answer, and the heartbeats to fold into the next `Alive`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use carmi_api::machinecert::MachineProver;
use carmi_api::msg::Role;
use carmi_api::msg::relay::{Chan, RelayUp};
use tokio::sync::{mpsc, oneshot};

use crate::RelayConfig;

/// What the global RM sends one machine, in order.
#[derive(Debug)]
pub(crate) enum Down {
    /// Bytes of its connection.
    Data(Bytes),
    /// The global RM ended its link.
    Close(String),
}

/// The relay's shared state.
pub struct Hub {
    state: Mutex<State>,
    /// The relay's key and certificate, in a pool with tokens.
    pub(crate) prover: Option<Arc<MachineProver>>,
    max_queued: usize,
    /// Unchanged heartbeats folded, and frames passed on, since the last summary.
    pub(crate) folded: std::sync::atomic::AtomicU64,
    pub(crate) passed: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    /// To the global RM, while linked.
    up: Option<mpsc::Sender<(RelayUp, Bytes)>>,
    next_chan: Chan,
    /// Each machine's way in, from the moment it asks to be admitted.
    sessions: HashMap<Chan, mpsc::Sender<Down>>,
    /// Admissions waiting for the global RM.
    admits: HashMap<Chan, oneshot::Sender<Result<(), String>>>,
    /// Channels whose machine sent an unchanged heartbeat since the last `Alive`.
    alive: Vec<Chan>,
}

/// A machine's place at the relay while the global RM decides on it.
pub(crate) struct Asking {
    pub chan: Chan,
    pub down: mpsc::Receiver<Down>,
    pub up: mpsc::Sender<(RelayUp, Bytes)>,
    pub answer: oneshot::Receiver<Result<(), String>>,
}

impl Hub {
    /// A hub with no link yet; with a key to certify when the pool has tokens.
    pub fn new(config: &RelayConfig) -> Result<Hub, String> {
        let prover = match config.secret.token() {
            Some(_) => Some(Arc::new(MachineProver::generate()?)),
            None => None,
        };
        Ok(Hub {
            state: Mutex::new(State::default()),
            prover,
            max_queued: config.max_queued.max(1),
            folded: Default::default(),
            passed: Default::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each change under the lock is one insert, remove or push: a panic
        // cannot leave it half made, so a poisoned lock is still good.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Machines connected through this relay now.
    pub fn sessions(&self) -> usize {
        self.state().sessions.len()
    }

    /// A new link to the global RM, and the way to it.
    pub(crate) fn linked_by(&self, up: mpsc::Sender<(RelayUp, Bytes)>) {
        self.state().up = Some(up);
    }

    /// The link to the global RM is gone: every machine's connection ends
    /// (each reconnects, here or elsewhere) and waiting admissions fail.
    pub fn lose_upstream(&self, why: &str) {
        let mut s = self.state();
        s.up = None;
        s.alive.clear();
        for (_, tx) in s.sessions.drain() {
            let _ = tx.try_send(Down::Close(why.to_string()));
        }
        for (_, tx) in s.admits.drain() {
            let _ = tx.send(Err(format!(
                "the relay lost its link to the global RM: {why}"
            )));
        }
    }

    /// Asks the global RM to admit a machine in `role` showing `presented`.
    pub(crate) fn ask(
        &self,
        role: Role,
        presented: Option<String>,
        peer: String,
    ) -> Result<Asking, String> {
        let mut s = self.state();
        let up =
            s.up.clone()
                .ok_or("the relay has no link to the global RM yet; try again shortly")?;
        s.next_chan += 1;
        let chan = s.next_chan;
        let (down_tx, down) = mpsc::channel(self.max_queued);
        let (answer_tx, answer) = oneshot::channel();
        s.sessions.insert(chan, down_tx);
        s.admits.insert(chan, answer_tx);
        let admit = RelayUp::Admit {
            chan,
            role,
            presented,
            peer,
        };
        if up.try_send((admit, Bytes::new())).is_err() {
            s.sessions.remove(&chan);
            s.admits.remove(&chan);
            return Err("the relay's link to the global RM is full; try again shortly".into());
        }
        Ok(Asking {
            chan,
            down,
            up,
            answer,
        })
    }

    /// The global RM's answer about `chan`.
    pub(crate) fn admitted(&self, chan: Chan, result: Result<(), String>) {
        let mut s = self.state();
        if result.is_err() {
            s.sessions.remove(&chan);
        }
        if let Some(tx) = s.admits.remove(&chan) {
            let _ = tx.send(result);
        }
    }

    /// Bytes (or the end) from the global RM for `chan`'s machine. A machine
    /// that does not read them is closed, not buffered for without end.
    pub(crate) fn to_machine(&self, chan: Chan, down: Down) -> Option<String> {
        let mut s = self.state();
        let tx = s.sessions.get(&chan)?;
        let closing = matches!(down, Down::Close(_));
        let full = match tx.try_send(down) {
            Ok(()) => false,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        };
        if closing || full {
            s.sessions.remove(&chan);
        }
        full.then(|| {
            format!(
                "the machine stopped reading: {} messages are waiting for it",
                self.max_queued
            )
        })
    }

    /// `chan`'s machine sent a heartbeat that changes nothing.
    pub(crate) fn beat(&self, chan: Chan) {
        self.folded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.state().alive.push(chan);
    }

    /// The channels to name in the next `Alive`.
    pub(crate) fn take_alive(&self) -> Vec<Chan> {
        std::mem::take(&mut self.state().alive)
    }

    /// `chan`'s machine's connection ended at the relay.
    pub(crate) fn ended(&self, chan: Chan) -> Option<mpsc::Sender<(RelayUp, Bytes)>> {
        let mut s = self.state();
        s.admits.remove(&chan);
        s.sessions.remove(&chan)?;
        s.up.clone()
    }
}
