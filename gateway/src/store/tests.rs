//! Unit tests of the store: frames, uploads, eviction, reclamation, compaction, listing.

use std::sync::atomic::Ordering;

use rasa_fastpath::frame::{self, FrameIdentity};
use sha2::{Digest, Sha256};

use super::*;

fn store_with(budget: u64, arena: usize, lease: Duration, grace: Duration) -> Store {
    Store::new(
        StoreConfig {
            memory_budget: budget,
            arena_size: arena,
            lease,
            grace,
            key_lifetime: None,
            block_size: rasa_fastpath::frame::DEFAULT_BLOCK_SIZE,
            staging_memory: 256 << 20,
            warm_memory: 0,
        },
        None,
        None,
    )
}

fn store(budget: u64, arena: usize) -> Store {
    store_with(
        budget,
        arena,
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
}

async fn put(s: &Store, key: &str, body: &[u8]) -> Result<Arc<StoredVersion>, StoreError> {
    let mut up = s
        .writes()
        .begin(key, "application/octet-stream", body.len() as u64)
        .await?;
    for part in body.chunks(3) {
        up.write(part)?;
    }
    s.writes().commit(up, |_| Ok(()))
}

#[tokio::test]
async fn frames_validate_and_versions_stay_readable() {
    let s = store(1 << 20, 64 << 10);
    let v1 = put(&s, "k", b"one").await.unwrap();
    let v2 = put(&s, "k", b"two!").await.unwrap();
    assert_ne!(v1.version(), v2.version());
    assert_eq!(s.current("k").unwrap().version(), v2.version());
    assert_eq!(
        s.version("k", v1.version()).unwrap().payload().as_slice(),
        b"one"
    );
    for v in [&v1, &v2] {
        let id = FrameIdentity {
            key_hash: frame::key_hash("k"),
            version: v.version().0,
            payload_len: v.len(),
        };
        let payload = frame::validate(v.frame.as_slice(), id, v.checksum()).unwrap();
        assert_eq!(payload, v.payload().as_slice());
    }
    assert_eq!(
        v2.sha256_hex(),
        hex::encode(Sha256::digest(b"two!")),
        "sha256 computed while streaming"
    );
    assert!(s.delete("k", |_| Ok(())).unwrap());
    assert!(s.current("k").is_none());
    assert!(s.version("k", v1.version()).is_none());
    assert!(!s.delete("k", |_| Ok(())).unwrap());
}

#[tokio::test]
async fn wrong_length_or_dropped_upload_publishes_nothing() {
    let s = store(1 << 20, 64 << 10);
    let mut up = s.writes().begin("k", "t", 4).await.unwrap();
    up.write(b"abc").unwrap();
    assert!(matches!(
        s.writes().commit(up, |_| Ok(())),
        Err(StoreError::LengthMismatch { .. })
    ));
    let mut up = s.writes().begin("k", "t", 2).await.unwrap();
    assert!(up.write(b"abc").is_err());
    drop(up);
    assert!(s.current("k").is_none());
}

#[tokio::test]
async fn a_value_that_can_never_fit_is_refused_at_once() {
    let s = store(256 << 10, 64 << 10);
    assert!(matches!(
        put(&s, "huge", &vec![0u8; 300 << 10]).await,
        Err(StoreError::InsufficientStorage { .. })
    ));
}

#[tokio::test]
async fn eviction_and_recycling_keep_memory_within_budget() {
    let s = store_with(
        256 << 10,
        64 << 10,
        Duration::from_millis(20),
        Duration::from_millis(5),
    );
    let mut last = Vec::new();
    for i in 0..200u32 {
        let body = vec![(i % 251) as u8; 20 << 10];
        let v = put(&s, &format!("k{}", i % 50), &body).await.unwrap();
        s.lease(&v);
        assert!(
            s.memory().allocated() <= 256 << 10,
            "over budget after {i} puts"
        );
        last = body;
    }
    // The most recent value is readable; older ones were evicted or overwritten.
    assert_eq!(s.current("k49").unwrap().payload().as_slice(), &last[..]);
    let st = s.memory().arena_stats();
    assert!(st.recycled.load(Ordering::Relaxed) > 0, "{st:?}");
    assert!(
        st.keys_revoked.load(Ordering::Relaxed) == 0,
        "no fabric, no keys"
    );
    // A large value gets its own arena within the budget, evicting what it must.
    let big = vec![9u8; 150 << 10];
    let v = put(&s, "big", &big).await.unwrap();
    assert!(v.arena.dedicated);
    assert!(s.memory().allocated() <= 256 << 10);
    assert_eq!(s.current("big").unwrap().payload().as_slice(), &big[..]);
}

#[tokio::test]
async fn arenas_wait_for_leases_and_local_readers_before_reuse() {
    let s = store_with(
        1 << 20,
        64 << 10,
        Duration::from_secs(5),
        Duration::from_millis(100),
    );
    // Fill one arena, lease a value in it, then make every value in it dead.
    let first = put(&s, "a", &[1u8; 40 << 10]).await.unwrap();
    let deadline = s.lease(&first);
    let reader = first.payload(); // like an HTTP body in flight
    let (arena_id, old) = (first.arena.id, first.version());
    put(&s, "b", &[2u8; 40 << 10]).await.unwrap(); // seals the first arena
    put(&s, "a", &[3u8; 10]).await.unwrap(); // overwrites the only value in it
    drop(first);
    // Not before the lease deadline plus grace: until then the old version reads by id.
    for now in [SystemTime::now(), deadline + Duration::from_millis(99)] {
        s.memory().drain_dead(now);
        assert_eq!(s.memory().arena_counts().draining, 0);
        assert!(
            s.version("a", old).is_some(),
            "leased: still readable by id"
        );
        assert_eq!(s.arenas.reclaim(now), 0);
    }
    let after = deadline + Duration::from_millis(101);
    s.memory().drain_dead(after);
    assert_eq!(s.memory().arena_counts().draining, 1);
    assert!(s.version("a", old).is_none(), "unreachable once drained");
    // ...and not while a local reader holds its memory.
    assert_eq!(s.arenas.reclaim(after), 0);
    assert_eq!(reader.as_slice()[0], 1, "bytes unchanged under a reader");
    drop(reader);
    assert_eq!(s.arenas.reclaim(after), 1);
    let counts = s.memory().arena_counts();
    assert_eq!(
        (counts.draining, counts.free),
        (0, 1),
        "{counts:?} (arena {arena_id})"
    );
    // The old version went with it.
    assert_eq!(s.current("a").unwrap().payload().as_slice(), &[3u8; 10]);
}

#[tokio::test]
async fn compaction_moves_live_values_out_of_sparse_arenas() {
    let s = store_with(
        192 << 10,
        64 << 10,
        Duration::from_millis(1),
        Duration::ZERO,
    );
    // Arena 1: one small live value among dead ones.
    let (kept_version, kept_arena) = {
        let v = put(&s, "keep", b"kept value").await.unwrap();
        (v.version(), v.arena.id)
    };
    for i in 0..5 {
        put(&s, &format!("dead{i}"), &[0u8; 10 << 10])
            .await
            .unwrap();
    }
    for i in 0..5 {
        s.delete(&format!("dead{i}"), |_| Ok(())).unwrap();
    }
    // Fill the rest of the budget.
    for i in 0..4 {
        put(&s, &format!("fill{i}"), &[1u8; 40 << 10])
            .await
            .unwrap();
    }
    let mut spin = 0;
    while s.memory().arena_stats().compacted.load(Ordering::Relaxed) == 0 {
        put(&s, &format!("more{spin}"), &[2u8; 40 << 10])
            .await
            .unwrap();
        spin += 1;
        assert!(spin < 20, "no compaction happened");
    }
    let after = s
        .current("keep")
        .expect("a compacted value stays reachable");
    assert_eq!(
        after.version(),
        kept_version,
        "compaction keeps the version id"
    );
    assert_ne!(
        after.arena.id, kept_arena,
        "the value moved to another arena"
    );
    assert_eq!(after.payload().as_slice(), b"kept value");
}

#[tokio::test]
async fn list_pages_in_key_order_within_prefix() {
    let s = store(1 << 20, 64 << 10);
    for k in ["a/1", "a/2", "a/3", "b/1", "a"] {
        put(&s, k, k.as_bytes()).await.unwrap();
    }
    let keys =
        |v: Vec<Arc<StoredVersion>>| v.iter().map(|x| x.key().to_string()).collect::<Vec<_>>();
    let (p, more) = s.list("a/", None, 2);
    assert_eq!((keys(p), more), (vec!["a/1".into(), "a/2".into()], true));
    let (p, more) = s.list("a/", Some("a/2"), 2);
    assert_eq!((keys(p), more), (vec!["a/3".to_string()], false));
    let (p, _) = s.list("", Some("a/3"), 10);
    assert_eq!(keys(p), vec!["b/1".to_string()]);
}

#[tokio::test]
async fn listing_merges_every_shard_in_key_order() {
    let s = store(8 << 20, 1 << 20);
    // 2,000 keys, spread over every shard, stored in a scattered order; some outside the
    // prefix on both sides.
    let mut want = Vec::new();
    for i in 0..2000u32 {
        let k = format!("p/{:05}", (i * 7919) % 2000);
        put(&s, &k, b"v").await.unwrap();
        want.push(k);
    }
    put(&s, "o", b"v").await.unwrap();
    put(&s, "q", b"v").await.unwrap();
    want.sort();
    let mut got = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, more) = s.list("p/", after.as_deref(), 333);
        got.extend(page.iter().map(|v| v.key().to_owned()));
        after = got.last().cloned();
        if !more {
            break;
        }
        assert_eq!(page.len(), 333);
    }
    assert_eq!(got, want);
}

