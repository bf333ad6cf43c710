//! A tiny CARMI application for the end-to-end tests: started by a local RM,
//! it connects from its environment, answers every direct message by sending
//! the same bytes back to the sender with the tag plus one, and exits after a
//! message with tag 0. With the argument `plain` its direct connections are
//! in clear ([`ConnectOptions::plain_peers`]). With `CARMI_ECHO_REPORT` set,
//! it writes why its local RM connection ended to that file.

use carmi_api::client::{ConnectOptions, Incoming, connect};

#[tokio::main]
async fn main() {
    let mut opts = match ConnectOptions::from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("carmi-echo: {e}");
            std::process::exit(2);
        }
    };
    opts.plain_peers |= std::env::args().skip(1).any(|a| a == "plain");
    let (carmi, mut events) = match connect(opts).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("carmi-echo: {e}");
            std::process::exit(3);
        }
    };
    // The loop runs on a worker thread, where the client library's own tasks
    // run: on `block_on`'s thread every message would cross threads twice.
    let echo = carmi.clone();
    let looped = tokio::spawn(async move {
        while let Some(item) = events.next().await {
            match item {
                Incoming::Message { from, tag, data } => {
                    if tag == 0 {
                        break;
                    }
                    echo.send(from, tag + 1, data);
                }
                // What a test reads to see why the RM went away (`lost_master.rs`).
                Incoming::Disconnected(reason) => {
                    if let Ok(path) = std::env::var("CARMI_ECHO_REPORT") {
                        let _ = std::fs::write(path, format!("disconnected: {reason}\n"));
                    }
                }
                _ => {}
            }
        }
    });
    let _ = looped.await;
    carmi.flush().await;
}
