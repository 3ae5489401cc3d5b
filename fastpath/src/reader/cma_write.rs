//! One-sided writes by cross-memory attach (`shm` on the gateway's host): this process
//! writes each value into the gateway's upload region with `process_vm_writev`, consecutive
//! pieces by one system call, each piece shown to the caller just before it is written
//! (the one-sided PUT hashes it there, while it is in the cache).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::super::write::Seen;
use super::{calls, failed, helper_calls, parts_of, timeout, to_helper, Span};
use crate::local::CopyError;
use crate::reader::Failed;

/// Writes each value (bytes, and the address in process `pid` they go to) with
/// `process_vm_writev`, consecutive pieces (of at most [`crate::reader::CHUNK`]) by one system call
/// ([`calls`]), showing each piece to `seen` first. With 8 MiB or more and two cores, two
/// threads write whole values each, about half the bytes; a batch whose values cannot be
/// shared so (one large value) is shown to `seen` here first and its calls shared instead.
/// Stops at the first failure, or at the deadline.
pub(in crate::reader) fn write_all(
    pid: u32,
    values: &[(&[u8], u64)],
    seen: &Seen<'_>,
    deadline: Instant,
) -> Result<(), Failed> {
    let stop = AtomicBool::new(false);
    let total: usize = values.iter().map(|(b, _)| b.len()).sum();
    let all: Vec<usize> = (0..values.len()).collect();
    if !crate::helper::two_threads_for(total as u64, values.len()) {
        return write_values(pid, values, &all, seen, &stop, deadline);
    }
    let (theirs, mine) = halves(values);
    let theirs_bytes: usize = theirs.iter().map(|&v| values[v].0.len()).sum();
    if theirs_bytes.max(total - theirs_bytes) > total * 3 / 5 {
        // One value is most of the batch: seen here, its calls shared by two threads.
        let pieces = pieces_of(values, &all);
        for (v, bytes, _) in &pieces {
            seen(*v, bytes);
        }
        let spans: Vec<Span> = pieces.iter().map(|(_, b, r)| span(b, *r)).collect();
        let calls = calls(&spans, true, None);
        let helpers = helper_calls(&spans, &calls, None);
        let of = |theirs: bool| -> Vec<Range<usize>> {
            let both = calls.iter().zip(&helpers);
            both.filter(|(_, h)| **h == theirs)
                .map(|(c, _)| c.clone())
                .collect()
        };
        let run = |mine: Vec<Range<usize>>| write_calls(pid, &spans, &mine, &stop, deadline);
        let (theirs, mine) = (of(true), of(false));
        return both(|| run(theirs), || run(mine));
    }
    both(
        || write_values(pid, values, &theirs, seen, &stop, deadline),
        || write_values(pid, values, &mine, seen, &stop, deadline),
    )
}

/// `theirs` on a helper thread and `mine` here; the first failure of either.
fn both(
    theirs: impl FnOnce() -> Result<(), Failed> + Send,
    mine: impl FnOnce() -> Result<(), Failed>,
) -> Result<(), Failed> {
    std::thread::scope(|s| {
        let helper = s.spawn(theirs);
        let mine = mine();
        let theirs = helper
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        mine.and(theirs)
    })
}

/// The values split in two by bytes, whole values each ([`to_helper`]): the helper's and
/// the caller's, by index.
fn halves(values: &[(&[u8], u64)]) -> (Vec<usize>, Vec<usize>) {
    let theirs = to_helper(values.iter().map(|(bytes, _)| bytes.len()));
    (0..values.len()).partition(|&v| theirs[v])
}

/// The pieces of the values `which`: (value, bytes, remote address), at most
/// [`crate::reader::CMA_CHUNK`] bytes each, in order.
fn pieces_of<'a>(values: &[(&'a [u8], u64)], which: &[usize]) -> Vec<(usize, &'a [u8], u64)> {
    which
        .iter()
        .flat_map(|&v| {
            let (bytes, remote) = values[v];
            let chunks = bytes.chunks(crate::reader::CMA_CHUNK).enumerate();
            chunks.map(move |(i, b)| (v, b, remote + (i * crate::reader::CMA_CHUNK) as u64))
        })
        .collect()
}

