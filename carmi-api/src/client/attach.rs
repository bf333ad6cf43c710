//! Attaching a process to its local RM: the connection, the handshake as an
//! application, the job credential that may come first, and the listener for
//! direct messages from peers.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Attaches this process to its local RM: connects, opens the direct-message
/// listener, runs the handshake as [`Role::Application`] and waits for
/// `Attached`. Must be called inside a tokio runtime, which then runs the
/// client's background tasks.
pub async fn connect(opts: ConnectOptions) -> Result<(Carmi, EventStream), ConnectError> {
    let addr = opts.local.clone();
    let unreachable = |error| ConnectError::Unreachable {
        addr: addr.clone(),
        error,
    };
    let stream = crate::net::dial(&addr, CONNECT_TIMEOUT)
        .await
        .map_err(unreachable)?;
    let listener = open_listener(&opts, &stream).await?;
    // Made before the first peer connects, so that a certificate error shows here.
    let acceptor = crate::tls::Acceptor::shared().map_err(|e| ConnectError::Listen {
        addr: "the listener".into(),
        error: std::io::Error::other(e),
    })?;
    let bound = listener
        .local_addr()
        .map_err(|error| ConnectError::Listen {
            addr: "the listener".into(),
            error,
        })?
        .to_string();
    let endpoint = opts.endpoint_advertise.clone().unwrap_or(bound);

    // A local RM takes TLS only; both proofs cover the session's keys.
    let crate::tls::Stream {
        reader: r,
        writer: mut w,
        binding,
    } = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, crate::tls::connect(stream))
        .await
        .map_err(|_| ConnectError::Handshake {
            addr: addr.clone(),
            error: HandshakeError::Timeout,
        })?
        .map_err(unreachable)?;
    let mut r = FrameReader::new(r);
    let role = Role::Application {
        job: opts.job,
        process: opts.process,
        endpoint: endpoint.clone(),
    };
    handshake::client_bound(&mut r, &mut w, &opts.secret, &role, &binding)
        .await
        .map_err(|e| match e {
            HandshakeError::BadProof => ConnectError::WrongSecret { addr: addr.clone() },
            error => ConnectError::Handshake {
                addr: addr.clone(),
                error,
            },
        })?;
    let not_attached = |reason: String| ConnectError::NotAttached {
        addr: addr.clone(),
        reason,
    };
    // Written through a buffer: many small requests share a packet (see `rm::write_loop`).
    let w = tokio::io::BufWriter::with_capacity(64 * 1024, w);
    let mut conn: Conn<ToLocal, FromLocal, _, _> = Conn::from_parts(r, w);
    // A process that connected with the pool secret is given its job's
    // credential first: its peers prove that one, not the pool secret.
    let mut credential = None;
    let deadline = tokio::time::Instant::now() + ATTACH_TIMEOUT;
    let (job, process) = loop {
        match tokio::time::timeout_at(deadline, conn.recv()).await {
            Err(_) => {
                return Err(not_attached(format!(
                    "no answer within {} s",
                    ATTACH_TIMEOUT.as_secs()
                )));
            }
            Ok(Ok(Some((
                FromLocal::Credential {
                    credential: text, ..
                },
                _,
            )))) => {
                credential = Some(Secret::new(text.as_bytes()).map_err(ConnectError::Secret)?);
            }
            Ok(Ok(Some((FromLocal::Attached { job, process }, _)))) => break (job, process),
            Ok(Ok(Some((FromLocal::Refused { reason }, _)))) => {
                return Err(ConnectError::Refused {
                    addr: addr.clone(),
                    reason,
                });
            }
            Ok(Ok(Some((other, _)))) => {
                return Err(not_attached(format!("it sent {other:?} first")));
            }
            Ok(Ok(None)) => return Err(not_attached("it closed the connection".into())),
            Ok(Err(e)) => return Err(not_attached(e.to_string())),
        }
    };
    let secret = match credential {
        Some(c) if c.job() == Some(job) => c,
        _ => opts.secret,
    };

    let (stop_tx, stop_rx) = watch::channel(());
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let (events, events_rx) = mpsc::unbounded_channel();
    let runtime = tokio::runtime::Handle::current();
    let output_budget = Arc::new(Semaphore::new(OUTPUT_BUFFER));
    let shared = Arc::new(Shared {
        job,
        process,
        secret,
        endpoint,
        plain_peers: opts.plain_peers,
        runtime: runtime.clone(),
        stop: stop_rx,
        next_request: AtomicU64::new(1),
        commands,
        events,
        lookups: Mutex::new(HashMap::new()),
        rm_down: Mutex::new(None),
        endpoints: Mutex::new(HashMap::new()),
        peers: Mutex::new(HashMap::new()),
        output_files: Mutex::new(HashMap::new()),
        spawns: Mutex::new(HashMap::new()),
        output_budget: output_budget.clone(),
    });
    let (r, w) = conn.split();
    runtime.spawn(rm::write_loop(shared.clone(), commands_rx, w));
    runtime.spawn(rm::read_loop(shared.clone(), r));
    runtime.spawn(peer::accept_loop(shared.clone(), listener, acceptor));
    let carmi = Carmi {
        inner: Arc::new(Handle {
            shared,
            _stop: stop_tx,
        }),
    };
    let events = EventStream {
        rx: events_rx,
        output_budget,
    };
    Ok((carmi, events))
}

/// Opens the listener for direct messages on `endpoint_host`, or else on the
/// address this process uses to reach its RM: that interface is the one the
/// pool's network reaches, and it is loopback only when the RM is too.
async fn open_listener(opts: &ConnectOptions, rm: &TcpStream) -> Result<TcpListener, ConnectError> {
    let listen_error = |addr: String| move |error| ConnectError::Listen { addr, error };
    let addr: SocketAddr = match &opts.endpoint_host {
        Some(host) => tokio::net::lookup_host((host.as_str(), 0))
            .await
            .map_err(listen_error(host.clone()))?
            .next()
            .ok_or_else(|| {
                listen_error(host.clone())(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the name has no address",
                ))
            })?,
        None => {
            let ip = rm
                .local_addr()
                .map_err(listen_error("the local address".into()))?
                .ip();
            SocketAddr::new(ip, 0)
        }
    };
    TcpListener::bind(addr)
        .await
        .map_err(listen_error(addr.to_string()))
}
