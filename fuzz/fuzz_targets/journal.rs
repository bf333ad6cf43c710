//! The global RM's journal after a crash or a disk fault: reading it ends in
//! the records before the damage and a description of the damage. Each line
//! carries a hash the fuzzer rarely gets right, so the record decoding behind
//! it is also fed the bytes directly.
#![no_main]

use carmi_global_core::journal::{Record, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse(data);
    let _ = serde_json::from_slice::<Record>(data);
});
