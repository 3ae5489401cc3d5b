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

/// `work` done on each of `jobs`, the results in the jobs' order: on two threads when
/// [`two_threads_for`] the jobs' `bytes` says so, each job going to whichever thread holds
/// fewer bytes so far (both do about half, whatever the sizes); else in turn here.
pub fn each_on_two<T: Send, R: Send>(
    jobs: Vec<T>,
    bytes: impl Fn(&T) -> u64,
    work: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let total: u64 = jobs.iter().map(&bytes).sum();
    if !two_threads_for(total, jobs.len()) {
        return jobs.into_iter().map(work).collect();
    }
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    let (mut held_mine, mut held_theirs) = (0, 0);
    for (i, job) in jobs.into_iter().enumerate() {
        let len = bytes(&job);
        if held_mine <= held_theirs {
            held_mine += len;
            mine.push((i, job));
        } else {
            held_theirs += len;
            theirs.push((i, job));
        }
    }
    let run = |part: Vec<(usize, T)>| -> Vec<(usize, R)> {
        part.into_iter().map(|(i, job)| (i, work(job))).collect()
    };
    let mut all = std::thread::scope(|s| {
        let helper = s.spawn(|| run(theirs));
        let mut all = run(mine);
        all.extend(
            helper
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        );
        all
    });
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}
