//! Nothing secret before the server is proven, and proven by what only it
//! holds (issue 37 item 4), against a real `carmi-global`, `carmi-local` and
//! `carmi`:
//!
//! - a program holding the pool secret (and a signing key of its own),
//!   playing the global RM to `carmi` or to a local RM, fails its proof and
//!   is shown no token;
//! - a proxy that terminates TLS with its own certificate learns no token
//!   and no request;
//! - what a client shows a local RM (a token's public part and its holder's
//!   proof, made for that machine) opens no connection of its own, is taken
//!   once, and only from that machine;
//! - a server that cannot show the certificate the pool gave machine M's key
//!   (one holding the pool secret, or another machine's certificate) is
//!   shown nothing by a client that means to reach M's local RM;
//! - a revoked daemon token no longer opens its own machine's control connection.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use carmi_api::authz::{TokenAnswer, TokenRequest};
use carmi_api::control::OwnerLink;
use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::machinecert::{self, MachineProver};
use carmi_api::msg::{FromGlobal, ToGlobal};
use carmi_api::proof::Presented;
use carmi_api::tls;
use carmi_api::token::{Power, SigningKey, now_unix, public_part};
use carmi_tests::{Pool, bin_dir, text};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What an impostor server was shown: the token proofs its handshakes
/// carried, and how many handshakes reached it.
#[derive(Default)]
struct Seen {
    shown: Vec<Presented>,
    handshakes: usize,
}

/// A server on loopback that holds the pool secret (`secret`, with a
/// signing key of its own or a machine's name): its address and what it sees.
async fn impostor(secret: Secret) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tls = tls::Acceptor::generate().unwrap();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (tls, secret, record) = (tls.clone(), secret.clone(), record.clone());
            tokio::spawn(async move {
                let Ok(s) = tls.accept(tcp, true).await else {
                    return;
                };
                let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
                record.lock().unwrap().handshakes += 1;
                let _ = handshake::server_auth(&mut r, &mut w, &secret, &s.binding, |_, p| {
                    if let Some(p) = p {
                        record.lock().unwrap().shown.push(p.clone());
                    }
                    Ok(())
                })
                .await;
                // Hold the connection a while, as a server that took it would.
                tokio::time::sleep(Duration::from_secs(2)).await;
            });
        }
    });
    (addr, seen)
}

/// The pool secret alone (no token), as every user and machine holds it.
fn bare(pool: &Pool) -> Secret {
    Secret::from_file(&pool.secret_path).unwrap()
}

/// A token file for `identity` with `power` (and `machine`).
fn token(pool: &Pool, identity: &str, power: Power, machine: Option<&str>) -> PathBuf {
    let path = pool.dir.join(format!("{identity}-{power}.token"));
    pool.token_file(&path, identity, power, machine, 3600);
    path
}

/// `carmi ARGS` against `addr` presenting the token in `file`.
fn carmi_at(pool: &Pool, addr: &str, file: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_POOL", addr).env("CARMI_TOKEN", file);
    cmd.args(args).output().unwrap()
}

