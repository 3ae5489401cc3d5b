//! Cold batches cost about what warm ones do (issue 46, item 3): `get_many_into` of keys
//! whose descriptors the client does not hold asks for all of them in one descriptor
//! request (not one per key), and `register()` registers its memory on the client's open
//! endpoints when called, not on the first read into it.

use rasa_client::{Client, FastPath};
use rasa_tests::{pattern, requests_to, Gateway};

/// Descriptor requests the gateway answered: (one key each, batches).
async fn descriptor_requests(gw: &Gateway) -> (f64, f64) {
    (
        requests_to(gw, "/v1/descriptors/{*key}").await,
        requests_to(gw, "/v1/descriptors").await,
    )
}

const FAST: [&str; 4] = ["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_get_many_into_asks_for_every_descriptor_in_one_request() {
    let gw = Gateway::start(&FAST);
    let keys: Vec<String> = (0..64).map(|i| format!("cold/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..64).map(|i| pattern(4096 + i, i as u64)).collect();
    for (k, v) in keys.iter().zip(&values) {
        rasa_tests::put_value(&gw, k, v).await;
    }
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let before = descriptor_requests(&gw).await;
    let bufs: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; 8192]).collect();
    let got = c.many().get_into(&refs, bufs).await;
    let after = descriptor_requests(&gw).await;
    for ((r, buf), v) in got.into_iter().zip(&values) {
        let w = r.unwrap();
        assert_eq!(&buf[..w.length as usize], &v[..]);
    }
    assert_eq!(
        after.0 - before.0,
        0.0,
        "no descriptor asked for one key at a time"
    );
    assert_eq!(after.1 - before.1, 1.0, "one batch of descriptors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_registers_on_the_open_endpoints_when_called() {
    let gw = Gateway::start(&FAST);
    rasa_tests::put_value(&gw, "reg/a", &pattern(10_000, 1)).await;
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    c.get("reg/a").await.unwrap(); // the client's endpoint is open now
    let buf = c.register(1 << 20).unwrap();
    assert!(
        buf.registrations() >= 1,
        "registered when made, before any read into it"
    );
    let (r, buf) = c.get_into("reg/a", buf).await;
    assert_eq!(r.unwrap().length, 10_000);
    assert_eq!(&buf[..10_000], &pattern(10_000, 1)[..]);
}

/// A cold batch into one registered buffer asks for its descriptors in parts, all at once,
/// and reads each part as soon as its descriptors are in (issue 63): 256 values land
/// byte-exact at their offsets after four batch requests (none for a single key); read
/// again, with every descriptor held, it asks for none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_batch_into_registered_memory_asks_in_parts_and_lands_whole() {
    let gw = Gateway::start(&FAST);
    let (n, size) = (256usize, 4096usize);
    let keys: Vec<String> = (0..n).map(|i| format!("parts/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..n).map(|i| pattern(size - i, i as u64)).collect();
    let w = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let items: Vec<(&str, bytes::Bytes)> = keys
        .iter()
        .map(String::as_str)
        .zip(values.iter().map(|v| bytes::Bytes::from(v.clone())))
        .collect();
    for r in w.many().put(&items).await.unwrap() {
        r.unwrap();
    }
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let regions: Vec<std::ops::Range<usize>> = (0..n).map(|i| i * size..(i + 1) * size).collect();
    let mut buf = c.register(n * size).unwrap();
    for (round, asked) in [(0, 4.0), (1, 0.0)] {
        let before = descriptor_requests(&gw).await;
        let (r, back) = buf.get_many_in(&c, &refs, &regions).await;
        buf = back;
        let after = descriptor_requests(&gw).await;
        for (i, w) in r.unwrap().into_iter().enumerate() {
            assert_eq!(w.unwrap().length as usize, values[i].len(), "round {round}");
            assert_eq!(&buf[regions[i].start..][..values[i].len()], &values[i][..]);
        }
        assert_eq!(
            after.0 - before.0,
            0.0,
            "round {round}: no single-key request"
        );
        assert_eq!(after.1 - before.1, asked, "round {round}: batch requests");
    }
}

/// A batch of descriptors answers the keys held in memory at once (no lookup future a
/// key, the metrics counted once for the batch) and counts what single requests count: a
/// descriptor, a lease, a cache hit and the bytes named for each key found; a key not
/// there gets its own `not_found` (a miss), an invalid one its `invalid_key`, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_descriptors_counts_each_descriptor_lease_and_hit() {
    let gw = Gateway::start(&FAST);
    let http = rasa_tests::http();
    for i in 0..10 {
        let r = http
            .put(gw.url(&format!("/v1/objects/count/{i}")))
            .body(pattern(100 + i, i as u64))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    const COUNTED: [&str; 5] = [
        "rasa_leases_granted_total",
        "rasa_descriptors_total{path=\"fabric\"}",
        "rasa_fastpath_bytes_advertised_total",
        "rasa_cache_hits_total",
        "rasa_cache_misses_total",
    ];
    let counts = || async {
        let text = rasa_tests::text_of(http.get(gw.url("/metrics"))).await;
        COUNTED.map(|name| rasa_tests::metric_in(&text, name))
    };
    let before = counts().await;
    let mut keys: Vec<String> = (0..10).map(|i| format!("count/{i}")).collect();
    keys.extend(["count/none".to_owned(), "count/../x".to_owned()]);
    let body: rasa_openapi::DescriptorBatchResponse = rasa_tests::json_of(
        http.post(gw.url("/v1/descriptors"))
            .json(&serde_json::json!({ "keys": keys })),
    )
    .await;
    let after = counts().await;
    assert_eq!(body.results.len(), 12);
    for (i, r) in body.results.iter().take(10).enumerate() {
        let d = r
            .descriptor
            .as_ref()
            .expect("a descriptor for a stored key");
        assert_eq!(
            (r.key.as_str(), d.length),
            (keys[i].as_str(), 100 + i as u64)
        );
        assert!(
            d.addr.is_some() && d.lease_ms > 0,
            "leased, with its address"
        );
    }
    let code = |i: usize| body.results[i].error.as_ref().map(|p| p.code);
    assert_eq!(code(10), Some(rasa_openapi::ProblemCode::NotFound));
    assert_eq!(code(11), Some(rasa_openapi::ProblemCode::InvalidKey));
    let named: f64 = (0..10).map(|i| (100 + i) as f64).sum();
    let grew: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(grew, [10.0, 10.0, named, 10.0, 1.0], "{COUNTED:?}");
}
