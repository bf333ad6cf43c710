//! `carmi-local`: the CARMI local resource manager daemon.
//!
//! Prints `listening on ADDR` as its first line on stdout once applications
//! can connect; logs go to stderr (`RUST_LOG` sets the level, default `info`).
//! Stops cleanly on SIGTERM or SIGINT, killing every process it started.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use carmi_local::config::{Cli, Settings};
use carmi_local::daemon::Daemon;
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    if cli.remove_slot_users {
        return remove_slot_users(&cli);
    }
    let settings = match Settings::from_cli(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("carmi-local: error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(settings, cli.owner_returns_at).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-local: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: Settings, owner_returns_at: Option<u64>) -> anyhow::Result<()> {
    // Signal handlers first, so that a signal during start-up is not lost.
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    // A job (a slot user) must not read the pool secret: refused like a
    // key file, naming the fix. (Checked here, not in `Daemon::start`: an
    // embedded pool keeps its secret in its own private folder.)
    carmi_api::files::check_shared_key(&settings.secret_file).context("the pool secret")?;
    let daemon = Daemon::start(settings).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", daemon.app_addr())?;
        out.flush()?;
    }
    let returns = owner_returns(owner_returns_at);
    tokio::pin!(returns);
    let mut returned = owner_returns_at.is_none();
    let why = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            _ = daemon.stopped() => break "",
            _ = &mut returns, if !returned => {
                returned = true;
                tracing::info!("the owner comes back for good (--owner-returns-at): vacating");
                daemon.owner_event(carmi_api::msg::OwnerEvent::Arrive).await;
            }
        }
    };
    if why.is_empty() {
        daemon.shutdown().await;
        anyhow::bail!("no registration with the global RM within the orphan timeout; stopped");
    }
    // A signal stops the machine for good (an administrator, a batch
    // system ending a pilot): the global RM hears it before the processes
    // are killed.
    tracing::info!("{why}: leaving the pool");
    daemon.leave(&format!("its local RM got {why}")).await;
    Ok(())
}

/// `--remove-slot-users`: deletes the accounts of the prefix that no
/// running local RM holds, and says what it did with each.
fn remove_slot_users(cli: &Cli) -> ExitCode {
    let removal = Settings::removal_prefix(cli)
        .map_err(anyhow::Error::from)
        .and_then(|prefix| {
            let done = carmi_local::slot_users::remove(&prefix)?;
            Ok((prefix, done))
        });
    let (prefix, done) = match removal {
        Ok(r) => r,
        Err(e) => {
            eprintln!("carmi-local: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    for name in &done.removed {
        let _ = writeln!(out, "removed {name}");
    }
    for (name, why) in &done.kept {
        let _ = writeln!(out, "kept {name}: {why}");
    }
    let _ = writeln!(
        out,
        "slot users of prefix `{prefix}`: {} removed, {} kept",
        done.removed.len(),
        done.kept.len()
    );
    if done.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Completes at wall-clock time `at` (seconds since the Unix epoch), never
/// without one.
async fn owner_returns(at: Option<u64>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    tokio::time::sleep(std::time::Duration::from_secs(at.saturating_sub(now))).await;
}
