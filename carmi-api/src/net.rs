//! Opening connections the way every CARMI party does.

use std::time::Duration;

use tokio::net::TcpStream;

/// How long to wait for a peer to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to `addr` within `timeout` and turns Nagle off, since every
/// protocol exchange is a small request waiting for its answer. A timeout is
/// an `io::ErrorKind::TimedOut` error saying how long was waited.
pub async fn dial(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", timeout.as_secs()),
            )
        })??;
    stream.set_nodelay(true)?;
    Ok(stream)
}
