//! A tiny CARMI application for the end-to-end tests: started by a local RM,
//! it connects from its environment, answers every direct message by sending
//! the same bytes back to the sender with the tag plus one, and exits after a
//! message with tag 0. With the argument `plain` its direct connections are
//! in clear ([`ConnectOptions::plain_peers`]).

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
            if let Incoming::Message { from, tag, data } = item {
                if tag == 0 {
                    break;
                }
                echo.send(from, tag + 1, data);
            }
        }
    });
    let _ = looped.await;
    carmi.flush().await;
}
