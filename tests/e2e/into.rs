//! Reads into the caller's memory (`Client::get_into`, `get_many_into`): the right bytes on
//! both paths, a buffer too small refused before anything is read, a corrupt frame never
//! accepted (required: an error; auto: the read is done again over HTTP).

use rasa_client::{Client, Error, FastPath, ReadPath};
use rasa_openapi::Descriptor;
use rasa_tests::{pattern, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_into_fills_caller_memory_on_both_paths() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let value = pattern((3 << 20) + 5, 3);
    let http = rasa_tests::http();
    let r = http
        .put(gw.url("/v1/objects/v"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for (mode, path) in [
        (FastPath::Required, ReadPath::Fabric),
        (FastPath::Off, ReadPath::Http),
    ] {
        let c = Client::builder(&gw.base).fast_path(mode).build().unwrap();
        let (r, buf) = c.get_into("v", vec![0xEE_u8; value.len() + 10]).await;
        let w = r.unwrap();
        assert_eq!((w.path, w.length), (path, value.len() as u64));
        assert!(buf[..value.len()] == value[..], "{mode:?}: bytes differ");
        assert_eq!(
            &buf[value.len()..],
            &[0xEE; 10],
            "{mode:?}: wrote past the value"
        );

        let (r, buf) = c.get_into("v", vec![0_u8; value.len() - 1]).await;
        match r {
            Err(Error::BufferTooSmall { needed, capacity }) => {
                assert_eq!(
                    (needed, capacity),
                    (Some(value.len() as u64), buf.len() as u64)
                );
            }
            other => panic!("{mode:?}: a buffer too small gave {other:?}"),
        }
        assert!(
            buf.iter().all(|&b| b == 0),
            "{mode:?}: wrote into a buffer too small"
        );

        let (r, _) = c.get_into("absent", vec![0_u8; 8]).await;
        assert_eq!(
            r.unwrap_err().code(),
            Some(rasa_openapi::ProblemCode::NotFound)
        );

        let keys = ["v", "absent", "v"];
        let bufs = vec![vec![0_u8; value.len()], vec![0_u8; 1], vec![0_u8; 1]];
        let results = c.get_many_into(&keys, bufs).await;
        assert_eq!(results.len(), 3);
        assert!(results[0].1 == value, "{mode:?}: batch bytes differ");
        assert!(results[0].0.is_ok());
        assert_eq!(
            results[1].0.as_ref().unwrap_err().code(),
            Some(rasa_openapi::ProblemCode::NotFound)
        );
        assert!(matches!(results[2].0, Err(Error::BufferTooSmall { .. })));
    }

    // A descriptor cached for the key now names a copy with a byte flipped.
    let _bad: Descriptor =
        rasa_tests::json_of(http.post(gw.url("/v1/_test/corrupt/v?serve=true"))).await;
    let required = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let (r, _) = required.get_into("v", vec![0_u8; value.len()]).await;
    assert!(
        matches!(r, Err(Error::FastPath(ref m)) if m.contains("frame")),
        "{r:?}"
    );
    let auto = Client::builder(&gw.base).build().unwrap();
    let (r, buf) = auto.get_into("v", vec![0_u8; value.len()]).await;
    assert_eq!(r.unwrap().path, ReadPath::Http);
    assert!(buf == value, "the HTTP read after a rejected frame differs");
    assert!(
        auto.stats()
            .fallbacks
            .get("frame_mismatch")
            .copied()
            .unwrap_or(0)
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_reaches_the_caller_with_one_copy() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let value = pattern((3 << 20) + 7, 11);
    let r = rasa_tests::http()
        .put(gw.url("/v1/objects/v"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let len = value.len() as u64;
    for (mode, path) in [
        (FastPath::Required, ReadPath::Fabric),
        (FastPath::Off, ReadPath::Http),
    ] {
        let c = Client::builder(&gw.base).fast_path(mode).build().unwrap();
        let copied = || c.stats().bytes_copied;
        let before = copied();
        let (r, buf) = c.get_into("v", vec![0u8; value.len()]).await;
        assert_eq!(r.unwrap().path, path);
        assert!(buf == value);
        assert_eq!(copied() - before, len, "{mode:?}: get_into copies");
        if path == ReadPath::Fabric {
            // One-sided, `get` and `get_range` copy once too (out of the scratch memory).
            let before = copied();
            assert!(c.get("v").await.unwrap().bytes == value);
            assert_eq!(copied() - before, len, "get copies");
            let before = copied();
            let obj = c.get_range("v", 1000..101_000).await.unwrap();
            assert_eq!(obj.path, ReadPath::Fabric);
            assert_eq!(copied() - before, 100_000, "get_range copies");
        }
    }
}
