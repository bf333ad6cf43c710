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

/// Who runs this command: `$USER`, else `$LOGNAME`, else the name of the
/// process's user id in the password database (a shell started without a
/// login, a cron job or a container often sets neither), else `uidN`.
pub(crate) fn user_name() -> String {
    for var in ["USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(var)
            && !v.is_empty()
        {
            return v;
        }
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` outlives its use.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() && !pw.pw_name.is_null() {
        // SAFETY: on success pw_name points to a NUL-terminated string in `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        if let Ok(name) = name.to_str()
            && !name.is_empty()
        {
            return name.to_string();
        }
    }
    format!("uid{uid}")
}
