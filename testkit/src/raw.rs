//! Connections the way an attacker or a stripped-down peer opens them:
//! raw protocol clients, connections that say nothing, and the process
//! limits a test with thousands of them needs.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use tokio::net::{TcpSocket, TcpStream};

/// A connection to the global RM at `addr` as a client of the pool opens
/// it (TLS from the first byte), after the handshake as `role`.
pub async fn dial(
    addr: &str,
    secret: &Secret,
    role: &Role,
) -> Result<(FrameReader<tls::Reader>, tls::Writer), handshake::HandshakeError> {
    let io = |e: std::io::Error| handshake::HandshakeError::Frame(e.into());
    let stream = TcpStream::connect(addr).await.map_err(io)?;
    let s = tls::connect(stream).await.map_err(io)?;
    let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
    handshake::client_bound(&mut r, &mut w, secret, role, &s.binding).await?;
    Ok((r, w))
}

/// A raw client speaking the protocol as local RM `name`, registered with one slot.
pub async fn raw_local(
    addr: &str,
    secret: &Secret,
    name: &str,
) -> (FrameReader<tls::Reader>, tls::Writer) {
    let role = Role::Local { name: name.into() };
    let (mut r, mut w) = dial(addr, secret, &role).await.expect("handshake");
    let ad = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Mips = 1 ]"),
        slots: 1,
        running: vec![],
    };
    write_frame(&mut w, &ad, &[]).await.expect("advertise");
    match r.read::<FromGlobal>().await {
        Ok(Some((FromGlobal::Registered { .. }, _))) => {}
        other => panic!("expected Registered, got {other:?}"),
    }
    (r, w)
}

/// A connection from `from` to `to` that sends nothing at all; `None` if
/// it could not be opened within 10 s.
pub async fn silent(from: IpAddr, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(from, 0)).ok()?;
    tokio::time::timeout(Duration::from_secs(10), socket.connect(to))
        .await
        .ok()?
        .ok()
}

/// Raises this process's open-file limit to at least `want` (within the hard
/// limit); daemons started after inherit it.
pub fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    assert!(
        lim.rlim_cur >= want,
        "this test needs {want} open files; the hard limit is {}",
        lim.rlim_max
    );
}

/// The pid of the `carmi-global` whose state directory is under `dir`.
pub fn pid_of_global(dir: &Path) -> Option<u32> {
    let dir = dir.to_str()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains("carmi-global") && cmd.contains(dir)).then_some(pid)
    })
}
