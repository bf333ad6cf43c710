//! `carmi status`: the pool's machines, as a table with a summary by
//! architecture and state, as whole ads (`-l`), or as JSON; `-constraint`
//! keeps the machines whose ad satisfies a ClassAd expression.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, bail};
use carmi_api::admin::{pool_status, request};
use carmi_api::msg::{FromGlobal, MachineStatus, ToGlobal};
use clap::Args;

use crate::config::{PoolArgs, Required, resolve_env};

/// `carmi status` options.
#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Machines whose ad satisfies EXPR (or -constraint)
    #[arg(long, alias = "const", value_name = "EXPR")]
    constraint: Option<String>,
    /// Print every machine's whole ad (or -long)
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Print JSON instead of a table: every attribute of each machine's ad.
    #[arg(long)]
    json: bool,
    /// Print these attributes of each machine, one line per machine, values
    /// separated by spaces (or -af, as condor_status -af)
    #[arg(long = "af", alias = "autoformat", num_args = 1.., value_name = "ATTR")]
    af: Vec<String>,
    /// Print only the summary of slots by architecture and state (or -total)
    #[arg(long)]
    total: bool,
}

/// Runs `carmi status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let coords = resolve_env(&args.pool)?;
    let secret = coords.credentials()?;
    let pool = coords.pool()?.to_string();
    let constraint = match &args.constraint {
        Some(text) => Some(classad::parse_expr(text).map_err(|e| {
            anyhow::anyhow!(
                "-constraint: not a ClassAd expression (column {}: {})",
                e.column,
                e.message
            )
        })?),
        None => None,
    };
    let (mut machines, ads) = crate::block_on(async {
        let machines = pool_status(&pool, &secret).await?;
        let whole_ads = constraint.is_some() || args.long || args.json || !args.af.is_empty();
        let ads = if whole_ads {
            match request(&pool, &secret, None, ToGlobal::MachineAds).await? {
                FromGlobal::Ads(ads) => ads,
                other => bail!("the global RM answered {other:?} to MachineAds"),
            }
        } else {
            Vec::new()
        };
        Ok((machines, ads))
    })?;
    let mut parsed: BTreeMap<String, classad::ClassAd> = BTreeMap::new();
    for (name, text) in &ads {
        match classad::ClassAd::parse_any(text) {
            Ok(ad) => {
                parsed.insert(name.clone(), ad);
            }
            Err(e) => eprintln!("carmi: warning: the ad of {name} does not parse: {e}"),
        }
    }
    if let Some(c) = &constraint {
        machines.retain(|m| {
            parsed
                .get(&m.name)
                .is_some_and(|ad| ad.eval_expr(c, None).is_true())
        });
    }
    if args.json {
        for m in &mut machines {
            if let Some(ad) = parsed.get(&m.name) {
                m.attributes = ad
                    .iter()
                    .map(|(n, e)| (n.to_string(), e.to_string()))
                    .collect();
            }
        }
    }
    let out = if !args.af.is_empty() {
        autoformat(&machines, &parsed, &args.af)
    } else if args.total {
        summary(&machines)
    } else if args.json {
        let mut v = machines_json(&machines);
        if args.long
            && let serde_json::Value::Array(items) = &mut v
        {
            for item in items {
                let name = item["name"].as_str().unwrap_or_default().to_string();
                let ad = ads.iter().find(|(n, _)| *n == name).map(|(_, a)| a.clone());
                item["ad"] = ad.into();
            }
        }
        let mut text = serde_json::to_string_pretty(&v).expect("JSON values always serialize");
        text.push('\n');
        text
    } else if args.long {
        let mut text = String::new();
        for m in &machines {
            if let Some(ad) = parsed.get(&m.name) {
                for (name, expr) in ad.iter() {
                    text.push_str(&format!("{name} = {expr}\n"));
                }
                text.push('\n');
            }
        }
        text
    } else {
        table(&machines)
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("cannot write to stdout")?;
    Ok(())
}

/// `-af`: the named attributes of each machine, evaluated in its ad, on one
/// line per machine; strings lose their quotes as in `condor_status -af`, and
/// a missing attribute prints `undefined`.
fn autoformat(
    machines: &[MachineStatus],
    ads: &BTreeMap<String, classad::ClassAd>,
    names: &[String],
) -> String {
    let empty = classad::ClassAd::new();
    let mut out = String::new();
    for m in machines {
        let ad = ads.get(&m.name).unwrap_or(&empty);
        let values: Vec<String> = names
            .iter()
            .map(|n| match ad.eval_attr(n) {
                classad::Value::Str(s) => s.to_string(),
                v => v.to_string(),
            })
            .collect();
        out.push_str(&values.join(" "));
        out.push('\n');
    }
    out
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
                        "job": s.job.map(|j| j.0),
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
    for m in machines {
        let mut row = vec![m.name.clone()];
        row.extend(COLUMNS.iter().map(|c| cell(attribute(m, c))));
        row.push(m.slots.iter().map(slot_text).collect::<Vec<_>>().join(" "));
        rows.push(row);
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
    out.push_str(&summary(machines));
    out
}

/// Slot counts by architecture and state, one line per architecture, and a total.
fn summary(machines: &[MachineStatus]) -> String {
    let mut by_arch: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    for m in machines {
        let arch = cell(attribute(m, "Arch"));
        for slot in &m.slots {
            *by_arch
                .entry(arch.clone())
                .or_default()
                .entry(slot.state.clone())
                .or_default() += 1;
            *totals.entry(slot.state.clone()).or_default() += 1;
        }
    }
    let line = |label: &str, counts: &BTreeMap<String, usize>| {
        let total: usize = counts.values().sum();
        let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        format!("{label:>12}: {total:>4} slots  {}\n", parts.join(", "))
    };
    let mut out = String::new();
    for (arch, counts) in &by_arch {
        out.push_str(&line(arch, counts));
    }
    let slots: usize = totals.values().sum();
    // Machines that lend no slots (submit machines) serve applications but
    // are not part of what the pool can run on: counted apart.
    let submit = machines.iter().filter(|m| m.slots.is_empty()).count();
    let hosts = machines.len() - submit;
    out.push_str(&format!(
        "{hosts} machine{}, {slots} slot{}{}{}\n",
        if hosts == 1 { "" } else { "s" },
        if slots == 1 { "" } else { "s" },
        if totals.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                totals
                    .iter()
                    .map(|(s, n)| format!("{n} {s}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        match submit {
            0 => String::new(),
            1 => "; 1 submit machine (no slots)".to_string(),
            n => format!("; {n} submit machines (no slots)"),
        }
    ));
    out
}
