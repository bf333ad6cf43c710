//! The machine ad: what this machine is (detected once), how busy it is
//! (sampled for every advertisement and heartbeat), and what its owner adds.
//!
//! Attributes, in the order they are printed:
//! `Name`, `Arch`, `OpSys`, `Memory` (MiB), `Cpus`, `Mips`, `KFlops`, `GPUs`
//! and the GPUs' attributes ([`crate::gpu`]) (static);
//! `LoadAvg`, `Disk` (KiB free in the work directory), `FreeMemory` (MiB
//! available) (dynamic); then the configured attributes. A configured
//! attribute replaces a detected one of the same name, and a replaced dynamic
//! attribute is no longer refreshed: the owner's word wins.
//!
//! Here the detection and sampling (which read `/proc` and the file system);
//! the ad built from them, and the heartbeat updates, are pure and live in
//! `carmi_local_core::ad` (re-exported here).

use std::path::Path;

pub use carmi_local_core::ad::{DYNAMIC_ATTRIBUTES, DynamicInfo, MachineAd, StaticInfo};

use crate::benchmark::Scores;

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
        total_memory_mib: meminfo_kib(&meminfo, "MemTotal").map_or(0, |k| k / 1024),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as i64),
        scores,
        // Set by the daemon once its cgroups are (or are not) set up.
        cgroup_version: None,
        // Found apart ([`crate::gpu::detect`]): it may run a command.
        gpus: crate::gpu::Gpus::default(),
    }
}

/// The static facts of the machine's ad: detected, with the version of the
/// cgroups binding its processes, and its memory and `gpus` shared among
/// its slots (`slots` as configured, else one per CPU); and how many slots.
pub fn static_info(
    (name, slots): (&str, Option<u32>),
    scores: Option<Scores>,
    cgroups: Option<&crate::cgroup::Cgroups>,
    gpus: crate::gpu::Gpus,
) -> (StaticInfo, u32) {
    let mut info = detect_static(name, scores);
    info.cgroup_version = cgroups.map(crate::cgroup::Cgroups::version);
    let slots = slots.unwrap_or_else(|| u32::try_from(info.cpus.max(1)).unwrap_or(1));
    partition_memory(&mut info, slots);
    info.gpus = gpus;
    info.gpus.share(slots);
    if info.gpus.total > 0 && info.gpus.per_slot == 0 {
        tracing::warn!(
            gpus = info.gpus.total,
            slots,
            "more slots than GPUs: each slot advertises GPUs = 0 and no GPU job can match; \
             set `slots` to the number of GPUs (or fewer) to lend them"
        );
    }
    (info, slots)
}

/// Shares the machine's memory among its `slots`: each slot's `Memory` is
/// an equal part (HTCondor's static slots), so that the jobs matched to
/// them, bound to what they asked for, fit in the machine together.
pub fn partition_memory(info: &mut StaticInfo, slots: u32) {
    info.memory_mib = info.total_memory_mib / i64::from(slots.max(1));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_advertises_its_share_of_the_memory() {
        let mut s = detect_static("m", None);
        s.total_memory_mib = 24_000;
        partition_memory(&mut s, 4);
        assert_eq!((s.memory_mib, s.total_memory_mib), (6_000, 24_000));
        partition_memory(&mut s, 0);
        assert_eq!(s.memory_mib, 24_000);
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
