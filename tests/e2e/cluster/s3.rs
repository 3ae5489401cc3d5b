//! The S3 listener on every member of a 3-member cluster: objects written through one
//! member are stored once, at their key's owner, and read the same through every member,
//! over the native API and one-sided; listings, multipart uploads, copies and
//! DeleteObjects span the members.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use rasa_client::{Client, FastPath, ReadPath};
use rasa_openapi::cluster::owner;
use rasa_openapi::{ClusterMember, HOP_HEADER};
use rasa_tests::etcd::{cluster_name, member_args, Etcd};
use rasa_tests::{new_s3_key, pattern, s3_client_with, temp_dir, Gateway};

use super::all_see;

/// Three members with S3 listeners and one credentials file; their S3 clients (as the
/// view advertises them) and the view's members.
/// Three members with S3 listeners, their S3 clients, the member list, and the file of
/// the secret they share.
async fn s3_fleet(
    etcd: &Etcd,
) -> (
    Vec<Gateway>,
    Vec<aws_sdk_s3::Client>,
    Vec<ClusterMember>,
    std::path::PathBuf,
) {
    let dir = temp_dir("cluster-s3");
    let keys = dir.join("s3-keys");
    let (id, secret) = new_s3_key(&keys, "admin", "read,write");
    let name = cluster_name("s3");
    // Members that prove themselves: every hop they send each other carries its proof,
    // S3 signatures and all.
    let cluster_secret = super::proof::secret_file("cluster-s3", 0o600);
    let gws: Vec<Gateway> = (1..=3)
        .map(|i| {
            let mut args = member_args(etcd, &name, &format!("g{i}"), "10s");
            args.extend(
                [
                    "--cluster-secret-file",
                    cluster_secret.to_str().unwrap(),
                    "--s3-listen",
                    "127.0.0.1:0",
                    "--s3-bucket",
                    "data",
                    "--s3-credentials-file",
                    keys.to_str().unwrap(),
                    "--fast-path",
                    "on",
                    "--fabric-provider",
                    "tcp;ofi_rxm",
                ]
                .map(str::to_owned),
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Gateway::start(&args)
        })
        .collect();
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 3).await;
    let members = view.members.clone();
    let clients = gws
        .iter()
        .map(|gw| {
            let me = members
                .iter()
                .find(|m| m.url == gw.base)
                .expect("every gateway is in the view");
            let s3 = me
                .s3_url
                .as_deref()
                .expect("each member advertises its S3 listener");
            s3_client_with(s3, &id, &secret)
        })
        .collect();
    (gws, clients, members, cluster_secret)
}

async fn body(c: &aws_sdk_s3::Client, key: &str) -> Vec<u8> {
    let got = c.get_object().bucket("data").key(key).send().await;
    let got = got.unwrap_or_else(|e| panic!("GET {key}: {e:?}"));
    got.body.collect().await.unwrap().into_bytes().to_vec()
}

