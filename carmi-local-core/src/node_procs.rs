//! The core's side of the processes on this machine: a spawn's executable
//! fetched (from the global RM or a peer) and stored, the process launched,
//! killed, and its exit (and a master's returned files) reported.
//!
//! Kept apart from `node.rs`, which holds the state and the global and
//! application links, so that each file stays readable.

use bytes::Bytes;
use carmi_proto::exe::is_sha256_hex;
use carmi_proto::ids::{HostId, ProcessId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, OutputRoute, ProcessUsage, SlotActivity, StageSource,
    ToGlobal,
};

use super::{Core, Effect, Fetch, Launch, Link, Proc, ProcState};

impl Launch {
    /// The process a `Spawn` (on a slot) or `SpawnMaster` (a job's master,
    /// outside the slots) asks for; `None` for any other message.
    pub(super) fn from_spawn(msg: FromGlobal) -> Option<Launch> {
        let launch = match msg {
            FromGlobal::Spawn {
                process,
                job,
                host,
                executable,
                args,
                output,
                requests,
            } => Launch {
                process,
                job,
                host,
                executable,
                args,
                master: false,
                env: Vec::new(),
                stdio: (None, None),
                input_files: Vec::new(),
                return_files: Vec::new(),
                inputs: Vec::new(),
                output,
                requests,
            },
            FromGlobal::SpawnMaster {
                process,
                job,
                executable,
                args,
                env,
                output,
                error,
                input_files,
                return_files,
                inputs,
                requests,
            } => Launch {
                process,
                job,
                host: HostId(0),
                executable,
                args,
                master: true,
                env,
                stdio: (output, error),
                input_files,
                return_files,
                inputs,
                output: OutputRoute::Keep,
                requests,
            },
            _ => return None,
        };
        Some(launch)
    }
}

impl Core {
    /// The slot (0 first) a host id of this machine stands for, once
    /// registered: what the driver gives a process of that slot (its GPUs).
    pub fn slot_of_host(&self, host: HostId) -> Option<usize> {
        self.slot_of(host)
    }

    /// The slot a host id of this machine stands for, once registered.
    pub(super) fn slot_of(&self, host: HostId) -> Option<usize> {
        match &self.link {
            Link::Registered { hosts } => hosts
                .iter()
                .position(|h| *h == host)
                .filter(|&s| s < self.slots),
            _ => None,
        }
    }

    /// The global RM asks for a process: fetch its executable if missing, or launch it.
    pub(super) fn on_spawn(&mut self, launch: Launch) {
        let process = launch.process;
        if self.procs.contains_key(&process) {
            tracing::warn!(%process, "Spawn of a process that already exists here; ignored");
            return;
        }
        let slot = if launch.master {
            None
        } else if let Some(slot) = self.slot_of(launch.host) {
            Some(slot)
        } else {
            tracing::warn!(%process, host = %launch.host, "Spawn on a host that is not a slot of this machine");
            self.refuse_spawn(
                process,
                format!("host {} is not a slot of this machine", launch.host),
            );
            return;
        };
        if !self.accepting {
            tracing::info!(%process, "Spawn refused: the owner policy does not let jobs start now");
            self.refuse_spawn(
                process,
                "the machine's owner policy does not let new processes start now (START is false: the owner is using the machine or was recently)".into(),
            );
            return;
        }
        if !is_sha256_hex(&launch.executable.sha256) {
            tracing::warn!(%process, sha256 = %launch.executable.sha256, "Spawn with a malformed executable hash");
            self.refuse_spawn(
                process,
                format!(
                    "executable {}: `{}` is not a SHA-256 in lower-case hex",
                    launch.executable.name, launch.executable.sha256
                ),
            );
            return;
        }
        self.procs.insert(
            process,
            Proc {
                launch: launch.clone(),
                slot,
                state: ProcState::Launching { kill: false },
                kill_at: None,
            },
        );
        self.effects.push(Effect::Launch(launch));
    }

    /// The executable of a launch is not in the cache: fetch it from the global RM.
    pub fn on_cache_miss(&mut self, process: ProcessId) {
        let Some(exe) = self
            .procs
            .get(&process)
            .map(|p| p.launch.executable.clone())
        else {
            return;
        };
        self.on_input_miss(process, exe);
    }

