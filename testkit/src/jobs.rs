//! Jobs whose master is a shell script, as the end-to-end tests submit them
//! (through `carmi` from a submit directory, or over the admin protocol as
//! a client that skips the command's checks), and the waits that follow:
//! for a condition, for a `carmi` process, for a job's record in the
//! history. Each test used to carry its own copy of these.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use carmi_api::exe::sha256_hex;
use carmi_api::ids::JobId;
use carmi_api::msg::{ExecutableRef, FromGlobal, JobRecord, SubmitRequest, ToGlobal};
use carmi_api::submit::JobSpec;

use crate::{Pool, text};

/// How often the waits look again: often enough that a test does not
/// linger, seldom enough that polling `carmi` does not load the machine.
const POLL: Duration = Duration::from_millis(100);

/// Writes `body` to `path` and makes it executable (mode 0755), as a
/// job's master script must be.
pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).expect("write a script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .expect("make a script executable");
}

/// Writes `dir/NAME.sh` (`#!/bin/sh`, then `script`) and `dir/NAME.sub`
/// (`executable = NAME.sh`, the `submit` lines, `queue`); returns the
/// submit file's path.
pub fn write_job(dir: &Path, name: &str, script: &str, submit: &str) -> PathBuf {
    write_script(
        &dir.join(format!("{name}.sh")),
        &format!("#!/bin/sh\n{script}\n"),
    );
    let sub = dir.join(format!("{name}.sub"));
    std::fs::write(&sub, format!("executable = {name}.sh\n{submit}queue\n"))
        .expect("write a submit file");
    sub
}

/// The executable `master.sh` whose content is `master`, and a submit of
/// `spec` with it by `owner` from machine `m0`, as the admin protocol
/// carries it (the caller uploads `master` with it, or not).
pub fn submit_request(owner: &str, master: &str, spec: JobSpec) -> (ExecutableRef, ToGlobal) {
    let executable = ExecutableRef {
        name: "master.sh".into(),
        sha256: sha256_hex(master.as_bytes()),
        size: master.len() as u64,
    };
    let msg = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: owner.into(),
        machine: "m0".into(),
        executable: executable.clone(),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    (executable, msg)
}

/// How many times the gated job `name` ([`Pool::submit_gated`]) started.
pub fn gated_starts(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("runs.{name}")))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The state `carmi q --json` gave `job` in `queue` ([`Pool::queue_states`]).
pub fn state_of(queue: &[(u64, String)], job: u64) -> Option<&str> {
    queue
        .iter()
        .find(|(j, _)| *j == job)
        .map(|(_, s)| s.as_str())
}

impl Pool {
    /// `carmi` ([`Pool::carmi`]) run from `dir`, as a user in a submit
    /// directory outside the pool runs it (relative paths are from there).
    pub fn carmi_in(&self, dir: &Path) -> Command {
        let mut cmd = self.carmi();
        cmd.current_dir(dir);
        cmd
    }

    /// Runs `cmd`, which must succeed; returns its standard output. A
    /// failure panics with the command, its standard error and the logs.
    pub fn run_ok(&self, cmd: &mut Command) -> String {
        let out = cmd.output().expect("run a command");
        assert!(
            out.status.success(),
            "{:?} {:?}: {}\n{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            text(&out.stderr),
            self.logs()
        );
        text(&out.stdout)
    }

    /// Writes `dir/master.sh` (`master`, executable) and `dir/job.sub`
    /// (`submit`), submits `job.sub` with `carmi` from `dir` and returns
    /// what it printed, the job id, trimmed.
    pub fn submit_script(&self, dir: &Path, master: &str, submit: &str) -> String {
        write_script(&dir.join("master.sh"), master);
        std::fs::write(dir.join("job.sub"), submit).expect("write a submit file");
        let out = self.run_ok(self.carmi_in(dir).args(["submit", "job.sub"]));
        out.trim().to_string()
    }

    /// Submits the submit file `sub` with `carmi` (from [`Pool::carmi`],
    /// as the test set it up: pinned to a machine, with another token) and
    /// `--json`; the job's id. A refusal panics with its reason and the logs.
    pub fn submit_file(&self, mut carmi: Command, sub: &Path) -> u64 {
        let out = self.run_ok(carmi.args(["submit", "--json"]).arg(sub));
        let v: serde_json::Value = serde_json::from_str(&out).expect("submit --json parses");
        v["job"].as_u64().expect("a job id")
    }

