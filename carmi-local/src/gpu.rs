//! Finding the machine's GPUs at start-up: `nvidia-smi` when it is
//! installed and answers, else the entries of `/proc/driver/nvidia/gpus`;
//! what they say is parsed by `carmi_local_core::gpu`. Never fails: a
//! machine where neither is present (or the command hangs) has no GPUs
//! found, and its owner may still configure them (`gpus = N`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use carmi_local_core::gpu::{Gpu, Gpus};
use carmi_local_core::gpu::{SMI_FIELDS, SMI_FIELDS_OLD, detected};

/// How long `nvidia-smi` may take: a wedged driver can make it hang, and
/// the daemon must start regardless.
const SMI_PATIENCE: Duration = Duration::from_secs(10);

/// Where the NVIDIA driver lists its GPUs, one directory per device.
const PROC_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The GPUs of this machine, with `configured` (the owner's `gpus`)
/// replacing their number when given; blocking (it may run `nvidia-smi`).
pub fn detect(configured: Option<u32>) -> Gpus {
    // A machine whose owner says it has none is not probed.
    if configured == Some(0) {
        return Gpus::new(Vec::new(), Some(0));
    }
    let proc_entries = read_proc_entries(Path::new(PROC_GPUS));
    let smi = query_smi(&SMI_FIELDS)
        .map(|t| (t, &SMI_FIELDS[..]))
        .or_else(|| query_smi(&SMI_FIELDS_OLD).map(|t| (t, &SMI_FIELDS_OLD[..])));
    let devices = detected(smi.as_ref().map(|(t, f)| (t.as_str(), *f)), &proc_entries);
    if !devices.is_empty() {
        tracing::info!(gpus = devices.len(), "GPUs found");
    }
    Gpus::new(devices, configured)
}

/// The `information` files under `dir` (`/proc/driver/nvidia/gpus/BUS/information`).
fn read_proc_entries(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("information")).ok())
        .collect()
}

/// `nvidia-smi`'s CSV answer for `fields`, or `None` when it is not
/// installed, fails (a field this driver does not know) or does not answer
/// within [`SMI_PATIENCE`] (then it is killed).
fn query_smi(fields: &[&str]) -> Option<String> {
    let mut child = Command::new("nvidia-smi")
        .arg(format!("--query-gpu={}", fields.join(",")))
        .arg("--format=csv,noheader,nounits")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    // Read on a thread, so that a full pipe never stalls the wait below.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + SMI_PATIENCE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                tracing::warn!("nvidia-smi did not answer in {SMI_PATIENCE:?}; GPUs not queried");
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let text = reader.join().ok()?;
    status.filter(|s| s.success()).map(|_| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_never_fails_and_the_owners_number_wins() {
        // Whatever this machine has, detection answers, and an owner's 0 hides it.
        let found = detect(None);
        assert_eq!(found.total, found.devices.len() as i64);
        let none = detect(Some(0));
        assert_eq!((none.total, none.devices.len()), (0, 0));
        assert_eq!(detect(Some(3)).total, 3);
    }

    #[test]
    fn proc_entries_are_read_from_each_devices_directory() {
        let dir = std::env::temp_dir().join(format!("carmi-gpu-proc-{}", std::process::id()));
        let dev = dir.join("0000:00:1e.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(
            dev.join("information"),
            "Model: \t\t Tesla T4\nDevice Minor: \t 0\n",
        )
        .unwrap();
        let entries = read_proc_entries(&dir);
        assert_eq!(entries.len(), 1);
        let gpus = detected(None, &entries);
        assert_eq!(gpus[0].name.as_deref(), Some("Tesla T4"));
        assert!(read_proc_entries(&dir.join("absent")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
