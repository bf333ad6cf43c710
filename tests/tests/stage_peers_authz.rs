//! A machine's staging listener (what peer local RMs fetch executables
//! from) serves other machines and admins only, as the global RM vouches
//! for the token each shows it (issue 37 item 6): the pool secret alone, or
//! a user's token, fetches nothing, against a real `carmi-global` and
//! `carmi-local`.

use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::handshake::{Secret, Towards};
use carmi_api::msg::ExecutableRef;
use carmi_api::stage::{Arrival, FetchSpec, fetch};
use carmi_api::token::Power;
use carmi_tests::Pool;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// What fetching an executable nobody has from the staging listener at
/// `addr` gives a client calling itself machine `name` and holding the pool
/// secret and the token in `file` (`None`: none): the error's words.
async fn fetch_from(pool: &Pool, addr: &str, name: &str, file: Option<&Path>) -> String {
    let token = file.map(|f| carmi_api::token::read_token_file(f).unwrap());
    let secret = Secret::from_file(&pool.secret_path)
        .unwrap()
        .with_token(token);
    let exe = ExecutableRef {
        name: "nothing".into(),
        sha256: "ab".repeat(32),
        size: 1,
    };
    let dest = pool.dir.join(format!("fetched-{}", rand_suffix()));
    let got = fetch(FetchSpec {
        addr,
        secret: &secret,
        towards: Towards::Local,
        name,
        executable: &exe,
        dest: &dest,
        arrival: &Arrival::new(),
    })
    .await;
    match got {
        Ok(()) => panic!("fetched an executable nobody has"),
        Err(e) => e.to_string(),
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machines_staging_listener_serves_other_machines_and_admins_only() {
    let pool = Pool::start("stage-peers-authz", 1, &[vec![]]);
    pool.wait_registered();
    let listen = format!("127.0.0.1:{}", free_port());
    let _m5 = pool.start_extra_local("m5", &pool.global_addr, &["--stage-listen", &listen]);
    let m0 = pool.dir.join("m0.token");
    // Until m5's link is up it has no certificate to prove itself with.
    let start = Instant::now();
    let mut got = fetch_from(&pool, &listen, "m0", Some(&m0)).await;
    while got.contains("not linked to the pool yet") && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        got = fetch_from(&pool, &listen, "m0", Some(&m0)).await;
    }
    // Another machine is let in: what it is told is about the executable.
    assert!(got.contains("does not hold it"), "{got}");
    let admin = fetch_from(&pool, &listen, "m0", Some(&pool.admin_token)).await;
    assert!(admin.contains("does not hold it"), "{admin}");
    // A machine calling itself another is not.
    let posing = fetch_from(&pool, &listen, "m7", Some(&m0)).await;
    assert!(
        posing.contains("may not advertise machine `m7`"),
        "{posing}"
    );

    let none = fetch_from(&pool, &listen, "m0", None).await;
    assert!(
        none.contains("needs a machine's daemon token or power admin; none was presented"),
        "{none}"
    );
    let bob = pool.dir.join("bob.token");
    pool.token_file(&bob, "bob", Power::Submit, None, 3600);
    let refused = fetch_from(&pool, &listen, "bob", Some(&bob)).await;
    assert!(
        refused.contains("`bob` (power submit) may not advertise"),
        "{refused}"
    );
}
