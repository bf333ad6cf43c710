//! `carmi token create|list|revoke`: admin requests to the global RM, which
//! holds the pool's signing key; and the signing key and first admin token
//! that `carmi pool init` writes on the manager.

use std::path::Path;

use anyhow::{Context, bail};
use carmi_api::admin::request;
use carmi_api::authz::{Power, TokenAnswer, TokenInfo, TokenRequest};
use carmi_api::msg::{FromGlobal, ToGlobal};
use carmi_api::token::{Grant, SigningKey, now_unix};
use clap::{Args, Subcommand};

use crate::config::{PoolArgs, Required, resolve_env};

/// Default lifetime of a token: 30 days.
const DEFAULT_LIFETIME: &str = "30d";

/// Lifetime of the admin token `carmi pool init` writes: one year.
const INIT_ADMIN_LIFETIME_S: u64 = 365 * 24 * 3600;

/// `carmi token` subcommands.
#[derive(Subcommand)]
pub enum TokenCommand {
    /// Make a signed token for an identity (admin only); prints it, or writes it to --out.
    Create(CreateArgs),
    /// List the tokens the global RM made, with their state (admin only).
    List {
        #[command(flatten)]
        pool: PoolArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id (admin only): it is refused from now on and
    /// the connections it opened are closed.
    Revoke {
        #[command(flatten)]
        pool: PoolArgs,
        /// The token's id (from `carmi token list`).
        id: String,
    },
}

/// `carmi token create` options.
#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Who the token names (a user name, or a machine's daemon name).
    #[arg(long)]
    identity: String,
    /// What it allows: read, submit, daemon or admin.
    #[arg(long, value_name = "POWER")]
    authz: Power,
    /// For a daemon token: the one machine it may advertise.
    #[arg(long)]
    machine: Option<String>,
    /// How long it lasts: a number with s, m, h or d (30d, 12h, 3600s).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_LIFETIME)]
    lifetime: String,
    /// Write the token to this new file (mode 0600) instead of printing it.
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
}

/// Runs a `carmi token` subcommand.
pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(args) => {
            let lifetime_s = parse_duration(&args.lifetime)?;
            let req = TokenRequest::Create {
                identity: args.identity,
                power: args.authz,
                machine: args.machine,
                lifetime_s,
            };
            let TokenAnswer::Created { token, info } = ask(&args.pool, req)? else {
                bail!("the global RM answered something else than the new token");
            };
            match &args.out {
                Some(path) => {
                    carmi_api::files::write_private(path, &format!("{token}\n"), false)?;
                    eprintln!(
                        "token {} for `{}` ({}) written to {}",
                        info.id,
                        info.identity,
                        info.power,
                        path.display()
                    );
                }
                None => println!("{token}"),
            }
            Ok(())
        }
        TokenCommand::List { pool, json } => {
            let TokenAnswer::List(list) = ask(&pool, TokenRequest::List)? else {
                bail!("the global RM answered something else than the list");
            };
            if json {
                crate::jobs::print(&format!("{}\n", serde_json::to_string(&list)?))
            } else {
                crate::jobs::print(&table(&list, now_unix()))
            }
        }
        TokenCommand::Revoke { pool, id } => {
            let TokenAnswer::Revoked { id, known } = ask(&pool, TokenRequest::Revoke { id })?
            else {
                bail!("the global RM answered something else than the revocation");
            };
            if known {
                println!("revoked {id}");
            } else {
                println!(
                    "revoked {id} (a token this global RM did not make; it is refused all the same)"
                );
            }
            Ok(())
        }
    }
}

/// Sends a token request to the global RM (admin only) and returns its answer.
pub(crate) fn ask(pool: &PoolArgs, req: TokenRequest) -> anyhow::Result<TokenAnswer> {
    let coords = resolve_env(pool)?;
    let secret = coords.credentials()?;
    let addr = coords.pool()?.to_string();
    let answer =
        crate::block_on(async { Ok(request(&addr, &secret, None, ToGlobal::Tokens(req)).await?) })?;
    match answer {
        FromGlobal::Tokens(a) => Ok(a),
        FromGlobal::AdminFailed(f) => bail!("{}", f.message),
        other => bail!("unexpected answer from the global RM: {other:?}"),
    }
}

fn table(list: &[TokenInfo], now: u64) -> String {
    let mut out = format!(
        "{:<36}  {:<16} {:<7} {:<12} {}\n",
        "ID", "IDENTITY", "POWER", "MACHINE", "STATE"
    );
    for t in list {
        let state = if t.revoked {
            "revoked".to_string()
        } else if now >= t.expires_unix {
            "expired".to_string()
        } else {
            format!("expires in {}", human(t.expires_unix - now))
        };
        out.push_str(&format!(
            "{:<36}  {:<16} {:<7} {:<12} {state}\n",
            t.id,
            t.identity,
            t.power,
            t.machine.as_deref().unwrap_or("-")
        ));
    }
    out
}

fn human(s: u64) -> String {
    match s {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `30d`, `12h`, `90m`, `3600s` or `3600` (seconds), as seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = digits.parse().with_context(|| {
        format!("`{text}` is not a duration: expected a number with s, m, h or d (30d)")
    })?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => bail!("`{text}`: unknown unit `{other}` (expected s, m, h or d)"),
    };
    n.checked_mul(scale)
        .filter(|&s| s > 0)
        .with_context(|| format!("`{text}` is not a usable lifetime"))
}

/// Writes a new signing key beside the pool secret `secret` (`pool.secret`
/// -> `pool.key`) and a first admin token for `identity` (`pool.admin.token`),
/// both mode 0600; returns the token's id.
pub fn init_keys(secret: &Path, identity: &str, force: bool) -> anyhow::Result<String> {
    let key = SigningKey::generate()?;
    let key_path = secret.with_extension("key");
    let token_path = secret.with_extension("admin.token");
    for p in [&key_path, &token_path] {
        if p.exists() && !force {
            bail!(
                "{} already exists; pass --force to replace it (every token of the pool then stops working)",
                p.display()
            );
        }
    }
    let grant = Grant {
        identity: identity.to_string(),
        power: Power::Admin,
        machine: None,
        lifetime_s: INIT_ADMIN_LIFETIME_S,
    };
    let (token, claims) = key.issue(&grant, now_unix())?;
    carmi_api::files::write_private(&key_path, &format!("{}\n", key.to_text()), force)?;
    carmi_api::files::write_private(&token_path, &format!("{token}\n"), force)?;
    Ok(claims.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d").unwrap(), 30 * 86_400);
        assert_eq!(parse_duration("12h").unwrap(), 12 * 3600);
        assert_eq!(parse_duration("90m").unwrap(), 5400);
        assert_eq!(parse_duration("3600").unwrap(), 3600);
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("3w").is_err());
        assert!(parse_duration("d").is_err());
    }

    #[test]
    fn pool_init_keys_are_private_and_the_token_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("pool.secret");
        let id = init_keys(&secret, "root", false).unwrap();
        let key = carmi_api::files::read_private(&dir.path().join("pool.key")).unwrap();
        let token =
            carmi_api::token::read_token_file(&dir.path().join("pool.admin.token")).unwrap();
        let key = SigningKey::from_text(&key).unwrap();
        let claims = key
            .public()
            .verify(&token, now_unix(), &Default::default())
            .unwrap();
        assert_eq!((claims.id, claims.power), (id, Power::Admin));
        assert!(
            init_keys(&secret, "root", false).is_err(),
            "never replaced silently"
        );
    }
}
