//! The S3 door refuses what it does not do: server-side encryption and POST form uploads
//! answer `501 NotImplemented` and store nothing, an empty `Content-MD5` is
//! `400 InvalidDigest`, a bucket with uploads in progress is not deleted (its bytes never
//! stranded), buckets are made and removed only by keys that may (`buckets`, `admin`), and
//! a removed namespace's series leave `/metrics` with it.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use rasa_tests::{metric, new_s3_key, s3_client_with, temp_dir, Gateway};

/// A gateway whose S3 listener serves bucket `data` and, with `--s3-create-buckets`,
/// namespaces as buckets; open unless `keys` names a credentials file. Its S3 URL.
fn start(keys: Option<&std::path::Path>) -> (Gateway, String) {
    start_with(keys, "").0
}

/// [`start`] with the operator's namespaces file `namespaces`; also its path.
fn start_with(
    keys: Option<&std::path::Path>,
    namespaces: &str,
) -> ((Gateway, String), std::path::PathBuf) {
    let dir = temp_dir("s3-door");
    let ns_file = dir.join("namespaces");
    std::fs::write(&ns_file, namespaces).unwrap();
    let mut args = vec![
        "--memory",
        "64MiB",
        "--max-object-size",
        "8MiB",
        "--s3-listen",
        "127.0.0.1:0",
        "--s3-bucket",
        "data",
        "--namespaces",
        ns_file.to_str().unwrap(),
        "--s3-create-buckets",
        "--s3-bucket-quota",
        "16MiB",
    ];
    if let Some(k) = keys {
        args.extend(["--s3-credentials-file", k.to_str().unwrap()]);
    }
    let gw = Gateway::start(&args);
    let url = gw.s3_url();
    ((gw, url), ns_file)
}

