//! An over-limit upload is answered before its body has all arrived; the SDK (and every
//! binding over it) names that answer every time, never a broken pipe: `413` for a value
//! over `--max-object-size`, `507` for one larger than its namespace can ever hold.

use rasa_client::Client;
use rasa_openapi::ProblemCode;
use rasa_tests::{temp_dir, Gateway};

const TRIES: usize = 20;

async fn named_every_time(c: &Client, key: &str, len: usize, code: ProblemCode) {
    let body = bytes::Bytes::from(vec![7u8; len]);
    let mut wrong = Vec::new();
    for i in 0..TRIES {
        match c.put(key, body.clone()).await {
            Err(e) if e.code() == Some(code) => {}
            other => wrong.push(format!("try {i}: {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {TRIES} PUTs of {len} bytes were not answered {code:?}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_limit_put_is_named_not_a_broken_pipe() {
    let dir = temp_dir("early-answers");
    let ns_file = dir.join("namespaces");
    std::fs::write(&ns_file, "small 16MiB\n").unwrap();
    let gw = Gateway::start(&[
        "--memory",
        "256MiB",
        "--max-object-size",
        "1MiB",
        "--namespaces",
        ns_file.to_str().unwrap(),
    ]);
    let c = Client::builder(&gw.base).build().unwrap();
    named_every_time(&c, "k", 2 << 20, ProblemCode::PayloadTooLarge).await;

    let gw = Gateway::start(&[
        "--memory",
        "256MiB",
        "--max-object-size",
        "64MiB",
        "--namespaces",
        ns_file.to_str().unwrap(),
    ]);
    let c = Client::builder(&gw.base)
        .namespace("small")
        .build()
        .unwrap();
    named_every_time(&c, "k", 20 << 20, ProblemCode::InsufficientStorage).await;
    // Nothing was stored, and the gateway still serves.
    assert!(c.get("k").await.is_err());
    c.put("k", vec![1u8; 1 << 20])
        .await
        .expect("a value that fits");
}
