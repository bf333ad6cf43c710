//! Opening connections the way every CARMI party does.

use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Connections the kernel may hold for a daemon before it accepts them.
/// Tokio's `TcpListener::bind` asks for 1024: thousands of machines
/// reconnecting at once after a global RM restart (or a burst of silent
/// connections) overflowed it, and a client whose handshake the kernel
/// completed but then dropped waits on a connection nobody will accept.
/// The kernel caps it at `net.core.somaxconn` (4096 by default).
pub const LISTEN_BACKLOG: u32 = 4096;

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

/// Binds a daemon's listener on `addr` (`HOST:PORT`, the first address it
/// resolves to) with [`LISTEN_BACKLOG`], reusing the address as
/// `TcpListener::bind` does.
pub async fn listen(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{addr}` names no address"),
        )
    }))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_listener_binds_a_free_port_and_accepts() {
        let l = super::listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let dial = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await });
        let (_, peer) = l.accept().await.unwrap();
        assert!(peer.ip().is_loopback());
        assert!(dial.await.unwrap().is_ok());
        assert!(super::listen("no-such-host.invalid:1").await.is_err());
    }
}
