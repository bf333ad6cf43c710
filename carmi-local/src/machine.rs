//! The machine ad: what this machine is (detected once), how busy it is
//! (sampled for every advertisement and heartbeat), and what its owner adds.
//!
//! Attributes, in the order they are printed:
//! `Name`, `Arch`, `OpSys`, `Memory` (MiB), `Cpus`, `Mips`, `KFlops` (static);
//! `LoadAvg`, `Disk` (KiB free in the work directory), `FreeMemory` (MiB
//! available) (dynamic); then the configured attributes. A configured
//! attribute replaces a detected one of the same name, and a replaced dynamic
//! attribute is no longer refreshed: the owner's word wins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use classad::{ClassAd, Expr, Value};

use crate::benchmark::Scores;

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
    /// Physical memory in MiB.
    pub memory_mib: i64,
    /// CPUs available to this process.
    pub cpus: i64,
    /// Benchmark scores, if the benchmark ran.
    pub scores: Option<Scores>,
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

/// The host name, or `localhost` if the system will not say.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    "localhost".into()
}

/// `X86_64`, `AARCH64`: the Rust target architecture in HTCondor's upper case.
pub fn arch() -> String {
    std::env::consts::ARCH.to_ascii_uppercase()
}

/// `LINUX`, ...
pub fn opsys() -> String {
    std::env::consts::OS.to_ascii_uppercase()
}

/// Detects the static attributes; `scores` comes from [`crate::benchmark`].
pub fn detect_static(name: &str, scores: Option<Scores>) -> StaticInfo {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    StaticInfo {
        name: name.to_string(),
        arch: arch(),
        opsys: opsys(),
        memory_mib: meminfo_kib(&meminfo, "MemTotal").map_or(0, |k| k / 1024),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as i64),
        scores,
    }
}

/// Samples the dynamic attributes; a value that cannot be read is 0 (and logged).
pub fn sample_dynamic(work_dir: &Path) -> DynamicInfo {
    let load_avg = match std::fs::read_to_string("/proc/loadavg") {
        Ok(t) => parse_loadavg(&t).unwrap_or_else(|| {
            tracing::warn!(text = %t.trim(), "cannot parse /proc/loadavg");
            0.0
        }),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read /proc/loadavg");
            0.0
        }
    };
    let disk_kib = match free_disk_kib(work_dir) {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(path = %work_dir.display(), error = %e, "statvfs failed");
            0
        }
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    DynamicInfo {
        load_avg,
        disk_kib,
        free_memory_mib: meminfo_kib(&meminfo, "MemAvailable").map_or(0, |k| k / 1024),
    }
}

/// A `Key: N kB` field of /proc/meminfo.
fn meminfo_kib(meminfo: &str, key: &str) -> Option<i64> {
    meminfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        v.split_whitespace().next()?.parse().ok()
    })
}

/// The one-minute load average: the first field of /proc/loadavg.
fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// KiB available to unprivileged users in the file system holding `path`.
pub fn free_disk_kib(path: &Path) -> std::io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: statvfs is plain data, so all-zero is a valid value for the call to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let bytes = u128::from(st.f_bavail) * u128::from(st.f_frsize);
    Ok(i64::try_from(bytes / 1024).unwrap_or(i64::MAX))
}

/// Builds the ad and the heartbeat updates from detected and configured attributes.
#[derive(Clone, Debug)]
pub struct MachineAd {
    info: StaticInfo,
    configured: Vec<(String, Expr)>,
    work_dir: PathBuf,
    /// Dynamic values last told to the global RM (by advertisement or heartbeat).
    last_sent: BTreeMap<&'static str, Value>,
}