    /// A file a launch needs (its executable, or a master's input file) is
    /// not in the cache: fetch it as an executable is fetched; the launch is
    /// tried again once it is stored (and then finds the next one missing,
    /// if any).
    pub fn on_input_miss(&mut self, process: ProcessId, exe: ExecutableRef) {
        let Some(p) = self.procs.get_mut(&process) else {
            return;
        };
        if let ProcState::Launching { kill: true } = p.state {
            self.procs.remove(&process);
            self.report_killed_before_start(process);
            return;
        }
        p.state = ProcState::Fetching;
        let registered = self.is_registered();
        let f = self.fetches.entry(exe.sha256.clone()).or_insert(Fetch {
            executable: exe,
            waiting: Vec::new(),
            asked: false,
            storing: false,
        });
        f.waiting.push(process);
        if !f.asked && !f.storing && registered {
            f.asked = true;
            let sha256 = f.executable.sha256.clone();
            self.send(ToGlobal::Fetch { sha256 }, Bytes::new());
        }
    }

    /// A whole executable arrived from the global RM: store it.
    pub(super) fn on_executable(&mut self, executable: ExecutableRef, payload: Bytes) {
        let Some(f) = self.fetches.get_mut(&executable.sha256) else {
            tracing::warn!(sha256 = %executable.sha256, "executable bytes nobody asked for; dropped");
            return;
        };
        if f.storing {
            tracing::debug!(sha256 = %executable.sha256, "executable already being stored; duplicate dropped");
            return;
        }
        f.storing = true;
        // Verified against what the spawn asked for, not what the sender claims now.
        let executable = f.executable.clone();
        self.effects.push(Effect::Store {
            executable,
            payload,
        });
    }

    /// The global RM says where to fetch an executable from.
    pub(super) fn on_fetch_from(&mut self, sha256: String, source: StageSource) {
        let Some(f) = self.fetches.get_mut(&sha256) else {
            tracing::warn!(%sha256, "FetchFrom for an executable nobody waits for; ignored");
            return;
        };
        if f.storing {
            tracing::debug!(%sha256, "FetchFrom while already fetching; ignored");
            return;
        }
        f.storing = true;
        let executable = f.executable.clone();
        self.effects.push(Effect::FetchFrom { executable, source });
    }

    /// An [`Effect::FetchFrom`] finished. Either way the global RM is told
    /// (it tracks who holds what); on failure it names another source.
    pub fn on_fetched(&mut self, sha256: &str, source: StageSource, result: Result<(), String>) {
        self.send_or_keep(
            ToGlobal::Fetched {
                sha256: sha256.to_string(),
                source,
                result: result.clone(),
            },
            Bytes::new(),
        );
        match result {
            Ok(()) => self.on_stored(sha256, Ok(())),
            Err(reason) => {
                tracing::warn!(%sha256, %reason, "staged copy refused; asking the global RM for another source");
                let registered = self.is_registered();
                if let Some(f) = self.fetches.get_mut(sha256) {
                    f.storing = false;
                    // The global RM answers the report with a new source;
                    // without a link, `Fetch` is sent again once registered.
                    f.asked = registered;
                }
            }
        }
    }

    /// An [`Effect::Store`] finished: `Err` carries why the bytes were refused.
    pub fn on_stored(&mut self, sha256: &str, result: Result<(), String>) {
        match result {
            Ok(()) => {
                let Some(f) = self.fetches.remove(sha256) else {
                    return;
                };
                self.counters.staged_in_bytes += f.executable.size;
                for process in f.waiting {
                    if let Some(p) = self.procs.get_mut(&process) {
                        p.state = ProcState::Launching { kill: false };
                        let launch = p.launch.clone();
                        self.effects.push(Effect::Launch(launch));
                    }
                }
            }
            Err(reason) => self.fail_fetch(sha256, &reason),
        }
    }

