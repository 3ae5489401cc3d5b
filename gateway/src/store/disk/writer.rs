//! The disk tier's writer thread (spills and tombstones, in the order they were queued;
//! segments rolled and the oldest deleted when full) and recovery at start.

use crate::catalog;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use super::files::{self, SEGMENT_HEADER};
use super::record::{Extras, Head, TOMB, VALUE};
use super::segments::{self, Active, Scanned};
use super::{key_hash, Entry, Recovered, Segment, Shared, State};
use crate::store::StoredVersion;

/// What the writer is asked to do.
pub(super) enum Op {
    /// Write an evicted version (unless forgotten meanwhile).
    Spill(Arc<StoredVersion>),
    /// Void the earlier records of a key hash.
    Tomb(u64),
    /// Sync the open segment, then answer.
    Sync(mpsc::Sender<()>),
}

/// Rebuilds the index from `segments` of `dir` (the tier's own, opened by
/// [`segments::open_ours`]; scanned in parallel, applied in order: a later record or
/// tombstone of a key replaces an earlier one). A segment left with no record is deleted.
pub(super) fn recover(dir: &Path, segments: Vec<(u32, File)>) -> io::Result<(State, Recovered)> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = segments.len().div_ceil(threads).max(1);
    let scanned: Vec<io::Result<Scanned>> = std::thread::scope(|s| {
        let parts: Vec<_> = segments
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(id, file)| segments::scan(file, *id))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a segment scan panicked"))
            .collect()
    });
    let mut state = State::default();
    let mut recovered = Recovered::default();
    for ((id, file), scanned) in segments.into_iter().zip(scanned) {
        let scanned = scanned?;
        recovered.torn += scanned.torn;
        if scanned.torn > 0 {
            tracing::warn!(
                segment = id,
                torn = scanned.torn,
                "cut a torn tail off a segment"
            );
        }
        if scanned.records.is_empty() {
            files::remove_if_same(&segments::path_of(dir, id), &file)?;
            continue;
        }
        recovered.bytes += scanned.valid;
        for (h, entry) in scanned.records {
            match entry {
                Some(e) => state.index.insert(h, e),
                None => state.index.remove(&h),
            };
        }
        state.bytes += scanned.valid;
        state.files.insert(
            id,
            Segment {
                file: Arc::new(file),
                bytes: scanned.valid,
            },
        );
    }
    recovered.values = state.index.len() as u64;
    Ok((state, recovered))
}

/// Starts the writer over `active`, the new segment; it ends when the sender is dropped.
pub(super) fn start(shared: Arc<Shared>, active: Active) -> io::Result<mpsc::Sender<Op>> {
    let mut st = shared.state();
    st.bytes += active.len;
    st.files.insert(
        active.id,
        Segment {
            file: Arc::clone(&active.file),
            bytes: active.len,
        },
    );
    drop(st);
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rasa-disk-writer".into())
        .spawn(move || Writer { shared, active }.run(rx))?;
    Ok(tx)
}

struct Writer {
    shared: Arc<Shared>,
    active: Active,
}

impl Writer {
    fn run(mut self, ops: mpsc::Receiver<Op>) {
        for op in ops {
            match op {
                Op::Spill(v) => self.spill(&v),
                Op::Tomb(h) => {
                    let head = Head::of(TOMB, 0, h, &[]).expect("an empty body");
                    if let Err(e) = self.append(&head, &[]) {
                        tracing::error!(error = %e, "cannot write a tombstone to the disk tier");
                    }
                }
                Op::Sync(done) => {
                    if let Err(e) = self.active.file.sync_data() {
                        tracing::error!(error = %e, "cannot sync the disk tier");
                    }
                    let _ = done.send(());
                }
            }
        }
        let _ = self.active.file.sync_data();
    }

