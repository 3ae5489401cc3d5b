//! A member that owns a key, loses it to a member that joins and takes a write, then owns
//! it again once that member is gone, never serves what it held before (issue 65: the
//! chaos checker found it, seed 1543903091 without an origin). It cannot know what the
//! other owner acknowledged meanwhile: without an origin its older copy is a miss, never
//! the value the acknowledged write replaced.

use std::time::Duration;

use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{cluster_name, serving, wait_view, Etcd};

use super::{all_see, kill, member};

const TTL: &str = "2s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_owning_a_key_again_never_serves_what_it_held_before_losing_it() {
    let etcd = Etcd::start();
    let name = cluster_name("twice");
    let g1 = member(&etcd, &name, "g1", TTL, &[]);
    let g3 = member(&etcd, &name, "g3", TTL, &[]);
    let two = all_see(&[&g1, &g3], 2).await;
    let c = rasa_tests::http();
    let put = |gw: &rasa_tests::Gateway, key: &str, body: String| {
        c.put(gw.url(&format!("/v1/objects/{key}")))
            .body(body)
            .send()
    };
    // Version 1 of keys g1 owns while it and g3 are the members, written through g1.
    let mine: Vec<String> = (0..)
        .map(|i| format!("t/{i}"))
        .filter(|k| owner(k, &two.members).is_some_and(|m| m.node_id == "g1"))
        .take(48)
        .collect();
    for key in &mine {
        let r = put(&g1, key, format!("v1:{key}")).await.unwrap();
        assert_eq!(r.status(), 201, "{key}");
    }

    // g2 joins and owns some of them: version 2 of those, acknowledged (through g1, which
    // forwards to g2).
    let g2 = member(&etcd, &name, "g2", TTL, &[]);
    let three = all_see(&[&g1, &g2, &g3], 3).await;
    let moved: Vec<&String> = mine
        .iter()
        .filter(|k| owner(k, &three.members).is_some_and(|m| m.node_id == "g2"))
        .collect();
    assert!(!moved.is_empty(), "g2 owns none of {} keys", mine.len());
    for key in &moved {
        let r = put(&g1, key, format!("v2:{key}")).await.unwrap();
        assert_eq!(r.status(), 201, "{key}: {}", r.text().await.unwrap());
    }

    // g2 dies with them: g1 owns them again.
    kill(&g2, "KILL");
    g2.wait_exit(Duration::from_secs(5)).expect("killed");
    for gw in [&g1, &g3] {
        wait_view(gw, "g2 gone", Duration::from_secs(15), |v| {
            serving(v) == ["g1", "g3"]
        })
        .await;
    }
    for key in &moved {
        for gw in [&g1, &g3] {
            let r = c
                .get(gw.url(&format!("/v1/objects/{key}")))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            assert!(
                status == 404 || body == format!("v2:{key}"),
                "{key} via {}: {status} {body:?} after v2:{key} was acknowledged",
                gw.base
            );
        }
    }
    // The keys that never moved are still served.
    let kept = mine
        .iter()
        .find(|k| !moved.contains(k))
        .expect("a key g1 kept");
    let r = c
        .get(g3.url(&format!("/v1/objects/{kept}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), format!("v1:{kept}"));
}
