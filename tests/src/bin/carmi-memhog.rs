//! A job for the request enforcement tests (`tests/tests/enforce.rs`): it
//! allocates and touches `MIB` MiB (every page written, so that the memory
//! is really charged to it), prints how much it holds, keeps it for
//! `SECONDS` (default 0) and exits 0. Needs no pool connection.

use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut held: Vec<Vec<u8>> = Vec::with_capacity(mib);
    for i in 0..mib {
        // One MiB at a time, every page touched, so that usage climbs
        // steadily and a limit stops it part way.
        let mut chunk = vec![0u8; 1 << 20];
        for page in chunk.iter_mut().step_by(4096) {
            *page = (i % 251) as u8 + 1;
        }
        held.push(chunk);
    }
    let sum: u64 = held.iter().map(|c| u64::from(c[0])).sum();
    println!("holding {mib} MiB (check {sum})");
    let _ = std::io::stdout().flush();
    std::thread::sleep(std::time::Duration::from_secs(seconds));
}