/// Polls `f` every 100 ms for at most `limit`.
fn within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_holds_only_the_secret_is_shown_no_token_by_carmi() {
    let pool = Pool::start("mitm-carmi", 1, &[vec![]]);
    pool.wait_registered();
    let alice = token(&pool, "alice", Power::Submit, None);
    // The pool secret, then the secret and another pool's key.
    let other = Arc::new(SigningKey::generate().unwrap());
    for secret in [bare(&pool), bare(&pool).with_signer(other)] {
        let (addr, seen) = impostor(secret).await;
        let out = carmi_at(&pool, &addr, &alice, &["status"]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("did not prove it is this pool's global RM"),
            "{err}"
        );
        let seen = seen.lock().unwrap();
        assert!(seen.handshakes >= 1, "carmi never reached the impostor");
        assert!(seen.shown.is_empty(), "carmi showed its token's proof");
    }
    // The real global RM proves itself and alice is served.
    let out = carmi_at(&pool, &pool.global_addr, &alice, &["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_rm_shows_its_token_to_no_impostor_global_rm() {
    let pool = Pool::start("mitm-local", 1, &[vec![]]);
    let (addr, seen) = impostor(bare(&pool)).await;
    let log = pool.dir.join("m9.log");
    let token = token(&pool, "m9", Power::Daemon, Some("m9"));
    let mut child = Command::new(bin_dir().join("carmi-local"))
        .args(["--global", &addr, "--secret"])
        .arg(&pool.secret_path)
        .arg("--token")
        .arg(&token)
        .args(["--name", "m9", "--slots", "1", "--listen", "127.0.0.1:0"])
        .arg("--work-dir")
        .arg(pool.dir.join("m9"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let told = within(Duration::from_secs(30), || {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        log.contains("did not prove it is this pool's global RM")
            && seen.lock().unwrap().handshakes >= 2
    });
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(told, "the local RM did not say why it will not link: {log}");
    assert!(
        seen.lock().unwrap().shown.is_empty(),
        "the local RM showed its token"
    );
}

/// Relays TLS connections to `target` through a TLS session of its own
/// (its own certificate towards the client), recording what the client sends.
async fn tls_proxy(target: String) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let tls = tls::Acceptor::generate().unwrap();
    let record = recorded.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (tls, target, record) = (tls.clone(), target.clone(), record.clone());
            tokio::spawn(async move {
                let Ok(client) = tls.accept(tcp, false).await else {
                    return;
                };
                let upstream = TcpStream::connect(&target).await.unwrap();
                let server = tls::connect(upstream).await.unwrap();
                let (mut cr, mut cw, mut sr, mut sw) =
                    (client.reader, client.writer, server.reader, server.writer);
                let up = async {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        record.lock().unwrap().extend_from_slice(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() || sw.flush().await.is_err() {
                            break;
                        }
                    }
                };
                let down = async {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = sr.read(&mut buf).await {
                        if cw.write_all(&buf[..n]).await.is_err() || cw.flush().await.is_err() {
                            break;
                        }
                    }
                };
                tokio::select! { _ = up => {}, _ = down => {} }
            });
        }
    });
    (addr, recorded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_terminates_tls_learns_no_token_and_no_request() {
    let pool = Pool::start("mitm-proxy", 1, &[vec![]]);
    pool.wait_registered();
    let alice = token(&pool, "alice", Power::Admin, None);
    let (addr, recorded) = tls_proxy(pool.global_addr.clone()).await;
    let out = carmi_at(&pool, &addr, &alice, &["token", "list"]);
    assert!(!out.status.success(), "served through the proxy");
    let err = text(&out.stderr);
    assert!(err.contains("man in the middle"), "{err}");
    let text_of_token = std::fs::read_to_string(&alice).unwrap();
    let public = public_part(&text_of_token);
    let claims = public.split('.').nth(1).unwrap();
    let held = text_of_token.trim().rsplit('.').next().unwrap();
    let seen = recorded.lock().unwrap().clone();
    assert!(!seen.is_empty(), "nothing went through the proxy");
    let seen = String::from_utf8_lossy(&seen);
    assert!(!seen.contains(claims), "the proxy read the token's claims");
    assert!(
        !seen.contains(held),
        "the proxy read the token's holder key"
    );
    assert!(!seen.contains("Tokens"), "the proxy read the request");
}

/// A prover of a fresh key that `key` certified as machine `machine`'s.
fn certified(key: &SigningKey, machine: &str) -> Arc<MachineProver> {
    let prover = MachineProver::generate().unwrap();
    prover.certified(machinecert::issue(
        key,
        machine,
        &prover.public(),
        now_unix(),
    ));
    Arc::new(prover)
}

/// A token's proof made for machine m0: what a client holding `file` shows
/// m0's local RM (here a server holding m0's certified key, as m0 does).
async fn shown_to_m0(pool: &Pool, file: &Path) -> Presented {
    let m0 = bare(pool)
        .with_name("m0")
        .with_prover(certified(&pool.key, "m0"));
    let (addr, seen) = impostor(m0).await;
    let token = carmi_api::token::read_token_file(file).unwrap();
    let secret = bare(pool).with_token(Some(token));
    OwnerLink::connect(&addr, &secret).await.unwrap();
    let shown = seen.lock().unwrap().shown.pop();
    shown.expect("a proof shown to m0")
}

/// What the global RM answers machine `daemon` (its token file) asking
/// about a proof shown to it.
async fn vouch(pool: &Pool, daemon: &Path, shown: &Presented) -> Result<String, String> {
    let token = carmi_api::token::read_token_file(daemon).unwrap();
    let secret = bare(pool).with_token(Some(token));
    let ask = ToGlobal::Tokens(TokenRequest::Vouch {
        shown: shown.encode(),
    });
    match carmi_api::admin::request(&pool.global_addr, &secret, None, ask).await {
        Ok(FromGlobal::Tokens(TokenAnswer::Vouched { identity, .. })) => Ok(identity),
        Ok(FromGlobal::AdminFailed(f)) => Err(f.message),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_machine_is_shown_is_taken_once_from_that_machine_and_opens_nothing_else() {
    let pool = Pool::start("mitm-shown", 1, &[vec![]]);
    pool.wait_registered();
    let m0 = pool.dir.join("m0.token");
    let m1 = token(&pool, "m1", Power::Daemon, Some("m1"));
    // An admin's control connection to m0: what m0 gets is for m0, once.
    let shown = shown_to_m0(&pool, &pool.admin_token).await;
    let refused = vouch(&pool, &m1, &shown).await.unwrap_err();
    assert!(
        refused.contains("made for local:m0, not for local:m1"),
        "{refused}"
    );
    assert_eq!(vouch(&pool, &m0, &shown).await.unwrap(), "admin");
    let refused = vouch(&pool, &m0, &shown).await.unwrap_err();
    assert!(refused.contains("already taken"), "{refused}");
    // Its public part, as a token of its own, opens no connection.
    let copy = pool.dir.join("copied.token");
    carmi_api::files::write_private(&copy, &shown.token, false).unwrap();
    let out = carmi_at(&pool, &pool.global_addr, &copy, &["token", "list"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no holder key"),
        "{}",
        text(&out.stderr)
    );
    // Nor does a user's token shown to a machine: bob's proof opens nothing
    // for m1, and a user may not ask.
    let bob = token(&pool, "bob", Power::Submit, None);
    let shown = shown_to_m0(&pool, &bob).await;
    assert!(vouch(&pool, &m1, &shown).await.is_err());
    let refused = vouch(&pool, &bob, &shown).await.unwrap_err();
    assert!(refused.contains("is no machine's daemon"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_daemon_token_no_longer_opens_its_machines_control_connection() {
    let pool = Pool::start("mitm-revoked", 1, &[vec![]]);
    pool.wait_registered();
    let m0 = pool.dir.join("m0.token");
    let text_of = carmi_api::token::read_token_file(&m0).unwrap();
    let secret = bare(&pool).with_token(Some(text_of.clone()));
    let addr = pool.locals[0].app_addr.clone();
    OwnerLink::connect(&addr, &secret).await.unwrap();
    let id = carmi_api::token::claims_unchecked(&text_of).unwrap().id;
    let out = pool
        .carmi()
        .args(["token", "revoke", &id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let Err(refused) = OwnerLink::connect(&addr, &secret).await else {
        panic!("a revoked daemon token opened its machine's control connection");
    };
    let refused = refused.to_string();
    assert!(refused.contains("revoked"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_machines_certificate_is_shown_no_token() {
    let pool = Pool::start("mitm-machine", 1, &[vec![]]);
    pool.wait_registered();
    let token = carmi_api::token::read_token_file(&pool.admin_token).unwrap();
    let client = bare(&pool).with_token(Some(token));
    let other = SigningKey::generate().unwrap();
    let cases = [
        (bare(&pool).with_name("m0"), "no machine certificate"),
        (
            bare(&pool)
                .with_name("m0")
                .with_prover(certified(&pool.key, "m9")),
            "its certificate is machine m9's",
        ),
        (
            bare(&pool)
                .with_name("m0")
                .with_prover(certified(&other, "m0")),
            "not signed by this pool's key",
        ),
    ];
    for (server, why) in cases {
        let (addr, seen) = impostor(server).await;
        let Err(e) = OwnerLink::connect(&addr, &client).await else {
            panic!("a control connection opened to a server that cannot prove machine m0 ({why})");
        };
        let e = e.to_string();
        assert!(
            e.contains("did not prove it is this pool's local RM of machine m0"),
            "{e}"
        );
        assert!(e.contains(why), "{e}");
        assert!(
            seen.lock().unwrap().shown.is_empty(),
            "shown a token: {why}"
        );
    }
    // The real m0 proves its certificate, and the admin is let in.
    let link = OwnerLink::connect(&pool.locals[0].app_addr, &client).await;
    assert!(link.is_ok(), "the real m0 refused");
}
