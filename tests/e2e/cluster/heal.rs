//! A cluster that heals (issue 32): membership comes back after etcd was away for longer
//! than the members' leases.

use std::time::{Duration, Instant};

use rasa_openapi::cluster::owner;
use rasa_openapi::Descriptor;
use rasa_tests::etcd::{cluster_name, member_args, serving, wait_view, Etcd};
use rasa_tests::relay::Relay;
use rasa_tests::{json_of, pattern, Gateway};

use super::{all_see, fleet};

/// etcd frozen for more than `--member-ttl`: every lease expires (etcd revokes them once
/// it runs again). Each member notices that its lease is gone — not that etcd is away —
/// and registers again, so every view is whole again within the time the members take to
/// try again (a third of the TTL), not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_register_again_after_etcd_was_away_longer_than_their_leases() {
    const TTL: Duration = Duration::from_secs(3);
    let etcd = Etcd::start();
    let name = cluster_name("heal");
    let gws = fleet(&etcd, &name, 3, "3s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 3).await;
    etcd.signal("STOP");
    std::thread::sleep(TTL * 2 + Duration::from_secs(1));
    etcd.signal("CONT");
    let resumed = Instant::now();
    for gw in &gws {
        let v = wait_view(gw, "all three members again", TTL * 2, |v| {
            serving(v) == ["g1", "g2", "g3"]
        })
        .await;
        assert_eq!(v.members.len(), 3);
    }
    eprintln!("members back {:?} after etcd resumed", resumed.elapsed());
}

/// A read forwarded to an owner that accepts connections but answers nothing (frozen) is
/// served by the forwarding member after a short wait of its own, not after the owner's
/// 30 s body timeout: callers with a few seconds' timeout still get an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_forwarded_to_a_frozen_owner_is_answered_within_seconds() {
    let etcd = Etcd::start();
    let name = cluster_name("frozen-owner");
    let gws = fleet(&etcd, &name, 2, "10s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 2).await;
    let key = key_owned_by("f/", "g2", &view);
    let more: Vec<String> = (0..)
        .map(|i| format!("f/more-{i}"))
        .filter(|k| owner(k, &view.members).is_some_and(|m| m.node_id == "g2"))
        .take(5)
        .collect();
    super::kill(&gws[1], "STOP");
    let read = |key: String| {
        let url = gws[0].url(&format!("/v1/objects/{key}"));
        async move {
            let started = Instant::now();
            let answer = rasa_tests::http()
                .get(url)
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            (answer, started.elapsed())
        }
    };
    let (answer, took) = read(key).await;
    // Only the first read waits for the frozen owner: it is passed over for a few seconds.
    let mut after = Vec::new();
    for k in more {
        after.push(read(k).await);
    }
    super::kill(&gws[1], "CONT");
    let answer = answer.expect("an answer from the member asked");
    assert_eq!(answer.status(), 404, "served here: g1 has no such key");
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
    for (answer, took) in after {
        assert_eq!(answer.expect("an answer").status(), 404);
        assert!(
            took < Duration::from_secs(1),
            "a later read waited {took:?} for the owner that had just failed to answer"
        );
    }
    assert!(
        rasa_tests::metric(
            &gws[0],
            "rasa_cluster_forwards_total{result=\"owner_suspect\"}"
        )
        .await
            >= 5.0
    );
}

