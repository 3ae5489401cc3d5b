//! The reader suite, run on every provider available here (`tcp;ofi_rxm`, `sockets`, `shm`).

//! The fast-path suite in one process, on every software provider available here.

use super::fixtures::{store, Stored, BS, TIMEOUT};
use super::*;
use crate::server::FabricServer;
use std::time::Instant;

/// `read_range`: ranges at block boundaries, inside one block, across many, empty, at the
/// end, beyond the end; a lie about the block size or a table entry is a miss.
fn ranges(provider: &str, server: &FabricServer, reader: &mut Reader) {
    let len = 3 * CHUNK + 5000; // pieces of CHUNK bytes, and a short last block
    let payload: Vec<u8> = (0..len).map(|b| (b * 31 % 251) as u8).collect();
    let s = store(server, payload, 700);
    let b = BS as u64;
    let l = len as u64;
    for r in [
        0..1,
        0..b,
        b..2 * b,
        10..20,
        b - 1..b + 1,
        5..l,
        l - 1..l,
        0..l,
        7..7,
        l..l,
    ] {
        let got = reader
            .read_range(&s.frame, r.clone(), TIMEOUT)
            .unwrap_or_else(|e| panic!("{provider}: range {r:?}: {e}"));
        assert!(
            got[..] == s.payload[r.start as usize..r.end as usize],
            "{provider}: range {r:?} differs"
        );
    }
    let e = reader.read_range(&s.frame, l - 1..l + 1, TIMEOUT);
    assert!(matches!(e, Err(ReadError::OutOfRange { .. })), "{e:?}");
    let lie = RemoteFrame {
        blocks: Some(BlockTable {
            block_size: 2 * BS,
            ..s.frame.blocks.unwrap()
        }),
        ..s.frame
    };
    let e = reader.read_range(&lie, 0..10, TIMEOUT);
    assert!(matches!(e, Err(ReadError::Frame(_))), "{provider}: {e:?}");
    let lie = RemoteFrame {
        blocks: Some(BlockTable {
            at: s.frame.blocks.unwrap().at + 8,
            ..s.frame.blocks.unwrap()
        }),
        ..s.frame
    };
    let e = reader.read_range(&lie, 0..10, TIMEOUT);
    assert!(
        matches!(
            e,
            Err(ReadError::Frame(FrameError::BlockMismatch { index: 0 }))
        ),
        "{provider}: {e:?}"
    );
    // A frame without a table cannot be read by range; the endpoint stays usable.
    let none = RemoteFrame {
        blocks: None,
        ..s.frame
    };
    assert!(reader.read_range(&none, 0..10, TIMEOUT).is_err());
    assert_eq!(
        reader.read_range(&s.frame, 0..3, TIMEOUT).unwrap(),
        &s.payload[..3]
    );
}

fn suite(provider: &str) {
    suite_reading(provider, false);
}

