//! The reader suite, run on every provider available here (`tcp;ofi_rxm`, `sockets`).

//! The fast-path suite in one process, on every software provider available here.

use super::*;
use crate::frame::{key_hash, FrameHasher};
use crate::server::FabricServer;

const TIMEOUT: Duration = Duration::from_secs(10);

struct Stored {
    region: MemoryRegion,
    offset: usize,
    frame: RemoteFrame,
    payload: Vec<u8>,
}

fn store(server: &FabricServer, payload: Vec<u8>, version: u64) -> Stored {
    let id = FrameIdentity {
        key_hash: key_hash("k"),
        version,
        payload_len: payload.len() as u64,
    };
    let mut h = FrameHasher::new();
    h.update(&payload);
    let (header, checksum) = h.seal(id);
    let buffer = ArenaBuffer::new(HEADER_LEN + payload.len() + 4096).unwrap();
    // Put the frame at a non-zero offset so offset/virtual addressing both matter.
    let _pad = buffer.try_reserve(128, 64).unwrap();
    let mut slot = buffer.try_reserve(HEADER_LEN + payload.len(), 64).unwrap();
    slot.as_mut_slice()[..HEADER_LEN].copy_from_slice(&header);
    slot.as_mut_slice()[HEADER_LEN..].copy_from_slice(&payload);
    let offset = slot.offset();
    let _frozen = slot.freeze();
    let region = server.register(buffer).unwrap();
    let frame = RemoteFrame {
        addr: server.remote_addr(&region, offset),
        rkey: region.key(),
        identity: id,
        checksum,
    };
    Stored {
        region,
        offset,
        frame,
        payload,
    }
}

fn suite(provider: &str) {
    let cfg = FabricConfig::new(provider, Some("127.0.0.1".into()));
    let server = match FabricServer::start(&cfg) {
        Ok(s) => s,
        Err(e) => panic!("provider {provider} must be available here: {e}"),
    };
    let mut reader = Reader::connect(cfg.clone(), server.address().to_vec()).unwrap();
    for (i, len) in [0usize, 1, 4096, (1 << 20) + 3].into_iter().enumerate() {
        let payload: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
        let s = store(&server, payload, i as u64);
        let got = reader.read(&s.frame, TIMEOUT).unwrap();
        assert_eq!(got, s.payload, "{provider}: {len} bytes");
    }

    streaming(provider, &server, &mut reader);

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
    assert!(
        matches!(e, Err(ReadError::KeyRevoked(_))),
        "{provider}: past the end gave {e:?}"
    );
    assert_eq!(reader.read(&fresh, TIMEOUT).unwrap(), payload);
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

#[test]
fn suite_on_tcp_rxm() {
    suite("tcp;ofi_rxm");
}

#[test]
fn suite_on_sockets() {
    suite("sockets");
}
