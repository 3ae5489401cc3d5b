//! Batch writes in a cluster: a put batch sent to any member stores each value at its
//! owner (one sub-batch per owner), a delete batch deletes at the owners, and the SDK's
//! `put_many` sends each owner its own batch.

use bytes::Bytes;
use rasa_openapi::cluster::owner;
use rasa_openapi::{DeleteBatchResponse, ExistsBatchResponse, PutBatchManifest, PutBatchResponse};
use rasa_tests::etcd::{cluster_name, Etcd};
use rasa_tests::{http, pattern, Gateway};

use super::{all_see, fleet, sdk};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_sent_to_one_member_lands_at_each_keys_owner() {
    let etcd = Etcd::start();
    let name = cluster_name("batch");
    let gws = fleet(&etcd, &name, 3, "3s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let v = all_see(&refs, 3).await;
    let values: Vec<(String, Vec<u8>)> = (0..30)
        .map(|i| (format!("b/{i}"), pattern(1000 + i * 37, i as u64)))
        .collect();
    let mut body =
        PutBatchManifest::of(values.iter().map(|(k, b)| (k.as_str(), b.len() as u64))).line();
    values.iter().for_each(|(_, b)| body.extend_from_slice(b));
    let r = http()
        .post(gws[0].url("/v1/batch/put?lease=true"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let results = r.json::<PutBatchResponse>().await.unwrap().results;
    let mut elsewhere = 0;
    for ((key, bytes), r) in values.iter().zip(&results) {
        let d = r
            .descriptor
            .as_ref()
            .unwrap_or_else(|| panic!("{key}: {:?}", r.error));
        let at = owner(key, &v.members).unwrap();
        assert_eq!(d.node_id.as_deref(), Some(at.node_id.as_str()), "{key}");
        assert!(d.addr.is_some(), "{key}: asked with ?lease=true");
        elsewhere += usize::from(at.url != gws[0].base);
        // Read at the owner itself, marked as forwarded: it holds the value.
        let owner_gw = gws.iter().find(|g| g.base == at.url).unwrap();
        let got = http()
            .get(owner_gw.url(&format!("/v1/objects/{key}")))
            .header("rasa-hop", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200, "{key} at its owner");
        assert_eq!(got.bytes().await.unwrap().as_ref(), &bytes[..]);
    }
    assert!(elsewhere > 0, "some keys are owned by other members");

    // The SDK: each owner gets its own batch.
    let client = sdk(&gws[1].base);
    let items: Vec<(&str, Bytes)> = values
        .iter()
        .map(|(k, b)| {
            (
                k.as_str(),
                Bytes::from(b.iter().rev().copied().collect::<Vec<u8>>()),
            )
        })
        .collect();
    let out = client.put_many(&items).await.unwrap();
    for ((key, _), r) in items.iter().zip(&out) {
        let d = r.as_ref().unwrap();
        assert_eq!(
            d.node_id.as_deref(),
            Some(owner(key, &v.members).unwrap().node_id.as_str())
        );
    }
    let got = client.get(items[7].0).await.unwrap();
    assert_eq!(got.bytes, items[7].1);

    // An exists batch through any member checks each key at its owner; so does the SDK's.
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    let mut asked: Vec<&str> = keys.clone();
    asked.push("batch/none");
    let r = http()
        .post(gws[1].url("/v1/batch/exists"))
        .json(&serde_json::json!({ "keys": asked }))
        .send()
        .await
        .unwrap();
    let results = r.json::<ExistsBatchResponse>().await.unwrap().results;
    let there: Vec<bool> = results.iter().map(|r| r.exists).collect();
    assert_eq!(
        there[..keys.len()],
        vec![true; keys.len()][..],
        "{results:?}"
    );
    assert!(!there[keys.len()]);
    let there = client.exists_many(&asked).await.unwrap();
    assert_eq!(there.iter().filter(|r| **r == Ok(true)).count(), keys.len());

    // A delete batch through another member deletes at every owner.
    let r = http()
        .post(gws[2].url("/v1/batch/delete"))
        .json(&serde_json::json!({ "keys": keys }))
        .send()
        .await
        .unwrap();
    let results = r.json::<DeleteBatchResponse>().await.unwrap().results;
    assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
    for gw in &gws {
        for key in &keys {
            let r = http()
                .get(gw.url(&format!("/v1/objects/{key}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "{key} via {}", gw.base);
        }
    }
}
