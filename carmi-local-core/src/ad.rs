//! The machine ad, built from what the daemon detected once (`StaticInfo`),
//! what it samples for each advertisement and heartbeat (`DynamicInfo`) and
//! what the owner configured; and the heartbeat updates, which carry only
//! what changed since it was last sent. Pure: the detection and sampling
//! (`/proc`, the file system) are the daemon's (`carmi_local::machine`).
//!
//! Attributes, in the order they are printed:
//! `Name`, `Arch`, `OpSys`, `Memory` (MiB, one slot's share), `TotalMemory`,
//! `Cpus`, `Mips`, `KFlops`,
//! `MemoryLimitEnforced`, `CgroupVersion` (when enforced), `GPUs` and the
//! GPU attributes of [`crate::gpu`] (static);
//! `LoadAvg`, `Disk` (KiB free in the work directory), `FreeMemory` (MiB
//! available) (dynamic); then the configured attributes. A configured
//! attribute replaces a detected one of the same name, and a replaced dynamic
//! attribute is no longer refreshed: the owner's word wins.

use std::collections::BTreeMap;

use classad::{ClassAd, Expr, Value};
use serde::{Deserialize, Serialize};

use crate::gpu::Gpus;

/// The start-up benchmark's result (measured by the daemon's `benchmark`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scores {
    /// Millions of integer operations per second.
    pub mips: i64,
    /// Thousands of floating-point operations per second.
    pub kflops: i64,
}

/// Names of the attributes refreshed in heartbeats.
pub const DYNAMIC_ATTRIBUTES: [&str; 3] = ["LoadAvg", "Disk", "FreeMemory"];

/// What is detected once at start-up.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticInfo {
    /// Machine name in the pool.
    pub name: String,
    /// `X86_64`, `AARCH64`, ...
    pub arch: String,
    /// `LINUX`, ...
    pub opsys: String,
    /// Memory of one slot in MiB: the machine's divided among its slots, as
    /// HTCondor's static slots share it (what one process may ask for).
    pub memory_mib: i64,
    /// Physical memory of the whole machine in MiB (`TotalMemory`).
    pub total_memory_mib: i64,
    /// CPUs available to this process.
    pub cpus: i64,
    /// Benchmark scores, if the benchmark ran.
    pub scores: Option<Scores>,
    /// The cgroup version binding each process to its job's requests
    /// (`carmi_local::cgroup`), `None` when processes run unbound: the ad
    /// says `MemoryLimitEnforced` and `CgroupVersion` so that a job that
    /// must be bound can require it.
    pub cgroup_version: Option<u8>,
    /// The GPUs found or configured, and each slot's share (`GPUs`).
    pub gpus: Gpus,
}

/// What changes while the daemon runs.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicInfo {
    /// One-minute load average.
    pub load_avg: f64,
    /// KiB free (for unprivileged users) in the work directory.
    pub disk_kib: i64,
    /// MiB of memory available for new processes.
    pub free_memory_mib: i64,
}

/// Builds the ad and the heartbeat updates from detected and configured attributes.
#[derive(Clone, Debug)]
pub struct MachineAd {
    info: StaticInfo,
    configured: Vec<(String, Expr)>,
    /// Dynamic values last told to the global RM (by advertisement or heartbeat).
    last_sent: BTreeMap<&'static str, Value>,
    /// When measured values were last told (seconds of the caller's clock).
    measured_at: Option<f64>,
}

/// Values measured from the machine that move a little at nearly every
/// heartbeat: told at most every [`MEASURED_REFRESH_S`], so that most
/// heartbeats change nothing (a relay folds those into one message, and the
/// global RM looks at a machine again only when its ad changed). HTCondor's
/// machines update their ads every few minutes; the owner's state, which
/// decides where jobs may run, still travels at the next heartbeat.
pub const MEASURED: [&str; 4] = ["LoadAvg", "Disk", "FreeMemory", "NonPoolLoad"];

/// How often [`MEASURED`] values are refreshed in heartbeats, in seconds.
pub const MEASURED_REFRESH_S: f64 = 30.0;

impl MachineAd {
    /// An ad from detected facts and the owner's attributes (later ones win).
    pub fn new(info: StaticInfo, configured: Vec<(String, Expr)>) -> MachineAd {
        MachineAd {
            info,
            configured,
            last_sent: BTreeMap::new(),
            measured_at: None,
        }
    }

    /// The static facts.
    pub fn info(&self) -> &StaticInfo {
        &self.info
    }

