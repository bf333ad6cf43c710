//! Bytes on any daemon port after the handshake: frames cut from them and
//! decoded as each message kind a daemon reads end in messages or an error.
#![no_main]

use bytes::BytesMut;
use carmi_api::frame::decode;
use carmi_proto::msg::{FromGlobal, FromLocal, ToGlobal, ToLocal, ToLocalControl};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

/// Decodes frames until the bytes run out or one is refused.
fn frames<T: DeserializeOwned>(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = decode::<T>(&mut buf, 1 << 20) {}
}

fuzz_target!(|data: &[u8]| {
    frames::<ToGlobal>(data);
    frames::<FromGlobal>(data);
    frames::<ToLocal>(data);
    frames::<FromLocal>(data);
    frames::<ToLocalControl>(data);
});
