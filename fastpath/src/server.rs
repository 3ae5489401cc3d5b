//! The target side: an endpoint whose registered memory peers read one-sided, and the
//! progress thread that software providers need.

use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::buffer::ArenaBuffer;
use crate::fabric::queue::{Completion, Polled};
use crate::fabric::{
    plan, FabricConfig, FabricError, MemoryRegion, Node, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};

/// Counters of the progress thread, for metrics.
#[derive(Debug, Default)]
pub struct ProgressStats {
    /// Times the thread woke (a completion, a timeout or an empty poll after back-off).
    pub wakeups: AtomicU64,
    /// Error completions drained.
    pub errors: AtomicU64,
}

/// A fabric endpoint serving one-sided reads of registered arenas.
///
/// A progress thread drives the endpoint: blocking in `fi_cq_sread` where the completion
/// queue has a wait object (software providers such as `tcp;ofi_rxm`, which serve reads only
/// while someone drives them; idle CPU ≈ 0), polling with back-off where it has none (EFA,
/// whose NIC serves reads by itself).
pub struct FabricServer {
    node: Arc<Node>,
    address: Vec<u8>,
    keys: KeyGen,
    stop: Arc<AtomicBool>,
    progress: Option<JoinHandle<()>>,
    stats: Arc<ProgressStats>,
}

impl std::fmt::Debug for FabricServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricServer")
            .field("node", &self.node)
            .finish()
    }
}

/// Requested memory-region keys that never repeat within a run and cannot be predicted
/// from the ones a client has seen: the n-th key is a keyed pseudo-random permutation of
/// n (a 4-round Feistel network with SHA-256 as its round function and a random per-boot
/// secret, cycle-walked into the key space), cut to the provider's key size and to 53
/// bits so descriptors stay exact in JSON for every client language. Distinct counters
/// give distinct keys (re-registering with a key used before revives the old key on some
/// providers, so reuse is never safe), and keys from different boots are independent.
struct KeyGen {
    secret: [u8; 32],
    next: AtomicU64,
    bits: u32,
}

impl std::fmt::Debug for KeyGen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyGen")
            .field("bits", &self.bits)
            .finish_non_exhaustive()
    }
}

impl KeyGen {
    fn new(key_size: usize) -> Self {
        Self {
            secret: rand::random(),
            next: AtomicU64::new(0),
            bits: ((key_size.clamp(1, 8) * 8) as u32).min(53),
        }
    }

    fn next(&self) -> u64 {
        let domain = 1u64 << self.bits;
        // A provider with tiny keys (2 bytes) could exhaust them; then they wrap.
        let n = self.next.fetch_add(1, Ordering::Relaxed) % domain;
        // Cycle-walking: the Feistel network permutes a power of two at least as large
        // as the key space; applying it until the value falls inside keeps a bijection.
        let mut k = self.permute(n);
        while k >= domain {
            k = self.permute(k);
        }
        k
    }

    /// A keyed permutation of the integers below `2^(2·half)`.
    fn permute(&self, x: u64) -> u64 {
        let half = self.bits.div_ceil(2);
        let mask = (1u64 << half) - 1;
        let (mut l, mut r) = (x >> half, x & mask);
        for round in 0u8..4 {
            let mut h = Sha256::new();
            h.update(self.secret);
            h.update([round]);
            h.update(r.to_le_bytes());
            let f = u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"));
            (l, r) = (r, l ^ (f & mask));
        }
        (l << half) | r
    }
}

impl FabricServer {
    /// Opens an endpoint for `cfg` and starts its progress thread.
    pub fn start(cfg: &FabricConfig) -> Result<Self, FabricError> {
        let node = Arc::new(Node::open(&cfg.clone().serving())?);
        let address = node.address()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ProgressStats::default());
        let progress = {
            let (node, stop, stats) = (Arc::clone(&node), Arc::clone(&stop), Arc::clone(&stats));
            std::thread::Builder::new()
                .name("rasa-fabric-progress".into())
                .spawn(move || progress_loop(&node, &stop, &stats))
                .map_err(|e| FabricError::Call {
                    call: "spawn progress thread",
                    errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                    text: e.to_string(),
                })?
        };
        Ok(Self {
            keys: KeyGen::new(node.provided().key_size()),
            node,
            address,
            stop,
            progress: Some(progress),
            stats,
        })
    }

    /// The local stack (provider, address format, registration mode).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The endpoint's address, for clients.
    pub fn address(&self) -> &[u8] {
        &self.address
    }

    /// The TCP port peers connect to, for providers that take connections on one
    /// (`tcp;ofi_rxm`, `sockets`: address format `FI_SOCKADDR_IN`/`_IN6`); `None` for the
    /// others (EFA, `shm`). [`crate::silent::close_silent`] watches it.
    pub fn tcp_port(&self) -> Option<u16> {
        let format = self.node.provided().address_format();
        (format == "FI_SOCKADDR_IN" || format == "FI_SOCKADDR_IN6")
            .then(|| crate::silent::port_of_address(&self.address))
            .flatten()
    }

    /// Progress-thread counters.
    pub fn stats(&self) -> &ProgressStats {
        &self.stats
    }

    /// Registers `buffer` for remote reads under a fresh key.
    pub fn register(&self, buffer: Arc<ArenaBuffer>) -> Result<MemoryRegion, FabricError> {
        self.node
            .register(buffer, ACCESS_REMOTE_READ, self.keys.next())
    }

    /// Registers `buffer` for remote *writes* only under a fresh key: an upload region,
    /// which that key can never read. Closing the region revokes the key (on providers
    /// that check keys; `shm`'s cross-memory attach does not).
    pub fn register_writable(&self, buffer: Arc<ArenaBuffer>) -> Result<MemoryRegion, FabricError> {
        self.node
            .register(buffer, ACCESS_REMOTE_WRITE, self.keys.next())
    }

    /// Key rotation: registers the region's buffer again under a fresh key and then closes
    /// the old region, revoking its key. A peer still using the old key gets a protection
    /// error, never other bytes.
    pub fn rotate(&self, region: MemoryRegion) -> Result<MemoryRegion, FabricError> {
        let fresh = self.register(Arc::clone(region.buffer()))?;
        drop(region);
        Ok(fresh)
    }

    /// The address peers must use for `offset` within `region`.
    pub fn remote_addr(&self, region: &MemoryRegion, offset: usize) -> u64 {
        self.node.remote_addr(region, offset)
    }
}

