//! `carmi userprio`: the users of the fair share (issue 15, item 7) with
//! their recent usage, effective priority and priority factor, and, for an
//! admin, `--set-factor USER F` as HTCondor's `condor_userprio -setfactor`:
//! a user whose factor is 2 is owed half the hosts of one whose factor is
//! 1. The factor is journaled, so it survives a restart of the global RM.

use carmi_api::admin::request;
use carmi_api::msg::{FromGlobal, ToGlobal, UserPrio, UserPrioRequest};
use clap::Args;

use crate::config::PoolArgs;
use crate::talk::{connect, failed, print};

/// `carmi userprio` options.
#[derive(Args)]
pub struct UserPrioArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Set USER's priority factor to F (a positive number; 1 is the
    /// default; admin only), then list the users
    #[arg(long, num_args = 2, value_names = ["USER", "F"], allow_negative_numbers = true)]
    set_factor: Option<Vec<String>>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `carmi userprio`.
pub fn run(args: UserPrioArgs) -> anyhow::Result<()> {
    let req = match args.set_factor.as_deref() {
        Some([user, f]) => {
            let factor: f64 = f.parse().map_err(|_| {
                anyhow::anyhow!("--set-factor {user} {f}: the factor must be a number")
            })?;
            UserPrioRequest::SetFactor {
                user: user.clone(),
                factor,
            }
        }
        _ => UserPrioRequest::List,
    };
    let (pool, secret) = connect(&args.pool)?;
    let answer = crate::block_on(async {
        Ok(request(&pool, &secret, None, ToGlobal::UserPrio(req)).await?)
    })?;
    let users = match answer {
        FromGlobal::Users(users) => users,
        other => return Err(failed(other, "userprio")),
    };
    if args.json {
        print(&format!("{}\n", serde_json::to_string_pretty(&users)?))
    } else {
        print(&table(&users))
    }
}

/// One line per user, best priority first (as the global RM sent them).
fn table(users: &[UserPrio]) -> String {
    let mut out = format!(
        "{:<16} {:>12} {:>12} {:>8}\n",
        "USER", "PRIORITY", "HOST-HOURS", "FACTOR"
    );
    for u in users {
        let name: String = u.user.chars().take(16).collect();
        out.push_str(&format!(
            "{name:<16} {:>12.2} {:>12.2} {:>8.2}\n",
            u.priority, u.usage_hours, u.factor
        ));
    }
    if users.is_empty() {
        out.push_str("(no user has used the pool lately or has a factor set)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_user_with_priority_usage_and_factor() {
        let users = [UserPrio {
            user: "alice".into(),
            priority: 6.0,
            usage_hours: 2.0,
            factor: 2.0,
        }];
        let text = table(&users);
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row, ["alice", "6.00", "2.00", "2.00"]);
    }
}
