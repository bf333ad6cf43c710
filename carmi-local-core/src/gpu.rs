//! The machine's GPUs as its ad tells them: read from what the daemon
//! found (`nvidia-smi`'s CSV answer, the entries of
//! `/proc/driver/nvidia/gpus/*/information`) or set in its configuration.
//! Pure: the daemon (`carmi_local::gpu`) runs the command and reads the
//! files; here the text is parsed and the attributes made, so that both are
//! tested on real samples.
//!
//! Attributes, in HTCondor's names, so that submit files written for
//! HTCondor pools match unchanged:
//! - `GPUs`: the GPUs of one slot (always present; 0 when none);
//! - `TotalGPUs`: the machine's GPUs (when any);
//! - `DetectedGPUs`: `"CUDA0, CUDA1"`, the devices found (when any);
//! - `CUDACapability` and `GPUs_Capability` (compute capability, a real),
//!   `CUDAGlobalMemoryMb` and `GPUs_GlobalMemoryMb` (MiB, an integer),
//!   `CUDADeviceName` and `GPUs_DeviceName`: what every GPU of the machine
//!   has (the least capability and memory among them, the name when they
//!   share it), since a job may be given any of them.
//!   `gpus_minimum_capability` and `gpus_minimum_memory` are matched
//!   against `GPUs_Capability` and `GPUs_GlobalMemoryMb`; the `CUDA`
//!   spellings serve requirements written for older HTCondor pools.

use classad::Value;

/// The fields asked of `nvidia-smi --query-gpu=...`, in this order
/// (`--format=csv,noheader,nounits`).
pub const SMI_FIELDS: [&str; 4] = ["index", "name", "memory.total", "compute_cap"];

/// The same without `compute_cap`, which drivers before 510 do not know.
pub const SMI_FIELDS_OLD: [&str; 3] = ["index", "name", "memory.total"];

/// One GPU, with what detection learned of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gpu {
    /// The device's name (`NVIDIA A100-SXM4-40GB`).
    pub name: Option<String>,
    /// CUDA compute capability (`8.0`).
    pub capability: Option<f64>,
    /// Memory in MiB.
    pub memory_mib: Option<i64>,
}

/// The machine's GPUs: how many, what is known of them, and each slot's share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gpus {
    /// GPUs of the whole machine: the devices found, or as configured.
    pub total: i64,
    /// GPUs each slot advertises (`GPUs`): `total` shared among the slots
    /// as memory is ([`Gpus::share`]).
    pub per_slot: i64,
    /// The devices found, in device order (empty when only configured).
    pub devices: Vec<Gpu>,
}

/// A value of `nvidia-smi`'s CSV, `None` when it says it has none
/// (`[N/A]`, `[Not Supported]`, `[Unknown Error]`) or is empty.
fn smi_value(text: &str) -> Option<&str> {
    let t = text.trim();
    (!t.is_empty() && !t.starts_with('[') && t != "N/A").then_some(t)
}

/// A number that may carry its unit (`40960 MiB` when `nounits` was not given).
fn leading_number(text: &str) -> Option<&str> {
    smi_value(text)?.split_whitespace().next()
}

/// The GPUs in `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`
/// output, `fields` being the names asked for. A name holding commas is
/// put back together (the other fields have none); lines that do not have
/// the fields (an error message) are skipped.
pub fn parse_nvidia_smi(text: &str, fields: &[&str]) -> Vec<Gpu> {
    let name_at = fields.iter().position(|f| *f == "name");
    let mut gpus = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some(cells) = smi_cells(line, fields.len(), name_at) else {
            continue;
        };
        // The index is a number: a line whose first field is not one is a message.
        if fields.first() == Some(&"index") && cells[0].trim().parse::<u32>().is_err() {
            continue;
        }
        let mut gpu = Gpu::default();
        for (field, cell) in fields.iter().zip(&cells) {
            match *field {
                "name" => gpu.name = smi_value(cell).map(String::from),
                "memory.total" => {
                    gpu.memory_mib = leading_number(cell).and_then(|n| n.parse().ok());
                }
                "compute_cap" => {
                    gpu.capability = smi_value(cell)
                        .and_then(|n| n.parse().ok())
                        .filter(|c: &f64| c.is_finite());
                }
                _ => {}
            }
        }
        gpus.push(gpu);
    }
    gpus
}

/// A CSV line's `n` cells, the commas of the name (cell `name_at`) kept in
/// it; `None` when the line has too few cells, or too many and no name.
fn smi_cells(line: &str, n: usize, name_at: Option<usize>) -> Option<Vec<String>> {
    let raw: Vec<&str> = line.split(',').collect();
    let extra = raw.len().checked_sub(n)?;
    match name_at {
        Some(at) => Some(
            raw[..at]
                .iter()
                .map(|c| c.to_string())
                .chain(std::iter::once(raw[at..=at + extra].join(",")))
                .chain(raw[at + extra + 1..].iter().map(|c| c.to_string()))
                .collect(),
        ),
        None => (extra == 0).then(|| raw.iter().map(|c| c.to_string()).collect()),
    }
}

