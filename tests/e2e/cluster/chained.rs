//! A read a member serves for a key it does not own is not answered with anything the
//! origin said before the read arrived (issue 65): when an earlier fetch of the key is
//! still running, the read waits for a fetch chained after it. That chained fetch starts
//! once the earlier one has stored its (older) answer, and must take that as its base —
//! not as a write that replaced its version meanwhile, which it would answer with (found
//! by the chaos runs: seed 803710463, a read answering a value older than a write
//! acknowledged before it).

use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use rasa_openapi::cluster::owner;
use rasa_openapi::HOP_HEADER;
use rasa_tests::etcd::{cluster_name, Etcd};
use rasa_tests::{metric, pattern, S3Server, S3_BUCKET};

use super::{all_see, fleet};

/// A GET of `url` marked as passed on by a member (served where it arrives): when it
/// ended, and the body.
async fn hopped_get(url: String) -> (Instant, Vec<u8>) {
    let r = rasa_tests::http()
        .get(&url)
        .header(HOP_HEADER, "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    let body = r.bytes().await.unwrap().to_vec();
    (Instant::now(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_chained_after_another_answers_what_it_fetched() {
    let s3 = S3Server::start();
    let direct = s3.client().await;
    let etcd = Etcd::start();
    let mut args = s3.gateway_args("pre");
    args.extend(["--max-object-size", "64MiB"].map(str::to_owned));
    let gws = fleet(&etcd, &cluster_name("chained"), 2, "10s", &args);
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 2).await;
    let put = |key: String, body: Vec<u8>| {
        direct
            .put_object()
            .bucket(S3_BUCKET)
            .key(format!("pre/{key}"))
            .body(ByteStream::from(body))
            .send()
    };
    for attempt in 0..5u64 {
        let key = format!("big/{attempt}");
        let (older, newer) = (pattern(48 << 20, attempt), pattern(1000, 100 + attempt));
        put(key.clone(), older.clone()).await.unwrap();
        let owner = owner(&key, &view.members).expect("an owner").url.clone();
        let other = gws.iter().find(|g| g.base != owner).expect("a non-owner");
        let url = other.url(&format!("/v1/objects/{key}"));
        let fetches = metric(other, "rasa_origin_fetches_total").await;
        // The first read starts a fetch of the older (large) object...
        let first = tokio::spawn(hopped_get(url.clone()));
        let asked = Instant::now();
        while metric(other, "rasa_origin_fetches_total").await == fetches {
            assert!(
                asked.elapsed() < Duration::from_secs(10),
                "no origin fetch in 10 s"
            );
        }
        // ...the object changes at the origin, then a second read arrives.
        put(key.clone(), newer.clone()).await.unwrap();
        let second_sent = Instant::now();
        let (_, second) = hopped_get(url).await;
        let (first_ended, first) = first.await.unwrap();
        assert!(
            first == older || first == newer,
            "the first read: one whole object"
        );
        // Again when the first fetch ended before the second read arrived, or broke off
        // as the object was replaced and was fetched anew (then it answers the newer one).
        if first_ended < second_sent || first != older {
            continue;
        }
        assert!(
            second == newer,
            "a read that arrived after the origin changed answered {} bytes, not the {} now there",
            second.len(),
            newer.len()
        );
        return;
    }
    panic!("in 5 attempts the first fetch never outlasted the second read's start");
}