    /// Submits a job from `dir` whose master notes each start in
    /// `dir/runs.NAME` ([`gated_starts`]) and then waits for `dir/go`: a
    /// job that runs until the test lets it end, and says whether it was
    /// started twice. `submit` is added to its submit file.
    pub fn submit_gated(&self, dir: &Path, name: &str, submit: &str) -> u64 {
        let script = format!(
            "echo $$ >> {d}/runs.{name}\nwhile [ ! -e {d}/go ]; do sleep 0.2; done",
            d = dir.display()
        );
        self.submit_file(self.carmi_in(dir), &write_job(dir, name, &script, submit))
    }

    /// `carmi q --json` as (job, state), or `None` when `carmi` failed.
    pub fn queue_states(&self) -> Option<Vec<(u64, String)>> {
        let out = self.carmi().args(["q", "--json"]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let q: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let jobs = q.as_array()?.iter().map(|j| {
            (
                j["job"].as_u64().unwrap_or(0),
                j["state"].as_str().unwrap_or("").to_string(),
            )
        });
        Some(jobs.collect())
    }

    /// Submits the job of submit file `submit` whose master is the script
    /// `master`, over the admin protocol as `tester` from `m0`, uploading
    /// the script with it; its id.
    pub async fn submit_admin(&self, master: &str, submit: &str) -> JobId {
        let spec = carmi_api::submit::parse("job.sub", submit).expect("a valid submit file");
        let (executable, msg) = submit_request("tester", master, spec);
        let upload = Some((&executable, master.as_bytes()));
        match carmi_api::admin::request(&self.global_addr, &self.secret, upload, msg).await {
            Ok(FromGlobal::Submitted { job }) => job,
            other => panic!("submit failed: {other:?}\n{}", self.logs()),
        }
    }

    /// `carmi wait JOB --timeout SECONDS` run from `dir`: its output, whose
    /// exit code is the job's (124 when it did not end in time).
    pub fn wait_job(&self, dir: &Path, job: &str, timeout_s: u32) -> Output {
        let timeout = timeout_s.to_string();
        self.carmi_in(dir)
            .args(["wait", job, "--timeout", &timeout])
            .output()
            .expect("run carmi wait")
    }

    /// Asserts that the process of `out` (a `carmi wait`) exited with
    /// `code`, showing its standard error and the logs if not.
    pub fn assert_exit(&self, out: &Output, code: i32) {
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}\n{}",
            text(&out.stderr),
            self.logs()
        );
    }

    /// Calls `attempt` until it gives a value, at most `limit`; a timeout
    /// panics with `what`, the last attempt's reason and the logs.
    pub fn wait_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut attempt: impl FnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            let why = match attempt() {
                Ok(value) => return value,
                Err(why) => why,
            };
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}: {why}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Polls `check` until it holds, at most `limit` (which only bounds a
    /// broken run); a timeout panics with `what` and the logs.
    pub fn wait_until(&self, what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
        self.wait_for(what, limit, || {
            if check() {
                Ok(())
            } else {
                Err("not yet".into())
            }
        });
    }

    /// Waits for `child` to exit, at most `limit`; kills it and panics
    /// saying `what` did not end otherwise.
    pub fn wait_exit(&self, child: &mut Child, what: &str, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("poll a child process") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} did not end\n{}", self.logs());
            }
            std::thread::sleep(POLL);
        }
    }

    /// `job`'s records in `carmi history --json JOB` (as JSON), once there
    /// are any, at most `limit`.
    pub fn wait_history_json(&self, job: &str, limit: Duration) -> Vec<serde_json::Value> {
        self.wait_for(&format!("job {job} in the history"), limit, || {
            let out = self.carmi().args(["history", "--json", job]).output();
            let out = out.expect("run carmi history");
            let records: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_default();
            match records.as_array() {
                Some(records) if !records.is_empty() => Ok(records.clone()),
                _ => Err(text(&out.stderr)),
            }
        })
    }

    /// How `job` ended: its one record in the history, once there, at
    /// most `limit`.
    pub fn wait_history(&self, job: &str, limit: Duration) -> JobRecord {
        let records = self.wait_history_json(job, limit);
        assert_eq!(records.len(), 1, "{records:?}");
        let record = records.into_iter().next().expect("one record");
        serde_json::from_value(record).expect("history --json parses")
    }
}