/// A member cut off from etcd (its link through a relay cut) stops acting as owner
/// within its TTL — the others have removed it by then — so no key has two owners: a PUT
/// sent to it for a key it owned goes to the key's owner in the others' view. Once the
/// link heals it registers again and owns its keys again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_etcd_stops_owning_and_rejoins_after_the_heal() {
    // Long enough that the members that keep their link never miss two renewals in a row
    // on a loaded test machine (a third of the TTL apart).
    const TTL: Duration = Duration::from_secs(5);
    let etcd = Etcd::start();
    let name = cluster_name("fenced");
    let etcd_at = etcd
        .endpoint
        .strip_prefix("etcd://")
        .unwrap()
        .parse()
        .unwrap();
    let relay = Relay::start(etcd_at).await;
    let mut gws: Vec<Gateway> = (1..=2)
        .map(|i| super::member(&etcd, &name, &format!("g{i}"), "5s", &[]))
        .collect();
    let mut args = member_args(&etcd, &name, "g3", "5s");
    args[1] = format!("etcd://{}", relay.addr);
    gws.push(super::member_with(&args));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let whole = all_see(&refs, 3).await;
    let key = key_owned_by("c/", "g3", &whole);
    relay.cut();
    let cut = Instant::now();
    let without = wait_view(&gws[0], "g3 removed", TTL * 3, |v| {
        serving(v) == ["g1", "g2"]
    })
    .await;
    let now_owner = owner(&key, &without.members).unwrap().node_id.clone();
    rasa_tests::wait_for_metric(&gws[2], "rasa_cluster_fenced", 1.0).await;
    // Its readiness says so (a load balancer sends its writes elsewhere); the others'
    // does not.
    let ready = |gw: &Gateway| rasa_tests::http().get(gw.url("/readyz")).send();
    let r = ready(&gws[2]).await.unwrap();
    assert_eq!(r.status(), 503, "/readyz of the fenced member");
    let text = r.text().await.unwrap();
    assert!(text.contains("fenced"), "{text}");
    assert_eq!(ready(&gws[0]).await.unwrap().status(), 200);
    let answer = rasa_tests::http()
        .put(gws[2].url(&format!("/v1/objects/{key}")))
        .body(pattern(100, 1))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let text = answer.text().await.unwrap();
    assert_eq!(status, 201, "the PUT through g3: {text}");
    let d: Descriptor = serde_json::from_str(&text).unwrap();
    assert_eq!(
        d.node_id.as_deref(),
        Some(now_owner.as_str()),
        "g3, cut off {:?} ago, still acted as owner",
        cut.elapsed()
    );
    relay.heal();
    all_see(&refs, 3).await;
    let r = ready(&gws[2]).await.unwrap();
    assert_eq!(r.status(), 200, "ready again after the heal");
    let d: Descriptor = json_of(
        rasa_tests::http()
            .put(gws[0].url(&format!("/v1/objects/{key}")))
            .body(pattern(100, 2)),
    )
    .await;
    assert_eq!(d.node_id.as_deref(), Some("g3"), "g3 owns its keys again");
}

/// Two write-through PUTs of one key at once, one sent to its owner and one to another
/// member (which forwards it): the owner orders them, so memory and S3 end on the same
/// version every round (the chaos run found them apart in 10 of 100 rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_puts_via_owner_and_non_owner_leave_memory_and_s3_agreeing() {
    const ROUNDS: u64 = 100;
    let s3 = rasa_tests::S3Server::start();
    let etcd = Etcd::start();
    let name = cluster_name("race");
    let gws = fleet(&etcd, &name, 2, "10s", &s3.gateway_args("pre"));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 2).await;
    let key = "race/k";
    let owner_at = match owner(key, &view.members).unwrap().node_id.as_str() {
        "g1" => 0,
        _ => 1,
    };
    let c = rasa_tests::http();
    for round in 0..ROUNDS {
        let put = |gw: &Gateway, seed: u64| {
            c.put(gw.url(&format!("/v1/objects/{key}")))
                .body(pattern(8 << 10, seed))
                .send()
        };
        let (a, b) = tokio::join!(
            put(&gws[owner_at], round * 2),
            put(&gws[1 - owner_at], round * 2 + 1)
        );
        assert_eq!(a.unwrap().status(), 201);
        assert_eq!(b.unwrap().status(), 201);
        let served =
            rasa_tests::bytes_of(c.get(gws[owner_at].url(&format!("/v1/objects/{key}")))).await;
        let held = s3.object(&format!("pre/{key}")).await;
        assert!(served == held, "round {round}: memory and S3 differ");
    }
}

