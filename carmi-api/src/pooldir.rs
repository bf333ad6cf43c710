//! The pool's directory: where `carmi pool init` writes the pool's files on
//! the manager, where `carmi join` installs a machine's or a user's, and
//! where `carmi-global` and `carmi` look for them when no flag names them:
//! `/etc/carmi` for root, `~/.config/carmi` for anyone else, or `$CARMI_DIR`
//! when set (a second pool, a package, tests that must not touch `/etc`).
//!
//! One directory for everything, so that a pool is set up without flags and
//! nobody copies a file by hand: `pool.secret` (every machine and user),
//! `pool.key` and `pool.admin.token` (the manager only), `dashboard.crt` and
//! `dashboard.key` (the manager's web dashboard), `local.token`,
//! `local.toml` and `local.env` (a pool machine's local RM), `user.token`
//! (a user's), and `config.toml` (where `carmi` finds the pool's address,
//! the secret and the token, `crate::coords`).

use std::path::{Path, PathBuf};

/// Environment variable: the pool's directory, instead of the default.
pub const ENV_DIR: &str = "CARMI_DIR";
/// The system-wide directory, root's.
pub const SYSTEM_DIR: &str = "/etc/carmi";
/// The pool's shared secret (every machine and user).
pub const SECRET: &str = "pool.secret";
/// The pool's signing key (the manager only).
pub const KEY: &str = "pool.key";
/// The admin token `carmi pool init` makes (the manager only).
pub const ADMIN_TOKEN: &str = "pool.admin.token";
/// The dashboard's certificate (PEM), made by `carmi pool init`.
pub const DASHBOARD_CERT: &str = "dashboard.crt";
/// The dashboard certificate's private key (PEM, PKCS#8).
pub const DASHBOARD_KEY: &str = "dashboard.key";
/// A pool machine's daemon token, installed by `carmi join`.
pub const LOCAL_TOKEN: &str = "local.token";
/// A pool machine's local RM configuration (`carmi-local --config`).
pub const LOCAL_CONFIG: &str = "local.toml";
/// A pool machine's `CARMI_GLOBAL=HOST:PORT` (the systemd unit's `EnvironmentFile=`).
pub const LOCAL_ENV: &str = "local.env";
/// A user's token, installed by `carmi join`.
pub const USER_TOKEN: &str = "user.token";
/// Where `carmi` finds the pool (`pool`, `secret`, `token` keys).
pub const CONFIG: &str = "config.toml";

/// The pool's directory for a process of effective user `euid`, from
/// `lookup` (the environment, injectable for tests): `$CARMI_DIR`, else
/// `/etc/carmi` for root, else `$XDG_CONFIG_HOME/carmi`, else
/// `$HOME/.config/carmi`; `None` for a non-root process with no home.
pub fn default_dir_for(euid: u32, lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
    if let Some(d) = get(ENV_DIR) {
        return Some(PathBuf::from(d));
    }
    if euid == 0 {
        return Some(PathBuf::from(SYSTEM_DIR));
    }
    if let Some(x) = get("XDG_CONFIG_HOME") {
        return Some(Path::new(&x).join("carmi"));
    }
    get("HOME").map(|h| Path::new(&h).join(".config/carmi"))
}

/// [`default_dir_for`] this process, with `lookup` for the environment.
pub fn default_dir(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    default_dir_for(euid(), lookup)
}

/// [`default_dir`] from the process environment.
pub fn default_dir_env() -> Option<PathBuf> {
    default_dir(&|k| std::env::var(k).ok())
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_gets_etc_others_their_config_and_carmi_dir_wins() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let home = env(&[("HOME", "/home/a")]);
        assert_eq!(default_dir_for(0, &home), Some(PathBuf::from("/etc/carmi")));
        assert_eq!(
            default_dir_for(1000, &home),
            Some(PathBuf::from("/home/a/.config/carmi"))
        );
        let xdg = env(&[("HOME", "/home/a"), ("XDG_CONFIG_HOME", "/x")]);
        assert_eq!(default_dir_for(1000, &xdg), Some(PathBuf::from("/x/carmi")));
        let set = env(&[("HOME", "/home/a"), ("CARMI_DIR", "/d")]);
        assert_eq!(default_dir_for(0, &set), Some(PathBuf::from("/d")));
        assert_eq!(default_dir_for(1000, &set), Some(PathBuf::from("/d")));
        assert_eq!(default_dir_for(1000, &env(&[])), None);
    }
}
