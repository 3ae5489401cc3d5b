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
    rasa_tests::put_value(&gw, "v", &value).await;
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
        let results = c.many().get_into(&keys, bufs).await;
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
    a_corrupt_frame_is_never_accepted(&gw, "v", &value, |_, len| vec![0_u8; len]).await;
}

/// Flips a byte in the copy of `key` (holding `value`) that new descriptors name, then reads
/// it into buffers `buf(client, len)` makes: required, the frame is refused; auto, the read
/// is done again over HTTP, with the right bytes, and the fallback is counted.
async fn a_corrupt_frame_is_never_accepted<B>(
    gw: &Gateway,
    key: &str,
    value: &[u8],
    buf: impl Fn(&Client, usize) -> B,
) where
    B: AsMut<[u8]> + AsRef<[u8]> + Send + 'static,
{
    let hook = gw.url(&format!("/v1/_test/corrupt/{key}?serve=true"));
    let _bad: Descriptor = rasa_tests::json_of(rasa_tests::http().post(hook)).await;
    let required = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let (r, _) = required.get_into(key, buf(&required, value.len())).await;
    assert!(
        matches!(r, Err(Error::FastPath(ref m)) if m.contains("frame")),
        "{r:?}"
    );
    let auto = Client::builder(&gw.base).build().unwrap();
    let (r, got) = auto.get_into(key, buf(&auto, value.len())).await;
    assert_eq!(r.unwrap().path, ReadPath::Http);
    assert!(
        got.as_ref()[..value.len()] == *value,
        "the HTTP read after a rejected frame differs"
    );
    let mismatches = auto.stats().fallbacks.get("frame_mismatch").copied();
    assert!(mismatches.unwrap_or(0) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_reaches_the_caller_with_one_copy() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let value = pattern((3 << 20) + 7, 11);
    rasa_tests::put_value(&gw, "v", &value).await;
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

/// `Client::register`: the fabric writes values straight into the registered buffer (no
/// copy counted), read after read into the same buffer (registered once per endpoint), many
/// at once, in batches; too small is refused; over HTTP it is filled like any buffer; a
/// corrupt frame that landed there is never accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_buffer_gets_the_value_with_no_copy() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let values = [
        pattern((3 << 20) + 7, 5),
        pattern(100_000, 6),
        pattern(1, 7),
    ];
    for (i, v) in values.iter().enumerate() {
        rasa_tests::put_value(&gw, &format!("r{i}"), v).await;
    }
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let copied = || c.stats().bytes_copied;
    let before = copied();
    let mut reg = c.register(4 << 20).unwrap();
    for round in 0..2 {
        for (i, v) in values.iter().enumerate() {
            let (r, back) = c.get_into(&format!("r{i}"), reg).await;
            reg = back;
            let w = r.unwrap();
            assert_eq!((w.path, w.length), (ReadPath::Fabric, v.len() as u64));
            assert!(reg[..v.len()] == v[..], "round {round}: r{i} differs");
        }
    }
    assert_eq!(
        copied() - before,
        0,
        "one-sided into registered memory copies"
    );
    assert_eq!(reg.registrations(), 1, "one reader at a time: one endpoint");

    let (r, small) = c.get_into("r0", c.register(10).unwrap()).await;
    assert!(
        matches!(r, Err(Error::BufferTooSmall { needed: Some(n), capacity: 10 }) if n == values[0].len() as u64),
        "{r:?}"
    );
    assert!(
        small.iter().all(|&b| b == 0),
        "wrote into a buffer too small"
    );

    // Many at once, each into its own registered buffer, on the client's endpoints.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let c = c.clone();
            let reg = c.register(4 << 20).unwrap();
            tokio::spawn(async move {
                let i = t % 3;
                let (r, reg) = c.get_into(&format!("r{i}"), reg).await;
                (i, r.unwrap().path, reg)
            })
        })
        .collect();
    for t in tasks {
        let (i, path, reg) = t.await.unwrap();
        assert_eq!(path, ReadPath::Fabric);
        assert!(
            reg[..values[i].len()] == values[i][..],
            "concurrent r{i} differs"
        );
    }
    let bufs = (0..3).map(|_| c.register(4 << 20).unwrap()).collect();
    for (i, (r, reg)) in c
        .many()
        .get_into(&["r0", "r1", "r2"], bufs)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(r.unwrap().path, ReadPath::Fabric);
        assert!(
            reg[..values[i].len()] == values[i][..],
            "batch r{i} differs"
        );
    }
    assert_eq!(copied() - before, 0, "concurrent and batched reads copy");

    // Over HTTP a registered buffer is filled like any other: one copy.
    let off = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let (r, reg) = off.get_into("r1", off.register(1 << 20).unwrap()).await;
    assert_eq!(r.unwrap().path, ReadPath::Http);
    assert!(reg[..values[1].len()] == values[1][..]);
    assert_eq!(off.stats().bytes_copied, values[1].len() as u64);

    // A frame with a flipped byte lands in the buffer but is never accepted.
    a_corrupt_frame_is_never_accepted(&gw, "r0", &values[0], |c, len| c.register(len).unwrap())
        .await;
}

