//! `carmi alloc`: allocation queues, through which the global RM grows the
//! pool with pilots submitted to a batch system (Slurm) while jobs wait for
//! hosts. `add`, `list`, `info`, `pause`, `resume`, `remove`, `dry-run`.

use carmi_api::admin::request;
use carmi_api::msg::{
    AllocAnswer, AllocQueueSpec, AllocQueueStatus, AllocRequest, FromGlobal, ToGlobal,
};
use clap::{Args, Subcommand};

use crate::config::PoolArgs;
use crate::jobs::{connect, failed, print};
use crate::token::parse_duration;

/// `carmi alloc` subcommands.
#[derive(Subcommand)]
pub enum AllocCommand {
    /// Create a queue that submits pilots when jobs wait for hosts.
    Add {
        #[command(subcommand)]
        backend: Backend,
    },
    /// List the queues and their allocations that are not over.
    List(Common),
    /// Show one queue with every allocation it remembers.
    Info(OneQueue),
    /// Stop a queue submitting (running pilots stay).
    Pause(OneQueue),
    /// Let a paused queue submit again (its failure count reset).
    Resume(OneQueue),
    /// Remove a queue: its waiting allocations are cancelled, its pilots
    /// end as soon as they are idle.
    Remove(OneQueue),
    /// Submit one short allocation now and report whether its pilot came up
    /// and registered (with the batch system's reason if not).
    DryRun {
        #[command(subcommand)]
        backend: Backend,
    },
}

/// The batch system of a queue.
#[derive(Subcommand)]
pub enum Backend {
    /// Slurm: pilots are `sbatch` jobs.
    Slurm(SlurmArgs),
}

/// Options shared by every subcommand.
#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    pool: PoolArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One queue.
#[derive(Args)]
pub struct OneQueue {
    #[command(flatten)]
    common: Common,
    /// The queue's id.
    queue: u64,
}

/// `carmi alloc add slurm` options.
#[derive(Args)]
pub struct SlurmArgs {
    #[command(flatten)]
    common: Common,
    /// Never more than this many pilot hosts at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    max_hosts: u32,
    /// Hosts per allocation (one pilot per node).
    #[arg(long, value_name = "K", default_value_t = 1)]
    hosts_per_alloc: u32,
    /// At most this many allocations wait in Slurm's queue at once.
    #[arg(long, value_name = "B", default_value_t = 1)]
    backlog: u32,
    /// Each allocation's time limit (90s, 30m, 2h).
    #[arg(long, value_name = "DURATION")]
    time_limit: String,
    /// A pilot without work for this long ends.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    idle_timeout: String,
    /// How long before the time limit the pilot's hosts are vacated
    /// [default: a quarter of the time limit, at most 1m].
    #[arg(long, value_name = "DURATION")]
    lead: Option<String>,
    /// Failures in a row after which the queue pauses itself.
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_failures: u32,
    /// Slots (CPUs) of each pilot.
    #[arg(long, value_name = "N", default_value_t = 1)]
    cpus: u32,
    /// A pilot that cannot register with the global RM for this long ends.
    #[arg(long, value_name = "DURATION", default_value = "3m")]
    orphan_timeout: String,
    /// A name for the queue.
    #[arg(long)]
    name: Option<String>,
    /// Further sbatch arguments, after `--`.
    #[arg(last = true, value_name = "SBATCH_ARGS")]
    extra: Vec<String>,
}

impl SlurmArgs {
    /// The queue these options describe (checked by the global RM).
    fn spec(&self) -> anyhow::Result<AllocQueueSpec> {
        let mut spec = AllocQueueSpec::slurm(self.max_hosts, parse_duration(&self.time_limit)?);
        spec.name = self.name.clone();
        spec.hosts_per_alloc = self.hosts_per_alloc;
        spec.backlog = self.backlog;
        spec.idle_timeout_s = parse_duration(&self.idle_timeout)?;
        spec.lead_s = self.lead.as_deref().map(parse_duration).transpose()?;
        spec.max_failures = self.max_failures;
        spec.cpus = self.cpus;
        spec.orphan_timeout_s = parse_duration(&self.orphan_timeout)?;
        spec.extra_args = self.extra.clone();
        Ok(spec)
    }
}

/// Runs `carmi alloc ...`.
pub fn run(command: AllocCommand) -> anyhow::Result<()> {
    let (common, req) = match &command {
        AllocCommand::Add {
            backend: Backend::Slurm(a),
        } => (&a.common, AllocRequest::Add(a.spec()?)),
        AllocCommand::DryRun {
            backend: Backend::Slurm(a),
        } => (&a.common, AllocRequest::DryRun(a.spec()?)),
        AllocCommand::List(c) => (c, AllocRequest::List),
        AllocCommand::Info(q) => (&q.common, AllocRequest::Info { queue: q.queue }),
        AllocCommand::Pause(q) => (&q.common, AllocRequest::Pause { queue: q.queue }),
        AllocCommand::Resume(q) => (&q.common, AllocRequest::Resume { queue: q.queue }),
        AllocCommand::Remove(q) => (&q.common, AllocRequest::Remove { queue: q.queue }),
    };
    let (pool, secret) = connect(&common.pool)?;
    let answer =
        crate::block_on(async { Ok(request(&pool, &secret, None, ToGlobal::Alloc(req)).await?) })?;
    let FromGlobal::Alloc(answer) = answer else {
        return Err(failed(answer, "alloc"));
    };
    if common.json {
        return print(&format!("{}\n", serde_json::to_string_pretty(&answer)?));
    }
    match answer {
        AllocAnswer::Queue(q) => print(&show(&q, true)),
        AllocAnswer::Queues(qs) if qs.is_empty() => print("no allocation queues\n"),
        AllocAnswer::Queues(qs) => print(&qs.iter().map(|q| show(q, false)).collect::<String>()),
        AllocAnswer::DryRun { ok, report } => {
            print(&format!("{}: {report}\n", if ok { "ok" } else { "failed" }))?;
            if ok {
                Ok(())
            } else {
                anyhow::bail!("the dry run's pilot did not come up")
            }
        }
    }
}

/// A queue as text: one line for it, one per allocation.
fn show(q: &AllocQueueStatus, long: bool) -> String {
    let s = &q.spec;
    let mut out = format!(
        "queue {}{} ({}): {}{}; {} of at most {} hosts, {} per allocation, backlog {}, time limit {} s, idle timeout {} s, demand {}, failures {}\n",
        q.id,
        s.name
            .as_deref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default(),
        s.backend,
        q.state,
        q.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        q.allocations
            .iter()
            .filter(|a| a.state != "ended" && a.state != "failed")
            .map(|a| a.hosts)
            .sum::<u32>(),
        s.max_hosts,
        s.hosts_per_alloc,
        s.backlog,
        s.time_limit_s,
        s.idle_timeout_s,
        q.demand,
        q.failures,
    );
    if long && !s.extra_args.is_empty() {
        out.push_str(&format!("  sbatch arguments: {}\n", s.extra_args.join(" ")));
    }
    for a in &q.allocations {
        out.push_str(&format!(
            "  alloc {} job {} {} hosts {} [{}] submitted {} started {} ends {}{}\n",
            a.id,
            a.batch_job.as_deref().unwrap_or("-"),
            a.state,
            a.hosts,
            a.machines.join(","),
            a.submitted_unix,
            a.started_unix.map_or("-".into(), |t| t.to_string()),
            a.ends_unix.map_or("-".into(), |t| t.to_string()),
            a.note
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default(),
        ));
    }
    out
}
