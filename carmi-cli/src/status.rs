//! `carmi status`: the pool's machines, as a table with a summary by
//! architecture and state, one line per machine (`-compact`), as whole ads
//! (`-l`), or as JSON; `-constraint` keeps the machines whose ad satisfies
//! a ClassAd expression, and names (`m0`, `slot1@m0`) keep those machines,
//! as `condor_status -l NAME` does.

use std::collections::{BTreeMap, HashMap};
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
    /// Print every machine's whole ad (or -long); with NAME, that machine's
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// One line per machine: platform, slots, CPUs, GPUs, memory, the
    /// states of its slots and its load (or -compact)
    #[arg(long)]
    compact: bool,
    /// Only these machines: NAME, or slotN@NAME for its Nth slot (as
    /// condor_status NAME)
    #[arg(value_name = "NAME")]
    names: Vec<String>,
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
    /// Only the machines with GPUs, with what their GPUs are: capability,
    /// memory, name (or -gpus)
    #[arg(long)]
    gpus: bool,
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
    let whole_ads = constraint.is_some()
        || args.long
        || args.json
        || args.compact
        || args.gpus
        || !args.af.is_empty();
    // Both asked at once: on a large pool each answer is megabytes, which
    // the global RM encodes on two threads instead of one after the other.
    let (mut machines, ads) = crate::block_on(async {
        let ads = async {
            if !whole_ads {
                return Ok(Vec::new());
            }
            match request(&pool, &secret, None, ToGlobal::MachineAds).await? {
                FromGlobal::Ads(ads) => Ok(ads),
                other => bail!("the global RM answered {other:?} to MachineAds"),
            }
        };
        let (machines, ads) = tokio::join!(pool_status(&pool, &secret), ads);
        Ok((machines?, ads?))
    })?;
    let slots_named = select(&mut machines, &args.names)?;
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
    if args.gpus {
        machines.retain(|m| parsed.get(&m.name).is_some_and(has_gpus));
    }
    if args.json && args.af.is_empty() && !args.total {
        let texts: HashMap<&str, &str> = (ads.iter())
            .filter(|_| args.long)
            .map(|(n, a)| (n.as_str(), &**a))
            .collect();
        return write_json(&machines, &parsed, &texts);
    }
    let out = if !args.af.is_empty() {
        autoformat(&machines, &parsed, &args.af)
    } else if args.total {
        summary(&machines)
    } else if args.long {
        long(&machines, &parsed, &slots_named)
    } else if args.compact {
        compact(&machines, &parsed)
    } else if args.gpus {
        gpu_table(&machines, &parsed)
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
    match classad::parse_expr(text) {
        Ok(expr) => expr_json(&expr, &classad::ClassAd::new(), || text.into()),
        Err(_) => serde_json::Value::String(text.to_string()),
    }
}

/// [`literal`] of an expression already parsed (a whole ad's attribute):
/// its value in `empty` (an ad with no attributes) when that is a number,
/// boolean or string, else `text()`.
fn expr_json(
    expr: &classad::Expr,
    empty: &classad::ClassAd,
    text: impl FnOnce() -> String,
) -> serde_json::Value {
    use classad::Value;
    match empty.eval_expr(expr, None) {
        Value::Bool(b) => b.into(),
        Value::Int(i) => i.into(),
        Value::Real(r) => serde_json::Number::from_f64(r)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| text().into()),
        Value::Str(s) => s.as_ref().into(),
        _ => text().into(),
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
        None => slot.state.to_string(),
    }
}

/// `--json`: each machine with every attribute of its whole ad (the
/// attributes `Status` shows where its ad is missing), its slots, and with
/// `-l` its whole ad's text (`texts`). Written to stdout one machine at a
/// time, without a JSON tree: at 50,000 machines the tree of the whole
/// answer took most of the command's time and 400 MB.
fn write_json(
    machines: &[MachineStatus],
    ads: &BTreeMap<String, classad::ClassAd>,
    texts: &HashMap<&str, &str>,
) -> anyhow::Result<()> {
    use serde::Serializer;
    let empty = classad::ClassAd::new();
    let stdout = std::io::stdout().lock();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout);
    let mut ser = serde_json::Serializer::pretty(&mut out);
    let each = machines.iter().map(|m| MachineJson {
        name: &m.name,
        attributes: AttributesJson {
            machine: m,
            ad: ads.get(&m.name),
            empty: &empty,
        },
        slots: m.slots.iter().map(|s| SlotJson {
            host: s.host.to_string(),
            state: &s.state,
            job: s.job.map(|j| j.0),
        }),
        ad: (!texts.is_empty()).then(|| texts.get(m.name.as_str()).copied()),
    });
    ser.collect_seq(each).context("cannot write to stdout")?;
    out.write_all(b"\n")
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

/// One machine of [`write_json`].
#[derive(serde::Serialize)]
struct MachineJson<'a, S: Iterator<Item = SlotJson<'a>> + Clone> {
    name: &'a str,
    attributes: AttributesJson<'a>,
    #[serde(serialize_with = "each")]
    slots: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    ad: Option<Option<&'a str>>,
}