/// One GPU from the text of its `/proc/driver/nvidia/gpus/BUS/information`
/// (`Model:  NVIDIA A100-SXM4-40GB`, `Device Minor:  0`, ...), and its
/// device minor number, by which such GPUs are put in order. The file says
/// nothing of memory or capability.
pub fn parse_proc_information(text: &str) -> Option<(u32, Gpu)> {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let model = field("Model")?;
    let minor = field("Device Minor")
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let gpu = Gpu {
        name: (!model.is_empty()).then_some(model),
        ..Gpu::default()
    };
    Some((minor, gpu))
}

/// The GPUs found: `nvidia-smi`'s when it listed any (it knows memory and
/// capability), else those of the `/proc` entries, in device order.
pub fn detected(smi: Option<(&str, &[&str])>, proc_entries: &[String]) -> Vec<Gpu> {
    if let Some((text, fields)) = smi {
        let gpus = parse_nvidia_smi(text, fields);
        if !gpus.is_empty() {
            return gpus;
        }
    }
    let mut found: Vec<(u32, Gpu)> = proc_entries
        .iter()
        .filter_map(|t| parse_proc_information(t))
        .collect();
    found.sort_by_key(|(minor, _)| *minor);
    found.into_iter().map(|(_, g)| g).collect()
}

impl Gpus {
    /// The machine's GPUs: the devices found, their number replaced by
    /// `configured` when the owner set one (detection can miss GPUs,
    /// or the owner may keep some for themselves: `gpus = 0`).
    pub fn new(devices: Vec<Gpu>, configured: Option<u32>) -> Gpus {
        let total = configured.map_or(devices.len() as i64, i64::from);
        // A machine configured without GPUs says nothing of the ones it keeps.
        let devices = if total == 0 { Vec::new() } else { devices };
        Gpus {
            total,
            per_slot: total,
            devices,
        }
    }

    /// Shares the GPUs among `slots` as memory is shared: each slot
    /// advertises an equal whole part, so that jobs matched to the slots
    /// together never ask for more GPUs than the machine has. With more
    /// slots than GPUs each slot has none: such a machine should have as
    /// many slots as GPUs (or fewer) to serve GPU jobs.
    pub fn share(&mut self, slots: u32) {
        self.per_slot = self.total / i64::from(slots.max(1));
    }

    /// The attributes of the ad, in the order printed (see the module's).
    pub fn attributes(&self) -> Vec<(&'static str, Value)> {
        let mut out = vec![("GPUs", Value::Int(self.per_slot))];
        if self.total == 0 {
            return out;
        }
        out.push(("TotalGPUs", Value::Int(self.total)));
        if self.devices.is_empty() {
            return out;
        }
        let ids: Vec<String> = (0..self.devices.len())
            .map(|i| format!("CUDA{i}"))
            .collect();
        out.push(("DetectedGPUs", Value::str(ids.join(", ").as_str())));
        let capability = self.least(|g| g.capability, f64::min);
        let memory = self.least(|g| g.memory_mib, i64::min);
        let first = self.devices[0].name.clone();
        let name = first.filter(|n| self.devices.iter().all(|g| g.name.as_ref() == Some(n)));
        if let Some(c) = capability {
            out.push(("CUDACapability", Value::Real(c)));
            out.push(("GPUs_Capability", Value::Real(c)));
        }
        if let Some(m) = memory {
            out.push(("CUDAGlobalMemoryMb", Value::Int(m)));
            out.push(("GPUs_GlobalMemoryMb", Value::Int(m)));
        }
        if let Some(n) = name {
            out.push(("CUDADeviceName", Value::str(n.as_str())));
            out.push(("GPUs_DeviceName", Value::str(n.as_str())));
        }
        out
    }

    /// `CUDA_VISIBLE_DEVICES` for a process on slot `slot` (0 first): that
    /// slot's own share, device indices `slot * per_slot ..`, so that the
    /// jobs on a machine's slots use different GPUs; `None` when the slot
    /// has none to itself (then the variable is left as it was).
    pub fn visible_devices(&self, slot: usize) -> Option<String> {
        let per_slot = usize::try_from(self.per_slot).ok().filter(|&n| n > 0)?;
        let first = slot.checked_mul(per_slot)?;
        let total = usize::try_from(self.total).ok()?;
        if first.checked_add(per_slot)? > total {
            return None;
        }
        let ids: Vec<String> = (first..first + per_slot).map(|i| i.to_string()).collect();
        Some(ids.join(","))
    }

    /// The least of a property over every device; `None` when one lacks it
    /// (nothing can then be promised of all of them).
    fn least<T>(&self, get: impl Fn(&Gpu) -> Option<T>, min: impl Fn(T, T) -> T) -> Option<T> {
        let mut values = self.devices.iter().map(&get);
        let first = values.next()??;
        values.try_fold(first, |acc, v| Some(min(acc, v?)))
    }
}

#[cfg(test)]
#[path = "gpu_tests.rs"]
mod tests;
