//! Encrypted and integrity-checked connections: TLS 1.3 (rustls, with ring
//! as its crypto provider) under the handshake of [`crate::handshake`].
//!
//! Nobody makes a certificate: a daemon generates a self-signed one in
//! memory when it starts ([`Acceptor::generate`], rcgen). A client accepts
//! whatever certificate it is shown, because identity is proved one layer
//! up: both sides feed the TLS session's exported keying material
//! (RFC 5705/8446 exporter, [`Stream::binding`]) into the mutual
//! challenge-response on the pool secret, so a man in the middle who
//! terminates TLS on both sides holds two different sessions and fails that
//! proof unless he knows the pool secret. After the handshake TLS protects
//! every frame: a byte altered on the way fails its record's authentication
//! and the connection closes with an error.
//!
//! A server may accept both TLS and plain connections, told apart by the
//! first byte (a TLS record starts with 0x16, a frame's length prefix with 0
//! for anything the handshake sends): the global RM does, so that tools of a
//! pool without tokens and of older versions keep working in clear (today's
//! clients open TLS from the first byte, token or not), and so does a process of a job
//! that asked for plain peer connections. A local RM's listeners, and a
//! job's processes by default, take TLS only.
//!
//! The client's configuration is built once per process ([`connect`]), and a
//! process that listens for its peers makes one certificate, on first use
//! ([`Acceptor::shared`]): a connection costs its TLS handshake, nothing more.

use std::io;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The reading half of a connection, TLS or plain.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection, TLS or plain.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Label of the keying material both sides export for the handshake.
const EXPORTER_LABEL: &[u8] = b"EXPORTER-carmi-handshake-binding";

/// A server's TLS stream, whole (see [`Acceptor::accept_whole`]).
pub type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;

/// The first byte of a TLS handshake record.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// A connection, split, with the value that binds the pool handshake to
/// its TLS session (empty for a plain connection).
pub struct Stream {
    /// Reading half.
    pub reader: Reader,
    /// Writing half.
    pub writer: Writer,
    /// Keying material exported from the TLS session; empty in clear.
    pub binding: Vec<u8>,
}

