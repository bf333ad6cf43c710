//! What every command that asks the global RM shares: finding it and the
//! pool secret, printing the answer, and turning an unexpected answer into
//! an error. Below the commands, so that they can use each other's parts
//! (`jobs` writes a job's log through `events`) without a circle.

use std::io::Write;

use anyhow::Context;
use carmi_api::handshake::Secret;
use carmi_api::msg::FromGlobal;

use crate::config::{PoolArgs, Required, resolve_env};

/// The global RM's address and the pool secret, from the options and the
/// environment.
pub(crate) fn connect(pool: &PoolArgs) -> anyhow::Result<(String, Secret)> {
    let coords = resolve_env(pool)?;
    let secret = coords.credentials()?;
    Ok((coords.pool()?.to_string(), secret))
}

/// Writes `text` to stdout.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")
}

/// The error for `what` when the global RM refused or answered something else.
pub(crate) fn failed(answer: FromGlobal, what: &str) -> anyhow::Error {
    match answer {
        FromGlobal::AdminFailed(f) => anyhow::anyhow!("{what}: {}", f.message),
        other => anyhow::anyhow!("{what}: the global RM answered {other:?}"),
    }
}
