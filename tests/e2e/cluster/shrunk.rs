//! A client's view of the members is one member's word (issue 65's long run): right after
//! an outage a member may list itself alone, and an SDK client that followed that view
//! had no one else to ask when the member went — its reads failed at once, for as long as
//! the member was away, though two others could answer. Members a view drops are still
//! tried (and asked for the next view) a while after it.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::owner;
use rasa_tests::etcd::{serving, wait_ready, wait_view};

use super::kill;

const TIMEOUT: Duration = Duration::from_secs(3);

/// Polls `client`'s stats until its followed view lists `nodes`; fails after 15 s.
async fn client_sees(client: &Client, nodes: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut seen = client.stats().cluster_members;
        seen.sort();
        if seen == nodes {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the client's view never listed {nodes:?}: it lists {seen:?}"
        );
        // No signal leaves the SDK when its view changes: sample it.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_view_shrank_to_one_member_reads_through_the_others_when_it_goes() {
    // An origin: a member that registers again after its lease ended starts over, and
    // fills what it owns from there.
    let fleet = super::frozen::over_origin("shrunk", 3, "2s", "shrunk", 40).await;
    let (objects, view, mut gws) = (fleet.objects, fleet.view, fleet.gws);
    let (key, body) = objects
        .iter()
        .find(|(k, _)| owner(k, &view.members).is_some_and(|m| m.node_id == "g3"))
        .expect("g3 owns a key");
    // The client knows g1 alone as its seed.
    let client = Client::builder(gws[0].base.clone())
        .fast_path(FastPath::Auto)
        .timeout(TIMEOUT)
        .build()
        .unwrap();
    assert_eq!(client.get(key).await.unwrap().bytes.as_ref(), &body[..]);
    client_sees(&client, &["g1", "g2", "g3"]).await;

    // g2 and g3 stop past their TTL: etcd drops their records, g1 lists itself alone, and
    // the client follows g1.
    kill(&gws[1], "STOP");
    kill(&gws[2], "STOP");
    wait_view(&gws[0], "g1 alone", Duration::from_secs(15), |v| {
        serving(v) == ["g1"]
    })
    .await;
    client_sees(&client, &["g1"]).await;

    // g1 goes; g2 and g3 come back (and register again).
    let g1 = gws.remove(0);
    kill(&g1, "KILL");
    assert!(g1.wait_exit(Duration::from_secs(10)).is_some(), "g1 ended");
    kill(&gws[0], "CONT");
    kill(&gws[1], "CONT");
    for gw in &gws {
        wait_view(gw, "itself serving again", Duration::from_secs(15), |v| {
            serving(v).contains(&v.this_node)
        })
        .await;
        wait_ready(gw, Duration::from_secs(15)).await;
    }

    let started = Instant::now();
    let got = client.get(key).await;
    let took = started.elapsed();
    let got = got.unwrap_or_else(|e| panic!("read of {key} after {took:?}: {e}"));
    assert_eq!(got.bytes.as_ref(), &body[..]);
    assert!(
        took <= TIMEOUT + TIMEOUT / 10,
        "the read took {took:?}, past its timeout {TIMEOUT:?} (+10 %)"
    );
    // And the client learns the view from them, not only from its seed.
    client_sees(&client, &["g2", "g3"]).await;
}
