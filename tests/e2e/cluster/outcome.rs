//! What a write passed on to its owner says when the owner does not answer: `503
//! unavailable` ("nothing was stored") only when nothing reached the owner; `504
//! owner_unreachable` ("it may or may not have been stored") once the request was sent
//! (issue 65: a `503` claimed nothing was stored for a write the owner may have stored, so
//! a client's retry could take effect twice).

use std::time::Duration;

use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{cluster_name, member_args, Etcd};
use rasa_tests::relay::Relay;
use rasa_tests::Gateway;

use super::{all_see, kill};

/// `(status, code)` of a PUT of `key` through the member at `base`.
async fn put_through(base: String, key: String) -> (u16, String) {
    let r = rasa_tests::http()
        .put(format!("{base}/v1/objects/{key}"))
        .body("value")
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let problem: serde_json::Value = r.json().await.unwrap_or_default();
    (
        status,
        problem["code"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_owner_got_and_did_not_answer_is_of_unknown_outcome_not_refused() {
    let etcd = Etcd::start();
    let name = cluster_name("outcome");
    // g2 is advertised at a relay the test cuts (g1 reaches it only through that); g3 is
    // reached directly.
    let relay = Relay::unset().await;
    let start = |node: &str, advertise: Option<String>| {
        let mut args = member_args(&etcd, &name, node, "30s");
        args.extend(["--fast-path".to_owned(), "off".to_owned()]);
        if let Some(url) = advertise {
            args.extend(["--advertise-url".to_owned(), url]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Gateway::start(&args)
    };
    let g1 = start("g1", None);
    let g2 = start("g2", Some(format!("http://{}", relay.addr)));
    relay.point_at(g2.addr);
    let g3 = start("g3", None);
    let view = all_see(&[&g1, &g2, &g3], 3).await;
    let key_of = |node: &str| {
        (0..)
            .map(|i| format!("o/{i}"))
            .find(|k| owner(k, &view.members).is_some_and(|m| m.node_id == node))
            .unwrap()
    };

    // g3 is gone (its port closed) but still in g1's view: nothing reaches it, so the
    // write is refused, nothing stored.
    let g3_key = key_of("g3");
    drop(g3);
    assert_eq!(
        put_through(g1.base.clone(), g3_key).await,
        (503, "unavailable".to_owned()),
        "a write that reached no owner"
    );

    // g2 is frozen: the write reaches its socket, then the link breaks with no answer.
    kill(&g2, "STOP");
    let writing = tokio::spawn(put_through(g1.base.clone(), key_of("g2")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.cut();
    let got = writing.await.unwrap();
    kill(&g2, "CONT");
    assert_eq!(
        got,
        (504, "owner_unreachable".to_owned()),
        "a write the owner may have stored"
    );
}
