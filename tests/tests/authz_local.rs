//! A local RM admits applications by token, not by the pool secret (issue
//! 21 item 2), against a real `carmi-global` (with the pool's signing key)
//! and a real `carmi-local`: a new job needs a token with power submit,
//! checked by the global RM (which knows the revocations), and is owned by
//! its identity; a refusal says who, what and the missing power, and closes
//! only that connection. A local RM's control connection needs the
//! machine's own daemon token or an admin token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_api::client::{ConnectError, ConnectOptions, EventStream, Incoming, connect};
use carmi_api::control::{ControlError, OwnerLink};
use carmi_api::handshake::Secret;
use carmi_api::msg::{FromLocalControl, OwnerEvent};
use carmi_api::token::Power;
use carmi_tests::{Pool, text};

/// A token file for `identity` with `power`, signed with the pool's key.
fn token(pool: &Pool, identity: &str, power: Power) -> PathBuf {
    let path = pool.dir.join(format!("{identity}-{power}.token"));
    pool.token_file(&path, identity, power, None, 3600);
    path
}

/// The pool secret presenting the token in `file` (`None`: no token).
fn secret(pool: &Pool, file: Option<&Path>) -> Secret {
    let token = file.map(|f| carmi_api::token::read_token_file(f).unwrap());
    pool.secret.clone().with_token(token)
}

/// An application starting a new job on m0's local RM presenting the token
/// in `file`: its job id, or why the pool refused it.
async fn start_job(
    pool: &Pool,
    file: Option<&Path>,
) -> Result<(carmi_api::client::Carmi, EventStream), String> {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), secret(pool, file));
    match connect(opts).await {
        Ok(app) => Ok(app),
        Err(e @ ConnectError::Refused { .. }) => Err(e.to_string()),
        Err(e) => panic!("connecting failed otherwise than by a refusal: {e}"),
    }
}

