//! A cluster of real gateway processes on a real etcd (and s3s-fs as the origin): members,
//! placement, forwarding, redirects, one S3 fetch per key for the whole cluster, filling
//! from the previous owner after a join; failures are in [`failures`].

mod batch;
mod chained;
mod failures;
mod frozen;
mod heal;
mod hot;
mod namespaced;
mod near;
mod never_back;
mod outcome;
mod proof;
mod records;
mod replicas;
mod replicas_ns;
mod s3;
mod secure;
mod shrunk;
mod twice;

use std::{process::Command, sync::Arc, time::Duration};

use aws_sdk_s3::primitives::ByteStream;
use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterView, Descriptor};
use rasa_tests::etcd::{cluster_name, member_args, serving, wait_view, Etcd};
use rasa_tests::{pattern, sha256_hex, Gateway, S3Server, S3_BUCKET};

pub(super) fn member(etcd: &Etcd, name: &str, node: &str, ttl: &str, extra: &[String]) -> Gateway {
    let mut args = member_args(etcd, name, node, ttl);
    args.extend_from_slice(extra);
    member_with(&args)
}

/// A member started with `args` (its cluster flags), on the fast path.
pub(super) fn member_with(args: &[String]) -> Gateway {
    let mut args = args.to_vec();
    args.extend(["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

pub(super) fn fleet(
    etcd: &Etcd,
    name: &str,
    n: usize,
    ttl: &str,
    extra: &[String],
) -> Vec<Gateway> {
    (1..=n)
        .map(|i| member(etcd, name, &format!("g{i}"), ttl, extra))
        .collect()
}

/// Three members `g1`–`g3` of a new cluster (after `tag`) sharing a secret, with `extra`.
pub(super) fn secret_fleet(etcd: &Etcd, tag: &str, extra: &[&str]) -> Vec<Gateway> {
    let name = cluster_name(tag);
    let secret = proof::secret_file(tag, 0o600).display().to_string();
    (1..=3)
        .map(|i| {
            let mut args = member_args(etcd, &name, &format!("g{i}"), "10s");
            args.extend(["--cluster-secret-file".to_owned(), secret.clone()]);
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Gateway::start(&args)
        })
        .collect()
}

/// Waits until every gateway sees `n` serving members; the last view.
pub(super) async fn all_see(gws: &[&Gateway], n: usize) -> ClusterView {
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
    for gw in gws {
        rasa_tests::etcd::wait_ready(gw, Duration::from_secs(15)).await;
    }
    last.expect("at least one gateway")
}

pub(super) fn kill(gw: &Gateway, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &gw.pid().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{signal} failed");
}

pub(super) fn sdk(seed: &str) -> Client {
    Client::builder(seed)
        .fast_path(FastPath::Auto)
        .build()
        .expect("a client")
}

pub(super) async fn seed_bucket(s3: &S3Server, prefix: &str, n: usize) -> Vec<(String, Vec<u8>)> {
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
        .many()
        .get(&["k/1", "k/2", "k/3", "missing"])
        .await
        .unwrap();
    assert_eq!(
        got[1].as_ref().unwrap().bytes.as_ref(),
        &pattern(102, 2)[..]
    );
    assert!(got[3].is_err());
    let listed = client.list("k/", None, 100).await.unwrap();
    assert_eq!(listed.items.len(), 30, "the SDK lists every member's keys");
    // Any member lists the whole cluster, a page at a time, and resolves a batch of
    // keys at their owners.
    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut q = vec![("prefix", "k/".to_owned()), ("limit", "7".to_owned())];
        q.extend(after.map(|a| ("after", a)));
        let page: rasa_openapi::ObjectList = http
            .get(gws[1].url("/v1/objects"))
            .query(&q)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(page.items.len() <= 7);
        keys.extend(page.items.into_iter().map(|i| i.key));
        match page.next_after {
            Some(a) => after = Some(a),
            None => break,
        }
    }
    let mut expected: Vec<String> = (0..30).map(|i| format!("k/{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected);
    let batch: Vec<String> = (0..30).map(|i| format!("k/{i}")).collect();
    let answer: rasa_openapi::DescriptorBatchResponse = http
        .post(gws[2].url("/v1/descriptors"))
        .json(&rasa_openapi::DescriptorBatchRequest {
            keys: batch.clone(),
        })
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (k, r) in batch.iter().zip(&answer.results) {
        let d = r.descriptor.as_ref().expect("resolved");
        assert_eq!(&d.key, k);
        assert_eq!(
            d.node_id.as_deref(),
            Some(owner(k, &v.members).unwrap().node_id.as_str())
        );
    }

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
async fn a_joining_member_fills_its_keys_from_their_previous_owners_not_from_s3() {
    let s3 = S3Server::start();
    let objects = seed_bucket(&s3, "pre", 120).await;
    let etcd = Etcd::start();
    let name = cluster_name("join");
    let args = s3.gateway_args("pre");
    let mut gws = fleet(&etcd, &name, 2, "3s", &args);
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 2).await;
    let client = sdk(&gws[0].base);
    for (key, body) in &objects {
        assert_eq!(client.get(key).await.unwrap().bytes.as_ref(), &body[..]);
    }
    gws.push(member(&etcd, &name, "g3", "3s", &args));
    let refs: Vec<&Gateway> = gws.iter().collect();
    let v = all_see(&refs, 3).await;
    // The client follows the change (long poll) and sends g3's keys to g3.
    let moved: Vec<&(String, Vec<u8>)> = objects
        .iter()
        .filter(|(k, _)| owner(k, &v.members).unwrap().node_id == "g3")
        .collect();
    assert!(moved.len() > 20, "g3 owns {} of 120 keys", moved.len());
    for (key, body) in &objects {
        assert_eq!(
            client.get(key).await.unwrap().bytes.as_ref(),
            &body[..],
            "{key}"
        );
    }
    for (key, _) in &objects {
        assert_eq!(
            s3.ops("GetObject", &format!("pre/{key}")),
            1,
            "{key}: S3 asked again"
        );
    }
    let filled = rasa_tests::metric(&gws[2], "rasa_peer_fills_total{result=\"hit\"}").await;
    assert_eq!(
        filled as usize,
        moved.len(),
        "g3 filled each of its keys from a peer"
    );
    assert_eq!(
        rasa_tests::metric(&gws[2], "rasa_origin_fetches_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_a_private_ca_forward_to_each_other_over_https() {
    let dir = rasa_tests::temp_dir("cluster-tls");
    let made = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["tls", "self-signed", "--host", "127.0.0.1", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    let etcd = Etcd::start();
    let name = cluster_name("tls");
    let tls = [
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
        "--cluster-ca-file".to_owned(),
        ca.display().to_string(),
    ];
    let gws = fleet(&etcd, &name, 2, "3s", &tls);
    assert!(gws.iter().all(|g| g.base.starts_with("https://")));
    let _ = rasa_tests::http(); // installs the TLS crypto provider
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap())
        .build()
        .unwrap();
    // Both members list both, with https URLs.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let v: ClusterView = loop {
        let v: ClusterView = https
            .get(gws[0].url("/v1/cluster"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if serving(&v).len() == 2 {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "{v:?}");
        let _ = https
            .get(gws[0].url(&format!("/v1/cluster?after={}&wait=5", v.revision)))
            .send()
            .await;
    };
    assert!(v
        .members
        .iter()
        .all(|m| m.url.starts_with("https://127.0.0.1:")));
    // Each owns its keys once it is ready (a moment after it registered).
    for gw in &gws {
        while https.get(gw.url("/readyz")).send().await.unwrap().status() != 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} never ready",
                gw.base
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A key g2 owns, written and read through g1: forwarded over TLS.
    let key = (0..)
        .map(|i| format!("t/{i}"))
        .find(|k| owner(k, &v.members).unwrap().node_id == "g2")
        .unwrap();
    let r = https
        .put(gws[0].url(&format!("/v1/objects/{key}")))
        .body(pattern(70_000, 5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let r = https
        .get(gws[0].url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["rasa-served-by"], "g2");
    assert_eq!(r.bytes().await.unwrap().as_ref(), &pattern(70_000, 5)[..]);
}
