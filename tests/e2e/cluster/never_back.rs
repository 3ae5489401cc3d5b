//! Reads never go back in time (issue 45, item 3): once a write of version N is
//! acknowledged, no member serves an older version of that key — not while its owner is
//! down, not after the owner returns. The repro: an owner killed (the others serve its keys
//! from S3 and keep copies), restarted, written through (version 2, acknowledged), killed
//! again, restarted again; before the fix every read through the others returned version
//! 1 in the second outage, and the restarted owner adopted their version-1 copies.

use std::net::SocketAddr;
use std::time::Duration;

use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{cluster_name, member_args, serving, wait_view, Etcd};
use rasa_tests::{bytes_of, Gateway, S3Server};

use super::{all_see, fleet, kill};

const TTL: &str = "3s";

/// A restarted `node` on `addr`, with `origin` flags.
fn restart(etcd: &Etcd, name: &str, node: &str, addr: SocketAddr, origin: &[String]) -> Gateway {
    let mut args = member_args(etcd, name, node, TTL);
    args.extend_from_slice(origin);
    args.extend(["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_at_with_s3(addr, &args)
}

/// Every key through each of `via`: `want`'s value (`v{n}:{key}`), never another.
async fn all_read(via: &[&Gateway], keys: &[String], want: u32, when: &str) {
    let c = rasa_tests::http();
    for key in keys {
        for gw in via {
            let got = bytes_of(c.get(gw.url(&format!("/v1/objects/{key}")))).await;
            let got = String::from_utf8_lossy(&got);
            assert_eq!(
                got,
                format!("v{want}:{key}"),
                "{when}: {key} via {}",
                gw.base
            );
        }
    }
}

/// Writes `v{n}:{key}` to every key through `gw` (each acknowledged: `201`).
async fn write_all(gw: &Gateway, keys: &[String], n: u32) {
    let c = rasa_tests::http();
    for key in keys {
        let r = c
            .put(gw.url(&format!("/v1/objects/{key}")))
            .body(format!("v{n}:{key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{key}: {}", r.text().await.unwrap());
    }
}

/// Waits until the members `at` see exactly `nodes` serving.
async fn members_are(at: &[&Gateway], nodes: &[&str], what: &str) {
    for gw in at {
        wait_view(gw, what, Duration::from_secs(15), |v| serving(v) == nodes).await;
    }
}

/// g2 (`gws[1]`) killed: every key reads as `want` through the others while g2 is still
/// in their views, and again once it is gone from them.
async fn outage(gws: &[Gateway], keys: &[String], want: u32, when: &str) {
    kill(&gws[1], "KILL");
    gws[1].wait_exit(Duration::from_secs(5)).expect("killed");
    let others = [&gws[0], &gws[2]];
    all_read(&others, keys, want, &format!("{when}, in the views")).await;
    members_are(&others, &["g1", "g3"], &format!("{when}: gone")).await;
    all_read(&others, keys, want, &format!("{when}, gone")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_written_and_killed_again_never_lets_an_older_version_be_read() {
    let s3 = S3Server::start();
    let etcd = Etcd::start();
    let name = cluster_name("never-back");
    let origin = s3.gateway_args("pre");
    let mut gws = fleet(&etcd, &name, 3, TTL, &origin);
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 3).await;
    let keys: Vec<String> = (0..)
        .map(|i| format!("t/{i}"))
        .filter(|k| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .take(12)
        .collect();
    let client = s3.client().await;
    for key in &keys {
        client
            .put_object()
            .bucket(rasa_tests::S3_BUCKET)
            .key(format!("pre/{key}"))
            .body(format!("v1:{key}").into_bytes().into())
            .send()
            .await
            .unwrap();
    }
    let addr = gws[1].addr;
    all_read(&[&gws[0], &gws[1], &gws[2]], &keys, 1, "at first").await;

    // First outage: the others serve g2's keys (version 1) and keep copies.
    outage(&gws, &keys, 1, "g2 down").await;

    // Back, written through (acknowledged): version 2 everywhere.
    gws[1] = restart(&etcd, &name, "g2", addr, &origin);
    all_see(&gws.iter().collect::<Vec<_>>(), 3).await;
    write_all(&gws[1], &keys, 2).await;
    all_read(&[&gws[0], &gws[1], &gws[2]], &keys, 2, "written").await;

    // Second outage: nothing older than version 2, while g2 is in the views and after.
    outage(&gws, &keys, 2, "g2 down again").await;

    // Back again: it adopts no copy older than the origin's, through itself or the others.
    gws[1] = restart(&etcd, &name, "g2", addr, &origin);
    all_see(&gws.iter().collect::<Vec<_>>(), 3).await;
    all_read(&[&gws[1], &gws[0], &gws[2]], &keys, 2, "g2 back again").await;
}

/// Without an origin nothing can confirm a copy: a member that holds a version written
/// while it owned the key, after the key moved to a member that took a newer write and then
/// stopped answering, serves a clean miss, not the older version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_origin_a_former_owner_serves_a_miss_not_its_older_copy() {
    let etcd = Etcd::start();
    let name = cluster_name("never-back-mem");
    let mut gws = fleet(&etcd, &name, 1, TTL, &[]);
    all_see(&[&gws[0]], 1).await;
    let keys: Vec<String> = (0..64).map(|i| format!("m/{i}")).collect();
    write_all(&gws[0], &keys, 1).await;
    gws.push(super::member(&etcd, &name, "g2", TTL, &[]));
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 2).await;
    let moved: Vec<String> = keys
        .iter()
        .filter(|k| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .take(4)
        .cloned()
        .collect();
    assert!(!moved.is_empty(), "some key moved to g2");
    write_all(&gws[1], &moved, 2).await;
    let c = rasa_tests::http();
    kill(&gws[1], "STOP");
    for key in &moved {
        let r = c
            .get(gws[0].url(&format!("/v1/objects/{key}")))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.bytes().await.unwrap();
        assert_ne!(
            &body[..],
            format!("v1:{key}").as_bytes(),
            "{key}: the former owner served its older copy ({status})"
        );
        assert_eq!(status, 404, "{key}: a clean miss");
    }
    kill(&gws[1], "CONT");
}
