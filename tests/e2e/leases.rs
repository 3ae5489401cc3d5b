//! Leases only where a descriptor goes out (issue 46, item 1): a plain PUT (curl, S3
//! clients: no `?lease=true`) answers without the remote address and leases nothing, so
//! writers are no longer throttled to memory ÷ lease — 300 × 1 MiB PUTs into 64 MiB with
//! the default 10 s lease met `503 memory is full of leased values` after the 63rd. A
//! descriptor that did go out (a PUT with `?lease=true`, `GET /v1/descriptors`) still
//! holds its bytes unchanged while memory is recycled under it.

use std::time::{Duration, Instant};

use base64::prelude::*;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::Reader;
use rasa_openapi::{Descriptor, FabricInfo};
use rasa_tests::{http, pattern, put_value, Gateway};

const SMALL: [&str; 10] = [
    "--memory",
    "64MiB",
    "--arena-size",
    "8MiB",
    "--max-object-size",
    "4MiB",
    "--fast-path",
    "on",
    "--fabric-provider",
    "tcp;ofi_rxm",
];

/// A plain PUT (no `?lease=true`) of `body` under `key`: its status and descriptor.
async fn plain_put(gw: &Gateway, key: &str, body: &[u8]) -> (reqwest::StatusCode, Descriptor) {
    let r = http()
        .put(gw.url(&format!("/v1/objects/{key}")))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_puts_larger_than_memory_are_not_throttled_by_leases() {
    let gw = Gateway::start(&SMALL);
    let body = pattern(1 << 20, 1);
    let started = Instant::now();
    for i in 0..300 {
        let (status, d) = plain_put(&gw, &format!("burst/{}", i % 40), &body).await;
        assert_eq!(status, 201, "PUT {i} of 300 into 64 MiB");
        assert_eq!(
            (d.addr, d.rkey, d.lease_ms),
            (None, None, 0),
            "a plain PUT hands out no address and takes no lease"
        );
    }
    eprintln!(
        "300 × 1 MiB plain PUTs into 64 MiB: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_handed_out_holds_its_bytes_while_memory_is_recycled() {
    let gw = Gateway::start(&SMALL);
    let kept = pattern(512 << 10, 2);
    let d = put_value(&gw, "kept/v", &kept).await; // asks for the lease
    assert!(d.addr.is_some() && d.lease_ms > 0, "{d:?}");
    // Replace it, then recycle memory several times over with plain PUTs.
    put_value(&gw, "kept/v", &pattern(512 << 10, 3)).await;
    let body = pattern(1 << 20, 4);
    for i in 0..120 {
        let (status, _) = plain_put(&gw, &format!("churn/{}", i % 30), &body).await;
        assert_eq!(status, 201, "PUT {i}");
    }
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let address = BASE64_STANDARD.decode(info.address.unwrap()).unwrap();
    let frame = rasa_tests::remote(&d);
    let got = tokio::task::spawn_blocking(move || {
        let cfg = FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into()));
        let mut reader = Reader::connect(cfg, address).unwrap();
        reader.read(&frame, Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert_eq!(
        got.expect("the leased version is still readable one-sided"),
        kept,
        "bytes under a live lease never change"
    );
}

#[tokio::test]
async fn a_lease_that_is_not_a_boolean_is_refused_and_stores_nothing() {
    let gw = Gateway::start(&[]);
    // An empty value is no boolean either (schemathesis sent `?lease=`, on the batch
    // route too); a bare `?lease` (no `=`) is the shorthand for true.
    for (path, value) in [
        ("/v1/objects/odd", "-1873"),
        ("/v1/objects/odd", ""),
        ("/v1/batch/put", ""),
    ] {
        let url = gw.url(&format!("{path}?lease={value}"));
        let req = match path {
            "/v1/batch/put" => http()
                .post(url)
                .body("{\"items\":[{\"key\":\"odd\",\"length\":1}]}\nx"),
            _ => http().put(url).body("x"),
        };
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 400, "{path}?lease={value}");
        assert!(r
            .text()
            .await
            .unwrap()
            .contains("lease must be true or false"));
        let got = http().get(gw.url("/v1/objects/odd")).send().await.unwrap();
        assert_eq!(got.status(), 404, "nothing stored");
    }
    let r = http()
        .put(gw.url("/v1/objects/bare?lease"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}
