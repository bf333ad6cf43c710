//! A short built-in benchmark that gives the machine ad its `Mips` and
//! `KFlops`, run once and cached in `WORK_DIR/benchmark.json`.
//!
//! The numbers are an index for ranking machines against each other (as
//! HTCondor's are), not a claim about the hardware's peak. They are measured
//! again only when the benchmark could come out differently: a new daemon
//! binary (compiled differently) or a different CPU model.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long each of the two loops runs.
const PHASE: Duration = Duration::from_millis(75);
/// Iterations between two looks at the clock.
const CHUNK: u32 = 50_000;
/// Bumped when the loops change, so that old cached results are not reused.
const BENCHMARK_VERSION: u32 = 1;
/// Cache file name inside the work directory.
pub const CACHE_FILE: &str = "benchmark.json";

/// The benchmark's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scores {
    /// Millions of integer operations per second.
    pub mips: i64,
    /// Thousands of floating-point operations per second.
    pub kflops: i64,
}

/// What the cached result depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Version of the loops.
    pub version: u32,
    /// Size of the daemon's executable.
    pub binary_size: u64,
    /// Modification time of the daemon's executable, nanoseconds since the epoch.
    pub binary_mtime_ns: u128,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    fingerprint: Fingerprint,
    scores: Scores,
}

impl Fingerprint {
    /// The fingerprint of the running binary on this CPU.
    pub fn current() -> Fingerprint {
        let (binary_size, binary_mtime_ns) = std::env::current_exe()
            .and_then(std::fs::metadata)
            .map(|m| {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (m.len(), mtime)
            })
            .unwrap_or((0, 0));
        Fingerprint {
            version: BENCHMARK_VERSION,
            binary_size,
            binary_mtime_ns,
            cpu_model: cpu_model(),
        }
    }
}

/// The CPU model, from /proc/cpuinfo; ARM kernels have no `model name`, so
/// their implementer and part numbers stand in for it.
pub fn cpu_model() -> String {
    let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") else {
        return String::new();
    };
    cpu_model_from(&text)
}

fn cpu_model_from(cpuinfo: &str) -> String {
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    if let Some(m) = field("model name") {
        return m;
    }
    [field("CPU implementer"), field("CPU part")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Scores from the cache in `work_dir` if they are still valid for this
/// binary and CPU, otherwise measured now (~150 ms) and cached.
pub fn scores(work_dir: &Path) -> Scores {
    let path = work_dir.join(CACHE_FILE);
    let fp = Fingerprint::current();
    match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<CacheEntry>(&bytes) {
            Ok(entry) if entry.fingerprint == fp => {
                tracing::debug!(path = %path.display(), "benchmark result reused");
                return entry.scores;
            }
            Ok(_) => {
                tracing::info!("binary or CPU changed since the last benchmark; measuring again")
            }
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %e,
                "benchmark cache is unreadable; measuring again"
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot read benchmark cache"),
    }
    let scores = measure();
    tracing::info!(
        mips = scores.mips,
        kflops = scores.kflops,
        "benchmark measured"
    );
    let entry = CacheEntry {
        fingerprint: fp,
        scores,
    };
    let tmp = work_dir.join(format!(".{CACHE_FILE}.tmp"));
    let json = serde_json::to_vec_pretty(&entry).expect("benchmark entries serialize");
    // Write-then-rename, so that a crash never leaves a half-written cache.
    if let Err(e) = std::fs::write(&tmp, json).and_then(|_| std::fs::rename(&tmp, &path)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot save benchmark result");
    }
    scores
}

/// Runs both loops now.
pub fn measure() -> Scores {
    Scores {
        mips: measure_int(),
        kflops: measure_float(),
    }
}

/// Integer operations per iteration of [`int_chunk`] (3 shifts, 3 xors, 1 add).
const INT_OPS: u64 = 7;

/// A xorshift generator: a serial dependency chain the compiler cannot
/// vectorise or fold away.
fn int_chunk(mut x: u64, n: u32) -> u64 {
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(u64::from(i));
    }
    x
}

fn measure_int() -> i64 {
    let start = Instant::now();
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    let mut iterations = 0u64;
    while start.elapsed() < PHASE {
        x = black_box(int_chunk(x, black_box(CHUNK)));
        iterations += u64::from(CHUNK);
    }
    black_box(x);
    let ops = (iterations * INT_OPS) as f64;
    (ops / start.elapsed().as_secs_f64() / 1e6).round().max(1.0) as i64
}

/// Floating-point operations per iteration of [`float_chunk`] (4 multiply-adds).
const FLOAT_OPS: u64 = 8;

/// Four independent multiply-add chains that converge to a fixed point, so
/// that values stay normal (denormals would measure something else).
fn float_chunk(acc: [f64; 4], n: u32) -> [f64; 4] {
    let [mut a, mut b, mut c, mut d] = acc;
    let (m, k) = (black_box(0.999_999_f64), black_box(1e-6_f64));
    for _ in 0..n {
        a = a * m + k;
        b = b * m + k;
        c = c * m + k;
        d = d * m + k;
    }
    [a, b, c, d]
}

fn measure_float() -> i64 {
    let start = Instant::now();
    let mut acc = black_box([0.5, 1.5, 2.5, 3.5]);
    let mut iterations = 0u64;
    while start.elapsed() < PHASE {
        acc = black_box(float_chunk(acc, black_box(CHUNK)));
        iterations += u64::from(CHUNK);
    }
    black_box(acc);
    let flops = (iterations * FLOAT_OPS) as f64;
    (flops / start.elapsed().as_secs_f64() / 1e3)
        .round()
        .max(1.0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_falls_back_to_arm_fields() {
        assert_eq!(
            cpu_model_from("processor : 0\nmodel name\t: Fancy CPU 9000\n"),
            "Fancy CPU 9000"
        );
        assert_eq!(
            cpu_model_from("CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"),
            "0x41 0xd0c"
        );
        assert_eq!(cpu_model_from("garbage"), "");
    }

    #[test]
    fn benchmark_is_cached_and_redone_when_the_fingerprint_changes() {
        let dir = crate::test_dir::TempDir::new("bench");
        let t = Instant::now();
        let first = scores(dir.path());
        assert!(first.mips > 0 && first.kflops > 0);
        assert!(t.elapsed() < Duration::from_secs(2));
        // A second call reads the cache: same numbers, no measuring.
        let t = Instant::now();
        assert_eq!(scores(dir.path()), first);
        assert!(t.elapsed() < PHASE);
        // A cache made for another CPU is ignored and replaced.
        let path = dir.path().join(CACHE_FILE);
        let mut entry: CacheEntry = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        entry.fingerprint.cpu_model = "another CPU".into();
        entry.scores = Scores { mips: 1, kflops: 1 };
        std::fs::write(&path, serde_json::to_vec(&entry).unwrap()).unwrap();
        assert_ne!(scores(dir.path()), Scores { mips: 1, kflops: 1 });
        // So is a corrupt one.
        std::fs::write(&path, b"{not json").unwrap();
        assert!(scores(dir.path()).mips > 1);
    }
}