/// The stale-copy sequence: a key's owner is frozen until the others remove it, the key
/// is written meanwhile through its interim owner, then the owner comes back. Every read
/// after its return — through either member — gets the new version: the returning member
/// revalidates what it holds before it is a member again (before: the old version, for
/// up to `--origin-ttl`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_from_a_lost_lease_serves_no_version_replaced_while_it_was_out() {
    let s3 = rasa_tests::S3Server::start();
    let etcd = Etcd::start();
    let name = cluster_name("stale");
    // 5 s: the member that stays never misses two renewals in a row on a loaded machine.
    let gws = fleet(&etcd, &name, 2, "5s", &s3.gateway_args("pre"));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 2).await;
    let key = key_owned_by("s/", "g2", &view);
    let c = rasa_tests::http();
    let url = |gw: &Gateway| gw.url(&format!("/v1/objects/{key}"));
    let (old, new) = (pattern(1000, 1), pattern(1000, 2));
    assert_eq!(
        c.put(url(&gws[1]))
            .body(old.clone())
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    super::kill(&gws[1], "STOP");
    wait_view(&gws[0], "g2 removed", Duration::from_secs(15), |v| {
        serving(v) == ["g1"]
    })
    .await;
    let d: Descriptor = json_of(c.put(url(&gws[0])).body(new.clone())).await;
    assert_eq!(
        d.node_id.as_deref(),
        Some("g1"),
        "g1 owns the key meanwhile"
    );
    super::kill(&gws[1], "CONT");
    all_see(&refs, 2).await;
    for round in 0..20 {
        for gw in &gws {
            let got = rasa_tests::bytes_of(c.get(url(gw))).await;
            assert!(
                got == new,
                "round {round}: {} served the old version",
                gw.base
            );
        }
    }
}

/// A dead owner's keys (before the others have removed it) are fetched from S3 once each,
/// by their next choice — every member that cannot reach the owner asks the next choice
/// rather than filling the key itself. (The next choice confirms its copy with a
/// conditional GET before serving it again: a body crosses once, a `304` after.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owners_keys_are_fetched_once_by_their_next_choice() {
    let s3 = rasa_tests::S3Server::start();
    let objects = super::seed_bucket(&s3, "pre", 90).await;
    let etcd = Etcd::start();
    let name = cluster_name("dead-owner");
    let gws = fleet(&etcd, &name, 3, "30s", &s3.gateway_args("pre"));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 3).await;
    let orphans: Vec<&(String, Vec<u8>)> = objects
        .iter()
        .filter(|(k, _)| owner(k, &view.members).is_some_and(|m| m.node_id == "g3"))
        .collect();
    assert!(orphans.len() > 10, "only {} keys on g3", orphans.len());
    super::kill(&gws[2], "KILL");
    let c = rasa_tests::http();
    for (k, body) in &orphans {
        for gw in &gws[..2] {
            let got = rasa_tests::bytes_of(c.get(gw.url(&format!("/v1/objects/{k}")))).await;
            assert!(got == *body, "{k} via {}", gw.base);
        }
    }
    let requests: usize = orphans
        .iter()
        .map(|(k, _)| s3.ops("GetObject", &format!("pre/{k}")))
        .sum();
    assert_eq!(
        requests,
        2 * orphans.len(),
        "S3 requests for {} orphaned keys: a fetch and a confirmation each",
        orphans.len()
    );
    let mut fetched = 0.0;
    for gw in &gws[..2] {
        fetched += rasa_tests::metric(gw, "rasa_origin_bytes_total").await;
    }
    let bodies: usize = orphans.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(fetched as usize, bodies, "each body crossed once");
}

