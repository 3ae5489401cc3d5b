//! What a descriptor lets its holder read (issue 31): descriptors — a remote address and
//! key that open memory one-sided — go only to callers that may read.

use rasa_openapi::{Descriptor, FabricInfo};
use rasa_tests::raw::{contains, read_region};
use rasa_tests::{json_of, new_token, temp_dir, wait_for_metric, Gateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A PUT with a write-only token is answered without `addr`/`rkey`: the writer learns
/// the version and its SHA-256, never a key to the arena's memory. A token that may read
/// gets the full descriptor, as before.
#[tokio::test]
async fn a_write_only_token_gets_no_remote_key() {
    let dir = temp_dir("trust-put");
    let file = dir.join("tokens");
    let writer = new_token(&file, "writer", "write");
    let both = new_token(&file, "both", "read,write");
    let gw = Gateway::start(&[
        "--token-file",
        file.to_str().unwrap(),
        "--fast-path",
        "on",
        "--fabric-provider",
        "tcp;ofi_rxm",
    ]);
    let c = rasa_tests::http();
    let put = |token: &str, key: &str| {
        c.put(gw.url(&format!("/v1/objects/{key}?lease=true")))
            .bearer_auth(token)
            .body(vec![7u8; 4096])
    };
    let d: Descriptor = json_of(put(&writer, "trust/w")).await;
    assert_eq!((d.addr, d.rkey), (None, None), "a writer got {d:?}");
    assert_eq!(d.length, 4096);
    assert!(!d.sha256.is_empty());
    let d: Descriptor = json_of(put(&both, "trust/rw")).await;
    assert!(
        d.addr.is_some() && d.rkey.is_some(),
        "a reader-writer got {d:?}"
    );
}

/// Reads every byte the memory region behind `key`'s descriptor covers, one-sided, as any
/// holder of that descriptor can (no frame check).
async fn exposed_by(gw: &Gateway, key: &str) -> Vec<u8> {
    let region: serde_json::Value = gw.get_json(&format!("/v1/_test/region/{key}")).await;
    let fabric: FabricInfo = gw.get_json("/v1/fabric").await;
    read_region(&region, &fabric).await
}

/// Bytes that were never stored are not readable one-sided: with a descriptor of a stored
/// value, reading every byte its remote key covers finds no byte of an upload still in
/// flight, of one that failed, or of a staged multipart part (markers planted in each) —
/// while the stored value itself is there. The in-flight upload then completes intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_exposes_no_byte_of_an_unpublished_upload() {
    let keys = temp_dir("trust-staged").join("s3-credentials");
    let (id, secret) = rasa_tests::new_s3_key(&keys, "writer", "read,write");
    let gw = Gateway::start(&[
        "--fast-path",
        "on",
        "--fabric-provider",
        "tcp;ofi_rxm",
        "--test-hooks",
        "--arena-size",
        "4MiB",
        "--s3-listen",
        "127.0.0.1:0",
        "--s3-bucket",
        "bkt",
        "--s3-credentials-file",
        keys.to_str().unwrap(),
    ]);
    let marker = |tag: &str, len: usize| -> Vec<u8> {
        let unit = format!("<{tag}-never-stored>");
        unit.as_bytes().iter().copied().cycle().take(len).collect()
    };
    let head = |key: &str, len: usize| {
        format!(
            "PUT /v1/objects/{key} HTTP/1.1\r\nHost: {}\r\nContent-Length: {len}\r\n\r\n",
            gw.addr
        )
    };
    // In flight: all but the last byte sent, the connection held open.
    let inflight = marker("inflight", 200_000);
    let mut open = TcpStream::connect(gw.addr).await.unwrap();
    open.write_all(head("u/inflight", inflight.len()).as_bytes())
        .await
        .unwrap();
    open.write_all(&inflight[..inflight.len() - 1])
        .await
        .unwrap();
    // Failed: the client goes away half-way.
    let failed = marker("failed", 100_000);
    let mut gone = TcpStream::connect(gw.addr).await.unwrap();
    gone.write_all(head("u/failed", 2 * failed.len()).as_bytes())
        .await
        .unwrap();
    gone.write_all(&failed).await.unwrap();
    wait_for_metric(
        &gw,
        "rasa_upload_bytes_in_progress",
        (inflight.len() - 1 + failed.len()) as f64,
    )
    .await;
    drop(gone);
    wait_for_metric(&gw, "rasa_uploads_abandoned_total", 1.0).await;
    // A staged multipart part.
    let s3 = rasa_tests::s3_client_with(&gw.s3_url(), &id, &secret);
    let mp = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key("u/multipart")
        .send()
        .await
        .expect("a multipart upload starts");
    s3.upload_part()
        .bucket("bkt")
        .key("u/multipart")
        .upload_id(mp.upload_id().unwrap())
        .part_number(1)
        .body(marker("multipart", 100_000).into())
        .send()
        .await
        .expect("a part is staged");
    // A stored value in the same (open) arena, and everything its descriptor opens.
    let stored = marker("stored", 10_000);
    let c = rasa_tests::http();
    let put = c
        .put(gw.url("/v1/objects/u/stored"))
        .body(stored.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let exposed = exposed_by(&gw, "u/stored").await;
    assert!(
        contains(&exposed, &stored[..64]),
        "the stored value itself reads"
    );
    for tag in ["inflight", "failed", "multipart"] {
        let unit = format!("<{tag}-never-stored>");
        assert!(
            !contains(&exposed, unit.as_bytes()),
            "bytes of a {tag} upload are readable with another key's descriptor"
        );
    }
    // The held upload still completes, intact.
    open.write_all(&inflight[inflight.len() - 1..])
        .await
        .unwrap();
    let mut answer = vec![0u8; 12];
    open.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 201");
    let got = c
        .get(gw.url("/v1/objects/u/inflight"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), &inflight[..]);
}