    /// An executable cannot be had: every spawn waiting for it fails.
    pub(super) fn fail_fetch(&mut self, sha256: &str, reason: &str) {
        let Some(f) = self.fetches.remove(sha256) else {
            tracing::warn!(%sha256, %reason, "fetch failure for an executable nobody waits for");
            return;
        };
        tracing::warn!(%sha256, %reason, waiting = f.waiting.len(), "executable cannot be staged");
        for process in f.waiting {
            self.procs.remove(&process);
            self.send_or_keep(
                ToGlobal::Started {
                    process,
                    result: Err(reason.to_string()),
                },
                Bytes::new(),
            );
        }
    }

    /// An [`Effect::Launch`] finished: the process runs, or could not be started.
    pub fn on_launched(&mut self, process: ProcessId, result: Result<(), String>) {
        let Some(p) = self.procs.get_mut(&process) else {
            tracing::error!(%process, "launch result for an unknown process");
            return;
        };
        let kill = matches!(p.state, ProcState::Launching { kill: true });
        match result {
            Ok(()) => {
                p.state = ProcState::Running { killing: kill };
                let suspended = p
                    .slot
                    .is_some_and(|s| self.slot_states[s] == SlotActivity::Suspended);
                self.send_or_keep(
                    ToGlobal::Started {
                        process,
                        result: Ok(()),
                    },
                    Bytes::new(),
                );
                if kill {
                    self.start_kill(process);
                } else if suspended {
                    self.effects.push(Effect::Suspend(process));
                }
            }
            Err(reason) => {
                self.procs.remove(&process);
                self.send_or_keep(
                    ToGlobal::Started {
                        process,
                        result: Err(reason),
                    },
                    Bytes::new(),
                );
            }
        }
    }

    /// Answers a `Spawn` that cannot be carried out at all.
    pub(super) fn refuse_spawn(&mut self, process: ProcessId, reason: String) {
        self.send(
            ToGlobal::Started {
                process,
                result: Err(reason),
            },
            Bytes::new(),
        );
    }

    /// A process killed before it started: report it as exited.
    pub(super) fn report_killed_before_start(&mut self, process: ProcessId) {
        tracing::info!(%process, "killed before it started");
        self.send_or_keep(
            ToGlobal::Started {
                process,
                result: Err("killed before it started".into()),
            },
            Bytes::new(),
        );
    }

    /// The global RM asks to kill a process.
    pub(super) fn on_kill(&mut self, process: ProcessId) {
        let Some(p) = self.procs.get_mut(&process) else {
            tracing::debug!(%process, "Kill of a process not running here (already exited?)");
            return;
        };
        match p.state {
            ProcState::Fetching => {
                self.procs.remove(&process);
                // Its executable's fetch, or one of its input files'.
                self.fetches.retain(|_, f| {
                    f.waiting.retain(|w| *w != process);
                    !f.waiting.is_empty()
                });
                self.report_killed_before_start(process);
            }
            ProcState::Launching { .. } => p.state = ProcState::Launching { kill: true },
            ProcState::Running { killing: true } => {}
            ProcState::Running { killing: false } => self.start_kill(process),
        }
    }

    /// A started process exited (nothing measured of its usage).
    pub fn on_exited(&mut self, process: ProcessId, status: ExitStatus, cpu_seconds: f64) {
        self.on_exited_with(process, status, cpu_seconds, ProcessUsage::default());
    }

    /// A started process exited, with what its cgroup measured.
    pub fn on_exited_with(
        &mut self,
        process: ProcessId,
        status: ExitStatus,
        cpu_seconds: f64,
        usage: ProcessUsage,
    ) {
        if self.procs.remove(&process).is_none() {
            tracing::error!(%process, "exit of an unknown process");
        } else {
            self.counters.processes_exited += 1;
        }
        self.send_or_keep(
            ToGlobal::Exited {
                process,
                status,
                cpu_seconds,
                usage,
            },
            Bytes::new(),
        );
    }

    /// A master left files to send back (read from its sandbox as it
    /// exited): they go out before its `Exited`, on the same connection, so
    /// that the global RM has them when the job ends.
    pub fn on_master_files(
        &mut self,
        process: ProcessId,
        files: Vec<carmi_proto::msg::ReturnedFile>,
        bytes: Vec<u8>,
    ) {
        self.send_or_keep(ToGlobal::MasterFiles { process, files }, Bytes::from(bytes));
    }
}
