//! Near copies (`--cluster-near-cache`): a member serves plain reads of another owner's
//! keys from the owner's last answer, and no write is acknowledged while a copy of what
//! it replaced can still be served; a member the owner cannot reach holds up a write only
//! until its lease ends.

use std::time::{Duration, Instant};

use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{cluster_name, member_args, Etcd};
use rasa_tests::{pattern, Gateway};

use super::all_see;
use super::proof::secret_file;

/// Three members with near copies and a shared secret, without an origin.
fn near_fleet(etcd: &Etcd, tag: &str) -> Vec<Gateway> {
    super::secret_fleet(
        etcd,
        tag,
        &["--cluster-near-cache", "64MiB", "--fast-path", "off"],
    )
}

/// A started near fleet (`tag`) where every member sees the others, and which of its
/// members owns `key`.
async fn near_cluster(tag: &str, key: &str) -> (Etcd, Vec<Gateway>, usize) {
    let etcd = Etcd::start();
    let gws = near_fleet(&etcd, tag);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 3).await;
    let owner_url = &owner(key, &view.members).expect("an owner").url;
    let at = gws
        .iter()
        .position(|g| &g.base == owner_url)
        .expect("a member");
    (etcd, gws, at)
}

/// GET `key` at `gw`: status, whether a near copy answered, body.
async fn get(gw: &Gateway, key: &str) -> (u16, bool, Vec<u8>) {
    let r = rasa_tests::http()
        .get(gw.url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers().get("rasa-near-lease").is_none(),
        "the owner's lease is not the client's"
    );
    let near = r.headers().get("rasa-near").is_some();
    (r.status().as_u16(), near, r.bytes().await.unwrap().to_vec())
}

