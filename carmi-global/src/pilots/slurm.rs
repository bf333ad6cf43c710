//! The Slurm backend: `sbatch --parsable` to submit, `scancel` to cancel,
//! `squeue` for the state of the jobs. Their outputs are parsed here, and
//! their own messages passed on when they fail.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use carmi_global_core::alloc_queue::BatchState;
use tokio::process::Command;

use super::{Backend, BackendFuture, Order, PilotSettings};

/// Pending reasons with which Slurm will never start a job (its
/// configuration forbids it): such an allocation is a failure at once.
const NEVER_STARTS: &[&str] = &[
    "PartitionConfig",
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionDown",
    "PartitionInactive",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSMaxWallDurationPerJobLimit",
    "ReqNodeNotAvail",
];

/// Slurm, through its commands on `PATH`.
pub struct Slurm {
    settings: PilotSettings,
    global_addr: String,
    /// Each submitted job's output file, to tell why a pilot ended early.
    outputs: Arc<Mutex<HashMap<String, PathBuf>>>,
}

impl Slurm {
    /// Pilots of this backend connect to `global_addr` unless the settings
    /// name another address.
    pub fn new(settings: PilotSettings, global_addr: String) -> Slurm {
        let global_addr = settings.global_addr.clone().unwrap_or(global_addr);
        Slurm {
            settings,
            global_addr,
            outputs: Arc::default(),
        }
    }

    /// The batch script of `order`.
    fn script(&self, order: &Order) -> String {
        let spec = &order.spec;
        let q = |s: &std::path::Path| shell_quote(&s.display().to_string());
        let mut s = String::new();
        let _ = writeln!(s, "#!/bin/sh");
        let _ = writeln!(
            s,
            "# CARMI pilot: allocation {} of queue {} (written by carmi-global).",
            order.alloc, order.queue
        );
        // The end is counted from the script's start, a little after
        // Slurm's: a few seconds early, never late.
        let _ = writeln!(s, "ends=$(( $(date +%s) + {} - 5 ))", spec.time_limit_s);
        let _ = writeln!(s, "returns=$(( ends - {} ))", spec.lead());
        let _ = writeln!(s, "i=${{SLURM_PROCID:-0}}");
        let _ = writeln!(s, "name=pilot-a{}-$i", order.alloc);
        let _ = writeln!(s, "work=\"${{TMPDIR:-/tmp}}/carmi-pilot-$SLURM_JOB_ID-$i\"");
        let config = order.dir.join("pilot.toml");
        let token = if order.tokens.is_empty() {
            String::new()
        } else {
            format!(" --token {}/\"$name\".token", q(&order.dir))
        };
        let _ = writeln!(
            s,
            "{} --global {} --secret {}{token} --config {} --name \"$name\" --slots {} \
             --work-dir \"$work\" --attr SlurmJobId=\"$SLURM_JOB_ID\" --attr PilotQueue={} \
             --attr PilotEndsAt=\"$ends\" --owner-returns-at \"$returns\" \
             --orphan-timeout {} &",
            q(&self.settings.local_binary),
            shell_quote(&self.global_addr),
            q(&self.settings.secret_file),
            q(&config),
            spec.cpus,
            order.queue,
            spec.orphan_timeout_s,
        );
        // Slurm's SIGTERM (scancel, the time limit) reaches the local RM,
        // which stops its processes; its work directory goes after it.
        let _ = writeln!(s, "pid=$!");
        let _ = writeln!(s, "trap 'kill -TERM $pid 2>/dev/null' TERM INT");
        let _ = writeln!(s, "wait $pid; wait $pid 2>/dev/null");
        let _ = writeln!(s, "rm -rf \"$work\"");
        s
    }
}

/// The pilots' local RM configuration: jobs run as the batch job's user,
/// as in any pilot system, even under a root batch job (`slot_users = []`:
/// no slot users are made on the batch nodes); a simulated owner, away
/// until the time limit's lead (`--owner-returns-at`), whose return
/// vacates at once.
const PILOT_CONFIG: &str = "slot_users = []\n\n[owner]\nsource = \"simulated\"\n\n[policy]\nminute = 1.0\n\
start = \"KeyboardIdle > Minute\"\nsuspend = \"false\"\ncontinue = \"true\"\n\
preempt = \"KeyboardIdle < Minute\"\nvacate_grace = 300.0\n";

/// `s` as one word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `--time` for Slurm: minutes:seconds.
fn time_arg(seconds: u64) -> String {
    format!("--time={}:{:02}", seconds / 60, seconds % 60)
}

/// Runs a Slurm command: its standard output, or its own message.
async fn run(cmd: &str, args: &[String]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run `{cmd}`: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let msg = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    Err(format!("`{cmd}` failed ({}): {msg}", out.status))
}

/// The job id in `sbatch --parsable`'s output (`ID` or `ID;CLUSTER`).
pub fn parse_sbatch(out: &str) -> Result<String, String> {
    let line = out.lines().map(str::trim).find(|l| !l.is_empty());
    let id = line.and_then(|l| l.split(';').next()).unwrap_or("");
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()) {
        Ok(id.to_string())
    } else {
        Err(format!("sbatch printed no job id: {:?}", out.trim()))
    }
}