/// One slot of [`MachineJson`].
#[derive(serde::Serialize)]
struct SlotJson<'a> {
    host: String,
    state: &'a str,
    job: Option<u64>,
}

/// Serializes an iterator as a JSON array, without collecting it first.
fn each<S, I>(items: &I, ser: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    I: Iterator + Clone,
    I::Item: serde::Serialize,
{
    ser.collect_seq(items.clone())
}

/// A machine's attributes: from its whole ad, or where that is missing the
/// ones `Status` shows.
struct AttributesJson<'a> {
    machine: &'a MachineStatus,
    ad: Option<&'a classad::ClassAd>,
    empty: &'a classad::ClassAd,
}

impl serde::Serialize for AttributesJson<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self.ad {
            Some(ad) => ser.collect_map(
                ad.iter()
                    .map(|(name, e)| (name, expr_json(e, self.empty, || e.to_string()))),
            ),
            None => ser.collect_map(
                (self.machine.attributes.iter()).map(|(name, text)| (name, literal(text))),
            ),
        }
    }
}

fn table(machines: &[MachineStatus]) -> String {
    // GPUs get a column only in a pool that has some, as condor_status
    // shows them only where a slot has any.
    let has_gpus = machines.iter().any(|m| {
        cell(attribute(m, "GPUs"))
            .parse::<f64>()
            .is_ok_and(|n| n > 0.0)
    });
    let columns: Vec<&str> = COLUMNS
        .iter()
        .flat_map(|&c| match c {
            "Cpus" if has_gpus => vec![c, "GPUs"],
            _ => vec![c],
        })
        .collect();
    let mut rows: Vec<Vec<String>> = vec![
        std::iter::once("Name")
            .chain(columns.iter().copied())
            .chain(["Slots"])
            .map(String::from)
            .collect(),
    ];
    for m in machines {
        let mut row = vec![m.name.clone()];
        row.extend(columns.iter().map(|c| cell(attribute(m, c))));
        row.push(m.slots.iter().map(slot_text).collect::<Vec<_>>().join(" "));
        rows.push(row);
    }
    let mut out = aligned(&rows);
    out.push_str(&summary(machines));
    out
}

/// `rows` (the first the header) in columns as wide as their widest cell:
/// numbers to the right, as people compare them; words to the left.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
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
    for row in rows {
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
    out
}

/// A machine named on the command line: `NAME`, or `slotN@NAME` for its
/// Nth slot (1 first, as HTCondor numbers them).
fn parse_name(text: &str) -> (&str, Option<usize>) {
    if let Some((slot, machine)) = text.split_once('@')
        && let Some(n) = slot.strip_prefix("slot").and_then(|n| n.parse().ok())
    {
        return (machine, Some(n));
    }
    (text, None)
}

/// Keeps the machines `names` name (all when there are none), and of a
/// machine named by its slots only those slots; the slots named, by
/// machine, for `-l`. A name the pool does not have is an error: an empty
/// answer would look like a machine with nothing to say.
fn select(
    machines: &mut Vec<MachineStatus>,
    names: &[String],
) -> anyhow::Result<BTreeMap<String, Vec<usize>>> {
    let mut slots: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut whole = std::collections::BTreeSet::new();
    for text in names {
        let (name, slot) = parse_name(text);
        let Some(m) = machines.iter().find(|m| m.name == name) else {
            bail!("no machine named {name} in the pool (`carmi status` lists them)");
        };
        match slot {
            Some(n) if n == 0 || n > m.slots.len() => bail!(
                "{text}: machine {name} has {} slot{} (slot1@{name} is the first)",
                m.slots.len(),
                if m.slots.len() == 1 { "" } else { "s" }
            ),
            Some(n) => slots.entry(name.to_string()).or_default().push(n),
            None => {
                whole.insert(name.to_string());
            }
        }
    }
    if names.is_empty() {
        return Ok(slots);
    }
    for ids in slots.values_mut() {
        ids.sort_unstable();
        ids.dedup();
    }
    machines.retain(|m| whole.contains(&m.name) || slots.contains_key(&m.name));
    for m in machines.iter_mut() {
        if let Some(kept) = slots.get(&m.name).filter(|_| !whole.contains(&m.name)) {
            let all = std::mem::take(&mut m.slots);
            m.slots = all
                .into_iter()
                .enumerate()
                .filter(|(i, _)| kept.contains(&(i + 1)))
                .map(|(_, s)| s)
                .collect();
        }
    }
    slots.retain(|name, _| !whole.contains(name));
    Ok(slots)
}