    fn spill(&mut self, v: &Arc<StoredVersion>) {
        let h = key_hash(v.key_bytes());
        let queued = |st: &State| st.pending.get(&h).is_some_and(|p| Arc::ptr_eq(p, v));
        if !queued(&self.shared.state()) {
            return; // written or deleted since: nothing to keep
        }
        let extras = Extras::of(v).encode();
        let frame = v.frame.as_slice();
        let parts = [frame, &extras[..]];
        let written = Head::of(VALUE, frame.len() as u32, h, &parts)
            .ok_or_else(|| io::Error::other("a record over 4 GiB"))
            .and_then(|head| {
                let (seg, off) = self.append(&head, &parts)?;
                Entry::new(seg, off, head.record_len(), v.version().0)
                    .ok_or_else(|| io::Error::other("a record past 4 GiB into its segment"))
            });
        let mut st = self.shared.state();
        let still = queued(&st);
        if still {
            st.pending.remove(&h);
        }
        match written {
            Ok(entry) if still => {
                st.index.insert(h, entry);
                drop(st);
                self.shared.stats.spilled.fetch_add(1, Ordering::Relaxed);
                catalog::DISK_SPILLS.counter().increment(1);
                catalog::DISK_SPILLED_BYTES.counter().increment(v.len());
            }
            Ok(_) => {}
            Err(e) => {
                drop(st);
                tracing::warn!(key = v.key(), error = %e, "cannot spill a value to the disk tier; dropped");
                self.shared.count_dropped();
            }
        }
    }

    /// Appends a record to the open segment, rolling it when full and deleting the oldest
    /// segments while the tier would be over its size. Where the record starts.
    fn append(&mut self, head: &Head, parts: &[&[u8]]) -> io::Result<(u32, u64)> {
        let n = head.record_len();
        if self.active.len > SEGMENT_HEADER && self.active.len + n > self.shared.config.segment_size
        {
            self.roll()?;
        }
        self.make_room(n)?;
        let off = self.active.append(head, parts)?;
        let mut st = self.shared.state();
        st.bytes += n;
        if let Some(seg) = st.files.get_mut(&self.active.id) {
            seg.bytes += n;
        }
        Ok((self.active.id, off))
    }

    /// Seals the open segment (synced) and opens the next.
    fn roll(&mut self) -> io::Result<()> {
        self.active.file.sync_data()?;
        let next = Active::create(
            &self.shared.config.dir,
            self.active.id + 1,
            &self.shared.identity,
        )?;
        let mut st = self.shared.state();
        st.bytes += next.len;
        st.files.insert(
            next.id,
            Segment {
                file: Arc::clone(&next.file),
                bytes: next.len,
            },
        );
        drop(st);
        self.active = next;
        Ok(())
    }

    /// Deletes the oldest segments until `n` more bytes fit.
    fn make_room(&mut self, n: u64) -> io::Result<()> {
        loop {
            let mut st = self.shared.state();
            if st.bytes + n <= self.shared.size.load(Ordering::Relaxed) {
                return Ok(());
            }
            let Some(&oldest) = st.files.keys().next() else {
                return Ok(());
            };
            if oldest == self.active.id {
                if self.active.len <= SEGMENT_HEADER {
                    return Ok(()); // alone: spill checked that it fits
                }
                drop(st);
                self.roll()?;
                continue;
            }
            let seg = st.files.remove(&oldest).expect("just seen");
            let before = st.index.len();
            st.index.retain(|_, e| e.seg != oldest);
            let evicted = (before - st.index.len()) as u64;
            st.bytes -= seg.bytes;
            drop(st);
            files::remove_if_same(
                &segments::path_of(&self.shared.config.dir, oldest),
                &seg.file,
            )?;
            self.shared
                .stats
                .evicted
                .fetch_add(evicted, Ordering::Relaxed);
            catalog::DISK_EVICTIONS.counter().increment(evicted);
            tracing::debug!(segment = oldest, evicted, "deleted the oldest disk segment");
        }
    }
}
