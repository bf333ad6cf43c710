//! The web dashboard's certificate: made once, by `carmi pool init`, and
//! written to the pool's directory (`dashboard.crt`, mode 0644, and
//! `dashboard.key`, mode 0600, both PEM), then read by `carmi-global --http`
//! at every start. A certificate made in memory at each start (what the
//! global RM does without these files) changes at every restart, and a
//! browser asks again each time whether to trust it; this one a browser is
//! told to trust once, its fingerprint compared with what `pool init` printed.

use std::path::Path;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

use crate::tls::Acceptor;

/// A certificate and its key, as the files hold them.
pub struct WebCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key (PKCS#8), PEM.
    pub key_pem: String,
    /// The certificate's SHA-256 fingerprint, `AB:CD:...`.
    pub fingerprint: String,
}

/// A fresh self-signed certificate for the DNS names (or IP addresses as
/// text) `names`.
pub fn make(names: Vec<String>) -> Result<WebCert, String> {
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot make a TLS certificate: {e}"))?;
    Ok(WebCert {
        cert_pem: pem("CERTIFICATE", made.cert.der()),
        key_pem: pem("PRIVATE KEY", &made.key_pair.serialize_der()),
        fingerprint: crate::tls::fingerprint(made.cert.der()),
    })
}

/// PEM (RFC 7468): the label's lines around base64 in lines of 64.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The acceptor serving the certificate of `cert` with the key of `key`
/// (PEM files; the key must be its reader's own, mode 0600, as every key
/// file), and the certificate's fingerprint. The errors name the file and
/// what is wrong with it.
pub fn load(cert: &Path, key: &Path) -> Result<(Acceptor, String), String> {
    let cert_text = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let cert_der = CertificateDer::from_pem_slice(&cert_text)
        .map_err(|e| format!("{}: not a PEM certificate: {e}", cert.display()))?;
    let key_text = crate::files::read_private(key).map_err(|e| e.to_string())?;
    let key_der = PrivatePkcs8KeyDer::from_pem_slice(key_text.as_bytes())
        .map_err(|e| format!("{}: not a PEM PKCS#8 private key: {e}", key.display()))?;
    Acceptor::from_der(cert_der.to_vec(), key_der.secret_pkcs8_der().to_vec())
        .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_certificate_loads_with_the_same_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let made = make(vec!["localhost".into(), "manager".into()]).unwrap();
        let (cert, key) = (dir.path().join("d.crt"), dir.path().join("d.key"));
        std::fs::write(&cert, &made.cert_pem).unwrap();
        crate::files::write_private(&key, &made.key_pem, false).unwrap();
        let (_, fingerprint) = load(&cert, &key).unwrap();
        assert_eq!(fingerprint, made.fingerprint);
        assert_eq!(fingerprint.len(), 32 * 3 - 1);
        // A key others may read is refused, naming the file.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(&cert, &key).err().unwrap();
        assert!(e.contains("d.key") && e.contains("too open"), "{e}");
        std::fs::write(&cert, "not pem").unwrap();
        assert!(load(&cert, &key).err().unwrap().contains("d.crt"));
    }
}
