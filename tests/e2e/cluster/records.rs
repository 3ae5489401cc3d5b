//! Review III, findings 1 and 2, on real members and a real etcd. A departed member's
//! signed record, saved from etcd and written back — without a lease, or under a lease
//! granted again with the same id once the record's time has passed — gets no request: a
//! listener on the departed member's address counts none. A hop proof replayed with
//! another body, or to another member, stores nothing aside.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterView, Descriptor, HOP_HEADER};
use rasa_tests::etcd::{cluster_name, hop_proof, member_args, Etcd};
use rasa_tests::{http, json_of, pattern, Gateway};

use super::proof::secret_file;
use super::{all_see, member_with};

/// A listener at `addr` that answers every request 200 and counts the connections.
async fn listener_at(addr: &str) -> Arc<AtomicUsize> {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    super::proof::counting(listener, b"{}")
}

/// Members `nodes` of cluster `name`, with member TTL `ttl`, proving themselves with
/// `secret`.
fn members(etcd: &Etcd, name: &str, nodes: &[&str], ttl: &str, secret: &Path) -> Vec<Gateway> {
    nodes
        .iter()
        .map(|node| {
            let mut args = member_args(etcd, name, node, ttl);
            args.extend(["--cluster-secret-file".into(), secret.display().to_string()]);
            member_with(&args)
        })
        .collect()
}

/// PUTs and GETs of 32 keys through `gw`, each answered by `gw` itself: the only member.
async fn writes_and_reads_stay_on(gw: &Gateway, round: &str) {
    for i in 0..32u64 {
        let key = format!("{round}/{i}");
        let d: Descriptor = json_of(
            http()
                .put(gw.url(&format!("/v1/objects/{key}")))
                .header("authorization", "Bearer not-for-the-listener")
                .body(pattern(512, i)),
        )
        .await;
        assert_eq!(d.node_id.as_deref(), Some("g1"), "{key}");
        let got = rasa_tests::bytes_of(http().get(gw.url(&format!("/v1/objects/{key}")))).await;
        assert!(got == pattern(512, i), "{key}");
    }
}