/// The suite; with `cma`, the reader copies by cross-memory attach itself (shm only).
fn suite_reading(provider: &str, cma: bool) {
    let served = FabricConfig::new(provider, Some("127.0.0.1".into()));
    let server = match FabricServer::start(&served) {
        Ok(s) => s,
        Err(e) => panic!("provider {provider} must be available here: {e}"),
    };
    let cfg = if cma {
        served.with_cma(std::process::id())
    } else {
        served
    };
    let mut reader = Reader::connect(cfg.clone(), server.address().to_vec()).unwrap();
    for (i, len) in [0usize, 1, 4096, (1 << 20) + 3].into_iter().enumerate() {
        let payload: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
        let s = store(&server, payload, i as u64);
        let got = reader.read(&s.frame, TIMEOUT).unwrap();
        assert_eq!(got, s.payload, "{provider}: {len} bytes");
    }

    expired(provider, &server, &mut reader);
    streaming(provider, &server, &mut reader);
    ranges(provider, &server, &mut reader);
    landing(provider, &cfg, &server, &mut reader);
    super::landing_tests::landing_many(provider, &server, &mut reader);

    // Several frames in one go; one bad promise fails only its own entry.
    let a = store(&server, vec![1u8; 3 << 20], 100);
    let b = store(&server, b"small".to_vec(), 101);
    let lie = RemoteFrame {
        checksum: b.frame.checksum ^ 1,
        ..b.frame
    };
    let got = reader.read_many(&[a.frame, b.frame, lie], TIMEOUT).unwrap();
    assert_eq!(got[0].as_deref().unwrap(), &a.payload[..]);
    assert_eq!(got[1].as_deref().unwrap(), &b.payload[..]);
    assert!(got[2].is_err());

    // A promise the bytes do not keep (wrong checksum, wrong version) is rejected.
    let s = store(&server, b"hello".to_vec(), 9);
    let lie = RemoteFrame {
        checksum: s.frame.checksum ^ 1,
        ..s.frame
    };
    assert!(matches!(
        reader.read(&lie, TIMEOUT),
        Err(ReadError::Frame(_))
    ));
    let lie = RemoteFrame {
        identity: FrameIdentity {
            version: 10,
            ..s.frame.identity
        },
        ..s.frame
    };
    assert!(matches!(
        reader.read(&lie, TIMEOUT),
        Err(ReadError::Frame(_))
    ));

    // A revoked key is a clean, prompt miss; a fresh descriptor then works.
    let Stored {
        region,
        offset,
        frame,
        payload,
    } = s;
    let old = frame;
    let region = server.rotate(region).unwrap();
    assert_ne!(region.key(), old.rkey, "rotation must change the key");
    let start = Instant::now();
    match reader.read(&old, TIMEOUT) {
        Err(ReadError::KeyRevoked(_)) => {}
        // shm's fast path never looks at the key (its slow path does): the unchanged
        // bytes are read, and only frame validation fences a reused arena there.
        Ok(bytes) if !plan::checks_remote_keys(provider) => assert_eq!(bytes, payload),
        other => panic!("{provider}: read with a revoked key gave {other:?}"),
    }
    assert!(
        start.elapsed() < TIMEOUT,
        "revoked read must not wait for the timeout"
    );
    // The endpoint is kept where the provider survives a revoked key (no rebuild: a
    // new domain, handshake and scratch registration), dropped where it does not.
    assert_eq!(
        reader.is_connected(),
        plan::survives_revoked_key(provider),
        "{provider}: endpoint after a revoked key"
    );
    let rebuilds = reader.rebuilds();
    let fresh = RemoteFrame {
        addr: server.remote_addr(&region, offset),
        rkey: region.key(),
        ..old
    };
    assert_eq!(reader.read(&fresh, TIMEOUT).unwrap(), payload);
    assert_eq!(
        reader.rebuilds() - rebuilds,
        u64::from(!plan::survives_revoked_key(provider)),
        "{provider}: rebuilds after a revoked key"
    );

    // Reading past the end of the region fails cleanly, and the reader recovers.
    let past = RemoteFrame {
        addr: fresh.addr + region.buffer().capacity() as u64,
        ..fresh
    };
    let e = reader.read(&past, TIMEOUT);
    // shm checks no bounds either: it reads whatever the gateway's process holds there,
    // and frame validation rejects it (never a complete-looking wrong value).
    let clean = matches!(e, Err(ReadError::KeyRevoked(_)))
        || (!plan::checks_remote_keys(provider) && matches!(e, Err(ReadError::Frame(_))));
    assert!(clean, "{provider}: past the end gave {e:?}");
    assert_eq!(reader.read(&fresh, TIMEOUT).unwrap(), payload);
}

/// A read whose time is over before it begins (a lease that ended while the call waited
/// for a thread) issues nothing: `Expired`, the endpoint kept, no rebuild. More of them than
/// a process may abandon endpoints (`contact`) leave the fast path as it was: under load
/// they once switched it off for good on `tcp;ofi_rxm`, each leaving a read in flight.
fn expired(provider: &str, server: &FabricServer, reader: &mut Reader) {
    let s = store(server, vec![5u8; 3 * CHUNK], 50);
    let rebuilds = reader.rebuilds();
    for _ in 0..2 * contact::MAX_ABANDONED_RXM_PER_GATEWAY {
        let e = reader.read(&s.frame, Duration::ZERO);
        assert!(matches!(e, Err(ReadError::Expired)), "{provider}: {e:?}");
        let e = reader.read_to(&s.frame, Instant::now(), &mut |_| Ok(()));
        assert!(matches!(e, Err(ReadError::Expired)), "{provider}: {e:?}");
        assert!(
            reader.is_connected(),
            "{provider}: endpoint after an expired read"
        );
    }
    assert_eq!(
        reader.rebuilds(),
        rebuilds,
        "{provider}: rebuilds after expired reads"
    );
    assert_eq!(reader.read(&s.frame, TIMEOUT).unwrap(), s.payload);
}

