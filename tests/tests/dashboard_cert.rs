//! The dashboard's certificate is the one `carmi pool init` made (issue 37
//! item 6): two starts of the global RM with the same pool directory serve
//! the same certificate, whose SHA-256 fingerprint is the one `pool init`
//! printed, so that a browser trusts it once. Without the files, the global
//! RM makes one in memory, as before. The global RM is started with no
//! `--secret` and no `--pool-key`: it finds both in the pool's directory
//! (`$CARMI_DIR`, which stands for `/etc/carmi` or `~/.config/carmi`), and
//! says what that directory lacks when it lacks the secret or the key.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use carmi_tests::{bin_dir, scratch, text};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any certificate and keeps the one it was shown.
#[derive(Debug)]
struct Keep(Arc<Mutex<Option<Vec<u8>>>>, WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Keep {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.1)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.1)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.1.supported_schemes()
    }
}

/// The SHA-256 fingerprint of the certificate served at `addr`.
fn served_fingerprint(addr: &str) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let seen = Arc::new(Mutex::new(None));
    let keep = Keep(seen.clone(), provider.signature_verification_algorithms);
    let config = rustls::ClientConfig::builder_with_provider(provider as Arc<CryptoProvider>)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(keep))
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .expect("a TLS handshake with the dashboard");
    }
    let der = seen.lock().unwrap().clone().expect("a certificate");
    carmi_api::tls::fingerprint(&der)
}

/// Starts the global RM with the pool directory `etc` and a dashboard,
/// reads the fingerprint of the certificate it serves, and stops it.
fn start_and_look(dir: &Path, etc: &Path) -> String {
    let mut child = Command::new(bin_dir().join("carmi-global"))
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("CARMI_DIR", etc)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let dashboard = lines
        .find_map(|l| {
            l.ok()?
                .strip_prefix("dashboard on https://")
                .map(|a| a.trim_end_matches('/').to_string())
        })
        .expect("the global RM serves its dashboard");
    let fingerprint = served_fingerprint(&dashboard);
    let _ = child.kill();
    let _ = child.wait();
    fingerprint
}

#[test]
fn the_dashboard_serves_pool_inits_certificate_at_every_start() {
    let dir = scratch("dashboard-cert");
    let etc = dir.join("etc-carmi");
    let out = Command::new(bin_dir().join("carmi"))
        .args(["pool", "init", "--pool", "127.0.0.1:9618"])
        .env("CARMI_DIR", &etc)
        .env_remove("CARMI_SECRET")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let made = printed
        .split("SHA-256 ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("pool init printed no fingerprint:\n{printed}"))
        .to_string();

    let first = start_and_look(&dir, &etc);
    let second = start_and_look(&dir, &etc);
    assert_eq!(first, made, "the dashboard serves another certificate");
    assert_eq!(second, made, "a restart changed the certificate");

    // Without the files: a certificate made in memory, not pool init's.
    std::fs::remove_file(etc.join("dashboard.crt")).unwrap();
    std::fs::remove_file(etc.join("dashboard.key")).unwrap();
    assert_ne!(start_and_look(&dir, &etc), made);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With neither `--secret` nor `--pool-key`, the global RM looks in the
/// pool's directory: with nothing there it says where it looked and what to
/// run; with a secret and no key it refuses, in the same words as ever.
#[test]
fn a_global_rm_without_flags_says_what_its_pool_directory_lacks() {
    let dir = scratch("pool-dir-refusals");
    let etc = dir.join("etc-carmi");
    std::fs::create_dir_all(&etc).unwrap();
    let global = || {
        Command::new(bin_dir().join("carmi-global"))
            .args(["--listen", "127.0.0.1:0"])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .env("CARMI_DIR", &etc)
            .output()
            .unwrap()
    };
    let out = global();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "started with no secret");
    let looked = etc.join("pool.secret");
    assert!(
        err.contains(&*looked.to_string_lossy()) && err.contains("carmi pool init"),
        "{err}"
    );
    let secret = carmi_api::handshake::Secret::generate_text();
    carmi_api::files::write_private(&looked, &secret, false).unwrap();
    let out = global();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "started with no key");
    assert!(
        err.contains("no pool signing key") && err.contains("--insecure"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