async fn status_and_code(req: reqwest::RequestBuilder) -> (u16, String) {
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    let code = body
        .split("<Code>")
        .nth(1)
        .and_then(|t| t.split("</Code>").next())
        .unwrap_or_default()
        .to_owned();
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encryption_and_form_uploads_are_refused_and_store_nothing() {
    let (_gw, s3) = start(None);
    let c = rasa_tests::http();
    let url = |k: &str| format!("{s3}/data/{k}");
    let key_b64 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
    let key_md5 = "zZ5FnqcIqUjVwvWmyog4zw==";
    let sse_c = [
        ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
        ("x-amz-server-side-encryption-customer-key", key_b64),
        ("x-amz-server-side-encryption-customer-key-md5", key_md5),
    ];
    let mut put = c.put(url("sse-c")).body("secretdata");
    for (k, v) in sse_c {
        put = put.header(k, v);
    }
    assert_eq!(status_and_code(put).await, (501, "NotImplemented".into()));
    for (k, v) in [
        ("x-amz-server-side-encryption", "AES256"),
        ("x-amz-server-side-encryption", "aws:kms"),
    ] {
        let put = c.put(url("sse")).header(k, v).body("secretdata");
        assert_eq!(
            status_and_code(put).await,
            (501, "NotImplemented".into()),
            "{v}"
        );
    }
    for k in ["sse-c", "sse"] {
        let r = c.get(url(k)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{k}: nothing was stored");
    }
    // A value stored plainly is not served to a GET that asks for decryption.
    let r = c.put(url("plain")).body("plain").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut get = c.get(url("plain"));
    for (k, v) in sse_c {
        get = get.header(k, v);
    }
    assert_eq!(status_and_code(get).await, (501, "NotImplemented".into()));

    // A browser form upload (with a policy whose expiration is malformed).
    let form = "--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nposted\r\n\
        --B\r\nContent-Disposition: form-data; name=\"policy\"\r\n\r\neyJleHBpcmF0aW9uIjoibm90LWEtZGF0ZSJ9\r\n\
        --B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--B--\r\n";
    let post = c
        .post(format!("{s3}/data"))
        .header("content-type", "multipart/form-data; boundary=B")
        .body(form);
    assert_eq!(status_and_code(post).await, (501, "NotImplemented".into()));
    let r = c.get(url("posted")).send().await.unwrap();
    assert_eq!(r.status(), 404, "the form's file was not stored");

    // An empty Content-MD5 is not "no Content-MD5".
    let put = c.put(url("md5")).header("content-md5", "").body("v");
    assert_eq!(status_and_code(put).await, (400, "InvalidDigest".into()));
    let r = c.get(url("md5")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_need_the_buckets_scope_and_uploads_keep_theirs_from_deletion() {
    let dir = temp_dir("s3-door-keys");
    let keys = dir.join("s3-keys");
    let (wid, wsecret) = new_s3_key(&keys, "writer", "read,write");
    let (mid, msecret) = new_s3_key(&keys, "maker", "read,write,buckets");
    let (gw, s3) = start(Some(&keys));
    let writer = s3_client_with(&s3, &wid, &wsecret);
    let maker = s3_client_with(&s3, &mid, &msecret);

    let e = writer
        .create_bucket()
        .bucket("lock")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"), "{e:?}");
    maker.create_bucket().bucket("made").send().await.unwrap();
    // A bucket that exists: CreateBucket answers its writers as S3 answers an owner.
    writer.create_bucket().bucket("made").send().await.unwrap();
    let e = writer
        .delete_bucket()
        .bucket("made")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"), "{e:?}");

    // An upload in progress keeps its bucket.
    let up = maker
        .create_multipart_upload()
        .bucket("made")
        .key("big")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    maker
        .upload_part()
        .bucket("made")
        .key("big")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(vec![5u8; 5 << 20]))
        .send()
        .await
        .unwrap();
    let e = maker
        .delete_bucket()
        .bucket("made")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("BucketNotEmpty"), "{e:?}");
    let listed = maker
        .list_multipart_uploads()
        .bucket("made")
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.uploads().len(),
        1,
        "still listed, so it can be aborted"
    );
    assert!(metric(&gw, "rasa_s3_multipart_bytes").await >= (5 << 20) as f64);
    let series = |text: &str| {
        text.lines()
            .filter(|l| l.contains("namespace=\"made\""))
            .count()
    };
    let text = rasa_tests::text_of(rasa_tests::http().get(gw.url("/metrics"))).await;
    assert!(
        series(&text) >= 4,
        "the namespace's series while it exists:\n{text}"
    );

    maker
        .abort_multipart_upload()
        .bucket("made")
        .key("big")
        .upload_id(id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        metric(&gw, "rasa_s3_multipart_bytes").await,
        0.0,
        "freed at once"
    );
    maker.delete_bucket().bucket("made").send().await.unwrap();
    let text = rasa_tests::text_of(rasa_tests::http().get(gw.url("/metrics"))).await;
    assert_eq!(
        series(&text),
        0,
        "a removed namespace's series go with it:\n{text}"
    );
    assert!(
        text.contains("rasa_namespace_quota_bytes{namespace=\"default\"}"),
        "the namespaces that remain keep theirs"
    );
}

/// Review III, finding 4: a key with the `buckets` scope (or `admin`) deleted the
/// operator's namespaces and rewrote the namespaces file. DeleteBucket removes only what
/// CreateBucket made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_namespaces_cannot_be_deleted_through_s3() {
    let dir = temp_dir("s3-door-operator");
    let keys = dir.join("s3-keys");
    let (mid, msecret) = new_s3_key(&keys, "maker", "read,write,buckets");
    let (aid, asecret) = new_s3_key(&keys, "root", "admin");
    let operators = "team 8MiB\nother 8MiB\n";
    let ((_gw, s3), ns_file) = start_with(Some(&keys), operators);
    for (id, secret) in [(&mid, &msecret), (&aid, &asecret)] {
        let c = s3_client_with(&s3, id, secret);
        for bucket in ["other", "team", "data"] {
            let e = c.delete_bucket().bucket(bucket).send().await.unwrap_err();
            assert_eq!(e.code(), Some("AccessDenied"), "{bucket} by {id}: {e:?}");
        }
        c.head_bucket().bucket("other").send().await.unwrap();
    }
    assert_eq!(std::fs::read_to_string(&ns_file).unwrap(), operators);
    // What CreateBucket made, it may remove; the operator's lines stay as they were.
    let maker = s3_client_with(&s3, &mid, &msecret);
    maker.create_bucket().bucket("made").send().await.unwrap();
    maker.delete_bucket().bucket("made").send().await.unwrap();
    assert_eq!(std::fs::read_to_string(&ns_file).unwrap(), operators);
}
