//! `carmi`: the pool's administration command.
//!
//! - `carmi pool init [--secret FILE] [--force]` writes a fresh pool secret, readable by its owner only.
//! - `carmi status [--pool HOST:PORT --secret FILE] [--json]` lists the pool's machines and slots
//!   (without flags: the pool `carmi pool up` recorded).
//! - `carmi pool up --hosts N [--owners MODEL] [--speedup X] [--seed S]` / `carmi pool down`:
//!   an embedded pool on this machine (see `pool.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use carmi_api::admin::pool_status;
use carmi_api::handshake::Secret;
use carmi_api::msg::MachineStatus;
use clap::{Parser, Subcommand};

mod pool;

#[derive(Parser)]
#[command(name = "carmi", version, about = "Administer a CARMI pool")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Set up a pool.
    Pool {
        #[command(subcommand)]
        command: PoolCommand,
    },
    /// Show every machine of the pool and the state of its slots.
    Status {
        /// `host:port` of the pool's global RM (default: the one `carmi pool up` recorded).
        #[arg(long, env = "CARMI_POOL", value_name = "HOST:PORT")]
        pool: Option<String>,
        /// The pool's secret file (default: the one `carmi pool up` recorded).
        #[arg(long, env = "CARMI_SECRET", value_name = "FILE")]
        secret: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Write a fresh random pool secret, readable by its owner only.
    Init {
        /// Where to write it.
        #[arg(
            long,
            env = "CARMI_SECRET",
            default_value = "pool.secret",
            value_name = "FILE"
        )]
        secret: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Start an embedded pool on this machine in the background and record it.
    Up(pool::UpArgs),
    /// Stop the pool `carmi pool up` started and remove what it left.
    Down,
    /// Run an embedded pool in the foreground (what `up` starts).
    #[command(hide = true)]
    Serve(pool::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pool {
            command: PoolCommand::Init { secret, force },
        } => pool_init(&secret, force),
        Command::Pool {
            command: PoolCommand::Up(args),
        } => pool::up(&args),
        Command::Pool {
            command: PoolCommand::Down,
        } => pool::down(),
        Command::Pool {
            command: PoolCommand::Serve(args),
        } => pool::serve(&args),
        Command::Status { pool, secret, json } => {
            status_target(pool, secret).and_then(|(p, s)| status(&p, &s, json))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn pool_init(path: &Path, force: bool) -> anyhow::Result<()> {
    let text = format!("{}\n", Secret::generate_text());
    if force {
        // Write beside it and rename over it: the file is never seen half
        // written, and an old file's looser mode does not carry over.
        let name = path
            .file_name()
            .with_context(|| format!("{} is not a file name", path.display()))?;
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let replaced = write_owner_only(&tmp, &text).and_then(|()| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("cannot replace {}", path.display()))
        });
        if replaced.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        replaced?;
    } else {
        write_owner_only(path, &text).map_err(|e| {
            match e.downcast_ref::<std::io::Error>().map(|e| e.kind()) {
                Some(std::io::ErrorKind::AlreadyExists) => anyhow::anyhow!(
                    "{} already exists; pass --force to replace it (every machine of the pool must then get the new secret)",
                    path.display()
                ),
                _ => e,
            }
        })?;
    }
    println!(
        "wrote a new pool secret to {} (readable by its owner only); copy it to every machine of the pool",
        path.display()
    );
    Ok(())
}

