//! `carmi pool add-machine` and `carmi pool add-user` (admin): the tokens a
//! new machine or user needs, each written to `NAME.token` (mode 0600), and
//! what to run with it, in one command for any number of names (HTCondor's
//! `condor_token_request`, kubeadm's `join` line).

use std::path::{Path, PathBuf};

use anyhow::bail;
use carmi_api::authz::{Power, TokenAnswer, TokenRequest};
use clap::Args;

use crate::config::{PoolArgs, Required, resolve_env};

/// Default lifetime of a machine's daemon token: 30 days, as a user's.
/// The global RM renews it over the machine's link once a third of it is
/// left, so a running machine never reaches its expiry; a machine switched
/// off for more than 10 days needs a new token.
const MACHINE_LIFETIME: &str = "30d";

/// `carmi pool add-machine` and `add-user` options.
#[derive(Args)]
pub struct AddArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The machines' names (as their local RMs call themselves) or the users' names.
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// How long each token lasts: a number with s, m, h or d [default: 30d;
    /// a machine's is renewed over its link before it expires].
    #[arg(long, value_name = "DURATION")]
    lifetime: Option<String>,
    /// For users: what their tokens allow (read, submit or admin).
    #[arg(long, value_name = "POWER", default_value = "submit")]
    authz: Power,
    /// Where to write the token files.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// Makes a daemon token for each machine of `args` and prints the line to
/// start its local RM with.
pub fn add_machines(args: &AddArgs) -> anyhow::Result<()> {
    let lifetime = args.lifetime.as_deref().unwrap_or(MACHINE_LIFETIME);
    let files = make(args, Power::Daemon, lifetime)?;
    let coords = resolve_env(&args.pool)?;
    let (pool, secret) = (coords.pool()?, coords.secret()?);
    let secret_name = secret
        .file_name()
        .map_or("pool.secret".into(), |n| n.to_string_lossy());
    for (name, file) in args.names.iter().zip(&files) {
        let token = file.file_name().map_or("".into(), |n| n.to_string_lossy());
        println!(
            "on {name}: copy {secret_name} and {token} there (mode 0600), then run\n  \
             carmi-local --global {pool} --secret {secret_name} --token {token} --config local.toml"
        );
    }
    Ok(())
}

/// Makes a token for each user of `args` and says how they use it.
pub fn add_users(args: &AddArgs) -> anyhow::Result<()> {
    if args.authz == Power::Daemon {
        bail!("--authz daemon is a machine's: use `carmi pool add-machine NAME`");
    }
    let lifetime = args.lifetime.as_deref().unwrap_or("30d");
    let files = make(args, args.authz, lifetime)?;
    for (name, file) in args.names.iter().zip(&files) {
        println!(
            "{name}: give them {} with the pool secret; they set CARMI_TOKEN to it",
            file.display()
        );
    }
    Ok(())
}

/// One token of `power` per name, written to `DIR/NAME.token`; their paths.
fn make(args: &AddArgs, power: Power, lifetime: &str) -> anyhow::Result<Vec<PathBuf>> {
    let lifetime_s = crate::token::parse_duration(lifetime)?;
    for name in &args.names {
        let path = token_path(&args.dir, name)?;
        if path.exists() {
            bail!(
                "{} exists already: revoke that token or move the file first",
                path.display()
            );
        }
    }
    let mut written = Vec::new();
    for name in &args.names {
        let req = TokenRequest::Create {
            identity: name.clone(),
            power,
            machine: (power == Power::Daemon).then(|| name.clone()),
            lifetime_s,
        };
        let TokenAnswer::Created { token, info } = crate::token::ask(&args.pool, req)? else {
            bail!("the global RM answered something else than the new token");
        };
        let path = token_path(&args.dir, name)?;
        carmi_api::files::write_private(&path, &format!("{token}\n"), false)?;
        eprintln!(
            "wrote {} ({} token {} of `{name}`)",
            path.display(),
            info.power,
            info.id
        );
        written.push(path);
    }
    Ok(written)
}

/// `DIR/NAME.token`, for a name that is a plain file name.
fn token_path(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !plain {
        bail!("`{name}` is not a machine or user name (letters, digits, `-`, `_`, `.`)");
    }
    Ok(dir.join(format!("{name}.token")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_plain_token_files_only() {
        let dir = Path::new("/tmp/x");
        assert_eq!(
            token_path(dir, "lab-pc-07").unwrap(),
            dir.join("lab-pc-07.token")
        );
        for bad in ["../etc/x", "a/b", "", "..", "a b"] {
            assert!(token_path(dir, bad).is_err(), "{bad:?}");
        }
    }
}