/// `-l`: each machine's whole ad, `Name = value` per line, a blank line
/// after each; a machine named by its slots prints once per slot, with
/// that slot's `SlotID`, `SlotState` and `SlotJob` after the ad's own
/// attributes (its slots share the machine's ad).
fn long(
    machines: &[MachineStatus],
    ads: &BTreeMap<String, classad::ClassAd>,
    slots: &BTreeMap<String, Vec<usize>>,
) -> String {
    let mut text = String::new();
    for m in machines {
        let Some(ad) = ads.get(&m.name) else {
            continue;
        };
        let print_ad = |text: &mut String| {
            for (name, expr) in ad.iter() {
                text.push_str(&format!("{name} = {expr}\n"));
            }
        };
        match slots.get(&m.name) {
            Some(ids) => {
                for (id, slot) in ids.iter().zip(&m.slots) {
                    print_ad(&mut text);
                    text.push_str(&format!("SlotID = {id}\nSlotState = \"{}\"\n", slot.state));
                    if let Some(job) = slot.job {
                        text.push_str(&format!("SlotJob = {}\n", job.0));
                    }
                    text.push('\n');
                }
            }
            None => {
                print_ad(&mut text);
                text.push('\n');
            }
        }
    }
    text
}

/// `-compact`: one line per machine (as `condor_status -compact`): its
/// platform, how many slots, CPUs and GPUs, its memory (MiB, the whole
/// machine's), its slots' states (`2 idle, 1 claimed`) and its load; then
/// the summary.
fn compact(machines: &[MachineStatus], ads: &BTreeMap<String, classad::ClassAd>) -> String {
    let header = [
        "Machine", "Platform", "Slots", "Cpus", "GPUs", "Memory", "States", "LoadAvg",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let empty = classad::ClassAd::new();
    for m in machines {
        let ad = ads.get(&m.name).unwrap_or(&empty);
        let shown = |name: &str| match ad.eval_attr(name) {
            classad::Value::Str(s) => s.to_string(),
            v if v.is_undefined() => "-".to_string(),
            v => v.to_string(),
        };
        let gpus = match ad.eval_attr("TotalGPUs").as_f64() {
            Some(n) => n.to_string(),
            None => shown("GPUs"),
        };
        let memory = match ad.eval_attr("TotalMemory").as_f64() {
            Some(n) => n.to_string(),
            None => shown("Memory"),
        };
        rows.push(vec![
            m.name.clone(),
            format!("{}/{}", shown("Arch"), shown("OpSys")),
            m.slots.len().to_string(),
            shown("Cpus"),
            gpus,
            memory,
            states(m),
            shown("LoadAvg"),
        ]);
    }
    let mut out = aligned(&rows);
    out.push_str(&summary(machines));
    out
}

/// Whether a machine's ad says it has GPUs (its own or its slots').
fn has_gpus(ad: &classad::ClassAd) -> bool {
    ["TotalGPUs", "GPUs"]
        .iter()
        .any(|a| ad.eval_attr(a).as_f64().is_some_and(|n| n > 0.0))
}

/// `-gpus`: one line per machine with GPUs (as `condor_status -gpus`):
/// GPUs per slot and in all, then what every one of them has (capability,
/// memory in MiB, name; `-` when the machine does not say), and its slots'
/// states. The properties are read in HTCondor's current names, else the
/// older `CUDA` ones.
fn gpu_table(machines: &[MachineStatus], ads: &BTreeMap<String, classad::ClassAd>) -> String {
    let header = [
        "Machine",
        "Slots",
        "GPUs",
        "TotalGPUs",
        "Capability",
        "GpuMemory",
        "DeviceName",
        "States",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let empty = classad::ClassAd::new();
    for m in machines {
        let ad = ads.get(&m.name).unwrap_or(&empty);
        let shown = |names: &[&str]| {
            let value = names
                .iter()
                .map(|n| ad.eval_attr(n))
                .find(|v| !v.is_undefined());
            match value {
                Some(classad::Value::Str(s)) => s.to_string(),
                Some(v) => v.to_string(),
                None => "-".to_string(),
            }
        };
        rows.push(vec![
            m.name.clone(),
            m.slots.len().to_string(),
            shown(&["GPUs"]),
            shown(&["TotalGPUs", "GPUs"]),
            shown(&["GPUs_Capability", "CUDACapability"]),
            shown(&["GPUs_GlobalMemoryMb", "CUDAGlobalMemoryMb"]),
            shown(&["GPUs_DeviceName", "CUDADeviceName"]),
            states(m),
        ]);
    }
    let mut out = aligned(&rows);
    let total: f64 = machines
        .iter()
        .filter_map(|m| ads.get(&m.name))
        .filter_map(|ad| {
            let total = ad.eval_attr("TotalGPUs").as_f64();
            total.or_else(|| ad.eval_attr("GPUs").as_f64())
        })
        .sum();
    let n = machines.len();
    out.push_str(&format!(
        "{n} machine{} with GPUs, {total} GPU{}\n",
        if n == 1 { "" } else { "s" },
        if total == 1.0 { "" } else { "s" }
    ));
    out
}

/// A machine's slots by state: `idle` when all are, else `1 idle, 1 claimed`;
/// `-` for a machine that lends none.
fn states(m: &MachineStatus) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &m.slots {
        *counts.entry(&*s.state).or_default() += 1;
    }
    match counts.len() {
        0 => "-".into(),
        1 => counts.into_keys().next().unwrap_or_default().to_string(),
        _ => counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
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
                .entry(slot.state.to_string())
                .or_default() += 1;
            *totals.entry(slot.state.to_string()).or_default() += 1;
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