/// The owner `carmi q --json` shows for `job`.
fn owner_of(pool: &Pool, job: u64) -> String {
    let out = pool.carmi().args(["q", "--json"]).output().unwrap();
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = (jobs.as_array().unwrap().iter()).find(|j| j["job"].as_u64() == Some(job));
    found.unwrap_or_else(|| panic!("job {job} in {jobs}"))["owner"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Asserts that the application behind `app` is still served: a request is answered.
async fn still_served(app: &carmi_api::client::Carmi, events: &mut EventStream) {
    let asked = app.define_class("any", "true");
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        // Any answer will do (the second definition fails as a duplicate).
        while let Some(incoming) = events.next().await {
            if let Incoming::Rm(event) = incoming
                && event.request() == asked
            {
                return true;
            }
        }
        false
    });
    assert!(
        answered.await.unwrap_or(false),
        "the other application is no longer served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_job_needs_a_token_that_may_submit_and_is_owned_by_its_identity() {
    let pool = Pool::start("authz-local", 1, &[vec![]]);
    pool.wait_registered();
    // An application of another user's, already running on the same local RM.
    let (other, mut other_events) = start_job(&pool, Some(&pool.admin_token)).await.unwrap();

    let carol = token(&pool, "carol", Power::Read);
    let refused = start_job(&pool, Some(&carol)).await.err().unwrap();
    assert!(
        refused.contains("`carol` (power read) may not start a job: it needs power submit"),
        "{refused}"
    );
    let refused = start_job(&pool, None).await.err().unwrap();
    assert!(
        refused.contains("without a token") && refused.contains("power submit"),
        "{refused}"
    );
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
    assert!(
        log.contains("`carol` (power read) may not start a job"),
        "{log}"
    );
    // Nor may it join another's job by declaring it, without that job's
    // credential (with the pool secret alone, or a token without admin).
    for file in [None, Some(carol.as_path())] {
        let mut opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), secret(&pool, file));
        opts.job = Some(other.job());
        let refused = connect(opts).await.err().unwrap().to_string();
        let job = other.job();
        assert!(
            refused.contains(&format!("joining job {job} without its credential needs")),
            "{refused}"
        );
    }
    // Each refusal closed its own connection only.
    still_served(&other, &mut other_events).await;

    // A submit token starts the job, which its identity owns.
    let made = pool
        .carmi()
        .args([
            "token",
            "create",
            "--identity",
            "alice",
            "--authz",
            "submit",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let alice = pool.dir.join("alice.token");
    carmi_api::files::write_private(&alice, &text(&made.stdout), false).unwrap();
    let (app, _events) = start_job(&pool, Some(&alice)).await.unwrap();
    assert_eq!(owner_of(&pool, app.job().0), "alice");
    assert_eq!(owner_of(&pool, other.job().0), "admin");

    // Revoked, it is refused at its next connection.
    let list = pool
        .carmi()
        .args(["token", "list", "--json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = (list.as_array().unwrap().iter())
        .find(|t| t["identity"] == "alice")
        .expect("alice's token is listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let revoked = pool
        .carmi()
        .args(["token", "revoke", &id])
        .output()
        .unwrap();
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let refused = start_job(&pool, Some(&alice)).await.err().unwrap();
    assert!(refused.contains("revoked"), "{refused}");
    still_served(&other, &mut other_events).await;
}

/// What a control connection to m0's local RM presenting the token in
/// `file` gets for an owner's arrival: `Ok` once applied, else why not.
async fn control(pool: &Pool, file: Option<&Path>) -> Result<(), String> {
    let addr = &pool.locals[0].app_addr;
    let mut link = match OwnerLink::connect(addr, &secret(pool, file)).await {
        Ok(link) => link,
        Err(e @ ControlError::Handshake { .. }) => return Err(e.to_string()),
        Err(e) => panic!("{e}"),
    };
    match link.send(OwnerEvent::Leave).await {
        Ok(FromLocalControl::OwnerApplied { .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_connection_needs_the_machines_daemon_token_or_an_admin_token() {
    let pool = Pool::start("authz-control", 1, &[vec![]]);
    pool.wait_registered();
    let refused = control(&pool, None).await.unwrap_err();
    assert!(
        refused.contains("daemon token or power admin; none was presented"),
        "{refused}"
    );
    // Refused in the handshake, so the client is told why.
    let carol = token(&pool, "carol", Power::Read);
    let refused = control(&pool, Some(&carol)).await.unwrap_err();
    assert!(
        refused.contains("daemon token or power admin") && refused.contains("`carol` (power read)"),
        "{refused}"
    );
    let bob = token(&pool, "bob", Power::Submit);
    let refused = control(&pool, Some(&bob)).await.unwrap_err();
    assert!(refused.contains("`bob` (power submit)"), "{refused}");
    let log = std::fs::read_to_string(pool.dir.join("m0.log")).unwrap();
    assert!(
        log.contains("connection refused: a control connection needs")
            && log.contains("`carol` (power read)"),
        "{log}"
    );
    control(&pool, Some(&pool.admin_token)).await.unwrap();
    control(&pool, Some(&pool.dir.join("m0.token")))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_power_may_start_a_job_or_drive_the_owner_as_the_table_says() {
    let pool = Pool::start("authz-local-matrix", 1, &[vec![]]);
    pool.wait_registered();
    // (identity, power, start a job at m0's local RM, open its control connection)
    let rows = [
        ("carol", Power::Read, false, false),
        ("alice", Power::Submit, true, false),
        ("m9", Power::Daemon, false, false),
        ("root", Power::Admin, true, true),
    ];
    for (who, power, may_start, may_control) in rows {
        let path = pool.dir.join(format!("{who}.token"));
        let machine = (power == Power::Daemon).then_some("m9");
        pool.token_file(&path, who, power, machine, 3600);
        let row = format!("{who} ({power})");
        match start_job(&pool, Some(&path)).await {
            Ok((app, _events)) => {
                assert!(may_start, "{row} started a job");
                assert_eq!(owner_of(&pool, app.job().0), who, "{row}");
            }
            Err(e) => {
                assert!(!may_start, "{row} refused: {e}");
                let needles = [
                    who,
                    power.name(),
                    "may not start a job",
                    "needs power submit",
                ];
                assert!(needles.iter().all(|n| e.contains(n)), "{row}: {e}");
            }
        }
        let control = control(&pool, Some(&path)).await;
        assert_eq!(control.is_ok(), may_control, "{row} control: {control:?}");
        if let Err(e) = control {
            assert!(
                e.contains(&format!("`{who}` (power {power})")),
                "{row}: {e}"
            );
        }
    }
    // m0's own daemon token drives its owner, and starts no job.
    let own = pool.dir.join("m0.token");
    control(&pool, Some(&own)).await.unwrap();
    let refused = start_job(&pool, Some(&own)).await.err().unwrap();
    assert!(
        refused.contains("`m0` (power daemon) may not start a job"),
        "{refused}"
    );
}
