//! The driver's outputs: each [`Effect`] of the core carried out, on the
//! global link, an application connection, the cache, or a launched process.
//!
//! Kept apart from `daemon.rs` (startup, the select loop, shutdown) so that
//! each file stays readable.

use std::path::PathBuf;

use bytes::Bytes;
use carmi_api::ids::{JobId, ProcessId};
use carmi_api::msg::{ExecutableRef, OutputRoute, StageSource, StdStream};
use tokio::sync::oneshot;

use super::{Driver, Input};
use crate::apps;
use crate::jobcred::Holder;
use crate::output::{self, ForwardTarget};
use crate::spawn::{Capture, ExitReport, LaunchSpec};
use carmi_local_core::node::{Effect, Launch};

impl Driver {
    /// Carries out the core's effects, including those that carrying them out produces.
    pub(super) fn flush(&mut self) {
        loop {
            let effects = self.core.take_effects();
            if effects.is_empty() {
                return;
            }
            for e in effects {
                self.apply(e);
            }
        }
    }

    /// Carries out one effect of the core.
    pub(super) fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::ToGlobal(msg, payload) => self.global.send(msg, payload),
            Effect::ToApp(conn, msg) => {
                let refused = self
                    .apps
                    .get(&conn)
                    .is_some_and(|out| !apps::try_send(out, conn, msg));
                // The kick ends the connection's task, which reports AppClosed.
                if refused && let Some(out) = self.apps.remove(&conn) {
                    out.kick.notify_one();
                }
            }
            // Dropping the sender lets the connection's task write what is
            // queued (the job's end), then close; it reports AppClosed.
            Effect::CloseApp(conn) => {
                self.apps.remove(&conn);
            }
            Effect::Launch(launch) => self.launch(launch),
            Effect::Store {
                executable,
                payload,
            } => self.store(executable, payload),
            Effect::FetchFrom { executable, source } => self.fetch_from(executable, source),
            // The SIGKILL, if the process outlives the kill grace, comes
            // from the core as `KillNow`.
            Effect::Kill(process) => match self.groups.0.get(&process) {
                Some(g) => {
                    tracing::info!(%process, "killing process group: SIGTERM");
                    if g.signal(libc::SIGTERM) {
                        // A stopped group acts on SIGTERM only once continued.
                        g.resume();
                    }
                }
                None => tracing::error!(%process, "kill of a process without a group"),
            },
            Effect::Orphaned { .. } => self.orphaned = true,
            Effect::Heartbeat => {
                let values = self.policy.public_values(self.unix_epoch);
                let sampled = crate::machine::sample_dynamic(&self.work_dir);
                let update = self.machine.update_from(&sampled, &values, self.now());
                self.core.on_heartbeat(update);
            }
            Effect::Suspend(process) => {
                if let Some(g) = self.groups.0.get(&process) {
                    g.suspend();
                }
            }
            Effect::Resume(process) => {
                if let Some(g) = self.groups.0.get(&process) {
                    g.resume();
                }
            }
            Effect::Terminate(process) => {
                if let Some(g) = self.groups.0.get(&process) {
                    tracing::info!(%process, "vacating: SIGTERM to the process group");
                    if g.signal(libc::SIGTERM) {
                        // A stopped group acts on SIGTERM only once continued.
                        g.resume();
                    }
                }
            }
            Effect::ReadLog {
                request,
                process,
                job,
                stream,
                offset,
                path,
            } => self.read_log(request, (process, job), (stream, offset), path),
            Effect::KillNow(process) => {
                if let Some(g) = self.groups.0.get(&process) {
                    tracing::info!(%process, "grace over: SIGKILL to the process group");
                    g.kill_now();
                }
            }
        }
    }

    /// Verifies and stores staged bytes off the driver's task; the result
    /// comes back as [`Input::Stored`].
    fn store(&mut self, executable: ExecutableRef, payload: Bytes) {
        let cache = self.cache.clone();
        let inputs = self.inputs_tx.clone();
        tokio::spawn(async move {
            let sha256 = executable.sha256.clone();
            let result = tokio::task::spawn_blocking(move || cache.store(&executable, &payload))
                .await
                .map_err(|e| format!("storing the executable failed: {e}"))
                .and_then(|r| r.map(|_| ()).map_err(|e| e.to_string()));
            let _ = inputs.send(Input::Stored { sha256, result }).await;
        });
    }

    /// Fetches an executable from a peer or the global RM's staging
    /// listener; the result comes back as [`Input::Fetched`].
    fn fetch_from(&mut self, executable: ExecutableRef, source: StageSource) {
        let stager = self.stager.clone();
        let inputs = self.inputs_tx.clone();
        tokio::spawn(async move {
            let result = stager.fetch(&executable, &source).await;
            let sha256 = executable.sha256;
            let _ = inputs
                .send(Input::Fetched {
                    sha256,
                    source,
                    result,
                })
                .await;
        });
    }

    /// Reads a chunk of a process's output for `carmi logs` off the
    /// driver's task; the result comes back as [`Input::LogRead`].
    fn read_log(
        &mut self,
        request: u64,
        (process, job): (ProcessId, JobId),
        (stream, offset): (StdStream, u64),
        path: Option<String>,
    ) {
        let (name, kept) = match stream {
            StdStream::Stdout => ("stdout", "out"),
            StdStream::Stderr => ("stderr", "err"),
        };
        // Its submit file's path, else its sandbox's file, else (it
        // exited meanwhile) where that file is kept.
        let mut paths: Vec<PathBuf> = path.into_iter().map(Into::into).collect();
        paths.push(self.launcher.sandbox_dir(process).join(name));
        paths.push(
            self.launcher
                .output_dir(job)
                .join(format!("{}.{kept}", process.0)),
        );
        let inputs = self.inputs_tx.clone();
        tokio::spawn(async move {
            let result = tokio::task::spawn_blocking(move || {
                let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
                crate::logread::read_chunk(&refs, offset)
            })
            .await
            .unwrap_or_else(|e| Err(format!("reading the output failed: {e}")));
            let _ = inputs.send(Input::LogRead { request, result }).await;
        });
    }

    /// Starts a process whose executable is cached (reporting a cache miss
    /// otherwise): sandbox copy and fork off the driver's task.
    pub(super) fn launch(&mut self, launch: Launch) {
        let Some(program) = self.cache.lookup(&launch.executable) else {
            self.core.on_cache_miss(launch.process);
            return;
        };
        let mut input_copies = Vec::with_capacity(launch.inputs.len());
        for input in &launch.inputs {
            match self.cache.lookup(input) {
                Some(path) => input_copies.push((path, input.name.clone())),
                None => {
                    self.core.on_input_miss(launch.process, input.clone());
                    return;
                }
            }
        }
        let credential = self.creds.hold(launch.job, Holder::Process(launch.process));
        let mut env = launch.env;
        // A slot's process sees its slot's GPUs (the job's own environment,
        // later in the list, still wins); a master runs outside the slots.
        let slot = (!launch.master).then(|| self.core.slot_of_host(launch.host));
        if let Some(devices) = slot
            .flatten()
            .and_then(|s| self.machine.info().gpus.visible_devices(s))
        {
            env.insert(0, ("CUDA_VISIBLE_DEVICES".into(), devices));
        }
        let spec = LaunchSpec {
            credential: Some(credential.clone()),
            requests: launch.requests,
            process: launch.process,
            job: launch.job,
            host: launch.host,
            name: launch.executable.name.clone(),
            program,
            args: launch.args,
            env,
            stdio: (
                launch.stdio.0.map(PathBuf::from),
                launch.stdio.1.map(PathBuf::from),
            ),
            input_files: launch.input_files.into_iter().map(PathBuf::from).collect(),
            return_files: launch.return_files,
            input_copies,
            capture: match &launch.output {
                OutputRoute::Keep => Capture::Files,
                OutputRoute::Discard => Capture::Discard,
                OutputRoute::Forward { .. } => Capture::Pipes,
            },
        };
        let forward = match launch.output {
            OutputRoute::Forward { endpoint, request } => Some((
                ForwardTarget {
                    endpoint,
                    request,
                    job: launch.job,
                    process: launch.process,
                    fallback_dir: self.work_dir.join("output").join(launch.job.0.to_string()),
                },
                carmi_api::handshake::Secret::from(&credential),
            )),
            _ => None,
        };
        let launcher = self.launcher.clone();
        let inputs = self.inputs_tx.clone();
        tokio::spawn(async move {
            let process = spec.process;
            // The exit must not overtake the launch result in the input queue:
            // the waiting thread holds its report until the launch is reported.
            let (launched_tx, launched_rx) = oneshot::channel::<()>();
            let exit_inputs = inputs.clone();
            let on_exit = move |report: ExitReport| {
                let _ = launched_rx.blocking_recv();
                let _ = exit_inputs.blocking_send(Input::Exited { process, report });
            };
            let result = tokio::task::spawn_blocking(move || launcher.launch(&spec, on_exit))
                .await
                .map_err(|e| format!("launching failed: {e}"))
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map(|launched| {
                    if let (Some(pipes), Some((target, secret))) = (launched.pipes, forward) {
                        tokio::spawn(output::forward(pipes, target, secret));
                    }
                    launched.group
                });
            let _ = inputs.send(Input::Launched { process, result }).await;
            let _ = launched_tx.send(());
        });
    }
}