#[test]
fn version_ids_parse_and_print() {
    let v = VersionId(0x00ab_cdef_0123_4567);
    assert_eq!(v.to_string(), "00abcdef01234567");
    assert_eq!("00abcdef01234567".parse::<VersionId>(), Ok(v));
    assert!("abc".parse::<VersionId>().is_err());
    assert!("+0abcdef01234567".parse::<VersionId>().is_err());
}

proptest::proptest! {
    /// The pattern in the OpenAPI document accepts exactly the version ids the server parses.
    #[test]
    fn the_documented_version_pattern_is_the_servers_rule(s in "[0-9a-fA-FgG ]{14,18}") {
        let pattern = regex::Regex::new(VERSION_PATTERN).unwrap();
        proptest::prop_assert_eq!(pattern.is_match(&s), s.parse::<VersionId>().is_ok(), "{:?}", s);
    }
}

#[tokio::test]
async fn a_streaming_dedicated_upload_is_charged_as_its_bytes_arrive() {
    // 64 MiB budget, 1 MiB arenas: a 40 MiB value needs a dedicated arena.
    let s = store_with(
        64 << 20,
        1 << 20,
        Duration::from_millis(50),
        Duration::from_millis(10),
    );
    let len = 40u64 << 20;
    let mut crawling = Vec::new();
    // Four uploads declaring 40 MiB each (160 MiB, more than the budget) and sending
    // nothing: each holds one step of the budget, not its declared length.
    for i in 0..4 {
        let up = s
            .writes()
            .begin_streaming(&format!("crawl{i}"), "x", len, None)
            .await
            .unwrap();
        crawling.push(up);
    }
    assert!(
        s.memory().allocated() <= 4 * arena::CHARGE_STEP + (4 << 20),
        "{}",
        s.memory().allocated()
    );
    // An honest upload still fits, and is charged in full when its last byte is in.
    let body = vec![7u8; 20 << 20];
    let mut up = s
        .writes()
        .begin_streaming("honest", "x", body.len() as u64, None)
        .await
        .unwrap();
    for part in body.chunks(1 << 20) {
        s.writes().write(&mut up, part).await.unwrap();
    }
    let v = s.writes().commit(up, |_| Ok(())).unwrap();
    assert!(v.arena.dedicated);
    assert_eq!(v.arena.charged(), v.arena.buffer.capacity() as u64);
    assert_eq!(s.current("honest").unwrap().payload().as_slice(), &body[..]);
    // Writing past the charge without the store is refused, never unaccounted.
    assert!(crawling[0]
        .write(&vec![0u8; (arena::CHARGE_STEP as usize) * 2])
        .is_err());
    // Abandoned, the crawlers give back exactly what they were charged.
    let before = s.memory().allocated();
    let held: u64 = crawling.iter().map(|u| u.charged()).sum();
    drop(crawling);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.memory().allocated() > before - held {
        s.memory().make_room();
        s.memory().reclaim();
        assert!(
            std::time::Instant::now() < deadline,
            "allocated {} of {}",
            s.memory().allocated(),
            before - held
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.memory().allocated(), before - held);
}

/// Uploads for shared arenas hold staging memory until they finish: with all of it in use
/// the next one waits, and is answered Busy once the wait has lasted a lease plus twice
/// the grace; as soon as an upload finishes (stored or dropped) the next one goes ahead.
#[tokio::test]
async fn staging_memory_bounds_uploads_in_progress() {
    let arena = 64 << 10;
    let mut s = store_with(
        8 << 20,
        arena,
        Duration::from_millis(100),
        Duration::from_millis(10),
    );
    s.config.staging_memory = 0; // at least one arena's worth is allowed anyway
    let s = Arc::new(Store::new(s.config, None, None));
    let first = s.writes().begin("a", "x", 60 << 10).await.unwrap();
    let waited = std::time::Instant::now();
    let second = s.writes().begin("b", "x", 60 << 10).await;
    assert!(matches!(second, Err(StoreError::Busy { .. })), "{second:?}");
    assert!(waited.elapsed() >= Duration::from_millis(120));
    let next = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.writes().begin("c", "x", 60 << 10).await.map(|_| ()) })
    };
    drop(first);
    next.await
        .unwrap()
        .expect("staging memory freed by the dropped upload");
    // A value larger than an arena is written in place and takes no staging memory.
    let _big = s.writes().begin("d", "x", 1 << 20).await.unwrap();
    let _small = s.writes().begin("e", "x", 60 << 10).await.unwrap();
}

