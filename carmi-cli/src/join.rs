//! `carmi pool add-machine` and `carmi pool add-user` (admin): the token a
//! new machine or user needs, with the pool's address and secret, in one
//! join bundle `NAME.join` (mode 0600, `crate::bundle`) per name, and the
//! one line to run with it, `carmi join NAME.join` (HTCondor's
//! `condor_token_request`, kubeadm's `join` line).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use carmi_api::authz::{Power, TokenAnswer, TokenRequest};
use clap::Args;

use crate::bundle::{Bundle, Kind};
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
    /// Where to write the bundles.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// Makes a daemon token for each machine of `args`, writes its bundle and
/// prints the line to run on it.
pub fn add_machines(args: &AddArgs) -> anyhow::Result<()> {
    let lifetime = args.lifetime.as_deref().unwrap_or(MACHINE_LIFETIME);
    for (name, file) in args.names.iter().zip(make(args, Kind::Machine, lifetime)?) {
        println!(
            "on {name}, with {file} copied there privately (scp): sudo carmi join {file}   (add --systemd to start it as a service)",
            file = file.display()
        );
    }
    Ok(())
}

/// Makes a token for each user of `args`, writes their bundles and says
/// what they run.
pub fn add_users(args: &AddArgs) -> anyhow::Result<()> {
    if args.authz == Power::Daemon {
        bail!("--authz daemon is a machine's: use `carmi pool add-machine NAME`");
    }
    let lifetime = args.lifetime.as_deref().unwrap_or("30d");
    for (name, file) in args.names.iter().zip(make(args, Kind::User, lifetime)?) {
        println!(
            "{name}: give them {file} privately (scp); they run carmi join {file}, and then carmi needs no export",
            file = file.display()
        );
    }
    Ok(())
}

/// One token per name, with the pool's address and secret in a bundle
/// `DIR/NAME.join`; their paths.
fn make(args: &AddArgs, kind: Kind, lifetime: &str) -> anyhow::Result<Vec<PathBuf>> {
    let lifetime_s = crate::token::parse_duration(lifetime)?;
    let power = match kind {
        Kind::Machine => Power::Daemon,
        Kind::User => args.authz,
    };
    for name in &args.names {
        let path = bundle_path(&args.dir, name)?;
        if path.exists() {
            bail!(
                "{} exists already: remove it first (and revoke its token, `carmi token list`, if it was not used)",
                path.display()
            );
        }
    }
    let coords = resolve_env(&args.pool)?;
    let pool = coords.pool()?.to_string();
    let secret = std::fs::read_to_string(coords.secret()?)
        .with_context(|| {
            format!(
                "cannot read the pool secret {}",
                coords.secret().unwrap_or(Path::new("")).display()
            )
        })?
        .trim()
        .to_string();
    if is_loopback(&pool) {
        eprintln!(
            "carmi: warning: the bundles name the pool {pool}, which other machines cannot reach: \
             pass --pool HOST:PORT with the manager's name (or set pool in config.toml)"
        );
    }
    let mut written = Vec::new();
    for name in &args.names {
        let req = TokenRequest::Create {
            identity: name.clone(),
            power,
            machine: (kind == Kind::Machine).then(|| name.clone()),
            lifetime_s,
        };
        let TokenAnswer::Created { token, info } = crate::token::ask(&args.pool, req)? else {
            bail!("the global RM answered something else than the new token");
        };
        let bundle = Bundle {
            kind,
            name: name.clone(),
            pool: pool.clone(),
            secret: secret.clone(),
            token: token.trim().to_string(),
        };
        let path = bundle_path(&args.dir, name)?;
        let path = path
            .strip_prefix("./")
            .map_or(path.clone(), Path::to_path_buf);
        carmi_api::files::write_private(&path, &bundle.to_text()?, false)?;
        eprintln!(
            "wrote {} ({} token {} of `{name}`, the pool's address and secret)",
            path.display(),
            info.power,
            info.id
        );
        written.push(path);
    }
    Ok(written)
}

/// True for `localhost:P`, `127.x.x.x:P` or `[::1]:P`.
fn is_loopback(pool: &str) -> bool {
    let host = pool.rsplit_once(':').map_or(pool, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `DIR/NAME.join`, for a name that is a plain file name.
fn bundle_path(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !plain {
        bail!("`{name}` is not a machine or user name (letters, digits, `-`, `_`, `.`)");
    }
    Ok(dir.join(format!("{name}.join")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_plain_bundle_files_only() {
        let dir = Path::new("/tmp/x");
        assert_eq!(
            bundle_path(dir, "lab-pc-07").unwrap(),
            dir.join("lab-pc-07.join")
        );
        for bad in ["../etc/x", "a/b", "", "..", "a b"] {
            assert!(bundle_path(dir, bad).is_err(), "{bad:?}");
        }
        assert!(is_loopback("localhost:9618") && is_loopback("127.0.0.1:1"));
        assert!(is_loopback("[::1]:9618") && !is_loopback("manager:9618"));
    }
}
