//! Where the pool is, for every subcommand that talks to it: the flags, and
//! [`carmi_api::coords`] for the order of every other source (environment,
//! the embedded pool `carmi pool up` runs, the user's config file), which a
//! WoDi program started by hand follows too.

use std::path::{Path, PathBuf};

use anyhow::bail;
use carmi_api::coords;
use clap::Args;

pub use carmi_api::coords::Coordinates;

/// Pool coordinates from the command line (each also read from the environment by the resolver).
#[derive(Args, Clone, Debug, Default)]
pub struct PoolArgs {
    /// The global RM, HOST:PORT, or its managers HOST:PORT,HOST:PORT (one
    /// active, the others standing by) [env: CARMI_POOL]
    #[arg(long, value_name = "HOST:PORT")]
    pub pool: Option<String>,
    /// The pool's secret file [env: CARMI_SECRET]
    #[arg(long, value_name = "FILE")]
    pub secret: Option<PathBuf>,
    /// The file holding your token [env: CARMI_TOKEN]
    #[arg(long, value_name = "FILE")]
    pub token: Option<PathBuf>,
    /// This machine's local RM, HOST:PORT [env: CARMI_LOCAL]
    #[arg(long, value_name = "HOST:PORT")]
    pub local: Option<String>,
}

/// The resolved coordinates' required keys, or errors naming where to give them.
pub trait Required {
    /// The global RM's address.
    fn pool(&self) -> anyhow::Result<&str>;
    /// The secret file.
    fn secret(&self) -> anyhow::Result<&Path>;
    /// The secret, presenting the user's token if one is given.
    fn credentials(&self) -> anyhow::Result<carmi_api::handshake::Secret> {
        let secret = carmi_api::handshake::Secret::from_file(self.secret()?)?;
        let token = match self.token_file() {
            Some(path) => {
                let text = carmi_api::token::read_token_file(path)?;
                warn_if_expiring(&text, path);
                Some(text)
            }
            None => None,
        };
        Ok(secret.with_token(token))
    }
    /// The token file, if any.
    fn token_file(&self) -> Option<&Path>;
}

/// Warns on stderr when the user's token expires within a week or has
/// expired: a lapsed token otherwise shows only as refusals.
fn warn_if_expiring(text: &str, path: &Path) {
    let now = carmi_api::token::now_unix();
    let warning = carmi_api::token::claims_unchecked(text)
        .and_then(|c| carmi_api::token::expiry_warning(&c, path, now));
    if let Some(w) = warning {
        eprintln!("carmi: warning: {w}");
    }
}

impl Required for Coordinates {
    fn pool(&self) -> anyhow::Result<&str> {
        match &self.pool {
            Some(p) => Ok(p),
            None => bail!("no pool address: {}", hint("pool")),
        }
    }

    fn secret(&self) -> anyhow::Result<&Path> {
        match &self.secret {
            Some(p) => Ok(p),
            None => bail!("no pool secret: {}", hint("secret")),
        }
    }

    fn token_file(&self) -> Option<&Path> {
        self.token.as_deref()
    }
}

fn hint(key: &str) -> String {
    coords::where_to_give(key, &|k| std::env::var(k).ok())
}

/// Flags > environment > embedded pool > config file, key by key.
pub fn resolve(
    flags: &PoolArgs,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Coordinates> {
    let given = Coordinates {
        pool: flags.pool.clone(),
        secret: flags.secret.clone(),
        local: flags.local.clone(),
        pool_pid: None,
        token: flags.token.clone(),
    };
    Ok(coords::resolve(&given, lookup)?)
}

/// [`resolve`] against the process environment.
pub fn resolve_env(flags: &PoolArgs) -> anyhow::Result<Coordinates> {
    resolve(flags, &|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn flags_beat_environment_beat_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "pool = \"f:1\"\nsecret = \"/f/secret\"\nlocal = \"f:2\"\nfuture_key = 1\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let lookup = env(&[("CARMI_CONFIG", path), ("CARMI_POOL", "e:1")]);
        let flags = PoolArgs {
            local: Some("x:9".into()),
            ..PoolArgs::default()
        };
        let c = resolve(&flags, &lookup).unwrap();
        assert_eq!(c.pool.as_deref(), Some("e:1"));
        assert_eq!(c.secret.as_deref(), Some(Path::new("/f/secret")));
        assert_eq!(c.local.as_deref(), Some("x:9"));
    }

    #[test]
    fn missing_file_is_empty_and_broken_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let c = resolve(
            &PoolArgs::default(),
            &env(&[("CARMI_CONFIG", missing.to_str().unwrap())]),
        )
        .unwrap();
        assert_eq!(c, Coordinates::default());
        assert!(c.pool().unwrap_err().to_string().contains("--pool"));
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "pool = [").unwrap();
        let e = resolve(
            &PoolArgs::default(),
            &env(&[("CARMI_CONFIG", bad.to_str().unwrap())]),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("not valid"), "{e:#}");
    }
}
