use super::*;

const SHA: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// A staging state with `n` local RMs (links 1..=n, machines m1..), each serving.
fn pool(n: u64, fanout: u32) -> Staging {
    let mut s = Staging::new(StagingConfig {
        fanout,
        ..StagingConfig::default()
    });
    for i in 1..=n {
        s.on_local_opened(LinkId(i), format!("m{i}"));
        s.on_endpoint(LinkId(i), format!("127.0.0.1:{}", 9000 + i));
    }
    s.on_stored(SHA);
    s
}

/// Every message through the real encoding, as (link, source name or "global"/"none").
fn take(s: &mut Staging) -> Vec<(u64, String)> {
    s.sanity_check();
    s.take_outputs()
        .into_iter()
        .map(|(l, m)| {
            let json = serde_json::to_string(&m).unwrap();
            let m: FromGlobal = serde_json::from_str(&json).unwrap();
            let src = match m {
                FromGlobal::FetchFrom {
                    source: StageSource::Global,
                    ..
                } => "global".to_string(),
                FromGlobal::FetchFrom {
                    source: StageSource::Peer { name, .. },
                    ..
                } => name,
                FromGlobal::NoExecutable { .. } => "none".to_string(),
                other => panic!("unexpected {other:?}"),
            };
            (l.0, src)
        })
        .collect()
}

#[test]
fn sixty_four_fetches_form_a_tree_and_the_store_serves_only_fanout() {
    let mut s = pool(64, 2);
    for i in 1..=64 {
        s.on_fetch(LinkId(i), SHA.into());
    }
    let out = take(&mut s);
    assert_eq!(
        out.len(),
        64,
        "every fetch is directed at once (pipelined holders)"
    );
    let from_global = out.iter().filter(|(_, src)| src == "global").count();
    assert_eq!(from_global, 2);
    // No source serves more than the fan-out, nobody fetches from itself.
    let mut per: HashMap<&str, usize> = HashMap::new();
    for (l, src) in &out {
        assert_ne!(*src, format!("m{l}"));
        *per.entry(src.as_str()).or_default() += 1;
    }
    assert!(per.values().all(|n| *n <= 2), "{per:?}");
    for i in 1..=64 {
        s.on_fetched(LinkId(i), SHA.into(), None);
    }
    assert!(take(&mut s).is_empty());
    let st = s.stats();
    assert_eq!(
        (st.directed_global, st.directed_peer, st.completed),
        (2, 62, 64)
    );
}

#[test]
fn the_default_fanout_makes_a_chain_each_machine_passing_it_to_the_next() {
    let mut s = Staging::new(StagingConfig::default());
    for i in 1..=8 {
        s.on_local_opened(LinkId(i), format!("m{i}"));
        s.on_endpoint(LinkId(i), format!("127.0.0.1:{}", 9000 + i));
    }
    s.on_stored(SHA);
    for i in 1..=8 {
        s.on_fetch(LinkId(i), SHA.into());
    }
    let out = take(&mut s);
    let expected: Vec<(u64, String)> = (1..=8)
        .map(|i| {
            let src = if i == 1 {
                "global".to_string()
            } else {
                format!("m{}", i - 1)
            };
            (i, src)
        })
        .collect();
    assert_eq!(out, expected, "store -> m1 -> m2 -> ... -> m8");
}

#[test]
fn a_failed_peer_copy_falls_back_to_the_store_and_the_peer_is_not_offered_again() {
    let mut s = pool(3, 1);
    s.on_fetch(LinkId(1), SHA.into());
    s.on_fetch(LinkId(2), SHA.into());
    assert_eq!(take(&mut s), vec![(1, "global".into()), (2, "m1".into())]);
    // The store is the fallback, beyond its fan-out.
    s.on_fetched(LinkId(2), SHA.into(), Some("SHA-256 mismatch".into()));
    assert_eq!(take(&mut s), vec![(2, "global".into())]);
    // m1 served a bad copy: m3 is sent to m2 (receiving), not to m1.
    s.on_fetch(LinkId(3), SHA.into());
    assert_eq!(take(&mut s), vec![(3, "m2".into())]);
    for i in 1..=3 {
        s.on_fetched(LinkId(i), SHA.into(), None);
    }
    assert!(take(&mut s).is_empty());
    assert_eq!((s.stats().failed, s.stats().completed), (1, 3));
}

