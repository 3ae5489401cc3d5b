//! A cluster under failure: a member killed under load, a member draining on SIGTERM, a
//! restart with the same id, refusals at start, and etcd stopped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterView, Descriptor, MemberState};
use rasa_tests::etcd::{cluster_name, member_args, serving, view, wait_view, Etcd};
use rasa_tests::{gateway_bin, pattern, Gateway, S3Server};

use super::{all_see, fleet, kill, member, sdk, seed_bucket};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_under_load_costs_no_wrong_bytes_and_no_errors() {
    let s3 = S3Server::start();
    let objects = Arc::new(seed_bucket(&s3, "pre", 60).await);
    let etcd = Etcd::start();
    let name = cluster_name("kill");
    let gws = fleet(&etcd, &name, 3, "2s", &s3.gateway_args("pre"));
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 3).await;
    let reads = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..4 {
        let (objects, reads, progress, stop) = (
            Arc::clone(&objects),
            Arc::clone(&reads),
            Arc::clone(&progress),
            Arc::clone(&stop),
        );
        let seeds = format!("{},{}", gws[0].base, gws[r % 3].base);
        readers.push(tokio::spawn(async move {
            let c = sdk(&seeds);
            let mut i = r * 13;
            while !stop.load(Ordering::Acquire) {
                let (key, body) = &objects[i % objects.len()];
                let got = c.get(key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
                assert_eq!(got.bytes.as_ref(), &body[..], "wrong bytes for {key}");
                reads.fetch_add(1, Ordering::AcqRel);
                progress.notify_waiters();
                i += 1;
            }
            c.stats()
        }));
    }
    let until = |n: u64| {
        let (reads, progress) = (Arc::clone(&reads), Arc::clone(&progress));
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let wake = progress.notified();
                if reads.load(Ordering::Acquire) >= n {
                    return;
                }
                assert!(Instant::now() < deadline, "readers stalled below {n} reads");
                let _ = tokio::time::timeout(Duration::from_secs(1), wake).await;
            }
        }
    };
    until(300).await;
    kill(&gws[1], "KILL");
    let killed_at = Instant::now();
    let before = reads.load(Ordering::Acquire);
    until(before + 300).await;
    wait_view(&gws[0], "g2 gone", Duration::from_secs(10), |v| {
        !serving(v).contains(&"g2".to_owned())
    })
    .await;
    let gone_after = killed_at.elapsed();
    let before = reads.load(Ordering::Acquire);
    until(before + 300).await;
    stop.store(true, Ordering::Release);
    for r in readers {
        let stats = r
            .await
            .expect("a reader finished without a wrong byte or an error");
        assert!(stats.fabric_reads > 0, "{stats:?}");
    }
    assert!(
        gone_after < Duration::from_secs(2 + 3),
        "g2 left the view {gone_after:?} after SIGKILL (TTL 2s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_held_descriptors_stay_readable_until_their_lease_ends() {
    let etcd = Etcd::start();
    let name = cluster_name("drain");
    let gws = fleet(&etcd, &name, 3, "3s", &["--lease".into(), "3s".into()]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 3).await;
    let client = sdk(&gws[0].base);
    let keys: Vec<String> = (0..24).map(|i| format!("d/{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        client.put(k, pattern(4096, i as u64)).await.unwrap();
    }
    let sent = Instant::now();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let held: Vec<(usize, Descriptor)> = client
        .many()
        .resolve(&key_refs)
        .await
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, d)| (i, d.expect("resolved")))
        .filter(|(_, d)| d.node_id.as_deref() == Some("g3"))
        .collect();
    assert!(!held.is_empty(), "g3 owns some of 24 keys");
    kill(&gws[2], "TERM");
    wait_view(&gws[0], "g3 draining", Duration::from_secs(5), |v| {
        v.members
            .iter()
            .any(|m| m.node_id == "g3" && m.state == MemberState::Draining)
    })
    .await;
    // Not ready while it drains: balancers send new requests elsewhere.
    let r = rasa_tests::http()
        .get(gws[2].url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "/readyz of a draining member");
    assert!(r.text().await.unwrap().contains("draining"));
    for (i, d) in &held {
        let got = client
            .versions()
            .read_descriptor(d, sent)
            .await
            .expect("a held descriptor is readable while g3 drains");
        assert_eq!(got.bytes.as_ref(), &pattern(4096, *i as u64)[..]);
        assert_eq!(got.path, rasa_client::ReadPath::Fabric);
    }
    let status = gws[2]
        .wait_exit(Duration::from_secs(15))
        .expect("g3 exits after its last lease");
    assert!(status.success(), "{status}");
    assert!(
        sent.elapsed() >= Duration::from_secs(3),
        "g3 left before its leases ended"
    );
    let v = view(&gws[0], None).await;
    assert_eq!(
        serving(&v),
        ["g1", "g2"],
        "g3 revoked its lease on the way out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_has_a_new_incarnation_and_old_descriptors_fail_cleanly() {
    let etcd = Etcd::start();
    let name = cluster_name("restart");
    let mut gws = fleet(&etcd, &name, 3, "2s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let v = all_see(&refs, 3).await;
    let old = v
        .members
        .iter()
        .find(|m| m.node_id == "g2")
        .unwrap()
        .incarnation
        .clone();
    let client = sdk(&gws[0].base);
    let key = (0..)
        .map(|i| format!("r/{i}"))
        .find(|k| owner(k, &v.members).unwrap().node_id == "g2")
        .unwrap();
    client.put(&key, pattern(10_000, 1)).await.unwrap();
    let sent = Instant::now();
    let d = client.resolve(&key).await.unwrap();
    kill(&gws[1], "KILL");
    gws[1].wait_exit(Duration::from_secs(5)).expect("killed");
    // The same id again: it waits for the dead process's record to expire, then joins.
    gws[1] = member(&etcd, &name, "g2", "2s", &[]);
    let v = wait_view(
        &gws[0],
        "g2 back with a new incarnation",
        Duration::from_secs(10),
        |v| {
            v.members
                .iter()
                .any(|m| m.node_id == "g2" && m.incarnation != old)
        },
    )
    .await;
    assert_eq!(serving(&v), ["g1", "g2", "g3"]);
    let stale = client.versions().read_descriptor(&d, sent).await;
    assert!(
        stale.is_err(),
        "a descriptor of the dead process must not read: {stale:?}"
    );
    // The restarted member serves new writes; the cache-only value it held is gone.
    client.put(&key, pattern(100, 2)).await.unwrap();
    assert_eq!(
        client.get(&key).await.unwrap().bytes.as_ref(),
        &pattern(100, 2)[..]
    );
}

/// Runs the gateway binary with `args` until it exits (it must, within 30 s); its exit
/// code and standard error.
async fn run_to_exit(args: &[String]) -> (Option<i32>, String) {
    let child = tokio::process::Command::new(gateway_bin())
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the gateway exits within 30 s")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_node_id_and_an_unreachable_etcd_are_refused_at_start() {
    let etcd = Etcd::start();
    let name = cluster_name("refuse");
    let g1 = member(&etcd, &name, "g1", "3s", &[]);
    let (code, err) = run_to_exit(&member_args(&etcd, &name, "g1", "3s")).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("in use by a live gateway") && err.contains(&g1.base),
        "{err}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let endpoint = format!("etcd://{closed}");
    let (code, err) =
        run_to_exit(&["--cluster".into(), endpoint, "--node-id".into(), "x".into()]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot reach etcd at http://{closed}")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_etcd_is_stopped_members_keep_serving_and_nothing_moves() {
    let etcd = Etcd::start();
    let name = cluster_name("pause");
    let gws = fleet(&etcd, &name, 3, "10s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let before = all_see(&refs, 3).await;
    let client = sdk(&gws[0].base);
    etcd.signal("STOP");
    let stopped = Instant::now();
    let mut i = 0u64;
    while stopped.elapsed() < Duration::from_secs(5) {
        let key = format!("p/{i}");
        let d = client
            .put(&key, pattern(64, i))
            .await
            .expect("a put while etcd is stopped");
        assert_eq!(
            d.node_id.as_deref(),
            Some(owner(&key, &before.members).unwrap().node_id.as_str())
        );
        assert_eq!(
            client.get(&key).await.unwrap().bytes.as_ref(),
            &pattern(64, i)[..]
        );
        i += 1;
    }
    for gw in &gws {
        assert_eq!(
            view(gw, None).await.members,
            before.members,
            "{} kept its view",
            gw.base
        );
    }
    etcd.signal("CONT");
    for gw in &gws {
        let now = view(gw, None).await;
        assert_eq!(serving(&now), ["g1", "g2", "g3"]);
        let incarnations = |v: &ClusterView| {
            v.members
                .iter()
                .map(|m| m.incarnation.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(incarnations(&now), incarnations(&before));
    }
    assert!(i > 10, "only {i} round trips in 5 s");
}
