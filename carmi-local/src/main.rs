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
    let settings = match Settings::from_cli(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("carmi-local: error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-local: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: Settings) -> anyhow::Result<()> {
    // Signal handlers first, so that a signal during start-up is not lost.
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let daemon = Daemon::start(settings).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", daemon.app_addr())?;
        out.flush()?;
    }
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    daemon.shutdown().await;
    Ok(())
}
