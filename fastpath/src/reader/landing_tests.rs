//! `direct().read_many`, run by the reader suite on every provider.

use super::fixtures::{store, Stored, TIMEOUT};
use super::*;
use crate::server::FabricServer;

/// `direct().read_many`: many values land at their offsets of one registered buffer in one
/// go, byte-exact (small ones and one spanning several pieces), the bytes between them
/// untouched (over 8 MiB in all: by cross-memory attach, two threads copy, each checking
/// what it copied); a frame whose promise is a lie fails alone, a large one too; a value
/// longer than its room is refused before anything is read; a revoked key fails the batch
/// (the caller falls back).
pub(super) fn landing_many(provider: &str, server: &FabricServer, reader: &mut Reader) {
    let values: Vec<Stored> = (0..40u64)
        .map(|i| {
            let len = if i == 7 || i == 20 {
                9 * CHUNK + 3
            } else {
                (i as usize * 997) % 70_000
            };
            let payload = (0..len).map(|b| (b as u64 * 13 + i) as u8).collect();
            store(server, payload, 900 + i)
        })
        .collect();
    let mut at = 0;
    let mut frames: Vec<(RemoteFrame, std::ops::Range<usize>)> = Vec::new();
    for v in &values {
        frames.push((v.frame, at..at + v.payload.len()));
        at += v.payload.len() + 5; // a gap the reads must not touch
    }
    // A lie about a frame in each half (over 8 MiB, two threads check a half each), and
    // about a frame larger than a cross-memory call (checked as its parts are copied).
    frames[3].0.checksum ^= 1;
    frames[30].0.checksum ^= 1;
    frames[20].0.checksum ^= 1;
    let mut dst = LandingBuffer::new(at).unwrap();
    dst.as_mut_slice().fill(0xEE);
    let got = reader
        .direct()
        .read_many(&frames, &mut dst, TIMEOUT)
        .unwrap_or_else(|e| panic!("{provider}: a batch of 40: {e}"));
    for (i, ((_, room), r)) in frames.iter().zip(&got).enumerate() {
        if i == 3 || i == 30 || i == 20 {
            assert!(matches!(r, Err(ReadError::Frame(_))), "{provider}: {r:?}");
            continue;
        }
        assert_eq!(r.as_ref().ok(), Some(&room.len()), "{provider}: value {i}");
        assert!(
            dst.as_slice()[room.clone()] == values[i].payload,
            "{provider}: value {i} differs"
        );
        let gap = &dst.as_slice()[room.end..(room.end + 5).min(at)];
        assert!(gap.iter().all(|&b| b == 0xEE), "{provider}: gap after {i}");
    }
    assert_eq!(dst.registrations(), 1, "{provider}: one registration");

    let mut short = frames.clone();
    short[5].1.end -= 1;
    let e = reader.direct().read_many(&short, &mut dst, TIMEOUT);
    assert!(matches!(e, Err(ReadError::Output(_))), "{provider}: {e:?}");
    assert!(reader.is_connected(), "{provider}: refused before reading");
    assert!(reader
        .direct()
        .read_many(&[], &mut dst, TIMEOUT)
        .unwrap()
        .is_empty());

    if plan::checks_remote_keys(provider) {
        let last = values.into_iter().last().expect("40 values");
        let room = frames[39].1.clone();
        let region = server.rotate(last.region).unwrap();
        let e = reader.direct().read_many(
            &[(frames[0].0, frames[0].1.clone()), (last.frame, room)],
            &mut dst,
            TIMEOUT,
        );
        assert!(
            e.is_err(),
            "{provider}: a revoked key fails the batch: {e:?}"
        );
        drop(region);
    }
}