/// States of `jobs` from `squeue -h -o '%i|%T|%r'` output; jobs not listed are gone.
pub fn parse_squeue(out: &str, jobs: &[String]) -> Vec<(String, BatchState)> {
    let mut seen: HashMap<&str, BatchState> = HashMap::new();
    for line in out.lines() {
        let mut f = line.trim().splitn(3, '|');
        let (Some(id), Some(state), reason) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let reason = reason.unwrap_or("").trim();
        let state = match state.trim() {
            "PENDING" if NEVER_STARTS.contains(&reason) => {
                BatchState::Gone(format!("Slurm will never start it: {reason}"))
            }
            "PENDING" | "REQUEUED" | "RESV_DEL_HOLD" | "SUSPENDED" => {
                BatchState::Pending(reason.to_string())
            }
            "RUNNING" | "CONFIGURING" | "COMPLETING" | "STAGE_OUT" | "SIGNALING" => {
                BatchState::Running
            }
            other => BatchState::Gone(if reason.is_empty() || reason == "None" {
                other.to_string()
            } else {
                format!("{other} ({reason})")
            }),
        };
        seen.insert(id.trim(), state);
    }
    jobs.iter()
        .map(|j| {
            let s = seen
                .remove(j.as_str())
                .unwrap_or_else(|| BatchState::Gone(String::new()));
            (j.clone(), s)
        })
        .collect()
}

/// The last non-empty lines of a pilot's batch output, to say why it ended.
fn tail(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(2)..].join(" / ");
    (!last.is_empty()).then(|| last.chars().take(400).collect())
}

impl Backend for Slurm {
    fn submit(&self, order: Order) -> BackendFuture<Result<String, String>> {
        let script = self.script(&order);
        let outputs = self.outputs.clone();
        Box::pin(async move {
            let path = order.dir.join(format!("a{}.sh", order.alloc));
            let config = order.dir.join("pilot.toml");
            let write = async {
                tokio::fs::write(&config, PILOT_CONFIG).await?;
                tokio::fs::write(&path, &script).await
            };
            write
                .await
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            let spec = &order.spec;
            let output = order.dir.join(format!("a{}-%j.out", order.alloc));
            let mut args = vec![
                "--parsable".to_string(),
                format!("--job-name=carmi-pilot-a{}", order.alloc),
                time_arg(spec.time_limit_s),
                format!("--nodes={}", spec.hosts_per_alloc),
                "--ntasks-per-node=1".into(),
                format!("--cpus-per-task={}", spec.cpus),
                format!("--output={}", output.display()),
            ];
            args.extend(spec.extra_args.iter().cloned());
            args.push(path.display().to_string());
            let id = parse_sbatch(&run("sbatch", &args).await?)?;
            let out = order.dir.join(format!("a{}-{id}.out", order.alloc));
            outputs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), out);
            tracing::info!(
                queue = order.queue,
                alloc = order.alloc,
                slurm_job = id,
                "pilot allocation submitted"
            );
            Ok(id)
        })
    }

    fn cancel(&self, job: String) -> BackendFuture<Result<(), String>> {
        Box::pin(async move { run("scancel", &[job]).await.map(|_| ()) })
    }

    fn status(
        &self,
        jobs: Vec<String>,
    ) -> BackendFuture<Result<Vec<(String, BatchState)>, String>> {
        let outputs = self.outputs.clone();
        Box::pin(async move {
            // Every job, not `-j`: squeue refuses ids it has forgotten.
            let args = ["-h", "-a", "-o", "%i|%T|%r"].map(String::from);
            let out = run("squeue", &args).await?;
            let mut states = parse_squeue(&out, &jobs);
            for (job, state) in &mut states {
                if let BatchState::Gone(why) = state
                    && why.is_empty()
                {
                    let path = outputs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(job)
                        .cloned();
                    if let Some(t) = path.as_deref().and_then(tail) {
                        *why = format!("its output ends with: {t}");
                    }
                }
            }
            Ok(states)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_output_gives_the_job_id_or_a_clear_error() {
        assert_eq!(parse_sbatch("42\n").unwrap(), "42");
        assert_eq!(parse_sbatch("43;cluster\n").unwrap(), "43");
        assert!(parse_sbatch("").unwrap_err().contains("no job id"));
        assert!(parse_sbatch("Submitted batch job 4").is_err());
    }

    #[test]
    fn squeue_lines_become_states_and_missing_jobs_are_gone() {
        let out =
            "7|PENDING|Resources\n8|RUNNING|None\n9|PENDING|PartitionConfig\n10|CANCELLED|None\n";
        let jobs: Vec<String> = ["7", "8", "9", "10", "11"].map(String::from).to_vec();
        let s = parse_squeue(out, &jobs);
        assert_eq!(s[0].1, BatchState::Pending("Resources".into()));
        assert_eq!(s[1].1, BatchState::Running);
        assert!(matches!(&s[2].1, BatchState::Gone(w) if w.contains("PartitionConfig")));
        assert_eq!(s[3].1, BatchState::Gone("CANCELLED".into()));
        assert_eq!(s[4].1, BatchState::Gone(String::new()));
    }

    #[test]
    fn time_limits_are_minutes_and_seconds() {
        assert_eq!(time_arg(90), "--time=1:30");
        assert_eq!(time_arg(3600), "--time=60:00");
    }
}
