//! How a process finds its local RM and says who it is: [`ConnectOptions`],
//! set by hand or read from the environment the local RM gives the
//! processes it starts, and why connecting can fail ([`ConnectError`]).
//!
//! Kept apart from `client.rs` (the connection, its tasks and the request
//! methods) so that each file stays readable. Re-exported from
//! [`crate::client`].

use std::str::FromStr;

use crate::handshake::{HandshakeError, Secret};
use crate::ids::{JobId, ParseIdError, ProcessId};

// Defined with the other coordinates (`coords` reads them too), so that
// `coords` need not reach up into the client.
pub use crate::coords::{ENV_LOCAL, ENV_SECRET_FILE};
/// Environment variable: the job this process belongs to (`3` or `j3`).
pub const ENV_JOB: &str = "CARMI_JOB";
/// Environment variable: this process's id (`5` or `p5`).
pub const ENV_PROCESS: &str = "CARMI_PROCESS";
/// Environment variable (optional): the host name or address on which this
/// process accepts direct messages, when peers cannot reach it at the address
/// it uses to reach its local RM (for instance when that is `127.0.0.1`).
pub const ENV_ENDPOINT_HOST: &str = "CARMI_ENDPOINT_HOST";

/// Environment variable (optional): `1` (or `true`, `yes`) opens this
/// process's direct connections to its peers in clear and accepts theirs in
/// clear too ([`ConnectOptions::plain_peers`]); a job sets it in its submit
/// file's `environment`.
pub const ENV_PLAIN_PEERS: &str = "CARMI_PLAIN_PEERS";

/// How to reach the local RM and who this process is.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// `host:port` of the local RM.
    pub local: String,
    /// The pool's shared secret.
    pub secret: Secret,
    /// The job to join; `None` starts a new job with this process as its first process.
    pub job: Option<JobId>,
    /// The id the RM gave this process when it started it; `None` otherwise.
    pub process: Option<ProcessId>,
    /// Where peers should connect for direct messages (a host name or
    /// address; the port is chosen by the system). `None` listens on the
    /// address this process uses to reach its local RM.
    pub endpoint_host: Option<String>,
    /// The `host:port` peers (and forwarded output) are told to connect to,
    /// when it is not the listener's own address: a NAT or a port forward
    /// in between, or a relay. `None`: the listener's address.
    pub endpoint_advertise: Option<String>,
    /// Direct messages in clear, for a job on a network it trusts: this
    /// process opens its connections to peers without TLS, and accepts peers
    /// in clear as well as over TLS (peers without this option still use
    /// TLS, and refuse a clear connection). The handshake still proves the
    /// job's credential, but anyone on the path can read and alter the
    /// messages (`docs/security.md`). Default: off, every direct connection
    /// is TLS.
    pub plain_peers: bool,
}

impl ConnectOptions {
    /// Options for a new job's first process: no job, no process id, default endpoint.
    pub fn new(local: impl Into<String>, secret: Secret) -> ConnectOptions {
        ConnectOptions {
            local: local.into(),
            secret,
            job: None,
            process: None,
            endpoint_host: None,
            endpoint_advertise: None,
            plain_peers: false,
        }
    }

    /// Reads `CARMI_LOCAL`, `CARMI_SECRET_FILE`, `CARMI_JOB`, `CARMI_PROCESS`
    /// and `CARMI_ENDPOINT_HOST`, as the local RM sets them for the processes
    /// it starts. A process without a job (it starts one) presents the
    /// user's token, found as `carmi` finds it (`CARMI_TOKEN`, the embedded
    /// pool's, the config file's `token`). A program started by hand finds its local RM and secret as
    /// `carmi` does (see [`crate::coords`]): `CARMI_LOCAL`/`CARMI_SECRET`,
    /// then the embedded pool `carmi pool up` runs, then the user's config
    /// file.
    pub fn from_env() -> Result<ConnectOptions, ConnectError> {
        ConnectOptions::from_vars(|name| std::env::var(name).ok())
    }

