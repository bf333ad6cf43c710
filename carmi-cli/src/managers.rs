//! `carmi pool status`: the pool's managers, from the list the pool's
//! address gives (`CARMI_POOL=a:9618,b:9618`, docs/standby.md): which one
//! is active, and for each standby whether it holds a whole copy of the
//! active's state and how many journal records it is behind.

use carmi_api::admin::{STANDBY_REFUSAL, managers, request};
use carmi_api::msg::{FromGlobal, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;

/// `carmi pool status`'s options.
#[derive(Args, Debug)]
pub struct ManagersArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Print JSON: a list of {address, role, behind, detail}.
    #[arg(long)]
    json: bool,
}

/// One manager as it answered.
#[derive(Debug, serde::Serialize)]
struct Row {
    address: String,
    /// `active`, `standby` or `unreachable`.
    role: &'static str,
    /// Journal records a standby is behind the active, as it last heard.
    behind: Option<u64>,
    detail: String,
}

/// Asks every manager of the list and prints who is what; fails when none is active.
pub fn run(args: &ManagersArgs) -> anyhow::Result<()> {
    let (pool, secret) = crate::talk::connect(&args.pool)?;
    let rows = crate::block_on(async {
        let mut rows = Vec::new();
        for addr in managers(&pool) {
            rows.push(ask(addr, &secret).await);
        }
        Ok(rows)
    })?;
    if args.json {
        crate::talk::print(&format!("{}\n", serde_json::to_string_pretty(&rows)?))?;
    } else {
        let mut text = String::new();
        for r in &rows {
            text.push_str(&format!("{:<24} {:<12} {}\n", r.address, r.role, r.detail));
        }
        crate::talk::print(&text)?;
    }
    match rows.iter().filter(|r| r.role == "active").count() {
        0 => anyhow::bail!(
            "no manager of `{pool}` is active: the standbys wait for the lease, or are not in sync (see their logs)"
        ),
        _ => Ok(()),
    }
}

async fn ask(addr: &str, secret: &carmi_api::handshake::Secret) -> Row {
    let row = |role, behind, detail| Row {
        address: addr.to_string(),
        role,
        behind,
        detail,
    };
    match request(addr, secret, None, ToGlobal::Status).await {
        Ok(FromGlobal::Pool(machines)) => {
            row("active", None, format!("{} machines", machines.len()))
        }
        Ok(other) => row("active", None, format!("answered {other:?}")),
        Err(e) => {
            let text = e.to_string();
            match text.find(STANDBY_REFUSAL) {
                Some(at) => {
                    let detail = text[at..].to_string();
                    row("standby", behind(&detail), detail)
                }
                None => row("unreachable", None, text),
            }
        }
    }
}

/// The `N records behind` of a standby's refusal.
fn behind(detail: &str) -> Option<u64> {
    let before = &detail[..detail.find(" records behind")?];
    before.rsplit(' ').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_standbys_lag_is_read_from_its_refusal() {
        let text = "standby manager (in sync, 3 records behind (epoch 2, heard 0.4 s ago)); the active manager is a:9618";
        assert_eq!(super::behind(text), Some(3));
        assert_eq!(
            super::behind("standby manager (not in sync: copying the state)"),
            None
        );
    }
}
