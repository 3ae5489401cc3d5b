//! Unit tests of the disk tier over real files in a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::store::{ObjectHeaders, Store, StoreConfig, VersionId};

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rasa-disk-{tag}-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(dir: &std::path::Path, size: u64, admit: Admit) -> DiskConfig {
    DiskConfig {
        root: dir.to_owned(),
        dir: dir.to_owned(),
        size,
        segment_size: 256 << 10,
        admit,
        recover: true,
    }
}

/// A store of 256 KiB in 64 KiB arenas over a disk tier in `dir`.
fn store(dir: &std::path::Path, size: u64, admit: Admit) -> Arc<Store> {
    Arc::new(Store::new(
        StoreConfig {
            memory_budget: 256 << 10,
            arena_size: 64 << 10,
            // A PUT waits up to a lease and twice the grace for room, here for the writer.
            lease: Duration::from_millis(500),
            grace: Duration::from_millis(1),
            key_lifetime: None,
            block_size: 0,
            staging_memory: 1 << 20,
            warm_memory: 0,
        },
        None,
        Some(Disk::open(config(dir, size, admit)).unwrap()),
    ))
}

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Stores `body` under `key`, as a client would: a `Busy` answer (memory full while the
/// disk tier's writer is still behind, on a loaded machine) is retried after the wait it
/// names, a few times.
async fn put(s: &Store, key: &str, body: &[u8]) -> Arc<StoredVersion> {
    let mut tries = 0;
    let mut up = loop {
        match s
            .writes()
            .begin(key, "text/x-rasa-test", body.len() as u64)
            .await
        {
            Ok(up) => break up,
            Err(crate::store::StoreError::Busy { retry_after }) if tries < 10 => {
                tries += 1;
                tokio::time::sleep(retry_after).await;
            }
            Err(e) => panic!("put {key} (after {tries} retries): {e}"),
        }
    };
    up.set_headers(ObjectHeaders {
        metadata: vec![("seq".into(), key.into())],
        ..ObjectHeaders::default()
    });
    up.write(body).unwrap();
    s.writes().commit(up, |_| Ok(())).unwrap()
}

async fn read(s: &Arc<Store>, key: &str) -> Option<Arc<StoredVersion>> {
    match s.current(key) {
        Some(v) => Some(v),
        None => s.tier().from_disk(key, Want::Read).await.unwrap(),
    }
}

/// PUTs `k0`…`k{n-1}` (20 KB each, through 256 KiB of memory), waits until the disk
/// tier has written what was evicted; their version ids.
async fn fill(s: &Store, n: usize) -> Vec<VersionId> {
    let mut versions = Vec::new();
    for i in 0..n {
        versions.push(put(s, &format!("k{i}"), &value(i, 20_000)).await.version());
    }
    flushed(s);
    versions
}

fn flushed(s: &Store) {
    assert!(
        s.disk().unwrap().flush(Duration::from_secs(10)),
        "the writer syncs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_values_come_back_from_disk_exact_with_their_extras() {
    let dir = temp("back");
    let s = store(&dir, 64 << 20, Admit::Never);
    let versions = fill(&s, 64).await;
    let spilled = s.disk().unwrap().stats().spilled.load(Ordering::Relaxed);
    assert!(
        spilled >= 40,
        "most of 1.25 MiB spilled from 256 KiB: {spilled}"
    );
    for (i, version) in versions.iter().enumerate() {
        let key = format!("k{i}");
        let v = read(&s, &key)
            .await
            .unwrap_or_else(|| panic!("{key} is kept"));
        assert_eq!(v.payload().as_slice(), &value(i, 20_000)[..], "{key}");
        assert_eq!(v.version(), *version, "{key} keeps its version");
        assert_eq!(v.content_type(), "text/x-rasa-test");
        assert_eq!(
            v.headers().unwrap().metadata,
            vec![("seq".into(), key.clone())]
        );
    }
    assert!(
        s.current("k0").is_none(),
        "admission never: still only on disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_recovers_values_and_never_resurrects_overwritten_or_deleted_ones() {
    let dir = temp("restart");
    let s = store(&dir, 64 << 20, Admit::FirstHit);
    fill(&s, 64).await;
    assert!(s.tier().on_disk("k0") && s.tier().on_disk("k1"));
    put(&s, "k0", b"newer, in memory only").await;
    assert!(
        s.delete("k1", |_| Ok(())).unwrap(),
        "a key only on disk is deleted"
    );
    flushed(&s);
    drop(s);

    let s = store(&dir, 64 << 20, Admit::FirstHit);
    let rec = s.disk().unwrap().recovered();
    assert_eq!(rec.torn, 0);
    assert!(
        read(&s, "k0").await.is_none(),
        "overwritten: its old bytes never return"
    );
    assert!(read(&s, "k1").await.is_none(), "deleted");
    let v = read(&s, "k2").await.unwrap();
    assert_eq!(v.payload().as_slice(), &value(2, 20_000)[..]);
    assert!(s.current("k2").is_some(), "first-hit admission promoted it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_and_never_served() {
    let dir = temp("torn");
    let s = store(&dir, 64 << 20, Admit::Never);
    fill(&s, 64).await;
    let before = s.disk().unwrap().usage().0;
    drop(s);
    // A crash in the middle of a record: its head and half its body.
    let last = *segments::list(&dir).unwrap().iter().max().unwrap();
    let path = segments::path_of(&dir, last);
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let scanned = segments::scan(&file, last).unwrap();
    let (_, Some(e)) = scanned.records.last().copied().unwrap() else {
        panic!("a value last")
    };
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(u64::from(e.off) + u64::from(e.len) / 2).unwrap();
    drop(f);

    let s = store(&dir, 64 << 20, Admit::Never);
    let rec = s.disk().unwrap().recovered();
    assert!(rec.torn > 0, "the torn record is counted");
    assert_eq!(rec.values, before - 1, "every other value is back");
    assert!(
        std::fs::metadata(&path).unwrap().len() < len,
        "the file is cut"
    );
    for i in 0..64 {
        if let Some(v) = read(&s, &format!("k{i}")).await {
            assert_eq!(v.payload().as_slice(), &value(i, 20_000)[..], "k{i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_deletes_its_oldest_segment_and_keeps_the_newest_values() {
    let dir = temp("full");
    let size = 1 << 20;
    let s = store(&dir, size, Admit::Never);
    fill(&s, 200).await;
    let disk = s.disk().unwrap();
    let (_, bytes, _) = disk.usage();
    assert!(bytes <= size, "{bytes} within {size}");
    assert!(disk.stats().evicted.load(Ordering::Relaxed) > 0);
    assert_eq!(disk.stats().dropped.load(Ordering::Relaxed), 0);
    assert!(
        read(&s, "k0").await.is_none(),
        "the oldest went with its segment"
    );
    let v = read(&s, "k180").await.expect("a recent value is kept");
    assert_eq!(v.payload().as_slice(), &value(180, 20_000)[..]);
}

#[test]
fn a_directory_in_use_by_another_tier_is_refused() {
    let dir = temp("locked");
    let first = Disk::open(config(&dir, 1 << 20, Admit::FirstHit)).unwrap();
    let e = Disk::open(config(&dir, 1 << 20, Admit::FirstHit)).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    drop(first);
    Disk::open(config(&dir, 1 << 20, Admit::FirstHit)).expect("free again once closed");
}

#[test]
fn a_directory_too_small_or_unwritable_is_refused_with_a_reason() {
    let dir = temp("small");
    let huge = 1u64 << 60;
    let e = Disk::open(config(&dir, huge, Admit::FirstHit)).unwrap_err();
    assert!(
        e.to_string().contains("--disk-size") && e.to_string().contains("free"),
        "{e}"
    );
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let e = Disk::open(config(&file, 1 << 20, Admit::FirstHit)).unwrap_err();
    assert!(e.to_string().starts_with("--disk "), "{e}");
}

#[test]
fn removing_a_tier_deletes_its_own_files_only() {
    let dir = temp("remove");
    let disk = Disk::open(config(&dir, 1 << 20, Admit::FirstHit)).unwrap();
    assert!(disk.close_cleanly(std::time::Duration::from_secs(5)));
    drop(disk);
    let foreign = segments::path_of(&dir, 0x99);
    std::fs::write(&foreign, b"not a segment").unwrap();
    std::fs::write(dir.join("notes.txt"), b"the operator's").unwrap();
    let e = segments::remove_tier(&dir).unwrap_err();
    assert!(e.to_string().contains("not the disk tier's"), "{e}");
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["00000099.seg", "notes.txt"],
        "only what was not the tier's"
    );
    std::fs::remove_file(&foreign).unwrap();
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    // An empty tier goes whole.
    let disk = Disk::open(config(&dir, 1 << 20, Admit::FirstHit)).unwrap();
    drop(disk);
    segments::remove_tier(&dir).unwrap();
    assert!(!dir.exists());
}