impl Stream {
    /// A plain TCP connection.
    pub fn plain(tcp: TcpStream) -> Stream {
        let (r, w) = tcp.into_split();
        Stream {
            reader: Box::new(r),
            writer: Box::new(w),
            binding: Vec::new(),
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server's TLS side: its self-signed certificate and key.
#[derive(Clone)]
pub struct Acceptor(tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor(..)")
    }
}

impl Acceptor {
    /// A fresh self-signed certificate (made in memory, never written).
    pub fn generate() -> Result<Acceptor, String> {
        Acceptor::generate_for(vec!["carmi-pool".to_string()]).map(|(a, _)| a)
    }

    /// A fresh self-signed certificate naming `names` (DNS names, or IP
    /// addresses as text), and its SHA-256 fingerprint (`AB:CD:...`), which
    /// a person can compare with what a browser shows: the dashboard's
    /// HTTPS, whose clients are browsers rather than the pool's handshake.
    pub fn generate_for(names: Vec<String>) -> Result<(Acceptor, String), String> {
        let made = rcgen::generate_simple_self_signed(names)
            .map_err(|e| format!("cannot make a TLS certificate: {e}"))?;
        Acceptor::from_der(made.cert.der().to_vec(), made.key_pair.serialize_der())
    }

    /// An acceptor serving the certificate `cert` (DER) with its PKCS#8
    /// private key `key` (DER), and the certificate's SHA-256 fingerprint:
    /// the dashboard's certificate that `carmi pool init` made, read from
    /// its files at every start, so that a browser trusts it once.
    pub fn from_der(cert: Vec<u8>, key: Vec<u8>) -> Result<(Acceptor, String), String> {
        let fingerprint = fingerprint(&cert);
        let cert = CertificateDer::from(cert);
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .map_err(|e| format!("TLS setup: {e}"))?;
        Ok((
            Acceptor(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            fingerprint,
        ))
    }

    /// Opens TLS on `tcp` as the server and hands back the whole stream,
    /// for a protocol other than the pool's (the dashboard serves HTTP on
    /// it). The caller has checked the first byte.
    pub async fn accept_whole(&self, tcp: TcpStream) -> io::Result<ServerStream> {
        self.0.accept(tcp).await
    }

    /// This process's acceptor, made on first use and shared by every
    /// listener the process opens (a job's process listens for its peers:
    /// one certificate per process, not one per connection).
    pub fn shared() -> Result<Acceptor, String> {
        static SHARED: OnceLock<Result<Acceptor, String>> = OnceLock::new();
        SHARED.get_or_init(Acceptor::generate).clone()
    }

    /// Accepts `tcp`: TLS if its first byte opens a TLS handshake, else in
    /// clear when `allow_plain`, else refused.
    pub async fn accept(&self, tcp: TcpStream, allow_plain: bool) -> io::Result<Stream> {
        let mut first = [0u8; 1];
        let n = tcp.peek(&mut first).await?;
        if n == 0 || first[0] != TLS_HANDSHAKE_BYTE {
            if allow_plain {
                return Ok(Stream::plain(tcp));
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "this daemon accepts TLS connections only",
            ));
        }
        let tls = self.0.accept(tcp).await?;
        let mut binding = vec![0u8; 32];
        tls.get_ref()
            .1
            .export_keying_material(&mut binding, EXPORTER_LABEL, None)
            .map_err(io::Error::other)?;
        let (r, w) = tokio::io::split(tls);
        Ok(Stream {
            reader: Box::new(r),
            writer: Box::new(w),
            binding,
        })
    }
}

/// The SHA-256 fingerprint of a certificate (DER) as a browser shows it:
/// `AB:CD:...`.
pub fn fingerprint(cert_der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, cert_der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The client side's configuration, the same for every connection: built
/// once per process.
fn client_config() -> io::Result<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let verifier = Arc::new(BoundByHandshake(
                provider().signature_verification_algorithms,
            ));
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| format!("TLS setup: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(io::Error::other)
}

/// Opens TLS on `tcp` as a client. A server that refused the connection
/// before its handshake (too many connections, say) answers in clear; that
/// answer is reported in its own words.
pub async fn connect(tcp: TcpStream) -> io::Result<Stream> {
    let connector = tokio_rustls::TlsConnector::from(client_config()?);
    let name = ServerName::try_from("carmi-pool").expect("a valid DNS name");
    let recorded = Arc::new(std::sync::Mutex::new(Vec::new()));
    let io = FirstBytes {
        tcp,
        seen: Some(recorded.clone()),
    };
    let tls = match connector.connect(name, io).await {
        Ok(tls) => tls,
        Err(e) => {
            let seen = recorded.lock().map(|b| b.clone()).unwrap_or_default();
            return Err(match crate::handshake::refusal_in(&seen) {
                Some(reason) => io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("refused by the server: {reason}"),
                ),
                None => e,
            });
        }
    };
    let mut tls = tls;
    tls.get_mut().0.seen = None;
    let mut binding = vec![0u8; 32];
    tls.get_ref()
        .1
        .export_keying_material(&mut binding, EXPORTER_LABEL, None)
        .map_err(io::Error::other)?;
    let (r, w) = tokio::io::split(tls);
    Ok(Stream {
        reader: Box::new(r),
        writer: Box::new(w),
        binding,
    })
}

/// Most bytes [`FirstBytes`] keeps: a refusal frame is far smaller.
const FIRST_BYTES: usize = 4096;

/// A client's TCP stream that keeps the first bytes it reads, until the
/// TLS handshake is over: what a server wrote in clear instead of TLS.
struct FirstBytes {
    tcp: TcpStream,
    /// Dropped (and recording stops) once it holds [`FIRST_BYTES`].
    seen: Option<Arc<std::sync::Mutex<Vec<u8>>>>,
}

impl AsyncRead for FirstBytes {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let Some(seen) = &self.seen {
            let mut kept = seen.lock().unwrap_or_else(|e| e.into_inner());
            let new = &buf.filled()[before..];
            let room = FIRST_BYTES.saturating_sub(kept.len());
            kept.extend_from_slice(&new[..new.len().min(room)]);
            if kept.len() >= FIRST_BYTES {
                drop(kept);
                self.seen = None;
            }
        }
        polled
    }
}

impl AsyncWrite for FirstBytes {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Opens `tcp` as a client: in clear when `plain` (a job's peer connections
/// on a trusted network, see `docs/security.md`), else TLS.
pub async fn open(tcp: TcpStream, plain: bool) -> io::Result<Stream> {
    if plain {
        Ok(Stream::plain(tcp))
    } else {
        connect(tcp).await
    }
}

/// Accepts any server certificate, but checks that the server holds its
/// key: who the server is, the pool handshake proves over the session's
/// exported keying material (see the module documentation).
#[derive(Debug)]
struct BoundByHandshake(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for BoundByHandshake {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn both_sides_export_the_same_binding_and_bytes_cross() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = Acceptor::generate().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(tcp, false).await.unwrap();
            let mut buf = [0u8; 5];
            s.reader.read_exact(&mut buf).await.unwrap();
            (buf, s.binding)
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut c = connect(tcp).await.unwrap();
        c.writer.write_all(b"hello").await.unwrap();
        c.writer.flush().await.unwrap();
        let (got, binding) = server.await.unwrap();
        assert_eq!(&got, b"hello");
        assert_eq!(binding, c.binding);
        assert_eq!(binding.len(), 32);
    }

    #[tokio::test]
    async fn a_tls_only_server_refuses_clear_text() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = Acceptor::generate().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            acceptor.accept(tcp, false).await.map(|_| ())
        });
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"\0\0\0\x10{\"Hello\":{}}").await.unwrap();
        assert!(server.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_client_refused_before_tls_reports_the_servers_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let why = "connection refused: this daemon has 3 connections open (max_connections)";
            crate::handshake::refuse_and_close(tcp, why).await;
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let e = connect(tcp).await.err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert!(e.to_string().contains("max_connections"), "{e}");
    }

    #[tokio::test]
    async fn a_client_holding_only_the_secret_speaks_tls_from_its_first_byte() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let text = crate::handshake::Secret::generate_text();
        let secret = crate::handshake::Secret::new(text.as_bytes()).unwrap();
        assert!(secret.token().is_none());
        // What `carmi status` opens, as every client of the global RM does.
        tokio::spawn(async move {
            let _ = crate::admin::pool_status(&addr.to_string(), &secret).await;
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 2];
        let mut got = 0;
        while got < 2 {
            got = tcp.peek(&mut first).await.unwrap();
        }
        assert_eq!(first, [0x16, 0x03], "a TLS record (handshake, version 3.x)");
    }
}
