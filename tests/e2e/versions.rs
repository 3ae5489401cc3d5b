//! Pinned-version reads and conditional writes through the SDK (issue 35, item 7):
//! `versions().get` reads an older version while the gateway holds it, one-sided or over
//! HTTP; `versions().put_if` stores only when its condition holds and changes nothing otherwise.

use rasa_client::{Client, Condition, FastPath, ProblemCode, ReadPath};
use rasa_tests::{pattern, Gateway};

#[tokio::test]
async fn an_older_version_reads_by_id_and_conditional_writes_change_nothing_when_false() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    // Its writes are leased: an older version stays readable by id (over HTTP too) at
    // least while a lease on it runs.
    let one_sided = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .lease_puts(true)
        .build()
        .unwrap();
    let http = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let (v1, v2) = (pattern(70_000, 1), pattern(70_000, 2));
    let d1 = one_sided.put("doc", v1.clone()).await.unwrap();
    one_sided.put("doc", v2.clone()).await.unwrap();
    for (c, path) in [(&one_sided, ReadPath::Fabric), (&http, ReadPath::Http)] {
        let old = c.versions().get("doc", &d1.version).await.unwrap();
        assert_eq!((old.bytes.as_ref(), old.path), (v1.as_slice(), path));
        assert_eq!(old.version, d1.version);
        let e = c
            .versions()
            .get("doc", "00000000000000ff")
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ProblemCode::NotFound), "{e}");
    }

    // A client reads its own writes: its cached descriptor of the key goes with the write
    // (another client may still read the version it holds a descriptor of).
    assert_eq!(one_sided.get("doc").await.unwrap().bytes, v2);
    let mine = one_sided.put("doc", b"mine".to_vec()).await.unwrap();
    let back = one_sided.get("doc").await.unwrap();
    assert_eq!(
        (back.bytes.as_ref(), back.path),
        (&b"mine"[..], ReadPath::Fabric)
    );
    let d2 = one_sided.put("doc", v2.clone()).await.unwrap();
    assert_ne!(mine.version, d2.version);
    assert_eq!(one_sided.get("doc").await.unwrap().bytes, v2);
    one_sided.delete("doc").await.unwrap();
    let gone = one_sided.get("doc").await.unwrap_err();
    assert_eq!(gone.code(), Some(ProblemCode::NotFound), "{gone}");
    let d2 = one_sided.put("doc", v2.clone()).await.unwrap();

    // Compare-and-swap on the ETag last read: the stale one loses, nothing changes.
    let stale = http
        .versions()
        .put_if(
            "doc",
            b"lost".to_vec(),
            None,
            Condition::IfMatch(d1.sha256.clone()),
        )
        .await
        .unwrap_err();
    assert_eq!(
        stale.code(),
        Some(ProblemCode::PreconditionFailed),
        "{stale}"
    );
    assert_eq!(http.get("doc").await.unwrap().bytes, v2);
    let d3 = http
        .versions()
        .put_if(
            "doc",
            b"won".to_vec(),
            Some("text/plain"),
            Condition::IfMatch(format!("\"{}\"", d2.sha256)),
        )
        .await
        .unwrap();
    let now = http.get("doc").await.unwrap();
    assert_eq!(
        (now.bytes.as_ref(), now.version.as_str()),
        (&b"won"[..], d3.version.as_str())
    );
    assert_eq!(now.content_type, "text/plain");

    // Create, never overwrite.
    let taken = http
        .versions()
        .put_if("doc", b"again".to_vec(), None, Condition::IfAbsent)
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Some(ProblemCode::PreconditionFailed));
    http.versions()
        .put_if("new", b"first".to_vec(), None, Condition::IfAbsent)
        .await
        .unwrap();
    assert_eq!(http.get("new").await.unwrap().bytes, &b"first"[..]);
}
