//! Attaching a process to its local RM: the connection, the handshake as an
//! application, the job credential that may come first, and the listener for
//! direct messages from peers.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use super::*;

/// The connection to the local RM once attached: messages to and from it,
/// over TLS, written through a buffer.
type RmConn =
    Conn<ToLocal, FromLocal, crate::tls::Reader, tokio::io::BufWriter<crate::tls::Writer>>;

/// Attaches this process to its local RM: connects, opens the direct-message
/// listener, runs the handshake as [`Role::Application`] and waits for
/// `Attached`. Must be called inside a tokio runtime, which then runs the
/// client's background tasks.
pub async fn connect(opts: ConnectOptions) -> Result<(Carmi, EventStream), ConnectError> {
    let addr = opts.local.clone();
    let stream = crate::net::dial(&addr, CONNECT_TIMEOUT)
        .await
        .map_err(|error| ConnectError::Unreachable {
            addr: addr.clone(),
            error,
        })?;
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
    let mut conn = handshake_as_application(stream, &opts, &endpoint).await?;
    let (job, process, credential) = await_attached(&mut conn, &addr).await?;
    let secret = match credential {
        Some(c) if c.job() == Some(job) => c,
        _ => opts.secret,
    };
    let me = Attached {
        job,
        process,
        secret,
        endpoint,
        plain_peers: opts.plain_peers,
    };
    Ok(start(me, conn, listener, acceptor))
}

/// Runs the handshake with the RM as [`Role::Application`] at `endpoint`.
async fn handshake_as_application(
    stream: TcpStream,
    opts: &ConnectOptions,
    endpoint: &str,
) -> Result<RmConn, ConnectError> {
    let addr = &opts.local;
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
        .map_err(|error| ConnectError::Unreachable {
            addr: addr.clone(),
            error,
        })?;
    let mut r = FrameReader::new(r);
    let role = Role::Application {
        job: opts.job,
        process: opts.process,
        endpoint: endpoint.to_string(),
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
    // Written through a buffer: many small requests share a packet (see `rm::write_loop`).
    let w = tokio::io::BufWriter::with_capacity(64 * 1024, w);
    Ok(Conn::from_parts(r, w))
}

/// Waits, at most [`ATTACH_TIMEOUT`], for the RM's `Attached`: this
/// process's job and id, and the job's credential if the RM sent one first.
async fn await_attached(
    conn: &mut RmConn,
    addr: &str,
) -> Result<(JobId, ProcessId, Option<Secret>), ConnectError> {
    let not_attached = |reason: String| ConnectError::NotAttached {
        addr: addr.to_string(),
        reason,
    };
    // A process that connected with the pool secret is given its job's
    // credential first: its peers prove that one, not the pool secret.
    let mut credential = None;
    let deadline = tokio::time::Instant::now() + ATTACH_TIMEOUT;
    loop {
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
            Ok(Ok(Some((FromLocal::Attached { job, process }, _)))) => {
                return Ok((job, process, credential));
            }
            Ok(Ok(Some((FromLocal::Refused { reason }, _)))) => {
                return Err(ConnectError::Refused {
                    addr: addr.to_string(),
                    reason,
                });
            }
            Ok(Ok(Some((other, _)))) => {
                return Err(not_attached(format!("it sent {other:?} first")));
            }
            Ok(Ok(None)) => return Err(not_attached("it closed the connection".into())),
            Ok(Err(e)) => return Err(not_attached(e.to_string())),
        }
    }
}

/// Who this attached process is, and what its peers prove.
struct Attached {
    job: JobId,
    process: ProcessId,
    secret: Secret,
    endpoint: String,
    plain_peers: bool,
}

/// Starts the client's background tasks on the current runtime: writing
/// to the RM, reading from it, accepting peers on `listener`.
fn start(
    me: Attached,
    conn: RmConn,
    listener: TcpListener,
    acceptor: crate::tls::Acceptor,
) -> (Carmi, EventStream) {
    let (stop_tx, stop_rx) = watch::channel(());
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let (events, events_rx) = mpsc::unbounded_channel();
    let runtime = tokio::runtime::Handle::current();
    let output_budget = Arc::new(Semaphore::new(OUTPUT_BUFFER));
    let shared = Arc::new(Shared {
        job: me.job,
        process: me.process,
        secret: me.secret,
        endpoint: me.endpoint,
        plain_peers: me.plain_peers,
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
    (carmi, events)
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