/// A key whose owner is `node` (of `members`), starting with `stem`.
fn owned_by(stem: &str, node: &str, members: &[ClusterMember]) -> String {
    (0..10_000)
        .map(|i| format!("{stem}{i}"))
        .find(|k| owner(k, members).map(|m| m.node_id.as_str()) == Some(node))
        .expect("some key lands on every member")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_serves_s3_with_each_key_at_its_owner() {
    let etcd = Etcd::start();
    let (gws, s3, members, secret) = s3_fleet(&etcd).await;
    let http = rasa_tests::http();

    // 24 objects written through the first member, under two directories.
    let mut written = BTreeMap::new();
    for i in 0..24 {
        let key = format!("{}/k{i:02}", if i % 2 == 0 { "even" } else { "odd" });
        let value = pattern(1000 + i * 100, i as u64);
        s3[0]
            .put_object()
            .bucket("data")
            .key(&key)
            .metadata("n", i.to_string())
            .body(ByteStream::from(value.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {key}: {e:?}"));
        written.insert(key, value);
    }
    let owners: BTreeSet<&str> = written
        .keys()
        .map(|k| owner(k, &members).unwrap().node_id.as_str())
        .collect();
    assert_eq!(owners.len(), 3, "the keys spread over every member");

    // Read the same through every member; stored once, at the owner only.
    for (key, value) in &written {
        for c in &s3 {
            assert_eq!(&body(c, key).await, value, "{key}");
        }
        let head = s3[2]
            .head_object()
            .bucket("data")
            .key(key)
            .send()
            .await
            .unwrap();
        let n = key[key.len() - 2..].trim_start_matches('0').to_owned();
        assert_eq!(
            head.metadata().unwrap()["n"],
            if n.is_empty() { "0" } else { &n }
        );
        let own = owner(key, &members).unwrap();
        for (i, gw) in gws.iter().enumerate() {
            // Asked as a member asks (the hop marker with its proof): what it holds itself.
            let path = format!("/v1/objects/{key}");
            let to = format!("g{}", i + 1);
            let here = http
                .get(gw.url(&path))
                .header(HOP_HEADER, "1")
                .header(
                    "rasa-hop-proof",
                    rasa_tests::etcd::hop_proof(&secret, ("g1", &to), "GET", &path, None),
                )
                .send()
                .await
                .unwrap()
                .status();
            let expected = if gw.base == own.url { 200 } else { 404 };
            assert_eq!(here.as_u16(), expected, "{key} at {}", gw.base);
        }
        // The native API of any member, and one-sided through the cluster-aware SDK.
        let native =
            rasa_tests::bytes_of(http.get(gws[1].url(&format!("/v1/objects/{key}")))).await;
        assert_eq!(&native[..], &value[..]);
    }
    let sdk = Client::builder(&gws[2].base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    for (key, value) in written.iter().take(6) {
        let o = sdk.get(key).await.unwrap();
        assert_eq!((o.path, &o.bytes[..]), (ReadPath::Fabric, &value[..]));
    }

    // Listings through any member cover every member, a page at a time.
    for (i, c) in s3.iter().enumerate() {
        let mut listed = Vec::new();
        let mut token = None;
        loop {
            let page = c
                .list_objects_v2()
                .bucket("data")
                .max_keys(5)
                .set_continuation_token(token.take())
                .send()
                .await
                .unwrap();
            listed.extend(page.contents().iter().map(|o| o.key().unwrap().to_owned()));
            match page.next_continuation_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        assert_eq!(
            listed,
            written.keys().cloned().collect::<Vec<_>>(),
            "member {i}"
        );
    }
    let top = s3[1]
        .list_objects_v2()
        .bucket("data")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = top
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["even/", "odd/"]);
    let mut v1 = Vec::new();
    let mut marker = None;
    loop {
        let page = s3[2]
            .list_objects()
            .bucket("data")
            .prefix("odd/")
            .max_keys(4)
            .set_marker(marker.take())
            .send()
            .await
            .unwrap();
        v1.extend(page.contents().iter().map(|o| o.key().unwrap().to_owned()));
        if !page.is_truncated().unwrap_or(false) {
            break;
        }
        marker = page.next_marker().map(str::to_owned);
    }
    assert_eq!(v1.len(), 12);
    let versions = s3[0]
        .list_object_versions()
        .bucket("data")
        .send()
        .await
        .unwrap();
    assert_eq!(versions.versions().len(), 24);

    // A multipart upload for a key g3 owns: begun through g2, parts through g1 and g3,
    // completed through g2.
    let big = owned_by("mp/", "g3", &members);
    let parts = [pattern(5 << 20, 40), pattern(1 << 20, 41)];
    let up = s3[1]
        .create_multipart_upload()
        .bucket("data")
        .key(&big)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let listed = s3[0]
        .list_multipart_uploads()
        .bucket("data")
        .send()
        .await
        .unwrap();
    let ids: Vec<&str> = listed
        .uploads()
        .iter()
        .filter_map(|u| u.upload_id())
        .collect();
    assert_eq!(ids, [id], "an upload staged at g3, listed through g1");
    let mut done = Vec::new();
    for (n, (via, part)) in [(0usize, &parts[0]), (2, &parts[1])]
        .into_iter()
        .enumerate()
    {
        let p = s3[via]
            .upload_part()
            .bucket("data")
            .key(&big)
            .upload_id(id)
            .part_number(n as i32 + 1)
            .body(ByteStream::from(part.clone()))
            .send()
            .await
            .unwrap();
        done.push(
            CompletedPart::builder()
                .part_number(n as i32 + 1)
                .e_tag(p.e_tag().unwrap())
                .build(),
        );
    }
    s3[1]
        .complete_multipart_upload()
        .bucket("data")
        .key(&big)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        body(&s3[0], &big).await,
        [&parts[0][..], &parts[1][..]].concat()
    );

    // A copy whose source g1 owns to a key g2 owns, asked of g3.
    let src = owned_by("copy/src", "g1", &members);
    let dst = owned_by("copy/dst", "g2", &members);
    let value = pattern(70_000, 50);
    s3[2]
        .put_object()
        .bucket("data")
        .key(&src)
        .content_type("text/x-copied")
        .metadata("origin", "g1")
        .cache_control("max-age=60")
        .body(ByteStream::from(value.clone()))
        .send()
        .await
        .unwrap();
    s3[2]
        .copy_object()
        .bucket("data")
        .key(&dst)
        .copy_source(format!("data/{src}"))
        .send()
        .await
        .unwrap();
    let copied = s3[0]
        .get_object()
        .bucket("data")
        .key(&dst)
        .send()
        .await
        .unwrap();
    assert_eq!(copied.content_type(), Some("text/x-copied"));
    assert_eq!(copied.metadata().unwrap()["origin"], "g1");
    assert_eq!(copied.cache_control(), Some("max-age=60"));
    assert_eq!(
        copied.body.collect().await.unwrap().into_bytes().to_vec(),
        value
    );

    // One DeleteObjects through g2 deletes every key at its owner.
    let mut all: Vec<String> = written.keys().cloned().collect();
    all.extend([big.clone(), src.clone(), dst.clone()]);
    let objects = all
        .iter()
        .map(|k| ObjectIdentifier::builder().key(k).build().unwrap())
        .collect();
    let out = s3[1]
        .delete_objects()
        .bucket("data")
        .delete(
            Delete::builder()
                .set_objects(Some(objects))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    assert_eq!(out.deleted().len(), all.len());
    for k in &all {
        for c in &s3 {
            assert!(
                c.head_object().bucket("data").key(k).send().await.is_err(),
                "{k} remains"
            );
        }
    }
    let left = s3[2].list_objects_v2().bucket("data").send().await.unwrap();
    assert_eq!(left.key_count(), Some(0));

    // An unsigned request is refused by the member asked, never carried to the owner.
    let elsewhere = owned_by("anon/", "g2", &members);
    let s3_of_g1 = members
        .iter()
        .find(|m| m.url == gws[0].base)
        .unwrap()
        .s3_url
        .clone()
        .unwrap();
    let anon = http
        .get(format!("{s3_of_g1}/data/{elsewhere}"))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 403);
    assert!(
        anon.headers().get("rasa-served-by").is_none(),
        "forwarded unsigned"
    );

    // Tools create the bucket first: it exists, so that succeeds on every member.
    for c in &s3 {
        c.create_bucket().bucket("data").send().await.unwrap();
    }
    // Every hop the members sent each other proved itself.
    for gw in &gws {
        let rejected = rasa_tests::metric(gw, "rasa_cluster_hops_rejected_total").await;
        assert_eq!(
            rejected, 0.0,
            "a member's own hop was taken for a forged one"
        );
    }
}
