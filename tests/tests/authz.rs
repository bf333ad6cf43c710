//! End to end, who may do what (issue 21): tokens of each power against a
//! real `carmi-global` (with the pool's signing key) and a real
//! `carmi-local`, through the `carmi` command and, for advertising machines,
//! the wire protocol as a local RM speaks it. Also revocation and expiry
//! (open connections closed), and key files others may read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, HandshakeError, Secret};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use carmi_api::token::Power;
use carmi_tests::{Pool, text};

const MASTER: &str = "#!/bin/sh\nwhile [ ! -e \"$STOP\" ]; do sleep 0.05; done\n";

/// A token file for `identity` with `power` (daemons bound to `machine`).
fn token(pool: &Pool, identity: &str, power: Power, machine: Option<&str>) -> PathBuf {
    let path = pool.dir.join(format!("{identity}-{power}.token"));
    if !path.exists() {
        pool.token_file(&path, identity, power, machine, 3600);
    }
    path
}

/// `carmi ARGS` presenting `token`, masters pinned to m0.
fn carmi(pool: &Pool, token: &Path, args: &[&str]) -> std::process::Output {
    pool.carmi()
        .env("CARMI_TOKEN", token)
        .env("CARMI_MACHINE", "m0")
        .args(args)
        .output()
        .unwrap()
}

/// Submits a job that waits forever (more machines than the pool has);
/// its id, or the refusal's text.
fn submit(pool: &Pool, token: &Path) -> Result<String, String> {
    submit_with(pool, token, "class_name = w\nmachine_count = 99\n")
}

/// Submits the job of [`MASTER`] with `more` submit lines; its id, or the
/// refusal's text.
fn submit_with(pool: &Pool, token: &Path, more: &str) -> Result<String, String> {
    let dir = &pool.dir;
    std::fs::write(dir.join("master.sh"), MASTER).unwrap();
    let sub = dir.join("wait.sub");
    let body = format!(
        "executable = master.sh\nenvironment = STOP={}\n{more}queue\n",
        dir.join("stop").display()
    );
    std::fs::write(&sub, body).unwrap();
    let out = carmi(pool, token, &["submit", "--json", sub.to_str().unwrap()]);
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["job"].as_u64().expect("a job id").to_string())
}

/// Connects to the global RM as the local RM of `machine` presenting
/// `token`, and advertises it: `Ok` once registered, else why not.
async fn advertise(pool: &Pool, token: &Path, machine: &str) -> Result<(), String> {
    let text = carmi_api::token::read_token_file(token).unwrap();
    let secret = pool.secret.clone().with_token(Some(text));
    let (mut r, mut w, binding) = open(pool).await;
    let role = Role::Local {
        name: machine.into(),
    };
    match handshake::client_bound(&mut r, &mut w, &secret, &role, &binding).await {
        Ok(()) => {}
        Err(HandshakeError::Refused(reason)) => return Err(reason),
        Err(e) => panic!("handshake failed otherwise: {e}"),
    }
    let ad = ToGlobal::Advertise {
        ad: format!("[ Name = \"{machine}\"; Arch = \"X86_64\" ]"),
        slots: 1,
        running: vec![],
    };
    write_frame(&mut w, &ad, &[]).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), r.read::<FromGlobal>()).await {
        Ok(Ok(Some((FromGlobal::Registered { .. }, _)))) => Ok(()),
        other => Err(format!("not registered: {other:?}")),
    }
}

fn allowed(out: &std::process::Output) -> Result<(), String> {
    if out.status.success() {
        Ok(())
    } else {
        Err(text(&out.stderr))
    }
}

