//! A read ends within the caller's timeout, frozen member or not (issue 45, item 6): a
//! client holding a descriptor of a member that then freezes (SIGSTOP) read one-sided from
//! it — one fabric timeout, then a fresh descriptor, then HTTP, each waiting its own
//! timeout (15.3 s for `rasa get --timeout 5s`). A call now has one deadline, and a member
//! that may be followed by the key's next choice gets half of what is left.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{cluster_name, Etcd};
use rasa_tests::S3Server;

use super::{all_see, fleet, kill};

const TIMEOUT: Duration = Duration::from_secs(3);

/// Members reading through an origin: the origin (`n_objects` objects under `prefix`), the
/// objects, etcd, and `n` members of cluster `tag` (member TTL `ttl`) once all see each
/// other, with their view.
/// (Its etcd and origin live as long as it does: move the other fields out, keep it.)
pub(super) struct OverOrigin {
    /// The origin's objects: key and bytes.
    pub objects: Vec<(String, Vec<u8>)>,
    /// The members' view once all see each other.
    pub view: rasa_openapi::ClusterView,
    /// The members, `g1` first.
    pub gws: Vec<rasa_tests::Gateway>,
    _etcd: Etcd,
    _s3: S3Server,
}

pub(super) async fn over_origin(
    tag: &str,
    n: usize,
    ttl: &str,
    prefix: &str,
    n_objects: usize,
) -> OverOrigin {
    let s3 = S3Server::start();
    let objects = super::seed_bucket(&s3, prefix, n_objects).await;
    let etcd = Etcd::start();
    let gws = fleet(&etcd, &cluster_name(tag), n, ttl, &s3.gateway_args(prefix));
    let view = all_see(&gws.iter().collect::<Vec<_>>(), n).await;
    OverOrigin {
        objects,
        view,
        gws,
        _etcd: etcd,
        _s3: s3,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_sided_read_of_a_frozen_member_ends_within_the_timeout() {
    let fleet = over_origin("frozen-fabric", 2, "10s", "pre", 40).await;
    let (objects, view, gws) = (fleet.objects, fleet.view, fleet.gws);
    let theirs: Vec<&(String, Vec<u8>)> = objects
        .iter()
        .filter(|(k, _)| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .take(4)
        .collect();
    assert!(theirs.len() >= 2, "g2 owns some keys");
    let client = Client::builder(gws[0].base.clone())
        .fast_path(FastPath::Auto)
        .timeout(TIMEOUT)
        .build()
        .unwrap();
    // Warm: each read one-sided from g2, its descriptor held.
    for (key, body) in &theirs {
        assert_eq!(client.get(key).await.unwrap().bytes.as_ref(), &body[..]);
    }
    assert!(
        client.stats().fabric_reads >= theirs.len() as u64,
        "{:?}",
        client.stats()
    );

    kill(&gws[1], "STOP");
    let mut took = Vec::new();
    for (key, body) in &theirs {
        let started = Instant::now();
        let got = client.get(key).await;
        took.push(started.elapsed());
        // Served by the key's next choice (from S3), or a timeout naming the setting:
        // either way within the call's timeout.
        match got {
            Ok(obj) => assert_eq!(obj.bytes.as_ref(), &body[..], "{key}"),
            Err(e) => eprintln!("{key}: {e}"),
        }
    }
    kill(&gws[1], "CONT");
    eprintln!("reads of a frozen member's keys took {took:?} (timeout {TIMEOUT:?})");
    for t in &took {
        assert!(
            *t <= TIMEOUT + TIMEOUT / 10,
            "a read took {t:?}, past its timeout {TIMEOUT:?} (+10 %): {took:?}"
        );
    }
}

/// A frozen owner is passed over from the first read that waited for it until it answers
/// again (issue 65: survivors sent it a request every few seconds, each waiting for an
/// answer, until its lease ended), and trusted again within a moment of answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_stays_suspect_until_it_answers_then_is_trusted_at_once() {
    let etcd = Etcd::start();
    let name = cluster_name("frozen-probe");
    // A TTL longer than the freeze: the frozen member stays in the view throughout.
    let gws = fleet(&etcd, &name, 2, "30s", &[]);
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 2).await;
    let key = (0..)
        .map(|i| format!("p/{i}"))
        .find(|k| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .unwrap();
    let http = rasa_tests::http();
    let put = http
        .put(gws[1].url(&format!("/v1/objects/{key}")))
        .body("held by g2")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let read = || async {
        let started = Instant::now();
        let r = http
            .get(gws[0].url(&format!("/v1/objects/{key}")))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("an answer from g1");
        let by = r
            .headers()
            .get("rasa-served-by")
            .map(|h| h.to_str().unwrap().to_owned());
        (started.elapsed(), by)
    };
    kill(&gws[1], "STOP");
    let (first, _) = read().await;
    assert!(
        first < Duration::from_secs(4),
        "the first read took {first:?}"
    );
    // For 8 s (past the 3 s a suspicion used to last) no read waits for it again.
    let frozen_until = Instant::now() + Duration::from_secs(8);
    let mut waits = Vec::new();
    while Instant::now() < frozen_until {
        let (took, _) = read().await;
        waits.push(took);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kill(&gws[1], "CONT");
    let thawed = Instant::now();
    let slow: Vec<&Duration> = waits
        .iter()
        .filter(|t| **t > Duration::from_secs(1))
        .collect();
    assert!(
        slow.is_empty(),
        "reads waited for the frozen owner again: {slow:?} of {} reads",
        waits.len()
    );
    // Once it answers, reads go to it again within a moment.
    loop {
        let (_, by) = read().await;
        if by.as_deref() == Some("g2") {
            break;
        }
        assert!(
            thawed.elapsed() < Duration::from_secs(3),
            "g2 answers again but reads are still not sent to it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("trusted again {:?} after it was thawed", thawed.elapsed());
}

/// A client never reads an older version than one it read before, however its reads of a
/// key move between the key's owner and its next choice (issue 65: each member's client
/// kept its own descriptors, so a read that failed over to the next choice a second time
/// reused the descriptor it got there the first time — older than the owner's answer in
/// between, and its lease still running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_failing_over_twice_never_reads_an_older_version_than_it_read() {
    let s3 = S3Server::start();
    let etcd = Etcd::start();
    let name = cluster_name("frozen-back");
    let mut extra = s3.gateway_args("pre");
    extra.extend(["--lease".to_owned(), "60s".to_owned()]);
    let gws = fleet(&etcd, &name, 2, "30s", &extra);
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 2).await;
    let key = (0..)
        .map(|i| format!("back/{i}"))
        .find(|k| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .unwrap();
    let write = |v: &'static str| {
        let url = gws[1].url(&format!("/v1/objects/{key}"));
        async move {
            let r = rasa_tests::http().put(url).body(v).send().await.unwrap();
            assert_eq!(r.status(), 201, "{v} written at its owner");
        }
    };
    let client = Client::builder(gws[0].base.clone())
        .fast_path(FastPath::Auto)
        .timeout(Duration::from_secs(6))
        .build()
        .unwrap();
    let read = || async { client.get(&key).await.map(|o| o.bytes.to_vec()) };
    write("v1").await;
    assert_eq!(read().await.unwrap(), b"v1", "read at the owner");

    // The owner freezes: the read fails over to the next choice (g1, which fetches v1).
    kill(&gws[1], "STOP");
    let got = read().await;
    kill(&gws[1], "CONT");
    assert_eq!(got.unwrap(), b"v1", "read at the next choice");
    write("v2").await;
    // Once this client asks the owner again (its suspicion ends), it reads v2 there.
    let asked = Instant::now();
    while read().await.unwrap() != b"v2" {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "the client never read v2 from its owner"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The owner freezes again: whatever answers, it is not v1.
    kill(&gws[1], "STOP");
    let again = read().await;
    kill(&gws[1], "CONT");
    if let Ok(bytes) = again {
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            "v2",
            "read back in time after failing over a second time"
        );
    }
}

/// An owner's miss asks the key's next choice for its copy before the origin (the
/// previous owner after a membership change): when that member is frozen, the owner waited
/// 2 s for it on every miss, the first as the later ones — and a read forwarded to the
/// owner by another member, which gives the owner 2 s, failed over to that frozen member
/// in turn (the chaos harness's fixed seed, a plain HTTP read past its 3 s). A frozen peer
/// now costs the first miss a short wait, and none after (it is a suspect until it
/// answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_miss_does_not_wait_on_a_frozen_next_choice() {
    let fleet = over_origin("frozen-fill", 3, "30s", "pre", 60).await;
    let (objects, view, gws) = (fleet.objects, fleet.view, fleet.gws);
    // Keys g2 owns whose next choice is g3.
    let theirs: Vec<&(String, Vec<u8>)> = objects
        .iter()
        .filter(|(k, _)| {
            let order = rasa_openapi::cluster::placement(k, &view.members);
            order[0].node_id == "g2" && order[1].node_id == "g3"
        })
        .take(2)
        .collect();
    assert_eq!(theirs.len(), 2, "two keys placed g2, g3");
    kill(&gws[2], "STOP");
    let mut took = Vec::new();
    for (key, body) in &theirs {
        let started = Instant::now();
        let got =
            rasa_tests::bytes_of(rasa_tests::http().get(gws[1].url(&format!("/v1/objects/{key}"))))
                .await;
        took.push(started.elapsed());
        assert!(got == *body, "{key}");
    }
    kill(&gws[2], "CONT");
    eprintln!("misses at the owner, its next choice frozen: {took:?}");
    assert!(
        took[0] < Duration::from_millis(1500),
        "the first miss waited {:?} for the frozen next choice",
        took[0]
    );
    assert!(
        took[1] < Duration::from_millis(400),
        "a later miss waited {:?} for it again",
        took[1]
    );
}
