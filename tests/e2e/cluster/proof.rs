//! Members that prove themselves (issue 45, item 2), on a shared network where others can
//! write etcd (here a client with its own certificate for an etcd over TLS): with `--cluster-secret-file`, a member record written by hand — pointing at
//! a listener that answers anything — is ignored (it receives 0 requests, and no client
//! bytes or credentials), and a client that marks its request as forwarded (`rasa-hop: 1`)
//! changes nothing: the write goes to the key's owner, and one version exists.

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterView, Descriptor, HOP_HEADER};
use rasa_tests::etcd::{cluster_name, member_args, Etcd, EtcdTls};
use rasa_tests::{http, json_of, pattern, temp_dir, Gateway};

use super::secure::refused_naming;
use super::{all_see, member_with};

/// A file (of `mode`) with a fresh secret.
pub(super) fn secret_file(tag: &str, mode: u32) -> std::path::PathBuf {
    let path = temp_dir(tag).join("cluster.secret");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::fs::write(
        &path,
        format!("{:032x}\n", nanos ^ u128::from(std::process::id())),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A listener that answers every request `EVIL-ANSWER!` and counts the connections.
async fn rogue_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, counting(listener, b"EVIL-ANSWER!"))
}

/// Answers every connection to `listener` `200` with `body`; how many there were.
pub(super) fn counting(listener: tokio::net::TcpListener, body: &'static [u8]) -> Arc<AtomicUsize> {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body).await;
            });
        }
    });
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_record_gets_nothing_and_a_forged_hop_changes_nothing() {
    // etcd as production runs it (TLS, client certificates); the rogue holds a client
    // certificate too: what keeps it out is the members' secret, not etcd's access.
    let tls = EtcdTls::make();
    let etcd = Etcd::start_tls(&tls);
    let name = cluster_name("proof");
    let secret = secret_file("proof", 0o600);
    let gws: Vec<Gateway> = ["g1", "g2"]
        .iter()
        .map(|node| {
            let mut args = member_args(&etcd, &name, node, "5s");
            args.extend(tls.member_flags());
            args.extend(["--cluster-secret-file".into(), secret.display().to_string()]);
            member_with(&args)
        })
        .collect();
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 2).await;

    // Two records written by hand: one without a MAC, one with a made-up one; both with a
    // weight that would win most keys.
    let (rogue_url, hits) = rogue_listener().await;
    let mut rogue = serde_json::to_value(&view.members[0]).unwrap();
    rogue["url"] = rogue_url.clone().into();
    rogue["weight"] = 1000.into();
    for (node, mac) in [("zz-rogue", None), ("zz-forged", Some("00".repeat(32)))] {
        rogue["node_id"] = node.into();
        if let Some(mac) = &mac {
            rogue["mac"] = mac.clone().into();
        }
        let key = format!("/rasa/{name}/members/{node}");
        etcd.put_as_client(Some(&tls), &key, &rogue.to_string())
            .await;
    }
    for gw in &gws {
        rasa_tests::wait_for_metric(gw, "rasa_cluster_records_rejected_total", 2.0).await;
        let v: ClusterView = gw.get_json("/v1/cluster").await;
        let ids: Vec<&str> = v.members.iter().map(|m| m.node_id.as_str()).collect();
        assert_eq!(ids, ["g1", "g2"], "the rogue records are not members");
    }
    // Writes and reads through both members, with a token-like header the rogue must not
    // see: every value where it belongs, nothing sent to the rogue.
    for i in 0..32u64 {
        let key = format!("r/{i}");
        let d: Descriptor = json_of(
            http()
                .put(gws[(i % 2) as usize].url(&format!("/v1/objects/{key}")))
                .header("authorization", "Bearer not-for-the-rogue")
                .body(pattern(256, i)),
        )
        .await;
        let at = owner(&key, &view.members).unwrap().node_id.clone();
        assert_eq!(d.node_id.as_deref(), Some(at.as_str()), "{key}");
        let got = http()
            .get(gws[((i + 1) % 2) as usize].url(&format!("/v1/objects/{key}")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200, "{key}");
        assert!(got.bytes().await.unwrap() == pattern(256, i), "{key}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the rogue listener was sent requests"
    );

    // A client marks its PUT as forwarded, to the member that does not own the key: the
    // write still goes to the owner, and both members serve that one version.
    let key = (0..)
        .map(|i| format!("hop/{i}"))
        .find(|k| owner(k, &view.members).unwrap().node_id == "g2")
        .unwrap();
    let path = format!("/v1/objects/{key}");
    let r = http()
        .put(gws[0].url(&path))
        .header(HOP_HEADER, "1")
        .body("SHADOW-VALUE-ON-G1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!(
        d.node_id.as_deref(),
        Some("g2"),
        "a forged hop stored a copy aside"
    );
    rasa_tests::wait_for_metric(&gws[0], "rasa_cluster_hops_rejected_total", 1.0).await;
    http()
        .put(gws[1].url(&path))
        .body("THE-VALUE")
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    for gw in &gws {
        for hop in [false, true] {
            let mut get = http().get(gw.url(&path));
            if hop {
                get = get.header(HOP_HEADER, "1");
            }
            let body = get.send().await.unwrap().bytes().await.unwrap();
            assert_eq!(&body[..], b"THE-VALUE", "hop {hop}: one version of the key");
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_others_may_read_is_refused_and_none_is_warned_of() {
    let etcd = Etcd::start();
    let name = cluster_name("proof-file");
    let loose = secret_file("proof-loose", 0o644);
    let mut args = member_args(&etcd, &name, "g1", "5s");
    args.extend(["--cluster-secret-file".into(), loose.display().to_string()]);
    let err = refused_naming(&args, "--cluster-secret-file");
    assert!(err.contains("other users"), "{err}");

    let log = temp_dir("proof-warn").join("gateway.log");
    let args = member_args(&etcd, &name, "g1", "5s");
    let all: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_logged(&all, &[("RUST_LOG", "warn")], &log);
    all_see(&[&gw], 1).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("no --cluster-secret-file") && text.contains("can join"),
        "{text}"
    );
}
