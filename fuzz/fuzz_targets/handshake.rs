//! What an unauthenticated client sends first: the server side of the
//! handshake ends in a role or an error, whatever the bytes.
#![no_main]

use carmi_api::frame::FrameReader;
use carmi_api::handshake::{Secret, server_auth};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let secret = Secret::new(b"a pool secret for fuzzing, 32+ bytes").expect("a secret");
        let mut reader = FrameReader::new(data);
        let mut sink = tokio::io::sink();
        let _ = server_auth(&mut reader, &mut sink, &secret, b"", |_, _| Ok(())).await;
    });
});
