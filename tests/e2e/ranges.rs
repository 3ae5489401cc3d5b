//! One-sided range reads validated by the frame's block table: exact bytes at and across
//! block boundaries, empty, cut and out-of-range ranges; a flipped byte fails only the
//! ranges covering its block (then served over HTTP); frames without a table read ranges
//! over HTTP; `rasa get --range`.

use rasa_client::{Client, Error, FastPath, ProblemCode, ReadPath};
use rasa_openapi::Descriptor;
use rasa_tests::{pattern, put_value as put, sha256_hex, Gateway};
use serde_json::Value;

const BLOCK: u64 = 64 << 10;

fn client(gw: &Gateway, mode: FastPath) -> Client {
    Client::builder(&gw.base).fast_path(mode).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_are_read_one_sided_and_exact() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let value = pattern((3 << 20) + 5, 7);
    let len = value.len() as u64;
    let d = put(&gw, "v", &value).await;
    assert_eq!((d.frame_format, d.block_size), (2, BLOCK as u32));
    let c = client(&gw, FastPath::Required);
    for r in [
        0..BLOCK,             // one whole block
        BLOCK..2 * BLOCK,     // the next, at its boundary
        100..200,             // inside one block
        BLOCK - 1..BLOCK + 1, // across a boundary
        1000..2_000_000,      // many blocks, more than one read piece
        len - 5..len,         // the short last block
        0..len,               // everything
    ] {
        let obj = c.get_range("v", r.clone()).await.unwrap();
        assert_eq!(obj.path, ReadPath::Fabric, "{r:?}");
        assert_eq!(obj.version, d.version);
        assert!(
            obj.bytes[..] == value[r.start as usize..r.end as usize],
            "{r:?}: bytes differ"
        );
    }
    // Empty: no bytes, the version named; an end past the value is cut as HTTP cuts it.
    let obj = c.get_range("v", 500..500).await.unwrap();
    assert_eq!(
        (obj.bytes.len(), obj.version.as_str()),
        (0, d.version.as_str())
    );
    let obj = c.get_range("v", len - 10..len + 100).await.unwrap();
    assert_eq!(obj.path, ReadPath::Fabric);
    assert!(obj.bytes[..] == value[value.len() - 10..]);
    // Beyond the end: the gateway's clean error, whatever the path.
    for mode in [FastPath::Required, FastPath::Off] {
        let e = client(&gw, mode)
            .get_range("v", len + 1..len + 5)
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(ProblemCode::RangeNotSatisfiable),
            "{mode:?}: {e:?}"
        );
    }
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 9..3;
    let e = c.get_range("v", reversed).await.unwrap_err();
    assert!(
        matches!(e, Error::InvalidRange { start: 9, end: 3 }),
        "{e:?}"
    );
    let stats = c.stats();
    assert_eq!(stats.http_reads, 0, "{stats:?}");
    assert!(stats.fallbacks.is_empty(), "{stats:?}");

    // Into the caller's memory: exactly the range, nothing past it; too small refused.
    let (r, buf) = c.get_range_into("v", 70_000..70_100, vec![0xEE; 110]).await;
    assert_eq!(r.unwrap().length, 100);
    assert!(buf[..100] == value[70_000..70_100] && buf[100..] == [0xEE; 10]);
    let (r, buf) = c.get_range_into("v", 0..100, vec![0; 99]).await;
    assert!(matches!(
        r,
        Err(Error::BufferTooSmall {
            needed: Some(100),
            capacity: 99
        })
    ));
    assert!(buf.iter().all(|&b| b == 0));

    // 0- and 1-byte values.
    put(&gw, "empty", b"").await;
    put(&gw, "one", b"x").await;
    let obj = c.get_range("one", 0..1).await.unwrap();
    assert_eq!((&obj.bytes[..], obj.path), (&b"x"[..], ReadPath::Fabric));
    assert!(c.get_range("empty", 0..0).await.unwrap().bytes.is_empty());
    let e = c.get_range("empty", 0..1).await.unwrap_err();
    assert_eq!(e.code(), Some(ProblemCode::RangeNotSatisfiable));
    let e = c.get_range("absent", 0..1).await.unwrap_err();
    assert_eq!(e.code(), Some(ProblemCode::NotFound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_fails_only_the_ranges_covering_its_block() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let value = pattern(1 << 20, 9);
    put(&gw, "v", &value).await;
    // The key's descriptors now name a copy with payload byte 200,000 (block 3) flipped;
    // HTTP still serves the good bytes.
    let flipped = 200_000u64;
    let bad_block = flipped / BLOCK;
    let _: Descriptor = rasa_tests::json_of(
        rasa_tests::http().post(gw.url(&format!("/v1/_test/corrupt/v?serve=true&at={flipped}"))),
    )
    .await;
    let auto = client(&gw, FastPath::Auto);
    let required = client(&gw, FastPath::Required);
    for r in [
        0..1000,
        bad_block * BLOCK - 10..bad_block * BLOCK,
        (bad_block + 1) * BLOCK..(bad_block + 1) * BLOCK + 10,
        900_000..1 << 20,
    ] {
        let obj = auto.get_range("v", r.clone()).await.unwrap();
        assert_eq!(
            obj.path,
            ReadPath::Fabric,
            "{r:?} does not cover block {bad_block}"
        );
        assert!(obj.bytes[..] == value[r.start as usize..r.end as usize]);
    }
    for r in [
        flipped..flipped + 1,
        bad_block * BLOCK..bad_block * BLOCK + 1,
        0..1 << 20,
    ] {
        let before = auto
            .stats()
            .fallbacks
            .get("frame_mismatch")
            .copied()
            .unwrap_or(0);
        let obj = auto.get_range("v", r.clone()).await.unwrap();
        assert_eq!(obj.path, ReadPath::Http, "{r:?} covers block {bad_block}");
        assert!(
            obj.bytes[..] == value[r.start as usize..r.end as usize],
            "{r:?}"
        );
        let after = auto
            .stats()
            .fallbacks
            .get("frame_mismatch")
            .copied()
            .unwrap_or(0);
        assert!(after > before, "{r:?}: no frame mismatch counted");
        let e = required.get_range("v", r.clone()).await.unwrap_err();
        assert!(
            matches!(&e, Error::FastPath(m) if m.contains(&format!("block {bad_block}"))),
            "{r:?}: {e:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_without_a_table_serve_ranges_over_http() {
    let gw = Gateway::start(&["--fast-path", "on", "--block-size", "0"]);
    let value = pattern(300_000, 3);
    let d = put(&gw, "v", &value).await;
    assert_eq!((d.block_size, d.block_table_offset), (0, None));
    let auto = client(&gw, FastPath::Auto);
    let obj = auto.get_range("v", 10..20).await.unwrap();
    assert_eq!(obj.path, ReadPath::Http);
    assert!(obj.bytes[..] == value[10..20]);
    assert_eq!(auto.stats().fallbacks.get("no_block_table"), Some(&1));
    // Whole reads are one-sided as before.
    assert_eq!(auto.get("v").await.unwrap().path, ReadPath::Fabric);
    let e = client(&gw, FastPath::Required)
        .get_range("v", 10..20)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::FastPath(m) if m.contains("no block table")),
        "{e:?}"
    );
}

use rasa_tests::rasa_cli as rasa;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reads_ranges() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let value = pattern(200_000, 5);
    let d = put(&gw, "v", &value).await;
    let dir = rasa_tests::temp_dir("cli-range");
    let out_file = dir.join("part");
    let n = value.len();
    for (spec, want) in [
        ("100-199", &value[100..200]),
        ("199990-", &value[n - 10..]),
        ("-7", &value[n - 7..]),
        ("0-999999", &value[..]),
    ] {
        let out = rasa(
            &gw,
            &[
                "get",
                "v",
                "--range",
                spec,
                "--json",
                "-o",
                out_file.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["path"], "fabric", "{spec}");
        assert_eq!(j["length"], want.len(), "{spec}");
        assert_eq!(j["sha256"], sha256_hex(want).as_str(), "{spec}");
        assert_eq!(j["version"], d.version.as_str());
        assert!(std::fs::read(&out_file).unwrap() == want, "{spec}");
    }
    // To standard output, over HTTP when asked.
    let out = rasa(&gw, &["get", "v", "--range", "5-9", "--fast-path", "off"]);
    assert_eq!(out.stdout, &value[5..10]);
    // A range past the end and a malformed one: clear errors, non-zero exit.
    let out = rasa(&gw, &["get", "v", "--range", "300000-300010"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("range"),
        "{out:?}"
    );
    let out = rasa(&gw, &["get", "v", "--range", "9-3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ends before it starts"));
}