#[test]
fn a_source_that_disconnects_is_forgotten_and_queued_fetches_move_on() {
    let mut s = pool(3, 1);
    s.on_fetch(LinkId(1), SHA.into());
    s.on_fetch(LinkId(2), SHA.into());
    s.on_fetch(LinkId(3), SHA.into());
    // Chain: store -> m1 -> m2 -> m3.
    assert_eq!(
        take(&mut s),
        vec![(1, "global".into()), (2, "m1".into()), (3, "m2".into())]
    );
    s.on_closed(LinkId(2));
    assert!(take(&mut s).is_empty());
    // m3 sees its source gone and reports it.
    s.on_fetched(LinkId(3), SHA.into(), Some("closed mid-transfer".into()));
    assert_eq!(take(&mut s), vec![(3, "global".into())]);
}

#[test]
fn unknown_executables_are_refused_and_a_store_failure_tries_a_peer() {
    let mut s = pool(2, 2);
    let other = "b".repeat(64);
    s.on_fetch(LinkId(1), other);
    assert_eq!(take(&mut s), vec![(1, "none".into())]);
    s.on_fetch(LinkId(1), SHA.into());
    assert_eq!(take(&mut s), vec![(1, "global".into())]);
    s.on_fetched(LinkId(1), SHA.into(), None);
    s.on_fetch(LinkId(2), SHA.into());
    s.on_fetch(LinkId(2), SHA.into());
    // The store has room, so it serves (the repeated fetch is ignored).
    assert_eq!(take(&mut s), vec![(2, "global".into())]);
    // The store failed: a peer.
    s.on_fetched(LinkId(2), SHA.into(), Some("disk full".into()));
    assert_eq!(take(&mut s), vec![(2, "m1".into())]);
    // The peer failed: the store again.
    s.on_fetched(LinkId(2), SHA.into(), Some("stalled".into()));
    assert_eq!(take(&mut s), vec![(2, "global".into())]);
    // The store failed, m1 failed before: no source left.
    s.on_fetched(LinkId(2), SHA.into(), Some("disk full".into()));
    assert_eq!(take(&mut s), vec![(2, "none".into())]);
}

#[test]
fn a_fetch_never_reported_gives_its_slot_back_after_the_timeout() {
    // One source slot (the store, fan-out 1), one new executable: m1
    // fetches it and never reports; m2 waits behind it.
    let mut s = Staging::new(StagingConfig {
        fanout: 1,
        fetch_timeout: Duration::from_secs(60),
    });
    for i in 1..=2 {
        s.on_local_opened(LinkId(i), format!("m{i}"));
    }
    s.on_stored(SHA);
    s.set_now(Duration::from_secs(10));
    s.on_fetch(LinkId(1), SHA.into());
    assert_eq!(take(&mut s), [(1, "global".to_string())]);
    s.on_fetch(LinkId(2), SHA.into());
    assert!(take(&mut s).is_empty(), "m2 waits for the store's one slot");
    assert_eq!(s.next_deadline(), Some(Duration::from_secs(70)));
    s.on_tick(Duration::from_secs(69));
    assert!(take(&mut s).is_empty(), "not before the timeout");
    s.on_tick(Duration::from_secs(70));
    assert_eq!(take(&mut s), [(2, "global".to_string())]);
    // m1's late report changes nothing; m2's completes.
    s.on_fetched(LinkId(1), SHA.into(), None);
    s.on_fetched(LinkId(2), SHA.into(), None);
    assert!(take(&mut s).is_empty());
    assert_eq!(s.next_deadline(), None);
}
