//! Synthetic machine and job ads, deterministic from an index, for
//! benchmarks, examples and trying `classad match` on a realistic pool.

use std::fmt::Write;

const ARCHES: &[&str] = &["X86_64", "AARCH64", "X86_64", "PPC64LE", "X86_64"];
const OSES: &[&str] = &["LINUX", "LINUX", "WINDOWS", "LINUX", "MACOS"];
const STATES: &[&str] = &["Unclaimed", "Claimed", "Owner", "Unclaimed"];

/// A cheap deterministic mix of the index, so ads differ without an RNG.
fn mix(i: u64, salt: u64) -> u64 {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Machine ad number `i` in old syntax (one `Name = expr` per line), about
/// fifteen attributes, including a Requirements and a Rank.
pub fn machine_old_syntax(i: u64) -> String {
    let mut s = String::with_capacity(512);
    let m = |salt| mix(i, salt);
    let _ = writeln!(s, "Name = \"slot1@host{i}.pool.example.edu\"");
    let _ = writeln!(s, "Machine = \"host{i}.pool.example.edu\"");
    let _ = writeln!(
        s,
        "Arch = \"{}\"",
        ARCHES[(m(1) % ARCHES.len() as u64) as usize]
    );
    let _ = writeln!(
        s,
        "OpSys = \"{}\"",
        OSES[(m(2) % OSES.len() as u64) as usize]
    );
    let _ = writeln!(s, "Memory = {}", 512 << (m(3) % 8));
    let _ = writeln!(s, "Disk = {}", 1_000_000 + m(4) % 9_000_000);
    let _ = writeln!(s, "Cpus = {}", 1 + m(5) % 32);
    let _ = writeln!(s, "Mips = {}", 500 + m(6) % 4000);
    let _ = writeln!(s, "KFlops = {}.{}", 100_000 + m(7) % 2_000_000, m(8) % 1000);
    let _ = writeln!(s, "LoadAvg = 0.{:02}", m(9) % 100);
    let _ = writeln!(s, "KeyboardIdle = {}", m(10) % 7200);
    let _ = writeln!(
        s,
        "State = \"{}\"",
        STATES[(m(11) % STATES.len() as u64) as usize]
    );
    let _ = writeln!(s, "Dedicated = {}", m(12) % 4 == 0);
    let _ = writeln!(s, "StartIdleTime = 15 * 60");
    let _ = writeln!(
        s,
        "Requirements = TARGET.ImageSize <= MY.Memory * 1024 && KeyboardIdle > StartIdleTime"
    );
    let _ = writeln!(s, "Rank = TARGET.Department == \"physics\"");
    s
}

/// Job ad number `i` in new syntax, with a Requirements and a Rank over machine attributes.
pub fn job_new_syntax(i: u64) -> String {
    format!(
        "[ Owner = \"user{}\"; Department = \"{}\"; ImageSize = {}; RequestMemory = {}; \
         Requirements = TARGET.Arch == \"X86_64\" && TARGET.OpSys == \"LINUX\" && TARGET.Memory >= RequestMemory; \
         Rank = TARGET.Mips + TARGET.KFlops / 1000 ]",
        i % 50,
        if i.is_multiple_of(3) { "physics" } else { "cs" },
        1000 + mix(i, 20) % 500_000,
        256 << (mix(i, 21) % 5),
    )
}

/// `n` machine ads in old syntax, separated by blank lines, as `classad match` reads them.
pub fn machines_old_syntax(n: u64) -> String {
    let mut s = String::with_capacity(n as usize * 560);
    for i in 0..n {
        s.push_str(&machine_old_syntax(i));
        s.push('\n');
    }
    s
}
