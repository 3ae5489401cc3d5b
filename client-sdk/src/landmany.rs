//! A batch read into one registered buffer in one go: every value whose descriptor the
//! client holds is read one-sided with all its frames in flight together, in a single trip
//! to the blocking pool (one per key cost more than the copies of 64 KiB values did), each
//! landing in its region and validated there. What pool cannot read (no descriptor held,
//! a frame refused, a failed batch) is left to the per-key way, which resolves, retries and
//! falls back to HTTP as a lone read does.

use std::ops::Range;
use std::time::Instant;

use rasa_fastpath::reader::LandingBuffer;
use sha2::{Digest, Sha256};

use crate::descriptors::remote_frame;
use crate::fabric::{frames_on, FabricPool};
use crate::stream::Written;
use crate::{Fallback, FastPath, ReadPath};

/// Keys a part of a batch has at least, when [`hold_and_land`] cuts it into parts.
const PART_KEYS: usize = 64;

/// Asks for the descriptors of `keys` not held (in parts, all requests at once) and reads
/// the values of every part whose descriptors are in into their `regions` of `landing`,
/// while the later parts' requests go on: the gateway answers for the next parts while
/// this client copies, and every part that arrived meanwhile is read in the next go,
/// together (a go of 8 MiB or more is copied by two threads). As [`land_many`]: `Some`
/// for each value read and validated, `None` for each left to the caller.
pub(crate) async fn hold_and_land(
    pool: &FabricPool,
    keys: &[&str],
    regions: &[Range<usize>],
    mut landing: LandingBuffer,
) -> (Vec<Option<Written>>, LandingBuffer) {
    use futures_util::future::{select, Either, FutureExt};
    use futures_util::StreamExt;
    let missing = pool.descriptors.missing(keys).len();
    let parts = (missing / PART_KEYS).clamp(1, 4);
    let size = keys.len().div_ceil(parts).max(1);
    let spans: Vec<Range<usize>> = (0..keys.len())
        .step_by(size)
        .map(|s| s..(s + size).min(keys.len()))
        .collect();
    let mut asks: futures_util::stream::FuturesUnordered<_> = spans
        .iter()
        .enumerate()
        .map(|(part, r)| pool.hold(&keys[r.clone()]).map(move |()| part))
        .collect();
    let mut out: Vec<Option<Written>> = keys.iter().map(|_| None).collect();
    let mut ready = Vec::new();
    loop {
        if ready.is_empty() {
            match asks.next().await {
                Some(part) => ready.push(part),
                None => break, // every part answered and read
            }
        }
        while let Some(Some(part)) = asks.next().now_or_never() {
            ready.push(part);
        }
        ready.sort_unstable();
        let go: Vec<usize> = ready.drain(..).flat_map(|p| spans[p].clone()).collect();
        let go_keys: Vec<&str> = go.iter().map(|&i| keys[i]).collect();
        let go_regions: Vec<Range<usize>> = go.iter().map(|&i| regions[i].clone()).collect();
        let mut land = Box::pin(land_many(pool, &go_keys, &go_regions, landing));
        let (got, back) = loop {
            if asks.is_empty() {
                break land.await;
            }
            match select(land, asks.next()).await {
                Either::Left((done, _)) => break done,
                Either::Right((part, still)) => {
                    ready.extend(part);
                    land = still;
                }
            }
        };
        for (i, written) in go.into_iter().zip(got) {
            out[i] = written;
        }
        landing = back;
    }
    (out, landing)
}

/// Reads the values of `keys` whose descriptors `pool` holds into their `regions` of
/// `landing`, together: `Some` for each one read and validated, `None` for each left to
/// the caller. Reads nothing unless at least two can go together. (A free function:
/// `FabricPool` has methods enough.)
pub(crate) async fn land_many(
    pool: &FabricPool,
    keys: &[&str],
    regions: &[Range<usize>],
    landing: LandingBuffer,
) -> (Vec<Option<Written>>, LandingBuffer) {
    let mut out: Vec<Option<Written>> = keys.iter().map(|_| None).collect();
    if pool.fast_path == FastPath::Off || pool.known_unavailable() || pool.rebuilding() {
        return (out, landing);
    }
    let mut batch = Vec::new();
    let mut earliest: Option<Instant> = None;
    let held = pool.descriptors.fresh_many(keys);
    for (i, (held, room)) in held.into_iter().zip(regions).enumerate() {
        let Some((d, deadline)) = held else {
            continue;
        };
        let fits = d.length <= room.len() as u64;
        if fits && matches!(remote_frame(&d), Ok(Some(_))) {
            earliest = Some(earliest.map_or(deadline, |e| e.min(deadline)));
            batch.push((i, d));
        }
    }
    let Some(earliest) = earliest.filter(|_| batch.len() >= 2) else {
        return (out, landing);
    };
    let Ok(state) = pool.ready_endpoint(earliest).await else {
        return (out, landing);
    };
    let Ok(frames) = frames_on(&state, batch.iter().map(|(_, d)| &**d)) else {
        return (out, landing);
    };
    let frames: Vec<_> = frames
        .into_iter()
        .zip(&batch)
        .map(|(f, (i, _))| (f, regions[*i].clone()))
        .collect();
    let timeout = earliest
        .saturating_duration_since(Instant::now())
        .min(pool.read_timeout)
        .min(pool.call_timeout.left());
    let (r, landing) = pool
        .on_reader(state, landing, move |reader, landing| {
            reader.direct().read_many(&frames, landing, timeout)
        })
        .await;
    let Ok(results) = r else {
        return (out, landing); // counted; the per-key way tries again
    };
    pool.counters.batch();
    for ((i, d), r) in batch.into_iter().zip(results) {
        // Hashed only when the frame stood (and the client asks for it).
        let room = regions[i].start..regions[i].start + d.length as usize;
        let digest_ok = || {
            !pool.verify_sha256
                || hex::encode(Sha256::digest(&landing.as_slice()[room.clone()])) == d.sha256
        };
        match r {
            Ok(n) if digest_ok() => {
                pool.counters.read(ReadPath::Fabric);
                out[i] = Some(Written {
                    length: n as u64,
                    version: d.version.clone(),
                    sha256: d.sha256.clone(),
                    content_type: d.content_type.clone(),
                    path: ReadPath::Fabric,
                });
            }
            Ok(_) => pool.counters.fallback(Fallback::Sha256Mismatch),
            Err(_) => {
                pool.counters.fallback(Fallback::FrameMismatch);
                pool.descriptors.forget(keys[i]);
            }
        }
    }
    (out, landing)
}
