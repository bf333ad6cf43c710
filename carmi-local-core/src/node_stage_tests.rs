//! The core's side of peer staging: `FetchFrom` becomes a fetch effect,
//! its outcome is reported with `Fetched`, and a failure waits for the
//! global RM's next source.

use super::*;
use carmi_proto::msg::StageSource;

#[test]
fn fetch_from_a_peer_then_fall_back_after_a_bad_copy() {
    let mut h = Harness::new(1);
    h.register();
    h.global(spawn(1, 100, exe("w", 'b')));
    assert!(matches!(h.next(), Effect::Launch(_)));
    h.step(|c| c.on_cache_miss(ProcessId(1)));
    let sha256 = exe("w", 'b').sha256;
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Fetch {
            sha256: sha256.clone()
        }
    );
    let peer = StageSource::Peer {
        name: "m7".into(),
        endpoint: "127.0.0.1:1".into(),
    };
    h.global(FromGlobal::FetchFrom {
        sha256: sha256.clone(),
        source: peer.clone(),
    });
    assert_eq!(
        h.next(),
        Effect::FetchFrom {
            executable: exe("w", 'b'),
            source: peer.clone()
        }
    );
    // A repeated answer while fetching starts nothing.
    h.global(FromGlobal::FetchFrom {
        sha256: sha256.clone(),
        source: StageSource::Global,
    });
    h.nothing_else();
    h.step(|c| c.on_fetched(&sha256, peer.clone(), Err("SHA-256 mismatch".into())));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Fetched {
            sha256: sha256.clone(),
            source: peer,
            result: Err("SHA-256 mismatch".into())
        }
    );
    // No new Fetch: the global RM answers the report with another source.
    h.nothing_else();
    h.global(FromGlobal::FetchFrom {
        sha256: sha256.clone(),
        source: StageSource::Global,
    });
    assert!(matches!(
        h.next(),
        Effect::FetchFrom {
            source: StageSource::Global,
            ..
        }
    ));
    h.step(|c| c.on_fetched(&sha256, StageSource::Global, Ok(())));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Fetched {
            sha256,
            source: StageSource::Global,
            result: Ok(())
        }
    );
    assert!(matches!(h.next(), Effect::Launch(l) if l.process == ProcessId(1)));
    h.nothing_else();
}