/// A key under `prefix` that `node` owns in `view`.
/// A member killed and started again on its address within its TTL: its predecessor's
/// record still holds the id, but the new process holds the port that record names, so
/// the predecessor is gone — it takes the record over at once instead of waiting a TTL.
/// Until it has joined it accepts no connection (refused, never a silent socket), and
/// reads through the survivor are answered within seconds the whole time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_within_its_ttl_rejoins_at_once_and_is_never_silent() {
    const TTL: Duration = Duration::from_secs(10);
    let etcd = Etcd::start();
    let name = cluster_name("restart-ttl");
    let mut gws = fleet(&etcd, &name, 2, "10s", &[]);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 2).await;
    let old = view.members[1].incarnation.clone();
    let key = key_owned_by("t/", "g2", &view);
    let put = rasa_tests::http()
        .put(gws[0].url(&format!("/v1/objects/{key}")))
        .body("before")
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    let addr = gws[1].addr;
    super::kill(&gws[1], "KILL");
    gws[1].wait_exit(Duration::from_secs(5)).expect("killed");

    // Probes, while g2 is down and restarting: its own port, and a read of its key via g1.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = |url: String, limit: Duration| {
        let stop = std::sync::Arc::clone(&stop);
        tokio::spawn(async move {
            let client = reqwest::Client::builder().build().unwrap();
            let mut slowest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let _ = client.get(&url).timeout(limit * 3).send().await;
                slowest = slowest.max(sent.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            slowest
        })
    };
    let own = probe(
        format!("http://{addr}/v1/objects/{key}"),
        Duration::from_secs(1),
    );
    let via = probe(
        gws[0].url(&format!("/v1/objects/{key}")),
        Duration::from_secs(3),
    );

    let started = Instant::now();
    let mut args = rasa_tests::etcd::member_args(&etcd, &name, "g2", "10s");
    args.extend(["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    gws[1] = Gateway::start_at(addr, &args);
    let ready = started.elapsed();
    let v = wait_view(&gws[0], "g2 back as a new incarnation", TTL, |v| {
        v.members
            .iter()
            .any(|m| m.node_id == "g2" && m.incarnation != old)
    })
    .await;
    let seen = started.elapsed();
    assert_eq!(serving(&v), ["g1", "g2"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (own, via) = (own.await.unwrap(), via.await.unwrap());
    eprintln!("restart: ready in {ready:?}, seen by g1 in {seen:?}; slowest probe of g2 {own:?}, via g1 {via:?}");
    assert!(
        ready < TTL / 4,
        "the restarted member waited {ready:?} before serving (its predecessor's TTL is {TTL:?})"
    );
    assert!(
        own < Duration::from_secs(1),
        "a request to the restarting member went unanswered for {own:?}"
    );
    assert!(
        via < Duration::from_secs(3),
        "a read through the survivor took {via:?}"
    );
    // It serves: a write through the survivor lands on it and reads back. A forwarded
    // write that meets a connection to the previous process is refused with Retry-After
    // (nothing stored), as a client of a cluster must expect; it retries as told.
    let mut answers = Vec::new();
    for _ in 0..3 {
        let put = rasa_tests::http()
            .put(gws[0].url(&format!("/v1/objects/{key}")))
            .body("after")
            .send()
            .await
            .unwrap();
        let (status, retry) = (put.status(), put.headers().get("retry-after").cloned());
        answers.push(format!("{status} {}", put.text().await.unwrap()));
        let Some(retry) = retry.filter(|_| status == 503) else {
            break;
        };
        let secs: u64 = retry.to_str().unwrap().parse().unwrap();
        assert!(secs <= 3, "Retry-After {secs}");
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    assert!(
        answers.last().unwrap().starts_with("201") && answers.len() <= 2,
        "{answers:?}"
    );
    let got = rasa_tests::http()
        .get(gws[1].url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"after");
}

fn key_owned_by(prefix: &str, node: &str, view: &rasa_openapi::ClusterView) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| owner(k, &view.members).is_some_and(|m| m.node_id == node))
        .unwrap_or_else(|| unreachable!("some key is {node}'s"))
}