impl Drop for FabricServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.node.wake_waiter();
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
    }
}

/// The pause after `idle_polls` empty polls of a queue without a wait object: spin a
/// thousand polls, then sleep 1 µs, doubling every 256 polls, never longer than `max`
/// ([`plan::max_idle_sleep`]).
pub fn idle_pause(idle_polls: u32, max: Duration) -> Option<Duration> {
    (idle_polls > 1000).then(|| {
        let doublings = ((idle_polls - 1000) / 256).min(20);
        Duration::from_micros(1 << doublings).min(max)
    })
}

fn progress_loop(node: &Node, stop: &AtomicBool, stats: &ProgressStats) {
    let mut entries = [Completion::default(); 16];
    let mut idle_polls = 0u32;
    let max_sleep = plan::max_idle_sleep(node.provided().provider());
    if !node.waitable() {
        // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread only, with a plain integer.
        // 1 µs of slack instead of the default 50 µs, so short pauses mean what they say.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
        }
    }
    while !stop.load(Ordering::Acquire) {
        // Asynchronous endpoint errors (on efa: a revoked key or a vanished reader during an
        // emulated read), which the provider would otherwise abort() on.
        if node.waitable() || idle_polls.is_multiple_of(1024) {
            for event in node.drain_events() {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(provider = node.provided().provider(), "{event}");
            }
        }
        let polled = if node.waitable() {
            node.wait_completions(&mut entries, 1000)
        } else {
            node.poll_completions(&mut entries)
        };
        match polled {
            Polled::ErrorPending => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                let _ = node.completion_error("progress");
                continue;
            }
            Polled::Completed(_) => idle_polls = 0,
            Polled::Empty if !node.waitable() => {
                // Polled queue with nothing to do: back off from spinning to short sleeps.
                idle_polls = idle_polls.saturating_add(1);
                match idle_pause(idle_polls, max_sleep) {
                    Some(pause) => std::thread::sleep(pause),
                    None => std::hint::spin_loop(),
                }
                continue;
            }
            Polled::Empty => {}
            // An unexpected error from the queue: don't spin on it.
            Polled::Failed(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        stats.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_back_off_never_sleeps_more_than_a_few_microseconds() {
        let efa = plan::max_idle_sleep("efa");
        assert_eq!(efa, Duration::from_micros(5));
        assert_eq!(idle_pause(10, efa), None);
        assert_eq!(idle_pause(1_100, efa), Some(Duration::from_micros(1)));
        assert_eq!(idle_pause(1_300, efa), Some(Duration::from_micros(2)));
        for n in [10_000, 1_000_000, u32::MAX] {
            assert_eq!(idle_pause(n, efa), Some(efa));
        }
    }

    #[test]
    fn an_idle_shm_gateway_backs_off_to_a_millisecond_within_a_second() {
        let shm = plan::max_idle_sleep("shm");
        assert_eq!(shm, Duration::from_millis(1));
        let mut slept = Duration::ZERO;
        let mut n = 0;
        while idle_pause(n, shm) != Some(shm) {
            slept += idle_pause(n, shm).unwrap_or_default();
            n += 1;
        }
        assert!(
            slept < Duration::from_secs(1),
            "{slept:?} before the longest sleep"
        );
        assert_eq!(idle_pause(u32::MAX, shm), Some(shm));
    }

    #[test]
    fn keys_fit_the_key_size_and_never_repeat_in_a_run() {
        for size in [2usize, 4, 8] {
            let k = KeyGen::new(size);
            let mut seen = std::collections::HashSet::new();
            for _ in 0..10_000 {
                let key = k.next();
                assert!(key < 1u64 << (size * 8).min(53));
                assert!(seen.insert(key), "key {key:#x} repeated");
            }
        }
    }

    #[test]
    fn a_tiny_key_space_is_used_whole_before_any_key_repeats() {
        let k = KeyGen::new(2);
        let all: std::collections::HashSet<u64> = (0..1u64 << 16).map(|_| k.next()).collect();
        assert_eq!(all.len(), 1 << 16);
    }

    /// Seeing keys does not tell the next one: consecutive keys differ in about half
    /// their bits (a counter, even XOR-ed with a secret, differs in one or two).
    #[test]
    fn consecutive_keys_look_unrelated() {
        let k = KeyGen::new(8);
        let keys: Vec<u64> = (0..2000).map(|_| k.next()).collect();
        let flips: u32 = keys.windows(2).map(|w| (w[0] ^ w[1]).count_ones()).sum();
        let mean = f64::from(flips) / (keys.len() - 1) as f64;
        assert!((20.0..33.0).contains(&mean), "mean bit flips {mean} of 53");
        let other = KeyGen::new(8);
        let same = (0..2000).filter(|_| other.next() == k.next()).count();
        assert_eq!(same, 0, "two boots gave the same keys");
    }
}