async fn put(gw: &Gateway, key: &str, body: &[u8]) -> Duration {
    let started = Instant::now();
    let r = rasa_tests::http()
        .put(gw.url(&format!("/v1/objects/{key}")))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "put {key}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_copies_serve_reads_and_never_outlive_a_write() {
    let key = "near/k";
    let (_etcd, gws, at) = near_cluster("near", key).await;
    let owner_gw = &gws[at];
    let others: Vec<&Gateway> = gws.iter().filter(|g| g.base != owner_gw.base).collect();

    put(owner_gw, key, &pattern(3000, 1)).await;
    // The first read of each other member goes to the owner and keeps its answer; the
    // next is served from the copy.
    for gw in &others {
        let (status, near, body) = get(gw, key).await;
        assert_eq!((status, near), (200, false));
        assert_eq!(body, pattern(3000, 1));
        let (status, near, body) = get(gw, key).await;
        assert_eq!((status, near), (200, true), "served near at {}", gw.base);
        assert_eq!(body, pattern(3000, 1));
    }

    // Every write — at the owner, or through another member — is acknowledged only once
    // no copy serves what it replaced: reads right after it see it everywhere.
    for round in 2..8u64 {
        let writer = &gws[round as usize % 3];
        let value = pattern(2000 + round as usize, round);
        put(writer, key, &value).await;
        for gw in &others {
            let (status, _, body) = get(gw, key).await;
            assert_eq!(status, 200);
            assert!(
                body == value,
                "round {round}: {} served replaced bytes",
                gw.base
            );
        }
        // And the copy is kept again.
        let (_, near, _) = get(others[0], key).await;
        assert!(near, "round {round}: a copy after the write");
    }

    // A batch (the SDK sends it to the owner) is a write like any other.
    let batch = pattern(1234, 77);
    let client = super::sdk(&others[1].base);
    let each = client
        .many()
        .put(&[(key, bytes::Bytes::from(batch.clone()))])
        .await
        .expect("put_many");
    assert!(each[0].is_ok());
    for gw in &others {
        let (status, _, body) = get(gw, key).await;
        assert!(status == 200 && body == batch, "{} after a batch", gw.base);
    }

    // A conditional or partial read is the owner's to answer, never a copy's.
    assert!(get(others[0], key).await.1, "a copy is held");
    let url = others[0].url(&format!("/v1/objects/{key}"));
    let etag = rasa_tests::http().get(&url).send().await.unwrap().headers()["etag"].clone();
    let r = rasa_tests::http()
        .get(&url)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304, "If-None-Match answered by the owner");
    let r = rasa_tests::http()
        .get(&url)
        .header("range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.headers().get("rasa-near").is_none());
    assert_eq!(r.bytes().await.unwrap().as_ref(), &batch[..10]);

    let r = rasa_tests::http()
        .delete(owner_gw.url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    for gw in &others {
        assert_eq!(
            get(gw, key).await.0,
            404,
            "a deleted key is gone everywhere"
        );
    }

    // Only a member revokes: a client's request is refused and changes nothing.
    put(owner_gw, key, &pattern(100, 9)).await;
    assert!(!get(others[0], key).await.1);
    assert!(get(others[0], key).await.1);
    let r = rasa_tests::http()
        .post(others[0].url("/v1/cluster/near"))
        .header("rasa-hop", "1")
        .body(format!("{key}\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(get(others[0], key).await.1, "the copy stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_be_told_holds_a_write_up_until_its_lease_ends() {
    let key = "near/frozen";
    let (_etcd, gws, at) = near_cluster("near-stop", key).await;
    let owner_gw = &gws[at];
    let holder = gws.iter().find(|g| g.base != owner_gw.base).unwrap();
    put(owner_gw, key, &pattern(500, 1)).await;
    get(holder, key).await;
    assert!(get(holder, key).await.1, "a copy is held");

    // The holder stops (SIGSTOP): it cannot be told, and it cannot serve either; the
    // owner acknowledges the write when the holder's lease has ended, not before and not
    // much later.
    super::kill(holder, "STOP");
    let kept_at = Instant::now();
    let took = put(owner_gw, key, &pattern(600, 2)).await;
    super::kill(holder, "CONT");
    assert!(
        took >= Duration::from_millis(300) && kept_at.elapsed() < Duration::from_secs(3),
        "the write waited {took:?} for a lease of 1s that began before it"
    );
    let (status, _, body) = get(holder, key).await;
    assert_eq!(status, 200);
    assert!(
        body == pattern(600, 2),
        "the resumed holder serves the write"
    );
}

/// A write is read nowhere while a copy of what it replaces can still be served: with a
/// holder its owner cannot tell (the members reach it through a relay that is cut; its
/// clients still reach it), a write waits out the holder's lease, and until it is
/// published a read at the owner answers the value it replaces. No read at the holder
/// after a read of the new value at the owner answers the old one (the chaos checker
/// found that: writes were published before their copies were revoked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_read_nowhere_until_the_copies_of_what_it_replaces_are_gone() {
    let etcd = Etcd::start();
    let name = cluster_name("near-order");
    let secret = secret_file("near-order", 0o600);
    let relay = rasa_tests::relay::Relay::unset().await;
    let start = |i: usize, advertise: Option<String>| {
        let mut args = member_args(&etcd, &name, &format!("g{i}"), "10s");
        args.extend(["--cluster-near-cache", "64MiB", "--fast-path", "off"].map(str::to_owned));
        args.extend([
            "--cluster-secret-file".to_owned(),
            secret.display().to_string(),
        ]);
        if let Some(url) = advertise {
            args.extend(["--advertise-url".to_owned(), url]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Gateway::start(&args)
    };
    // g1, the holder, is advertised at the relay; the others at their own address.
    let holder = start(1, Some(format!("http://{}", relay.addr)));
    relay.point_at(holder.addr);
    let gws = [holder, start(2, None), start(3, None)];
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = super::all_see(&refs, 3).await;
    let key = (0..)
        .map(|i| format!("near/order-{i}"))
        .find(|k| owner(k, &view.members).is_some_and(|m| m.node_id != "g1"))
        .expect("a key g1 does not own");
    let owner_id = &owner(&key, &view.members).unwrap().node_id;
    let owner_gw = &gws[owner_id[1..].parse::<usize>().unwrap() - 1];
    let holder = &gws[0];

    let (old, new) = (pattern(3000, 1), pattern(3000, 2));
    put(owner_gw, &key, &old).await;
    get(holder, &key).await;
    assert!(get(holder, &key).await.1, "the holder keeps a copy");

    relay.cut();
    let writing = {
        let (url, new) = (owner_gw.url(&format!("/v1/objects/{key}")), new.clone());
        tokio::spawn(async move {
            let r = rasa_tests::http().put(url).body(new).send().await.unwrap();
            assert_eq!(r.status(), 201);
        })
    };
    let mut rounds = 0;
    while !writing.is_finished() {
        let (_, _, at_owner) = get(owner_gw, &key).await;
        let (_, near, at_holder) = get(holder, &key).await;
        assert!(
            !(at_owner == new && at_holder == old),
            "round {rounds}: the owner answered the write, then the holder (near copy: \
             {near}) the value it replaced"
        );
        rounds += 1;
    }
    writing.await.unwrap();
    assert!(rounds > 0, "the write waited for the holder's lease");
    assert_eq!(get(holder, &key).await.2, new, "the holder reads the write");
}