/// The refusal names the identity, the action and what is missing.
fn assert_refused(what: &str, got: Result<impl std::fmt::Debug, String>, needles: &[&str]) {
    let Err(e) = got else {
        panic!("{what}: allowed, should be refused: {got:?}");
    };
    for n in needles {
        assert!(e.contains(n), "{what}: the refusal does not say `{n}`: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_power_may_do_what_the_table_says_and_is_told_why_not() {
    let pool = Pool::start("authz-matrix", 1, &[vec![]]);
    pool.wait_registered();
    let bob = token(&pool, "bob", Power::Submit, None);
    let bobs_job = submit(&pool, &bob).expect("bob submits");

    // (identity, power, status, submit, rm own, rm bob's, advertise m9,
    // advertise m8, token create)
    let rows = [
        (
            "carol",
            Power::Read,
            [true, false, false, false, false, false, false],
        ),
        (
            "alice",
            Power::Submit,
            [true, true, true, false, false, false, false],
        ),
        (
            "m9",
            Power::Daemon,
            [true, false, false, false, true, false, false],
        ),
        (
            "root",
            Power::Admin,
            [true, true, true, true, true, true, true],
        ),
    ];
    // A job of each identity, submitted with a submit token of the same
    // name, so that read and daemon tokens have an "own job" too.
    for (who, power, want) in rows {
        let t = token(&pool, who, power, Some("m9"));
        let own_job = submit(&pool, &token(&pool, who, Power::Submit, None)).unwrap();
        let row = format!("{who} ({power})");
        let p = power.name();

        let status = allowed(&carmi(&pool, &t, &["status", "--json"]));
        assert_eq!(status.is_ok(), want[0], "{row} status: {status:?}");

        let sub = submit(&pool, &t);
        if want[1] {
            let job = sub.unwrap_or_else(|e| panic!("{row} submit: {e}"));
            // The job's owner is the token's identity, whatever $USER says.
            let q = text(&carmi(&pool, &t, &["q", "--json"]).stdout);
            let jobs: serde_json::Value = serde_json::from_str(&q).unwrap();
            let mine = jobs
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["job"].as_u64() == job.parse::<u64>().ok());
            assert_eq!(mine.unwrap()["owner"], who, "{q}");
        } else {
            assert_refused(&format!("{row} submit"), sub, &[who, p, "may not submit"]);
        }

        let rm_own = allowed(&carmi(&pool, &t, &["rm", &own_job]));
        if want[2] {
            rm_own.unwrap_or_else(|e| panic!("{row} rm own: {e}"));
        } else {
            assert_refused(
                &format!("{row} rm own"),
                rm_own,
                &[who, p, "may not rm job", "needs power submit"],
            );
        }

        let rm_other = allowed(&carmi(&pool, &t, &["rm", &bobs_job]));
        if want[3] {
            rm_other.unwrap_or_else(|e| panic!("{row} rm bob's: {e}"));
        } else {
            assert_refused(
                &format!("{row} rm bob's"),
                rm_other,
                &[who, p, "may not rm job", "needs power", "admin"],
            );
        }

        let m9 = advertise(&pool, &t, "m9").await;
        assert_eq!(m9.is_ok(), want[4], "{row} advertise m9: {m9:?}");
        if let Err(e) = &m9 {
            let needles = [who, p, "advertise machine `m9`", "needs power daemon"];
            assert!(needles.iter().all(|n| e.contains(n)), "{e}");
        }
        let m8 = advertise(&pool, &t, "m8").await;
        assert_eq!(m8.is_ok(), want[5], "{row} advertise m8: {m8:?}");
        match (power, &m8) {
            (Power::Daemon, Err(e)) => assert!(e.contains("bound to machine `m9`"), "{e}"),
            (_, Err(e)) => {
                let needles = [who, p, "advertise machine `m8`", "needs power daemon"];
                assert!(needles.iter().all(|n| e.contains(n)), "{e}");
            }
            (_, Ok(())) => {}
        }

        let create = carmi(
            &pool,
            &t,
            &["token", "create", "--identity", "dave", "--authz", "read"],
        );
        if want[6] {
            let made = text(&create.stdout);
            assert!(
                made.starts_with("carmi1."),
                "{row}: {}",
                text(&create.stderr)
            );
        } else {
            assert_refused(
                &format!("{row} token create"),
                allowed(&create),
                &[who, p, "may not create tokens", "needs power admin"],
            );
        }
    }
    // The refusals were logged, and the global RM kept serving meanwhile.
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
    assert!(log.contains("refused"), "{log}");
    assert!(allowed(&carmi(&pool, &pool.admin_token, &["status"])).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_and_a_revoked_one_loses_its_connections() {
    let pool = Pool::start("authz-revoke", 1, &[vec![]]);
    pool.wait_registered();
    // No token, a forged one, one of another pool.
    let none = pool
        .carmi()
        .env_remove("CARMI_TOKEN")
        .arg("status")
        .output()
        .unwrap();
    assert_refused("no token", allowed(&none), &["no token"]);
    let forged = pool.dir.join("forged.token");
    let good = token(&pool, "eve", Power::Read, None);
    let mut t = carmi_api::token::read_token_file(&good).unwrap();
    // One character of the signature changed (never to itself: with 'A'
    // always written, one token in 64 stayed intact and was let in).
    let at = t.len() - 3;
    let other = if &t[at..at + 1] == "A" { "B" } else { "A" };
    t.replace_range(at..at + 1, other);
    carmi_api::files::write_private(&forged, &t, false).unwrap();
    let out = carmi(&pool, &forged, &["status"]);
    assert_refused("forged", allowed(&out), &["token refused"]);
    // A read token widened to admin, its signature kept.
    let grant = carmi_api::token::Grant {
        identity: "eve".into(),
        power: Power::Read,
        machine: None,
        lifetime_s: 60,
    };
    let (t, mut claims) = pool
        .key
        .issue(&grant, carmi_api::token::now_unix())
        .unwrap();
    claims.power = Power::Admin;
    // The signature and the holder key kept: only the claims change.
    let (_, sig) = carmi_api::token::public_part(&t).rsplit_once('.').unwrap();
    let (_, held) = t.rsplit_once('.').unwrap();
    let json = serde_json::to_vec(&claims).unwrap();
    let widened = format!("carmi1.{}.{sig}.{held}", URL_SAFE_NO_PAD.encode(json));
    let altered = pool.dir.join("altered.token");
    carmi_api::files::write_private(&altered, &widened, false).unwrap();
    let out = carmi(&pool, &altered, &["token", "list"]);
    assert_refused("altered", allowed(&out), &["token refused", "altered"]);
    let other = carmi_api::token::SigningKey::generate().unwrap();
    let grant = carmi_api::token::Grant {
        identity: "eve".into(),
        power: Power::Admin,
        machine: None,
        lifetime_s: 60,
    };
    let (foreign, _) = other.issue(&grant, carmi_api::token::now_unix()).unwrap();
    let foreign_file = pool.dir.join("foreign.token");
    carmi_api::files::write_private(&foreign_file, &foreign, false).unwrap();
    let out = carmi(&pool, &foreign_file, &["status"]);
    assert_refused("another pool's", allowed(&out), &["another pool"]);

    // A token revoked while a connection it opened is open: that connection
    // is closed within 10 s, and the token is refused from then on.
    let admin = &pool.admin_token;
    let made = carmi(
        &pool,
        admin,
        &[
            "token",
            "create",
            "--identity",
            "frank",
            "--authz",
            "submit",
        ],
    );
    let frank = pool.dir.join("frank.token");
    carmi_api::files::write_private(&frank, &text(&made.stdout), false).unwrap();
    let mut open = connect(&pool, &frank).await;
    let list = text(&carmi(&pool, admin, &["token", "list", "--json"]).stdout);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let id = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["identity"] == "frank")
        .expect("frank's token is listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    allowed(&carmi(&pool, admin, &["token", "revoke", &id])).unwrap();
    closed_within(
        &mut open,
        Duration::from_secs(10),
        "a revoked token's connection",
    )
    .await;
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
    assert!(
        log.contains(&format!("token {id} of `frank` was revoked")),
        "{log}"
    );
    let refused = allowed(&carmi(&pool, &frank, &["q"]));
    assert_refused("revoked", refused, &["revoked"]);
    let listed = text(&carmi(&pool, admin, &["token", "list"]).stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.contains(&id) && l.contains("revoked")),
        "{listed}"
    );

    // Expiry: a token that lasts 3 s works, its connection is closed when
    // it expires, and it is refused after.
    let short = pool.dir.join("short.token");
    pool.token_file(&short, "gina", Power::Read, None, 3);
    let mut open = connect(&pool, &short).await;
    allowed(&carmi(&pool, &short, &["status"])).unwrap();
    closed_within(
        &mut open,
        Duration::from_secs(3 + 10),
        "an expired token's connection",
    )
    .await;
    assert_refused(
        "expired",
        allowed(&carmi(&pool, &short, &["status"])),
        &["expired"],
    );
}

type Open = (FrameReader<tls::Reader>, tls::Writer);

/// An idle admin connection opened with `token`.
async fn connect(pool: &Pool, token: &Path) -> Open {
    let text = carmi_api::token::read_token_file(token).unwrap();
    let secret = pool.secret.clone().with_token(Some(text));
    let (mut r, mut w, binding) = open(pool).await;
    handshake::client_bound(&mut r, &mut w, &secret, &Role::Admin, &binding)
        .await
        .expect("admitted");
    (r, w)
}

/// A TLS connection to the global RM, before the pool handshake.
async fn open(pool: &Pool) -> (FrameReader<tls::Reader>, tls::Writer, Vec<u8>) {
    let stream = carmi_api::net::dial(&pool.global_addr, Duration::from_secs(5))
        .await
        .unwrap();
    let s = tls::connect(stream).await.unwrap();
    (FrameReader::new(s.reader), s.writer, s.binding)
}

/// Waits until the global RM closes `open`, at most `limit`.
async fn closed_within(open: &mut Open, limit: Duration, what: &str) {
    let start = Instant::now();
    match tokio::time::timeout(limit, open.0.read::<FromGlobal>()).await {
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Ok(Ok(Some(m))) => panic!("{what}: got {m:?} instead of the close"),
        Err(_) => panic!("{what}: still open after {:?}", start.elapsed()),
    }
}

#[test]
fn daemons_refuse_key_and_token_files_others_may_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = carmi_tests::scratch("authz-files");
    let key = carmi_api::token::SigningKey::generate().unwrap();
    let key_file = dir.join("pool.key");
    std::fs::write(&key_file, key.to_text()).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secret = dir.join("pool.secret");
    carmi_api::files::write_private(
        &secret,
        &carmi_api::handshake::Secret::generate_text(),
        false,
    )
    .unwrap();
    let out = std::process::Command::new(carmi_tests::bin_dir().join("carmi-global"))
        .args(["--listen", "127.0.0.1:0", "--secret"])
        .arg(&secret)
        .arg("--pool-key")
        .arg(&key_file)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("permissions 0644"), "{err}");
    assert!(
        err.contains(&format!("chmod 600 {}", key_file.display())),
        "{err}"
    );

    let token_file = dir.join("m0.token");
    std::fs::write(&token_file, "carmi1.x.y").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = std::process::Command::new(carmi_tests::bin_dir().join("carmi-local"))
        .args(["--global", "127.0.0.1:9", "--secret"])
        .arg(&secret)
        .arg("--token")
        .arg(&token_file)
        .args(["--name", "m0", "--slots", "1", "--work-dir"])
        .arg(dir.join("m0"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("permissions 0640"), "{err}");
    assert!(
        err.contains(&format!("chmod 600 {}", token_file.display())),
        "{err}"
    );

    // The pool secret: a daemon may share it with its group, never with others.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let local = std::process::Command::new(carmi_tests::bin_dir().join("carmi-local"))
        .args(["--global", "127.0.0.1:9", "--secret"])
        .arg(&secret)
        .args(["--name", "m0", "--slots", "1", "--work-dir"])
        .arg(dir.join("m0"))
        .output()
        .unwrap();
    let global = std::process::Command::new(carmi_tests::bin_dir().join("carmi-global"))
        .args(["--listen", "127.0.0.1:0", "--secret"])
        .arg(&secret)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    for out in [local, global] {
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(
            err.contains("pool secret") && err.contains("permissions 0644"),
            "{err}"
        );
        assert!(
            err.contains(&format!("chmod 600 {}", secret.display())),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens a staging connection to the global RM as `machine`'s stager with
/// `secret` (its token, if any): `Ok` once welcomed, else the refusal.
async fn stage_as(pool: &Pool, secret: &Secret, machine: &str) -> Result<(), String> {
    let (mut r, mut w, binding) = open(pool).await;
    let role = Role::Stager {
        name: machine.into(),
    };
    match handshake::client_bound(&mut r, &mut w, secret, &role, &binding).await {
        Ok(()) => Ok(()),
        Err(HandshakeError::Refused(reason)) => Err(reason),
        Err(e) => panic!("handshake failed otherwise: {e}"),
    }
}

/// A local RM's staging connection to the global RM presents its daemon
/// token: without one, or with another machine's, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staging_connection_needs_its_machines_daemon_token() {
    let pool = Pool::start("authz-stage", 1, &[vec![]]);
    let bare = Secret::from_file(&pool.secret_path).unwrap();
    let refused = stage_as(&pool, &bare, "m0").await;
    assert_refused("staging without a token", refused, &["no token"]);
    let m0 = carmi_api::token::read_token_file(&pool.dir.join("m0.token")).unwrap();
    let with_m0 = bare.with_token(Some(m0));
    stage_as(&pool, &with_m0, "m0")
        .await
        .expect("m0's token opens m0's staging connection");
    let other = stage_as(&pool, &with_m0, "m9").await;
    assert_refused(
        "staging as another machine",
        other,
        &["permission denied", "m9"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_may_neither_upload_nor_fetch_nor_serve_executables() {
    let pool = Pool::start("authz-transfer", 1, &[vec![]]);
    pool.wait_registered();
    let carol = token(&pool, "carol", Power::Read, None);
    let (mut r, mut w) = connect(&pool, &carol).await;
    let bytes = b"#!/bin/sh\necho hello\n";
    let exe = carmi_api::msg::ExecutableRef {
        name: "x.sh".into(),
        sha256: carmi_api::exe::sha256_hex(bytes),
        size: bytes.len() as u64,
    };
    let sends = [
        (
            ToGlobal::Upload {
                executable: exe.clone(),
            },
            &bytes[..],
            "needs power submit",
        ),
        (
            ToGlobal::Fetch {
                sha256: exe.sha256.clone(),
            },
            &[][..],
            "local RM's staging",
        ),
        (
            ToGlobal::StageServe {
                endpoint: "127.0.0.1:1".into(),
            },
            &[][..],
            "local RM's staging",
        ),
    ];
    for (msg, payload, why) in sends {
        write_frame(&mut w, &msg, payload).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), r.read::<FromGlobal>()).await;
        match answer {
            Ok(Ok(Some((FromGlobal::AdminFailed(f), _)))) => {
                assert!(f.message.contains("permission denied"), "{}", f.message);
                assert!(f.message.contains(why), "{}", f.message);
            }
            other => panic!("{msg:?} was not refused: {other:?}"),
        }
    }
    // Nothing was stored: a submitter's job with that file has to upload it.
    let store = pool.dir.join("global-state/executables").join(&exe.sha256);
    assert!(!store.exists(), "the reader's upload was stored");
    // The connection still serves what a reader may do.
    write_frame(&mut w, &ToGlobal::Status, &[]).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), r.read::<FromGlobal>()).await {
        Ok(Ok(Some((FromGlobal::Pool(_), _)))) => {}
        other => panic!("status after the refusals: {other:?}"),
    }
}

#[test]
fn uploads_are_held_to_a_quota_per_identity() {
    let options = carmi_tests::PoolOptions {
        global_args: vec!["--upload-quota-mib".into(), "1".into()],
        ..Default::default()
    };
    let pool = Pool::start_with("upload-quota", 1, &[vec![]], options);
    pool.wait_registered();
    let alice = token(&pool, "alice", Power::Submit, None);
    let bob = token(&pool, "bob", Power::Submit, None);
    // Alice's first job (a small master) fits; a 2 MiB master does not.
    submit(&pool, &alice).expect("a small upload fits the quota");
    let big = pool.dir.join("big.sh");
    let mut bytes = MASTER.as_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(b'#', 2 << 20));
    std::fs::write(&big, bytes).unwrap();
    let sub = pool.dir.join("big.sub");
    std::fs::write(&sub, "executable = big.sh\nqueue\n").unwrap();
    let out = carmi(&pool, &alice, &["submit", sub.to_str().unwrap()]);
    assert_refused(
        "alice's 2 MiB upload",
        allowed(&out),
        &["quota", "alice", "--upload-quota-mib"],
    );
    // The quota is alice's, not the pool's: bob still submits.
    submit(&pool, &bob).expect("bob's upload is charged to bob");
}

#[test]
fn a_journal_cut_at_its_start_gives_no_job_id_and_so_no_credential_again() {
    let mut pool = Pool::start("journal-cut", 1, &[vec![]]);
    pool.wait_registered();
    let alice = token(&pool, "alice", Power::Submit, None);
    let before: Vec<u64> = (0..3)
        .map(|_| submit(&pool, &alice).expect("submitted").parse().unwrap())
        .collect();
    // The journal is cut at its first record (damaged, say); the jobs' key
    // survives beside it.
    pool.kill_global();
    let state = pool.dir.join("global-state");
    std::fs::write(state.join("journal.log"), b"").unwrap();
    pool.restart_global();
    pool.wait_registered();
    let after: u64 = submit(&pool, &alice).expect("submitted").parse().unwrap();
    assert!(
        before.iter().all(|&b| after > b),
        "job {after} after the cut, {before:?} before it"
    );
    let key = carmi_api::jobcred::JobKey::load_or_create(&state.join("jobs.key")).unwrap();
    let new = key.credential(carmi_api::ids::JobId(after)).text();
    for b in before {
        assert_ne!(key.credential(carmi_api::ids::JobId(b)).text(), new);
    }
}

#[test]
fn a_global_rm_needs_a_signing_key_and_finds_the_one_beside_its_secret() {
    let dir = carmi_tests::scratch("needs-key");
    let secret = dir.join("pool.secret");
    let global = |extra: &[&str]| {
        std::process::Command::new(carmi_tests::bin_dir().join("carmi-global"))
            .args(["--listen", "127.0.0.1:0", "--secret"])
            .arg(&secret)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    carmi_api::files::write_private(&secret, &Secret::generate_text(), false).unwrap();
    // No key anywhere: refused, saying how to get one or how to go without.
    let out = global(&[]).wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "started without a key");
    assert!(
        err.contains("carmi pool init") && err.contains("--insecure"),
        "{err}"
    );
    // The key `carmi pool init` writes beside the secret is found: the
    // daemon serves, and a client holding only the secret is refused.
    let key = carmi_api::token::SigningKey::generate().unwrap();
    carmi_api::files::write_private(&dir.join("pool.key"), &key.to_text(), false).unwrap();
    let mut child = global(&[]);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening")
        .to_string();
    let only_secret = Secret::from_file(&secret).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let refused = rt.block_on(carmi_api::admin::pool_status(&addr, &only_secret));
    let _ = child.kill();
    let _ = child.wait();
    let why = refused
        .expect_err("a client without a token was served")
        .to_string();
    assert!(why.contains("no token"), "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}
