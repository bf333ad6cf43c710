//! A tiny CARMI application for the end-to-end tests: started by a local RM,
//! it connects from its environment, answers every direct message by sending
//! the same bytes back to the sender with the tag plus one, and exits after a
//! message with tag 0.

use carmi_api::client::{ConnectOptions, Incoming, connect};

#[tokio::main]
async fn main() {
    let opts = match ConnectOptions::from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("carmi-echo: {e}");
            std::process::exit(2);
        }
    };
    let (carmi, mut events) = match connect(opts).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("carmi-echo: {e}");
            std::process::exit(3);
        }
    };
    while let Some(item) = events.next().await {
        if let Incoming::Message { from, tag, data } = item {
            if tag == 0 {
                break;
            }
            carmi.send(from, tag + 1, data);
        }
    }
    carmi.flush().await;
}