impl MachineAd {
    /// An ad from detected facts and the owner's attributes (later ones win).
    pub fn new(info: StaticInfo, configured: Vec<(String, Expr)>, work_dir: PathBuf) -> MachineAd {
        MachineAd {
            info,
            configured,
            work_dir,
            last_sent: BTreeMap::new(),
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
        ad.insert_value("Cpus", Value::Int(i.cpus));
        if let Some(s) = i.scores {
            ad.insert_value("Mips", Value::Int(s.mips));
            ad.insert_value("KFlops", Value::Int(s.kflops));
        }
        for (n, v) in self.dynamic_values(d) {
            ad.insert_value(n, v);
        }
        for (n, e) in &self.configured {
            ad.insert(n, e.clone());
        }
        ad
    }

    /// The ad for an advertisement, sampled now, in new syntax, with the
    /// owner policy's `values` and `exprs` (see `Policy::public_values`);
    /// heartbeats that follow report changes from these values.
    pub fn advertise_text(
        &mut self,
        values: &[(&'static str, Value)],
        exprs: &[(&str, &Expr)],
    ) -> String {
        let d = sample_dynamic(&self.work_dir);
        self.last_sent = self.dynamic_values(&d).into_iter().collect();
        let mut ad = self.build(&d);
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

    /// The heartbeat update, sampled now: `Name = value` lines (old syntax)
    /// for the dynamic attributes and policy `values` that changed since last
    /// sent; may be empty.
    pub fn heartbeat_update(&mut self, values: &[(&'static str, Value)]) -> String {
        let d = sample_dynamic(&self.work_dir);
        self.update_from(&d, values)
    }

    /// Like [`MachineAd::heartbeat_update`] with given dynamic values.
    pub fn update_from(&mut self, d: &DynamicInfo, values: &[(&'static str, Value)]) -> String {
        let mut changed = ClassAd::new();
        let all = self
            .dynamic_values(d)
            .into_iter()
            .chain(values.iter().cloned());
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

    /// `NAME=EXPR` as the owner configures it. The real parser (with its
    /// checks) is `config`'s, which uses this module: a copy of its core
    /// here keeps the modules free of circles, tests included.
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
            cpus: 4,
            scores: Some(Scores {
                mips: 1000,
                kflops: 50000,
            }),
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
    fn detection_finds_plausible_values() {
        let s = detect_static(&host_name(), None);
        assert!(!s.name.is_empty());
        assert!(s.memory_mib > 0, "{s:?}");
        assert!(s.cpus >= 1);
        assert_eq!(s.opsys, "LINUX");
        assert!(s.arch.chars().all(|c| !c.is_ascii_lowercase()));
        let d = sample_dynamic(Path::new("/"));
        assert!(
            d.disk_kib > 0 && d.free_memory_mib > 0 && d.load_avg >= 0.0,
            "{d:?}"
        );
    }

    #[test]
    fn ad_has_detected_and_configured_attributes_and_reparses() {
        let configured = vec![
            parse_attr_arg("HasMatlab=true").unwrap(),
            parse_attr_arg(r#"Owner="alice""#).unwrap(),
            parse_attr_arg("Memory=1024").unwrap(),
            parse_attr_arg("Fast=Mips > 500").unwrap(),
        ];
        let m = MachineAd::new(info(), configured, PathBuf::from("/"));
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
        // The owner's Memory replaces the detected one.
        assert_eq!(ad.eval_attr("Memory").as_f64(), Some(1024.0));
    }

    #[test]
    fn heartbeats_carry_only_changed_dynamic_attributes() {
        let mut m = MachineAd::new(
            info(),
            vec![parse_attr_arg("Disk=1").unwrap()],
            PathBuf::from("/"),
        );
        let first = m.update_from(&dynamic(0.5), &[]);
        // Disk is the owner's, so it is never refreshed.
        assert!(!first.contains("Disk"), "{first}");
        assert!(first.contains("LoadAvg = 0.5"), "{first}");
        assert!(first.contains("FreeMemory = 2048"), "{first}");
        assert_eq!(m.update_from(&dynamic(0.5), &[]), "");
        let next = m.update_from(&dynamic(1.25), &[]);
        assert_eq!(next.trim(), "LoadAvg = 1.25");
        assert!(ClassAd::parse_old(&next).is_ok());
    }

    #[test]
    fn proc_file_parsing_tolerates_garbage() {
        assert_eq!(parse_loadavg("0.42 0.30 0.10 1/123 4567\n"), Some(0.42));
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(parse_loadavg("nan 1 2"), None);
        assert_eq!(
            meminfo_kib("MemTotal:       16318480 kB\n", "MemTotal"),
            Some(16318480)
        );
        assert_eq!(meminfo_kib("MemTotal: lots\n", "MemTotal"), None);
    }
}