    /// [`ConnectOptions::from_env`] over any source of variables (tests do not
    /// touch the process environment, which is shared between threads).
    pub(super) fn from_vars(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ConnectOptions, ConnectError> {
        // An empty variable is treated as unset: shells make `X=` easy to write by mistake.
        let get = |name: &str| var(name).filter(|v: &String| !v.trim().is_empty());
        let coords = crate::coords::resolve(&Default::default(), &|k| get(k))
            .map_err(ConnectError::Config)?;
        let missing = |key: &'static str| ConnectError::NoPool {
            key,
            hint: crate::coords::where_to_give(key, &|k| get(k)),
        };
        let local = coords.local.ok_or_else(|| missing("local"))?;
        let secret_path = coords.secret.ok_or_else(|| missing("secret"))?;
        let secret = Secret::from_file(&secret_path).map_err(ConnectError::Secret)?;
        let job = parse_id_var(ENV_JOB, get(ENV_JOB))?;
        let process = parse_id_var(ENV_PROCESS, get(ENV_PROCESS))?;
        if process.is_some() && job.is_none() {
            // A process id means the RM started us, and it always says for which job.
            return Err(ConnectError::MissingVar(ENV_JOB));
        }
        // A new job is started with the user's token (power submit: the
        // job's owner is its identity); a process of a known job proves
        // that job's credential instead.
        let token = match coords.token.filter(|_| job.is_none()) {
            Some(path) => Some(crate::token::read_token_file(&path).map_err(ConnectError::Token)?),
            None => None,
        };
        let secret = secret.with_token(token);
        Ok(ConnectOptions {
            local,
            secret,
            job,
            process,
            endpoint_host: get(ENV_ENDPOINT_HOST),
            plain_peers: parse_flag(ENV_PLAIN_PEERS, get(ENV_PLAIN_PEERS))?,
            endpoint_advertise: None,
        })
    }
}

/// Parses the yes/no flag in environment variable `name` (unset: no).
fn parse_flag(name: &'static str, value: Option<String>) -> Result<bool, ConnectError> {
    match value.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
        Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
        Some(_) => Err(ConnectError::BadVar {
            var: name,
            value: value.unwrap_or_default(),
            reason: "expected 1 or 0 (true/false, yes/no)".into(),
        }),
    }
}

/// Parses the id in environment variable `name`, if it is set.
fn parse_id_var<T: FromStr<Err = ParseIdError>>(
    name: &'static str,
    value: Option<String>,
) -> Result<Option<T>, ConnectError> {
    value
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|e: ParseIdError| ConnectError::BadVar {
                    var: name,
                    value: v.clone(),
                    reason: e.to_string(),
                })
        })
        .transpose()
}

/// Why [`connect`](super::connect) (or [`ConnectOptions::from_env`]) failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A required environment variable is not set.
    #[error(
        "environment variable {0} is not set (the local RM sets it for the processes it starts)"
    )]
    MissingVar(&'static str),
    /// No source names the pool's local RM or secret.
    #[error("no pool {key} for this program: {hint}")]
    NoPool {
        /// `local` or `secret`.
        key: &'static str,
        /// Every place it may be given.
        hint: String,
    },
    /// The config file or the embedded pool's record is broken.
    #[error("pool coordinates: {0}")]
    Config(crate::coords::FileError),
    /// An environment variable has a value that makes no sense.
    #[error("environment variable {var}={value:?}: {reason}")]
    BadVar {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The secret file could not be read or holds no usable secret.
    #[error("pool secret: {0}")]
    Secret(HandshakeError),
    /// The user's token file (`CARMI_TOKEN`, or the embedded pool's) could
    /// not be read, or others may read it.
    #[error("token: {0}")]
    Token(crate::files::FileError),
    /// The local RM could not be reached.
    #[error("cannot reach the local RM at {addr}: {error}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The listener for direct messages could not be opened.
    #[error("cannot listen for direct messages on {addr}: {error}")]
    Listen {
        /// The address tried.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The local RM and this process do not share the pool secret.
    #[error(
        "authentication with the local RM at {addr} failed: it does not know this process's pool secret (wrong secret file?)"
    )]
    WrongSecret {
        /// The local RM.
        addr: String,
    },
    /// The handshake failed for another reason (version, timeout, refusal).
    #[error("handshake with the local RM at {addr} failed: {error}")]
    Handshake {
        /// The local RM.
        addr: String,
        /// Why.
        error: HandshakeError,
    },
    /// The handshake succeeded but the RM did not attach this process.
    #[error("the local RM at {addr} did not attach this process: {reason}")]
    NotAttached {
        /// The local RM.
        addr: String,
        /// What happened instead.
        reason: String,
    },
    /// The pool refused this process: starting a new job needs a token
    /// with power `submit` (`CARMI_TOKEN`), and the one given (if any) does
    /// not have it, or is expired, revoked or not this pool's.
    #[error("the local RM at {addr} refused this process: {reason}")]
    Refused {
        /// The local RM.
        addr: String,
        /// Why, naming the identity, the action and the missing power.
        reason: String,
    },
}
