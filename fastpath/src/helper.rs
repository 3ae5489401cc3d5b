//! When a memory-bound job (a cross-memory copy, hashing a commit) is worth a second
//! thread: the bytes are many enough to repay starting one (tens of µs), and the machine
//! has a second core. The core count is read once: `available_parallelism` reads the
//! cgroup's CPU limit from `/proc` on every call, too dear for every batch.

use std::sync::OnceLock;

/// Bytes from which a job is split over two threads.
pub const TWO_THREADS_FROM: u64 = 8 << 20;

/// Whether a job over `bytes` in `parts` pieces is split over two threads.
pub fn two_threads_for(bytes: u64, parts: usize) -> bool {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    bytes >= TWO_THREADS_FROM && parts >= 2 && cores >= 2
}