fn span(bytes: &[u8], remote: u64) -> Span {
    Span {
        at: bytes.as_ptr() as usize,
        remote,
        len: bytes.len(),
    }
}

/// Writes the values `which` in calls, each call's pieces shown to `seen` just before.
fn write_values(
    pid: u32,
    values: &[(&[u8], u64)],
    which: &[usize],
    seen: &Seen<'_>,
    stop: &AtomicBool,
    deadline: Instant,
) -> Result<(), Failed> {
    let pieces = pieces_of(values, which);
    let spans: Vec<Span> = pieces.iter().map(|(_, b, r)| span(b, *r)).collect();
    let calls = calls(&spans, true, None);
    for call in &calls {
        for (v, bytes, _) in &pieces[call.clone()] {
            seen(*v, bytes);
        }
        write_calls(pid, &spans, std::slice::from_ref(call), stop, deadline)?;
    }
    Ok(())
}

/// Makes the system calls `calls` of `spans`, unless the other thread failed (`stop`:
/// it reports why) or the deadline passed; a failure sets `stop`.
fn write_calls(
    pid: u32,
    spans: &[Span],
    calls: &[Range<usize>],
    stop: &AtomicBool,
    deadline: Instant,
) -> Result<(), Failed> {
    for call in calls {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            stop.store(true, Ordering::Release);
            return Err(timeout());
        }
        write_call(pid, &spans[call.clone()]).map_err(|(_, e)| {
            stop.store(true, Ordering::Release);
            failed(e)
        })?;
    }
    Ok(())
}

/// Writes `spans` (each: bytes here at `at`, to `remote` in process `pid`) with one system
/// call; `Err((i, why))` when span `i` could not be written (those before it were).
fn write_call(pid: u32, spans: &[Span]) -> Result<(), (usize, CopyError)> {
    // SAFETY: each span describes bytes of a value the caller of `write_all` borrows for
    // the whole call; the kernel only reads them.
    unsafe { crate::local::copy_many_to(pid, &parts_of(spans)) }
}

#[cfg(test)]
mod tests {
    use super::write_all;

    /// Values written into this process's own memory (cross-memory attach to itself):
    /// every byte lands, and `seen` is shown each value's bytes once, in order, whether
    /// two threads write whole values, one large value's calls are shared, or one thread
    /// writes all.
    #[test]
    fn values_land_and_each_is_seen_whole_in_order() {
        use std::sync::Mutex;
        use std::time::{Duration, Instant};
        let pid = std::process::id();
        for sizes in [
            vec![9 << 20, 1, 0, 3 << 20, 64 << 10, 5 << 20],
            vec![20 << 20, 64],
            vec![64 << 10; 256],
            vec![4096; 3],
        ] {
            let src: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(v, &n)| (0..n).map(|j| (j * 31 + v * 7) as u8).collect())
                .collect();
            let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let values: Vec<(&[u8], u64)> = src
                .iter()
                .zip(&mut dst)
                .map(|(s, d)| (s.as_slice(), d.as_mut_ptr() as u64))
                .collect();
            let got: Vec<Mutex<Vec<u8>>> = sizes.iter().map(|_| Mutex::new(Vec::new())).collect();
            let seen = |v: usize, piece: &[u8]| got[v].lock().unwrap().extend_from_slice(piece);
            let deadline = Instant::now() + Duration::from_secs(30);
            let wrote = write_all(pid, &values, &seen, deadline);
            if let Err(f) = wrote {
                panic!("not written: {}", f.error);
            }
            drop(values);
            for (v, s) in src.iter().enumerate() {
                assert!(dst[v] == *s, "value {v} of {sizes:?} landed wrong");
                assert!(
                    *got[v].lock().unwrap() == *s,
                    "value {v} of {sizes:?} seen wrong"
                );
            }
        }
    }
}