async fn members_of(gw: &Gateway) -> Vec<String> {
    let v: ClusterView = gw.get_json("/v1/cluster").await;
    v.members.into_iter().map(|m| m.node_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_members_record_written_back_gets_no_request() {
    let etcd = Etcd::start();
    let name = cluster_name("departed");
    let secret = secret_file("departed", 0o600);
    let mut gws = members(&etcd, &name, &["g1", "g2"], "3s", &secret);
    let (g2, g1) = (gws.pop().unwrap(), gws.pop().unwrap());
    all_see(&[&g1, &g2], 2).await;
    let key = format!("/rasa/{name}/members/g2");
    let saved = etcd.get_value(&key).await.expect("g2's record");
    let record: serde_json::Value = serde_json::from_str(&saved).unwrap();
    let lease = record["lease"]
        .as_i64()
        .expect("the record names its lease");
    let expires_ms = record["expires_ms"].as_u64().expect("and its time");
    let addr = g2.base.trim_start_matches("http://").to_owned();
    assert!(g2.terminate().success());
    all_see(&[&g1], 1).await;
    let hits = listener_at(&addr).await;

    // Written back without a lease: ignored.
    let rejected = rasa_tests::metric(&g1, "rasa_cluster_records_rejected_total").await;
    etcd.put_as_client(None, &key, &saved).await;
    rasa_tests::wait_for_metric(&g1, "rasa_cluster_records_rejected_total", rejected + 1.0).await;
    assert_eq!(members_of(&g1).await, ["g1"]);
    writes_and_reads_stay_on(&g1, "no-lease").await;

    // Under a lease granted again with the record's id, once its time has passed: ignored.
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let wait = Duration::from_millis(expires_ms.saturating_sub(now_ms()) + 100);
    assert!(wait < Duration::from_secs(10), "valid for 3 TTLs: {wait:?}");
    tokio::time::sleep(wait).await; // the record's own time: nothing to wait on but the clock
    etcd.put_under_lease(&key, &saved, lease, 30).await;
    rasa_tests::wait_for_metric(&g1, "rasa_cluster_records_rejected_total", rejected + 2.0).await;
    assert_eq!(members_of(&g1).await, ["g1"]);
    writes_and_reads_stay_on(&g1, "same-lease").await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the listener at g2's address was sent requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_members_record_stays_honoured_past_its_first_time() {
    // Records are written again every TTL, each valid for three: a live member stays in
    // the view long past the time of the record it first wrote.
    let etcd = Etcd::start();
    let name = cluster_name("refresh");
    let secret = secret_file("refresh", 0o600);
    let gws = members(&etcd, &name, &["g1", "g2"], "2s", &secret);
    all_see(&[&gws[0], &gws[1]], 2).await;
    let first: serde_json::Value = serde_json::from_str(
        &etcd
            .get_value(&format!("/rasa/{name}/members/g2"))
            .await
            .unwrap(),
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert_eq!(members_of(&gws[0]).await, ["g1", "g2"]);
        tokio::time::sleep(Duration::from_millis(500)).await; // sampling the view over time
    }
    let now: serde_json::Value = serde_json::from_str(
        &etcd
            .get_value(&format!("/rasa/{name}/members/g2"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(
        now["expires_ms"].as_u64() > first["expires_ms"].as_u64(),
        "renewed"
    );
    assert_eq!(
        rasa_tests::metric(&gws[0], "rasa_cluster_records_rejected_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_replayed_with_another_body_or_to_another_member_stores_nothing_aside() {
    let etcd = Etcd::start();
    let name = cluster_name("bound");
    let secret = secret_file("bound", 0o600);
    let gws = members(&etcd, &name, &["g1", "g2"], "5s", &secret);
    let view = all_see(&[&gws[0], &gws[1]], 2).await;
    let key = (0..)
        .map(|i| format!("bound/{i}"))
        .find(|k| owner(k, &view.members).unwrap().node_id == "g2")
        .unwrap();
    let path = format!("/v1/objects/{key}");
    // What g2 holds itself, asked as a member asks.
    let held_at = |i: usize| {
        let to = ["g1", "g2"][i];
        let proof = hop_proof(&secret, ("g1", to), "GET", &path, None);
        http()
            .get(gws[i].url(&path))
            .header(HOP_HEADER, "1")
            .header("rasa-hop-proof", proof)
    };

    // A proof for body A, sent to its member with body B: the body breaks off.
    let proof = hop_proof(&secret, ("g1", "g2"), "PUT", &path, Some(b"REAL-VALUE"));
    let r = http()
        .put(gws[1].url(&path))
        .header(HOP_HEADER, "1")
        .header("rasa-hop-proof", &proof)
        .body("FAKE-VALUE")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "{}", r.text().await.unwrap());
    assert_eq!(
        held_at(1).send().await.unwrap().status(),
        404,
        "stored nothing"
    );

    // The proof g1 made for g2, replayed to g1 itself: the marker goes, so the write is
    // a client's like any other — passed to the owner, nothing kept at g1.
    let before = rasa_tests::metric(&gws[0], "rasa_cluster_hops_rejected_total").await;
    let proof = hop_proof(&secret, ("g1", "g2"), "PUT", &path, Some(b"OTHER"));
    let r = http()
        .put(gws[0].url(&path))
        .header(HOP_HEADER, "1")
        .header("rasa-hop-proof", &proof)
        .body("OTHER")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!(
        d.node_id.as_deref(),
        Some("g2"),
        "stored at the owner, not aside"
    );
    assert!(rasa_tests::metric(&gws[0], "rasa_cluster_hops_rejected_total").await > before);
    assert_eq!(
        held_at(0).send().await.unwrap().status(),
        404,
        "nothing at g1"
    );
    for gw in &gws {
        let got = rasa_tests::bytes_of(http().get(gw.url(&path))).await;
        assert_eq!(&got[..], b"OTHER", "one version, through every member");
    }
}

/// A member back from a lost lease owns nothing until its new record is visible (and the
/// join grace after it): it counted its new lease from the grant, before writing the
/// record, and for as long as the write took it was not fenced — with a view that still
/// held its old record, so it served its keys as their owner from a copy older than a
/// write the others' owner had acknowledged (a chaos run: ~35 ms). A pause between grant
/// and record (`--test-register-pause`, tests only) makes that moment long enough to look
/// at: `/readyz` (200 only when not fenced) is sampled against etcd's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_from_a_lost_lease_owns_nothing_before_its_record_is_back() {
    let etcd = Etcd::start();
    let name = cluster_name("rejoin");
    let etcd_addr: std::net::SocketAddr =
        etcd.endpoint.trim_start_matches("etcd://").parse().unwrap();
    let link = rasa_tests::relay::Relay::start(etcd_addr).await;
    let pause = ["--test-hooks", "--test-register-pause", "1500ms"].map(str::to_owned);
    let mut g1_args = member_args(&etcd, &name, "g1", "2s");
    g1_args.extend(pause.clone());
    let mut g2_args = member_args(&etcd, &name, "g2", "2s");
    g2_args[1] = format!("etcd://{}", link.addr);
    g2_args.extend(pause);
    let (g1, g2) = (member_with(&g1_args), member_with(&g2_args));
    all_see(&[&g1, &g2], 2).await;
    let key = format!("/rasa/{name}/members/g2");

    // g2 is cut from etcd past its TTL: its record goes, and it is fenced.
    link.cut();
    rasa_tests::etcd::wait_view(&g1, "g2 gone", Duration::from_secs(15), |v| {
        rasa_tests::etcd::serving(v) == ["g1"]
    })
    .await;
    assert!(etcd.get_value(&key).await.is_none(), "g2's record is gone");
    link.heal();

    // From now until its record is back, g2 must not say it is ready (own keys).
    let healed = Instant::now();
    let mut samples = 0;
    loop {
        let record = etcd.get_value(&key).await;
        let ready = http().get(g2.url("/readyz")).send().await.unwrap().status();
        samples += 1;
        if record.is_some() {
            break;
        }
        assert_ne!(
            ready,
            200,
            "g2 ready (owning keys) {:?} after etcd was back, with no record of it in etcd",
            healed.elapsed()
        );
        assert!(
            healed.elapsed() < Duration::from_secs(15),
            "g2 never registered again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // sampling, not waiting
    }
    eprintln!(
        "g2's record back {:?} after etcd was ({samples} samples)",
        healed.elapsed()
    );
    assert!(
        samples > 10,
        "the pause between grant and record was sampled"
    );
}
