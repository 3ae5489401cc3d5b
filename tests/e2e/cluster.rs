//! A cluster of real gateway processes on a real etcd (and s3s-fs as the origin):
//! membership, placement, forwarding and redirects, one S3 fetch per key for the whole
//! cluster, failover under SIGKILL, draining on SIGTERM, restarts, and etcd outages.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterView, Descriptor, MemberState};
use rasa_tests::etcd::{cluster_name, member_args, serving, view, wait_view, Etcd};
use rasa_tests::{gateway_bin, pattern, sha256_hex, Gateway, S3Server, S3_BUCKET};

fn member(etcd: &Etcd, name: &str, node: &str, ttl: &str, extra: &[String]) -> Gateway {
    let mut args = member_args(etcd, name, node, ttl);
    args.extend(["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"].map(str::to_owned));
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

fn fleet(etcd: &Etcd, name: &str, n: usize, ttl: &str, extra: &[String]) -> Vec<Gateway> {
    (1..=n)
        .map(|i| member(etcd, name, &format!("g{i}"), ttl, extra))
        .collect()
}

/// Waits until every gateway sees `n` serving members; the last view.
async fn all_see(gws: &[&Gateway], n: usize) -> ClusterView {
    let mut last = None;
    for gw in gws {
        last = Some(
            wait_view(
                gw,
                &format!("{n} serving members"),
                Duration::from_secs(15),
                |v| serving(v).len() == n,
            )
            .await,
        );
    }
    last.expect("at least one gateway")
}

fn kill(gw: &Gateway, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &gw.pid().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{signal} failed");
}

fn sdk(seed: &str) -> Client {
    Client::builder(seed)
        .fast_path(FastPath::Auto)
        .build()
        .expect("a client")
}

async fn seed_bucket(s3: &S3Server, prefix: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    let direct = s3.client().await;
    let objects: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("obj/{i}"),
                pattern(500 + (i * 997) % 20_000, i as u64),
            )
        })
        .collect();
    for chunk in objects.chunks(32) {
        futures_util::future::join_all(chunk.iter().map(|(k, body)| {
            direct
                .put_object()
                .bucket(S3_BUCKET)
                .key(format!("{prefix}/{k}"))
                .body(ByteStream::from(body.clone()))
                .send()
        }))
        .await
        .into_iter()
        .for_each(|r| {
            r.expect("put into s3s-fs");
        });
    }
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_own_keys_by_the_published_function_and_forward_or_redirect() {
    let etcd = Etcd::start();
    let name = cluster_name("place");
    let gws = fleet(&etcd, &name, 3, "3s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let v = all_see(&refs, 3).await;
    for gw in &gws {
        let info: rasa_openapi::FabricInfo = gw.get_json("/v1/fabric").await;
        let me = v.members.iter().find(|m| m.url == gw.base).expect("listed");
        assert_eq!(me.incarnation, info.incarnation);
        assert_eq!(me.fabric.address, info.address);
    }

    // The SDK puts each key on its owner, as the published function says.
    let client = sdk(&gws[0].base);
    let http = rasa_tests::http();
    for i in 0..30 {
        let key = format!("k/{i}");
        let body = pattern(100 + i, i as u64);
        let d = client.put(&key, body.clone()).await.expect("put");
        let expected = owner(&key, &v.members).expect("an owner");
        assert_eq!(
            d.node_id.as_deref(),
            Some(expected.node_id.as_str()),
            "{key}"
        );
        // Every member answers for every key: the owner itself, the others by forwarding.
        for gw in &gws {
            let r = http
                .get(gw.url(&format!("/v1/objects/{key}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{key} via {}", gw.base);
            let by = r
                .headers()
                .get("rasa-served-by")
                .map(|h| h.to_str().unwrap().to_owned());
            if gw.base == expected.url {
                assert_eq!(by, None);
            } else {
                assert_eq!(by.as_deref(), Some(expected.node_id.as_str()));
            }
            assert_eq!(r.bytes().await.unwrap().as_ref(), &body[..]);
        }
        // A request marked as forwarded is served where it lands: no second hop.
        let non_owner = gws.iter().find(|g| g.base != expected.url).unwrap();
        let r = http
            .get(non_owner.url(&format!("/v1/objects/{key}")))
            .header("rasa-hop", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            404,
            "a hop-marked request is not forwarded again"
        );
    }
    let got = client
        .get_many(&["k/1", "k/2", "k/3", "missing"])
        .await
        .unwrap();
    assert_eq!(
        got[1].as_ref().unwrap().bytes.as_ref(),
        &pattern(102, 2)[..]
    );
    assert!(got[3].is_err());
    let listed = client.list("k/", None, 100).await.unwrap();
    assert_eq!(listed.items.len(), 30, "the SDK lists every member's keys");

    // A PUT through a non-owner is streamed to the owner.
    let big = pattern(3 << 20, 77);
    let key = (0..)
        .map(|i| format!("big/{i}"))
        .find(|k| owner(k, &v.members).unwrap().url != gws[0].base)
        .unwrap();
    let r = http
        .put(gws[0].url(&format!("/v1/objects/{key}")))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!(
        d.node_id.as_deref(),
        Some(owner(&key, &v.members).unwrap().node_id.as_str())
    );
    assert_eq!(d.sha256, sha256_hex(&big));

    // A member in redirect mode answers 307 with the owner's URL.
    let g4 = member(
        &etcd,
        &name,
        "g4",
        "3s",
        &["--cluster-routing".into(), "redirect".into()],
    );
    let v = all_see(&[&g4, &gws[0]], 4).await;
    let key = (0..)
        .map(|i| format!("k/{i}"))
        .find(|k| owner(k, &v.members).unwrap().url != g4.base)
        .unwrap();
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_follow
        .get(g4.url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 307);
    assert_eq!(
        r.headers()["location"].to_str().unwrap(),
        format!("{}/v1/objects/{key}", owner(&key, &v.members).unwrap().url)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_key_is_fetched_from_s3_once_for_the_whole_cluster() {
    let s3 = S3Server::start();
    let objects = seed_bucket(&s3, "pre", 300).await;
    let etcd = Etcd::start();
    let name = cluster_name("once");
    let gws = fleet(&etcd, &name, 3, "3s", &s3.gateway_args("pre"));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let v = all_see(&refs, 3).await;
    let objects = Arc::new(objects);
    // Six readers at once: three that route by themselves (one seed each), three that
    // talk to one member only and rely on it forwarding.
    let mut readers = Vec::new();
    for r in 0..6 {
        let base = gws[r % 3].base.clone();
        let objects = Arc::clone(&objects);
        readers.push(tokio::spawn(async move {
            let c = Client::builder(&base)
                .discover_cluster(r < 3)
                .fast_path(FastPath::Auto)
                .build()
                .unwrap();
            for i in 0..objects.len() {
                let (key, body) = &objects[(i * 7 + r * 50) % objects.len()];
                let got = c.get(key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
                assert_eq!(got.sha256, sha256_hex(body), "{key}");
                assert_eq!(got.bytes.as_ref(), &body[..], "{key}");
            }
        }));
    }
    for r in readers {
        r.await.expect("a reader");
    }
    for (key, _) in objects.iter() {
        assert_eq!(
            s3.ops("GetObject", &format!("pre/{key}")),
            1,
            "{key} fetched from S3 once"
        );
    }
    // Each member fetched exactly the keys it owns.
    for gw in &gws {
        let me = v.members.iter().find(|m| m.url == gw.base).unwrap();
        let owned = objects
            .iter()
            .filter(|(k, _)| owner(k, &v.members).unwrap().node_id == me.node_id)
            .count();
        assert_eq!(
            rasa_tests::metric(gw, "rasa_origin_fetches_total").await as usize,
            owned,
            "{}",
            me.node_id
        );
    }
}

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
        .resolve_many(&key_refs)
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
    for (i, d) in &held {
        let got = client
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
    let stale = client.read_descriptor(&d, sent).await;
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
