//! `carmi-relay`: carries many machines' links to the global RM (see the
//! library's documentation, `carmi_relay`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// A relay between machines' local RMs and the pool's global RM: point local
/// RMs at it (`--global RELAY:PORT`, several separated by commas) and it
/// carries their links over one connection of its own.
#[derive(Parser, Debug)]
#[command(name = "carmi-relay", version)]
struct Cli {
    /// Address the machines connect to.
    #[arg(long, default_value = "0.0.0.0:9619")]
    listen: String,
    /// The global RM, HOST:PORT; with standby managers, each of them,
    /// separated by commas: the relay links to whichever is active.
    #[arg(long)]
    global: String,
    /// File holding the pool's secret.
    #[arg(long)]
    secret_file: PathBuf,
    /// File holding the relay's token (power admin), in a pool with tokens.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The relay's name (default: the host's name).
    #[arg(long)]
    name: Option<String>,
    /// How often machines' unchanged heartbeats are passed on, in milliseconds.
    #[arg(long, default_value_t = carmi_relay::DEFAULT_ALIVE.as_millis() as u64)]
    alive_ms: u64,
    /// Most machines' connections open at once.
    #[arg(long)]
    max_connections: Option<usize>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("carmi-relay: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let secret = carmi_api::handshake::Secret::from_file(&cli.secret_file)
        .map_err(|e| format!("{}: {e}", cli.secret_file.display()))?;
    let token = match &cli.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    if cli.global.split(',').all(|a| a.trim().is_empty()) {
        return Err("--global: give the global RM's HOST:PORT (or each standby manager's, separated by commas)".into());
    }
    let name = cli.name.clone().unwrap_or_else(host_name);
    let mut config = carmi_relay::RelayConfig::new(&name, &cli.global, secret.with_token(token));
    config.alive = Duration::from_millis(cli.alive_ms.max(10));
    if let Some(n) = cli.max_connections {
        config.conn_limits.max_connections = n;
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let relay = carmi_relay::Relay::bind(&cli.listen, config)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cli.listen))?;
        let addr = relay.local_addr().map_err(|e| e.to_string())?;
        // On standard output, as the other daemons print theirs: for
        // scripts and tests that start it on port 0.
        println!("listening on {addr}");
        tracing::info!(%addr, relay = %name, global = %cli.global, "relay listening");
        relay.run(shutdown()).await
    })
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "relay".into())
}