/// `RegisteredBuffer::from_owned` (the caller's own memory) and `get_many_at` (several values
/// landing at offsets of one registered buffer, in flight together): no copy one-sided, each
/// value at its offset, nothing past it, a region too small its own error, the buffer whole
/// again after; bad offsets refused before anything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_land_at_offsets_of_the_callers_own_registered_memory() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let values: Vec<Vec<u8>> = (0..5)
        .map(|i| pattern(10_000 * (i + 1), i as u64))
        .collect();
    for (i, v) in values.iter().enumerate() {
        rasa_tests::put_value(&gw, &format!("o{i}"), v).await;
    }
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let before = c.stats().bytes_copied;
    let reg = rasa_client::RegisteredBuffer::from_owned(vec![0xEE_u8; 200_000]).unwrap();
    let keys = ["o0", "o1", "missing", "o3", "o4"];
    let offsets = [0, 10_000, 30_000, 30_000, 70_000];
    let (r, reg) = reg.get_many_at(&c, &keys, &offsets).await;
    let got = r.unwrap();
    for (i, r) in got.iter().enumerate() {
        if keys[i] == "missing" {
            assert!(
                matches!(r, Err(e) if e.code() == Some(rasa_client::ProblemCode::NotFound)),
                "{r:?}"
            );
            continue;
        }
        let w = r.as_ref().unwrap();
        assert_eq!(
            (w.path, w.length),
            (ReadPath::Fabric, values[i].len() as u64)
        );
        assert!(
            reg[offsets[i]..offsets[i] + values[i].len()] == values[i][..],
            "{} differs",
            keys[i]
        );
    }
    assert!(
        reg[120_000..].iter().all(|&b| b == 0xEE),
        "wrote past the last value"
    );
    assert_eq!(
        c.stats().bytes_copied,
        before,
        "one-sided at offsets copies"
    );
    assert_eq!(reg.capacity(), 200_000, "whole again");

    // The last region too small: its error in its place; the others read.
    let (r, mut reg) = reg.get_many_at(&c, &["o0", "o4"], &[0, 199_000]).await;
    let got = r.unwrap();
    assert!(got[0].is_ok(), "{:?}", got[0]);
    assert!(
        matches!(
            got[1],
            Err(Error::BufferTooSmall {
                needed: Some(50_000),
                capacity: 1_000
            })
        ),
        "{:?}",
        got[1]
    );

    for (keys, offsets) in [
        (&["o0", "o1"][..], &[5, 1][..]),
        (&["o0"], &[200_001]),
        (&["o0"], &[]),
    ] {
        let (r, back) = reg.get_many_at(&c, keys, offsets).await;
        assert!(matches!(r, Err(Error::Output(_))), "{offsets:?}: {r:?}");
        assert_eq!(back.capacity(), 200_000);
        reg = back;
    }
}

/// `get_many_at` of many values whose descriptors are held reads them in one go (one trip
/// to the fabric, every frame in flight together), each byte-exact at its offset; a frame
/// refused in the batch is that key's alone (required: its error; auto: read again over
/// HTTP), the others still land in the same go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_into_registered_memory_is_read_in_one_go() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let values: Vec<Vec<u8>> = (0..64).map(|i| pattern(64 << 10, 500 + i)).collect();
    let keys: Vec<String> = (0..64).map(|i| format!("b{i}")).collect();
    for (k, v) in keys.iter().zip(&values) {
        rasa_tests::put_value(&gw, k, v).await;
    }
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let stride = (64 << 10) + 100;
    let offsets: Vec<usize> = (0..64).map(|i| i * stride).collect();
    let check = |reg: &rasa_client::RegisteredBuffer, skip: Option<usize>| {
        for (i, v) in values.iter().enumerate() {
            if Some(i) != skip {
                assert!(
                    reg[offsets[i]..offsets[i] + v.len()] == v[..],
                    "b{i} differs"
                );
            }
        }
    };
    let required_client = || {
        Client::builder(&gw.base)
            .fast_path(FastPath::Required)
            .build()
            .unwrap()
    };
    let required = required_client();
    let reg = required.register(64 * stride).unwrap();
    let (r, reg) = reg.get_many_at(&required, &keys, &offsets).await;
    assert!(r
        .unwrap()
        .iter()
        .all(|w| w.as_ref().unwrap().path == ReadPath::Fabric));
    check(&reg, None);
    let st = required.stats();
    assert_eq!((st.fabric_batches, st.fabric_reads), (1, 64), "{st:?}");

    drop(reg);

    // A corrupt frame (a new version, served): clients that ask for descriptors now.
    let hook = gw.url("/v1/_test/corrupt/b9?serve=true");
    let _bad: Descriptor = rasa_tests::json_of(rasa_tests::http().post(hook)).await;
    let required = required_client();
    let reg = required.register(64 * stride).unwrap();
    let (r, reg) = reg.get_many_at(&required, &keys, &offsets).await;
    let got = r.unwrap();
    assert!(matches!(got[9], Err(Error::FastPath(_))), "{:?}", got[9]);
    assert!(got.iter().enumerate().all(|(i, w)| i == 9 || w.is_ok()));
    check(&reg, Some(9));
    assert_eq!(required.stats().fabric_batches, 1);
    drop(reg);

    let auto = Client::builder(&gw.base).build().unwrap();
    let reg = auto.register(64 * stride).unwrap();
    let (r, reg) = reg.get_many_at(&auto, &keys, &offsets).await;
    let got = r.unwrap();
    assert_eq!(got[9].as_ref().unwrap().path, ReadPath::Http);
    check(&reg, None);
    let st = auto.stats();
    assert_eq!(
        (st.fabric_batches, st.fabric_reads, st.http_reads),
        (1, 63, 1),
        "{st:?}"
    );
}
