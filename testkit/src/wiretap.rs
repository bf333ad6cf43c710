//! What the encryption tests (issue 21) look at the wire with: a TCP proxy
//! that keeps what its clients sent and, when armed, flips one bit of it;
//! and the TCP ports a process listens on, so that a test can try every one
//! of a daemon's listeners, including those it names nowhere.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy to one upstream address, for any number of connections: it
/// keeps every byte its clients sent and, once [`Proxy::arm`]ed, flips one
/// bit in the next chunk a client sends (then disarms).
pub struct Proxy {
    /// Where clients connect (`127.0.0.1:PORT`).
    pub addr: String,
    seen: Arc<Mutex<Vec<u8>>>,
    armed: Arc<AtomicBool>,
    at: FlipAt,
    upstream: Arc<Mutex<String>>,
}

/// A flip at a byte offset of one direction of a connection (see
/// [`Proxy::arm_at`]): `(from_server, offset)`, taken by the first
/// connection whose stream in that direction reaches the offset.
type FlipAt = Arc<Mutex<Option<(bool, usize)>>>;

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a proxy");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let armed = Arc::new(AtomicBool::new(false));
        let at: FlipAt = Arc::default();
        let upstream = Arc::new(Mutex::new(upstream));
        let (s, a, t, u) = (seen.clone(), armed.clone(), at.clone(), upstream.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let to = u.lock().expect("proxy upstream").clone();
                let Ok(server) = TcpStream::connect(&to).await else {
                    continue;
                };
                tokio::spawn(forward(client, server, s.clone(), a.clone(), t.clone()));
            }
        });
        Proxy {
            addr,
            seen,
            armed,
            at,
            upstream,
        }
    }

    /// Forwards the next connections to `upstream` instead: for a server
    /// that must be told the proxy's address before it listens itself.
    pub fn set_upstream(&self, upstream: String) {
        *self.upstream.lock().expect("proxy upstream") = upstream;
    }

    /// Flips one bit of the byte at `offset` of the next connection's
    /// stream from the server (`from_server`) or from the client: an offset
    /// past the TLS handshake alters a record of application data, which
    /// [`Proxy::arm`] (the next chunk, often the handshake itself) cannot
    /// aim at.
    pub fn arm_at(&self, from_server: bool, offset: usize) {
        *self.at.lock().expect("proxy flip") = Some((from_server, offset));
    }

    /// Whether the flip of [`Proxy::arm_at`] is still to happen.
    pub fn armed_at(&self) -> bool {
        self.at.lock().expect("proxy flip").is_some()
    }

    /// Flips one bit of the next chunk a client sends (or not, if `on` is
    /// false: an unaltered run through the same proxy).
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::SeqCst);
    }

    /// Whether the armed flip is still to happen.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    /// What the clients sent so far, and the same as (lossy) text.
    pub fn seen(&self) -> (Vec<u8>, String) {
        let seen = self.seen.lock().expect("proxy record").clone();
        let clear = String::from_utf8_lossy(&seen).into_owned();
        (seen, clear)
    }
}

/// Copies `client` to `server` (recording, flipping when armed) and back.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    seen: Arc<Mutex<Vec<u8>>>,
    armed: Arc<AtomicBool>,
    at: FlipAt,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let back = at.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut passed = 0;
        while let Ok(n) = sr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            flip_at(&back, true, passed, &mut buf[..n]);
            passed += n;
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut passed = 0;
    while let Ok(n) = cr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        seen.lock()
            .expect("proxy record")
            .extend_from_slice(&buf[..n]);
        if armed.swap(false, Ordering::SeqCst) {
            buf[n / 2] ^= 0x01;
        }
        flip_at(&at, false, passed, &mut buf[..n]);
        passed += n;
        if sw.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = sw.shutdown().await;
}

/// Flips the armed byte if `chunk`, which follows `passed` bytes of the
/// `from_server` direction, holds it.
fn flip_at(at: &FlipAt, from_server: bool, passed: usize, chunk: &mut [u8]) {
    let mut at = at.lock().expect("proxy flip");
    if let Some((dir, offset)) = *at
        && dir == from_server
        && (passed..passed + chunk.len()).contains(&offset)
    {
        chunk[offset - passed] ^= 0x01;
        *at = None;
    }
}

/// The TCP ports process `pid` listens on (IPv4 and IPv6), from `/proc`:
/// the listening sockets of the system whose inodes the process holds open.
pub fn listening_ports(pid: u32) -> std::io::Result<Vec<u16>> {
    let mut inodes = std::collections::HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, state 0A (LISTEN), inode.
            let (Some(local), Some(&"0A"), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            if !inodes.contains(*inode) {
                continue;
            }
            let port = local.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
            if let Ok(port) = u16::from_str_radix(port, 16) {
                ports.push(port);
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// The process that listens on TCP `port` (its first found), from `/proc`.
pub fn pid_listening_on(port: u16) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if listening_ports(pid).is_ok_and(|ports| ports.contains(&port)) {
            return Some(pid);
        }
    }
    None
}
