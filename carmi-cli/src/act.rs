//! What `carmi rm`, `hold` and `release` share: which jobs a command line
//! names (clusters, procs, users, `-all`, `-constraint`, as HTCondor's
//! condor_rm, condor_hold and condor_release take them) and sending each
//! its request, one refusal never keeping the others.

use carmi_api::admin::request;
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, ToGlobal};
use clap::Args;

use crate::select::{self, Target};
use crate::talk::{failed, print};

/// The jobs a command acts on.
#[derive(Args)]
pub struct Selection {
    /// Clusters `C` (every proc), procs `C.P`, or user names (every job of
    /// that user in the queue)
    #[arg(value_name = "JOB|USER", required_unless_present_any = ["all", "constraint"])]
    targets: Vec<Target>,
    /// Every job of yours in the queue (or -all)
    #[arg(long)]
    all: bool,
    /// Every job in the queue whose ad satisfies EXPR (or -constraint):
    /// ClusterId, ProcId, Owner, Cmd, QDate, JobStatus (1 idle, 2 running,
    /// 5 held), HoldReason and the attributes a job published
    #[arg(long, alias = "const", value_name = "EXPR")]
    constraint: Option<String>,
}

/// One request to send: what the user reads, the job or cluster, and
/// whether it names a cluster.
struct Item {
    label: String,
    job: JobId,
    cluster: bool,
}

impl Selection {
    /// The requests to send, in command-line order.
    async fn items(&self, pool: &str, secret: &Secret) -> anyhow::Result<Vec<Item>> {
        let mut items = Vec::new();
        let needs_queue = self.all
            || self.constraint.is_some()
            || self.targets.iter().any(|t| matches!(t, Target::User(_)));
        let queue = if needs_queue {
            select::queue(pool, secret).await?
        } else {
            Vec::new()
        };
        let each_job = |keep: &dyn Fn(&carmi_api::msg::JobStatus) -> bool| -> Vec<Item> {
            queue
                .iter()
                .filter(|j| keep(j))
                .map(|j| Item {
                    label: format!("job {}", select::proc_id(j)),
                    job: j.job,
                    cluster: false,
                })
                .collect()
        };
        for t in &self.targets {
            match t {
                Target::Cluster(c) => items.push(Item {
                    label: format!("cluster {c}"),
                    job: JobId(*c),
                    cluster: true,
                }),
                Target::Proc(..) => items.push(Item {
                    label: format!("job {t}"),
                    job: select::one_job(pool, secret, t).await?,
                    cluster: false,
                }),
                Target::User(u) => {
                    let found = each_job(&|j| j.owner == *u);
                    if found.is_empty() {
                        anyhow::bail!("user {u} has no job in the queue");
                    }
                    items.extend(found);
                }
            }
        }
        if self.all {
            let me = crate::talk::user_name();
            items.extend(each_job(&|j| j.owner == me));
        }
        if let Some(text) = &self.constraint {
            let expr = select::constraint(text)?;
            items.extend(each_job(&|j| {
                select::job_ad(j).eval_expr(&expr, None).is_true()
            }));
        }
        Ok(items)
    }
}

/// Sends `msg(job, cluster)` for every job `sel` names, printing one line
/// per job or cluster done (`{done: C}` with `--json`); fails naming every
/// refusal if any.
pub fn each(
    pool: &crate::config::PoolArgs,
    sel: &Selection,
    json: bool,
    what: &str,
    done: &str,
    msg: impl Fn(JobId, bool) -> ToGlobal,
) -> anyhow::Result<()> {
    let (pool, secret) = crate::talk::connect(pool)?;
    let items = crate::block_on(async { sel.items(&pool, &secret).await })?;
    if items.is_empty() {
        anyhow::bail!("{what}: no job in the queue matches");
    }
    let mut errors = Vec::new();
    for item in items {
        let m = msg(item.job, item.cluster);
        let answer = crate::block_on(async { Ok(request(&pool, &secret, None, m).await?) })?;
        match answer {
            FromGlobal::Held { .. } | FromGlobal::Released { .. } | FromGlobal::Removed { .. } => {
                if json {
                    print(&format!("{}\n", serde_json::json!({ done: item.job.0 })))?;
                } else {
                    print(&format!("{} {done}\n", item.label))?;
                }
            }
            other => errors.push(failed(other, &format!("{what} {}", item.label))),
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        n => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow::bail!("{n} were not {done}:\n{}", all.join("\n"))
        }
    }
}