/// Creates `path` (which must not exist) with mode 0600 and writes `text`.
fn write_owner_only(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Set at creation, so the secret is never readable by others, not even briefly.
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The pool to ask: the flags (or their environment variables), else the
/// pool `carmi pool up` recorded.
fn status_target(
    pool: Option<String>,
    secret: Option<PathBuf>,
) -> anyhow::Result<(String, PathBuf)> {
    if let (Some(p), Some(s)) = (&pool, &secret) {
        return Ok((p.clone(), s.clone()));
    }
    match pool::recorded()? {
        Some((_, r)) => Ok((pool.unwrap_or(r.pool), secret.unwrap_or(r.secret))),
        None => anyhow::bail!(
            "which pool? pass --pool and --secret (or set CARMI_POOL and CARMI_SECRET), or start one with `carmi pool up`"
        ),
    }
}

fn status(pool: &str, secret: &Path, json: bool) -> anyhow::Result<()> {
    let secret = Secret::from_file(secret)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let machines = runtime.block_on(pool_status(pool, &secret))?;
    let out = if json {
        let mut text = serde_json::to_string_pretty(&machines_json(&machines))
            .expect("JSON values always serialize");
        text.push('\n');
        text
    } else {
        table(&machines)
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("cannot write to stdout")?;
    Ok(())
}

/// The attributes shown in the table, in column order.
const COLUMNS: [&str; 7] = [
    "Arch", "OpSys", "Memory", "Cpus", "Mips", "KFlops", "LoadAvg",
];

/// An attribute's ClassAd text, looked up without regard to case as ClassAd names are.
fn attribute<'a>(m: &'a MachineStatus, name: &str) -> Option<&'a str> {
    m.attributes
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A ClassAd literal as a JSON value: numbers, booleans and strings become
/// their JSON kind; anything else (an expression) stays as its text.
fn literal(text: &str) -> serde_json::Value {
    use classad::Value;
    let Ok(expr) = classad::parse_expr(text) else {
        return serde_json::Value::String(text.to_string());
    };
    match classad::ClassAd::new().eval_expr(&expr, None) {
        Value::Bool(b) => b.into(),
        Value::Int(i) => i.into(),
        Value::Real(r) => serde_json::Number::from_f64(r)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| text.into()),
        Value::Str(s) => s.as_ref().into(),
        _ => text.into(),
    }
}

/// A ClassAd literal for the table: strings without their quotes.
fn cell(text: Option<&str>) -> String {
    match text.map(literal) {
        None => "-".into(),
        Some(serde_json::Value::String(s)) => s,
        Some(v) => v.to_string(),
    }
}

fn slot_text(slot: &carmi_api::msg::SlotStatus) -> String {
    match slot.job {
        Some(job) => format!("{}:{}", slot.state, job),
        None => slot.state.clone(),
    }
}

fn machines_json(machines: &[MachineStatus]) -> serde_json::Value {
    machines
        .iter()
        .map(|m| {
            let attributes: serde_json::Map<String, serde_json::Value> = m
                .attributes
                .iter()
                .map(|(name, text)| (name.clone(), literal(text)))
                .collect();
            let slots: Vec<serde_json::Value> = m
                .slots
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "host": s.host.to_string(),
                        "state": s.state,
                        "job": s.job.map(|j| j.to_string()),
                    })
                })
                .collect();
            serde_json::json!({ "name": m.name, "attributes": attributes, "slots": slots })
        })
        .collect()
}

fn table(machines: &[MachineStatus]) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        std::iter::once("Name")
            .chain(COLUMNS)
            .chain(["Slots"])
            .map(String::from)
            .collect(),
    ];
    let mut counts: Vec<(String, usize)> = Vec::new();
    for m in machines {
        let mut row = vec![m.name.clone()];
        row.extend(COLUMNS.iter().map(|c| cell(attribute(m, c))));
        row.push(m.slots.iter().map(slot_text).collect::<Vec<_>>().join(" "));
        rows.push(row);
        for slot in &m.slots {
            match counts.iter_mut().find(|(s, _)| *s == slot.state) {
                Some((_, n)) => *n += 1,
                None => counts.push((slot.state.clone(), 1)),
            }
        }
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    // Numbers line up on the right, as people compare them; words on the left.
    let numeric: Vec<bool> = (0..columns)
        .map(|i| {
            i > 0
                && rows.len() > 1
                && rows[1..]
                    .iter()
                    .all(|r| r[i] == "-" || r[i].parse::<f64>().is_ok())
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, value) in row.iter().enumerate() {
            let pad = " ".repeat(widths[i] - value.chars().count());
            if numeric[i] {
                line.push_str(&pad);
                line.push_str(value);
            } else {
                line.push_str(value);
                line.push_str(&pad);
            }
            line.push_str("  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let slots: usize = machines.iter().map(|m| m.slots.len()).sum();
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    out.push_str(&format!(
        "{} machine{}, {slots} slot{}{}{}\n",
        machines.len(),
        if machines.len() == 1 { "" } else { "s" },
        if slots == 1 { "" } else { "s" },
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    ));
    out
}