/// A fill publishing `body` for `key` under `ticket` (as read-through does).
async fn fill(
    s: &Store,
    key: &str,
    body: &[u8],
    ticket: &super::FillTicket,
) -> Result<Arc<StoredVersion>, StoreError> {
    let mut up = s
        .writes()
        .begin(key, "application/octet-stream", body.len() as u64)
        .await?;
    up.write(body)?;
    s.writes().commit_fill(up, ticket, |_| Ok(()))
}

#[tokio::test]
async fn a_fill_does_not_bring_back_a_key_deleted_while_it_fetched() {
    let s = store(1 << 20, 64 << 10);
    // Deleted before the fill's ticket: the fill fetched after the delete, and publishes.
    s.delete("k", |_| Ok(())).unwrap();
    let early = s.fill_ticket();
    // Deleted while it fetched (of a key absent here, as after a put and a delete).
    let t = s.fill_ticket();
    s.delete("k", |_| Ok(())).unwrap();
    assert!(matches!(
        fill(&s, "k", b"old", &t).await,
        Err(StoreError::PreconditionFailed(_))
    ));
    assert!(s.current("k").is_none(), "the delete stands");
    assert!(
        matches!(
            fill(&s, "k", b"old", &early).await,
            Err(StoreError::PreconditionFailed(_))
        ),
        "the delete came after this ticket too"
    );
    // A ticket after the delete, or a delete of another key, stops nothing.
    let later = s.fill_ticket();
    s.delete("other", |_| Ok(())).unwrap();
    fill(&s, "k", b"new", &later).await.unwrap();
    assert_eq!(s.current("k").unwrap().payload().as_slice(), b"new");
    // Many deletes while fills run: tombstones are pruned, but never one a fill needs.
    for i in 0..200 {
        s.delete(&format!("x{i}"), |_| Ok(())).unwrap();
    }
    let t = s.fill_ticket();
    s.delete("k", |_| Ok(())).unwrap();
    for i in 0..200 {
        s.delete(&format!("y{i}"), |_| Ok(())).unwrap();
    }
    assert!(fill(&s, "k", b"again", &t).await.is_err());
    drop((t, later, early));
    // No ticket out: deletes leave no tombstone, and a fill's ticket taken now publishes.
    s.delete("k", |_| Ok(())).unwrap();
    let t = s.fill_ticket();
    fill(&s, "k", b"fresh", &t).await.unwrap();
}