    fn is_configured(&self, name: &str) -> bool {
        self.configured
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    fn dynamic_values(&self, d: &DynamicInfo) -> Vec<(&'static str, Value)> {
        let values = [
            Value::Real(d.load_avg),
            Value::Int(d.disk_kib),
            Value::Int(d.free_memory_mib),
        ];
        DYNAMIC_ATTRIBUTES
            .into_iter()
            .zip(values)
            .filter(|(n, _)| !self.is_configured(n))
            .collect()
    }

    /// The full ad with dynamic values `d`.
    pub fn build(&self, d: &DynamicInfo) -> ClassAd {
        let mut ad = ClassAd::with_capacity(16 + self.configured.len());
        let i = &self.info;
        ad.insert_value("Name", Value::str(i.name.as_str()));
        ad.insert_value("Arch", Value::str(i.arch.as_str()));
        ad.insert_value("OpSys", Value::str(i.opsys.as_str()));
        ad.insert_value("Memory", Value::Int(i.memory_mib));
        ad.insert_value("TotalMemory", Value::Int(i.total_memory_mib));
        ad.insert_value("Cpus", Value::Int(i.cpus));
        if let Some(s) = i.scores {
            ad.insert_value("Mips", Value::Int(s.mips));
            ad.insert_value("KFlops", Value::Int(s.kflops));
        }
        ad.insert_value(
            "MemoryLimitEnforced",
            Value::Bool(i.cgroup_version.is_some()),
        );
        if let Some(v) = i.cgroup_version {
            ad.insert_value("CgroupVersion", Value::Int(i64::from(v)));
        }
        for (n, v) in i.gpus.attributes() {
            ad.insert_value(n, v);
        }
        for (n, v) in self.dynamic_values(d) {
            ad.insert_value(n, v);
        }
        for (n, e) in &self.configured {
            ad.insert(n, e.clone());
        }
        ad
    }

    /// The ad for an advertisement with dynamic values `d`, in new syntax,
    /// with the owner policy's `values` and `exprs` (see
    /// `Policy::public_values`); heartbeats that follow report changes from
    /// these values.
    pub fn advertise(
        &mut self,
        d: &DynamicInfo,
        values: &[(&'static str, Value)],
        exprs: &[(&str, &Expr)],
    ) -> String {
        self.last_sent = self.dynamic_values(d).into_iter().collect();
        let mut ad = self.build(d);
        for (n, v) in values {
            ad.insert_value(n, v.clone());
            self.last_sent.insert(n, v.clone());
        }
        for (n, e) in exprs {
            if !self.is_configured(n) {
                ad.insert(n, (*e).clone());
            }
        }
        ad.to_string()
    }

    /// The heartbeat update at `now` (seconds) for dynamic values `d`:
    /// `Name = value` lines (old syntax) for the dynamic attributes and
    /// policy `values` that changed since last sent, the [`MEASURED`] ones
    /// only every [`MEASURED_REFRESH_S`]; may be empty.
    pub fn update_from(
        &mut self,
        d: &DynamicInfo,
        values: &[(&'static str, Value)],
        now: f64,
    ) -> String {
        let mut changed = ClassAd::new();
        let refresh = self
            .measured_at
            .is_none_or(|at| now - at >= MEASURED_REFRESH_S);
        if refresh {
            self.measured_at = Some(now);
        }
        let all = self
            .dynamic_values(d)
            .into_iter()
            .chain(values.iter().cloned())
            .filter(|(n, _)| refresh || !MEASURED.contains(n));
        for (n, v) in all {
            let same = self.last_sent.get(n).is_some_and(|old| old.identical(&v));
            if !same {
                changed.insert_value(n, v.clone());
                self.last_sent.insert(n, v);
            }
        }
        changed.to_old_syntax()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `NAME=EXPR` as the owner configures it (the daemon's `config` parses
    /// it with more checks).
    fn parse_attr_arg(arg: &str) -> Option<(String, Expr)> {
        let (name, value) = arg.split_once('=')?;
        Some((name.trim().to_string(), classad::parse_expr(value).ok()?))
    }

    fn info() -> StaticInfo {
        StaticInfo {
            name: "m1".into(),
            arch: "X86_64".into(),
            opsys: "LINUX".into(),
            memory_mib: 4096,
            total_memory_mib: 8192,
            cpus: 4,
            scores: Some(Scores {
                mips: 1000,
                kflops: 50000,
            }),
            cgroup_version: Some(2),
            gpus: Gpus::default(),
        }
    }

    fn dynamic(load: f64) -> DynamicInfo {
        DynamicInfo {
            load_avg: load,
            disk_kib: 1 << 20,
            free_memory_mib: 2048,
        }
    }

    #[test]
    fn ad_has_detected_and_configured_attributes_and_reparses() {
        let configured = vec![
            parse_attr_arg("HasMatlab=true").unwrap(),
            parse_attr_arg(r#"Owner="alice""#).unwrap(),
            parse_attr_arg("Memory=1024").unwrap(),
            parse_attr_arg("Fast=Mips > 500").unwrap(),
        ];
        let m = MachineAd::new(info(), configured);
        let text = m.build(&dynamic(0.5)).to_string();
        let ad = ClassAd::parse(&text).unwrap();
        assert_eq!(ad.eval_attr("Name").as_str(), Some("m1"));
        assert_eq!(ad.eval_attr("Arch").as_str(), Some("X86_64"));
        assert_eq!(ad.eval_attr("OpSys").as_str(), Some("LINUX"));
        assert_eq!(ad.eval_attr("Cpus").as_f64(), Some(4.0));
        assert_eq!(ad.eval_attr("KFlops").as_f64(), Some(50000.0));
        assert_eq!(ad.eval_attr("LoadAvg").as_f64(), Some(0.5));
        assert_eq!(ad.eval_attr("Disk").as_f64(), Some(1048576.0));
        assert!(ad.eval_attr("HasMatlab").is_true());
        assert!(ad.eval_attr("Fast").is_true());
        assert!(ad.eval_attr("MemoryLimitEnforced").is_true());
        assert_eq!(ad.eval_attr("TotalMemory").as_f64(), Some(8192.0));
        assert_eq!(ad.eval_attr("CgroupVersion").as_f64(), Some(2.0));
        // No GPUs: said, so that `GPUs >= 1` is false rather than undefined.
        assert_eq!(ad.eval_attr("GPUs").as_f64(), Some(0.0));
        // The owner's Memory replaces the detected one.
        assert_eq!(ad.eval_attr("Memory").as_f64(), Some(1024.0));
    }

    #[test]
    fn gpus_are_advertised_and_the_owners_attributes_win() {
        let mut i = info();
        i.gpus = Gpus::new(
            crate::gpu::parse_nvidia_smi("0, Tesla T4, 15360, 7.5\n", &crate::gpu::SMI_FIELDS),
            None,
        );
        let configured = vec![parse_attr_arg("CUDACapability=8.0").unwrap()];
        let text = MachineAd::new(i, configured)
            .build(&dynamic(0.0))
            .to_string();
        let ad = ClassAd::parse(&text).unwrap();
        assert_eq!(ad.eval_attr("GPUs").as_f64(), Some(1.0));
        assert_eq!(ad.eval_attr("GPUs_GlobalMemoryMb").as_f64(), Some(15360.0));
        assert_eq!(ad.eval_attr("GPUs_DeviceName").as_str(), Some("Tesla T4"));
        assert_eq!(ad.eval_attr("CUDACapability").as_f64(), Some(8.0));
        let job =
            ClassAd::parse("[ Requirements = TARGET.GPUs >= 1 && TARGET.GPUs_Capability >= 7.0 ]")
                .unwrap();
        assert!(
            job.eval_expr(&classad::parse_expr("Requirements").unwrap(), Some(&ad))
                .is_true()
        );
    }

    #[test]
    fn heartbeats_carry_only_changed_dynamic_attributes() {
        let mut m = MachineAd::new(info(), vec![parse_attr_arg("Disk=1").unwrap()]);
        let first = m.update_from(&dynamic(0.5), &[], 0.0);
        // Disk is the owner's, so it is never refreshed.
        assert!(!first.contains("Disk"), "{first}");
        assert!(first.contains("LoadAvg = 0.5"), "{first}");
        assert!(first.contains("FreeMemory = 2048"), "{first}");
        assert_eq!(m.update_from(&dynamic(0.5), &[], 40.0), "");
        let next = m.update_from(&dynamic(1.25), &[], 80.0);
        assert_eq!(next.trim(), "LoadAvg = 1.25");
        assert!(ClassAd::parse_old(&next).is_ok());
    }

    #[test]
    fn measured_values_wait_for_their_refresh_and_the_owner_state_does_not() {
        let mut m = MachineAd::new(info(), vec![]);
        let state = |s: &str| vec![("State", Value::str(s))];
        m.update_from(&dynamic(0.5), &state("Unclaimed"), 0.0);
        // The load moved, nothing else: an unchanged heartbeat.
        assert_eq!(m.update_from(&dynamic(0.75), &state("Unclaimed"), 1.0), "");
        // The owner came back: told at once, the load still waits.
        let owner = m.update_from(&dynamic(0.9), &state("Owner"), 2.0);
        assert_eq!(owner.trim(), "State = \"Owner\"");
        let later = m.update_from(&dynamic(0.9), &state("Owner"), MEASURED_REFRESH_S + 0.5);
        assert_eq!(later.trim(), "LoadAvg = 0.9");
    }
}
