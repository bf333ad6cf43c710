//! Replication in one process: a real active feed and a real standby
//! replica over TCP with the handshake, in temporary state directories.

use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_global_core::journal::test_records::submitted;

use super::feed::{Feed, FeedConfig};
use super::lease::{self, Lease, LeaseInfo};
use super::replica::{self, Replica};
use super::wire::ToStandby;
use crate::journal::{Journal, Record};

fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn same(a: &Path, b: &Path, file: &str) {
    assert_eq!(
        std::fs::read(a.join(file)).unwrap(),
        std::fs::read(b.join(file)).unwrap(),
        "{file} differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_append_is_on_the_standby_with_the_files_it_needs() {
    let (active, standby, shared) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let lock = shared.path().join("lease");
    let secret = Secret::new(b"a replication secret of some length").unwrap();
    let listener = carmi_api::net::listen("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let replica = Replica::new(&addr, standby.path(), &lock);
    tokio::spawn(replica.clone().serve(listener, secret.clone()));

    std::fs::write(active.path().join("job-ids"), "64\n").unwrap();
    std::fs::create_dir(active.path().join("executables")).unwrap();
    let lease = Lease::try_take(&lock).unwrap().expect("free");
    let info = LeaseInfo {
        epoch: 1,
        active: "me".into(),
        serving: "me:9618".into(),
        ..LeaseInfo::default()
    };
    lease.write(&info).unwrap();
    let (mut journal, _, _) = Journal::open(active.path()).unwrap();
    journal.append(&[submitted(1)]).unwrap();
    let config = FeedConfig {
        state_dir: active.path().to_path_buf(),
        peers: vec![addr.clone()],
        secret,
    };
    let feed = Feed::start(config, lease, info);
    journal.set_mirror(Box::new(feed));
    let lock2 = lock.clone();
    tokio::task::spawn_blocking(move || {
        until("the standby in sync", || {
            lease::read(&lock2).unwrap().in_sync == [addr.clone()]
        })
    })
    .await
    .unwrap();
    assert_eq!(replica::held_epoch(standby.path()), Some(1));

    // An executable stored, then a record naming it: acknowledged means
    // both are on the standby's disk.
    std::fs::write(active.path().join("executables/ab12"), "#!/bin/sh\n").unwrap();
    let (a, s) = (active.path().to_path_buf(), standby.path().to_path_buf());
    let lock3 = lock.clone();
    tokio::task::spawn_blocking(move || {
        journal.append(&[submitted(2)]).unwrap();
        same(&a, &s, "journal.log");
        same(&a, &s, "executables/ab12");
        same(&a, &s, "job-ids");
        assert!(!s.join("jobs.key").exists());
        journal.append(&[Record::Ended { job: JobId(1) }]).unwrap();
        journal.compact().unwrap();
        same(&a, &s, "journal.log");
        let progress = replica.progress();
        assert!(progress.synced);
        assert_eq!(progress.have, 2, "records streamed since the feed began");
        let refusal = replica.refusal();
        assert!(refusal.contains("(in sync, 0 records behind"), "{refusal}");
        assert!(
            refusal.ends_with("the active manager is me:9618"),
            "{refusal}"
        );
        // Dropped from the in-sync set by the active: no longer in sync.
        let mut dropped = lease::read(&lock3).unwrap();
        dropped.in_sync.clear();
        std::fs::write(&lock3, dropped.to_text()).unwrap();
        assert!(
            replica.refusal().contains("not in sync"),
            "{}",
            replica.refusal()
        );
    })
    .await
    .unwrap();
}

#[test]
fn a_stream_older_than_the_lease_is_refused() {
    let (standby, shared) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lock = shared.path().join("lease");
    let info = LeaseInfo {
        epoch: 5,
        ..LeaseInfo::default()
    };
    std::fs::write(&lock, info.to_text()).unwrap();
    let replica = Replica::new("me", standby.path(), &lock);
    let begin = |epoch| ToStandby::Begin {
        seq: 1,
        epoch,
        active: "old".into(),
        serving: "old:9618".into(),
        you: "me".into(),
    };
    let err = replica.apply(1, begin(4), &[]).unwrap_err();
    assert!(err.contains("epoch 4"), "{err}");
    assert_eq!(replica.apply(2, begin(5), &[]).unwrap(), Some(1));
    // A path out of the state directory is refused.
    let evil = ToStandby::File {
        seq: 2,
        path: "../evil".into(),
    };
    assert!(replica.apply(2, evil, b"x").is_err());
    assert!(!shared.path().join("evil").exists());
    // Once this manager takes over, nothing more is applied.
    replica.stop();
    let late = ToStandby::Synced { seq: 3 };
    assert!(replica.apply(2, late, &[]).is_err());
    assert_eq!(replica::held_epoch(standby.path()), None);
}