/// `read_to`: values larger than the scratch ring arrive whole and in order; a frame that
/// fails validation never has its last piece handed out; an output that refuses stops the
/// read and leaves the reader usable.
fn streaming(provider: &str, server: &FabricServer, reader: &mut Reader) {
    let deadline = || Instant::now() + TIMEOUT;
    let ring = stream::STREAM_PIECES * CHUNK;
    for (i, len) in [0usize, 1, CHUNK - HEADER_LEN, CHUNK, ring + 5]
        .into_iter()
        .enumerate()
    {
        let payload: Vec<u8> = (0..len).map(|b| (b * 13 + i) as u8).collect();
        let s = store(server, payload, 500 + i as u64);
        let mut got = Vec::new();
        let mut pieces = 0;
        reader
            .read_to(&s.frame, deadline(), &mut |p| {
                assert!(p.len() <= CHUNK);
                pieces += 1;
                got.extend_from_slice(p);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{provider}: streaming {len} bytes: {e}"));
        assert!(got == s.payload, "{provider}: streamed {len} bytes differ");
        let expected = if len == 0 {
            0
        } else {
            (len + HEADER_LEN).div_ceil(CHUNK)
        };
        assert_eq!(pieces, expected, "{provider}: {len} bytes in pieces");
    }
    let s = store(server, vec![7u8; 3 * CHUNK], 520);
    let lie = RemoteFrame {
        checksum: s.frame.checksum ^ 1,
        ..s.frame
    };
    let mut got = 0usize;
    let e = reader.read_to(&lie, deadline(), &mut |p| {
        got += p.len();
        Ok(())
    });
    assert!(matches!(e, Err(ReadError::Frame(_))), "{provider}: {e:?}");
    assert!(
        got < s.payload.len(),
        "{provider}: a rejected frame was handed out whole"
    );
    let e = reader.read_to(&s.frame, deadline(), &mut |_| Err("disk full".into()));
    assert!(
        matches!(&e, Err(ReadError::Output(m)) if m == "disk full"),
        "{e:?}"
    );
    assert_eq!(reader.read(&s.frame, TIMEOUT).unwrap(), s.payload);
}

/// `direct().read`: values land whole at the front of a registered buffer reused read after
/// read (one registration per endpoint); too small a buffer is refused before reading; a
/// bad frame is a miss; a revoked key is a miss and the rebuilt endpoint registers anew.
fn landing(provider: &str, cfg: &FabricConfig, server: &FabricServer, reader: &mut Reader) {
    let mut dst = LandingBuffer::new(4 * CHUNK).unwrap();
    for (i, len) in [0usize, 1, 4096, 3 * CHUNK + 5, 7].into_iter().enumerate() {
        let payload: Vec<u8> = (0..len).map(|b| (b * 11 + i) as u8).collect();
        let s = store(server, payload, 800 + i as u64);
        let n = reader
            .direct()
            .read(&s.frame, &mut dst, TIMEOUT)
            .unwrap_or_else(|e| panic!("{provider}: landing {len} bytes: {e}"));
        assert_eq!(n, len);
        assert!(
            dst.as_slice()[..n] == s.payload,
            "{provider}: {len} bytes differ"
        );
    }
    assert_eq!(
        dst.registrations(),
        1,
        "{provider}: one endpoint, one registration"
    );

    let s = store(server, vec![3u8; 4 * CHUNK + 1], 810);
    let e = reader.direct().read(&s.frame, &mut dst, TIMEOUT);
    assert!(matches!(e, Err(ReadError::Output(_))), "{provider}: {e:?}");
    assert!(reader.is_connected(), "{provider}: refused before reading");

    let s = store(server, vec![9u8; CHUNK + 10], 811);
    let lie = RemoteFrame {
        checksum: s.frame.checksum ^ 1,
        ..s.frame
    };
    let e = reader.direct().read(&lie, &mut dst, TIMEOUT);
    assert!(matches!(e, Err(ReadError::Frame(_))), "{provider}: {e:?}");
    assert_eq!(
        reader.direct().read(&s.frame, &mut dst, TIMEOUT).unwrap(),
        s.payload.len()
    );
    assert!(dst.as_slice()[..s.payload.len()] == s.payload);

    // Parts of one buffer (split_off) take values at their offsets and share its
    // registration; joined again, it is whole. The caller's own memory takes values too.
    let mut head = LandingBuffer::new(2 * CHUNK).unwrap();
    let mut tail = head.split_off(CHUNK);
    let a = store(server, vec![1u8; CHUNK], 813);
    let b = store(server, vec![2u8; 100], 814);
    assert_eq!(
        reader.direct().read(&a.frame, &mut head, TIMEOUT).unwrap(),
        CHUNK
    );
    assert_eq!(
        reader.direct().read(&b.frame, &mut tail, TIMEOUT).unwrap(),
        100
    );
    assert_eq!(
        tail.registrations(),
        1,
        "{provider}: the parts share one registration"
    );
    let c = store(server, vec![3u8; CHUNK + 1], 815);
    let e = reader.direct().read(&c.frame, &mut tail, TIMEOUT);
    assert!(
        matches!(e, Err(ReadError::Output(_))),
        "{provider}: a part's room: {e:?}"
    );
    head.unsplit(tail).unwrap();
    assert_eq!(head.capacity(), 2 * CHUNK);
    assert!(head.as_slice()[..CHUNK].iter().all(|&x| x == 1));
    assert!(head.as_slice()[CHUNK..CHUNK + 100].iter().all(|&x| x == 2));
    let mut own = LandingBuffer::from_owned(vec![0u8; 1000]).unwrap();
    assert_eq!(
        reader.direct().read(&b.frame, &mut own, TIMEOUT).unwrap(),
        100
    );
    assert!(own.as_slice()[..100].iter().all(|&x| x == 2));

    // Another endpoint reading into the same buffer registers it there too.
    let mut other = Reader::connect(cfg.clone(), server.address().to_vec()).unwrap();
    let t = store(server, b"elsewhere".to_vec(), 812);
    assert_eq!(other.direct().read(&t.frame, &mut dst, TIMEOUT).unwrap(), 9);
    assert_eq!(&dst.as_slice()[..9], b"elsewhere");
    assert_eq!(dst.registrations(), 2, "{provider}: two endpoints");

    // A revoked key is a miss; where it kills the endpoint, the new one registers anew.
    let Stored {
        region,
        offset,
        frame,
        ..
    } = s;
    let region = server.rotate(region).unwrap();
    let e = reader.direct().read(&frame, &mut dst, TIMEOUT);
    if !plan::checks_remote_keys(provider) {
        // shm's fast path never looks at the key: the old descriptor may still read the
        // unchanged bytes (only frame validation fences a reused arena there).
        match e {
            Ok(n) => assert_eq!(n, CHUNK + 10, "{provider}"),
            Err(ReadError::KeyRevoked(_)) => {}
            other => panic!("{provider}: {other:?}"),
        }
        return;
    }
    // With several reads in flight, tcp;ofi_rxm may fail one with a broken connection
    // before the one whose cancellation broke it reports the revoked key.
    let revoked = matches!(e, Err(ReadError::KeyRevoked(_)))
        || (!plan::survives_revoked_key(provider)
            && matches!(e, Err(ReadError::ConnectionLost(_))));
    assert!(revoked, "{provider}: {e:?}");
    let fresh = RemoteFrame {
        addr: server.remote_addr(&region, offset),
        rkey: region.key(),
        ..frame
    };
    assert_eq!(
        reader.direct().read(&fresh, &mut dst, TIMEOUT).unwrap(),
        CHUNK + 10
    );
    assert!(dst.as_slice()[..CHUNK + 10].iter().all(|&b| b == 9));
    let expected = 2 + usize::from(!plan::survives_revoked_key(provider));
    assert_eq!(
        dst.registrations(),
        expected,
        "{provider}: after a revoked key"
    );
}

#[test]
fn suite_on_tcp_rxm() {
    suite("tcp;ofi_rxm");
}

#[test]
fn suite_on_sockets() {
    suite("sockets");
}

#[test]
fn suite_on_shm() {
    suite("shm");
}

/// On shm with the reader's own cross-memory attach (what the SDK does on the gateway's
/// host): the same answers, no provider call on the data path.
#[test]
fn suite_on_shm_read_by_cross_memory_attach() {
    suite_reading("shm", true);
}
