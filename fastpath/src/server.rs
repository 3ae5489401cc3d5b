//! The target side: an endpoint whose registered memory peers read one-sided, and the
//! progress thread that software providers need.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::buffer::ArenaBuffer;
use crate::fabric::{FabricConfig, FabricError, MemoryRegion, Node};
use crate::sys;

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

/// Requested memory-region keys that never repeat: a random per-boot incarnation in the
/// high half and a counter (from a random start) in the low half, cut to the provider's key
/// size and to 53 bits, so descriptors stay exact in JSON for every client language.
/// (Re-registering with a key used before revives the old key on some providers, so reuse
/// is never safe.)
#[derive(Debug)]
struct KeyGen {
    incarnation: u64,
    next: AtomicU64,
    mask: u64,
}

impl KeyGen {
    fn new(key_size: usize) -> Self {
        let bits = ((key_size.clamp(1, 8) * 8) as u32).min(53);
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let half = bits / 2;
        Self {
            incarnation: (rand::random::<u64>() << half) & mask,
            next: AtomicU64::new(rand::random::<u64>() & ((1u64 << half) - 1)),
            mask,
        }
    }

    fn next(&self) -> u64 {
        (self.incarnation ^ self.next.fetch_add(1, Ordering::Relaxed)) & self.mask
    }
}

impl FabricServer {
    /// Opens an endpoint for `cfg` and starts its progress thread.
    pub fn start(cfg: &FabricConfig) -> Result<Self, FabricError> {
        let node = Arc::new(Node::open(cfg)?);
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
            keys: KeyGen::new(node.key_size()),
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

    /// Progress-thread counters.
    pub fn stats(&self) -> &ProgressStats {
        &self.stats
    }

    /// Registers `buffer` for remote reads under a fresh key.
    pub fn register(&self, buffer: Arc<ArenaBuffer>) -> Result<MemoryRegion, FabricError> {
        self.node
            .register(buffer, sys::FI_REMOTE_READ as u64, self.keys.next())
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
        // SAFETY: the queue is open (the node is alive); signalling wakes fi_cq_sread.
        unsafe {
            sys::rasa_fi_cq_signal(self.node.cq_raw());
        }
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
    }
}

fn progress_loop(node: &Node, stop: &AtomicBool, stats: &ProgressStats) {
    let mut entries = [sys::fi_cq_entry::default(); 16];
    let mut idle_polls = 0u32;
    while !stop.load(Ordering::Acquire) {
        let ret = if node.waitable() {
            // SAFETY: entries has room for 16 context-format entries; the queue is open.
            unsafe {
                sys::rasa_fi_cq_sread(
                    node.cq_raw(),
                    entries.as_mut_ptr().cast(),
                    entries.len(),
                    std::ptr::null(),
                    1000,
                )
            }
        } else {
            // SAFETY: as above, non-blocking.
            unsafe {
                sys::rasa_fi_cq_read(node.cq_raw(), entries.as_mut_ptr().cast(), entries.len())
            }
        };
        if ret == -(sys::FI_EAVAIL as isize) {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            let _ = node.cq_error("progress");
            continue;
        }
        if ret > 0 {
            idle_polls = 0;
        } else if !node.waitable() {
            // Polled queue with nothing to do: back off from spinning to short sleeps.
            idle_polls = idle_polls.saturating_add(1);
            if idle_polls > 1000 {
                std::thread::sleep(Duration::from_micros(50.min(u64::from(idle_polls / 1000))));
            } else {
                std::hint::spin_loop();
            }
            continue;
        } else if ret < 0
            && ret != -(sys::FI_EAGAIN as isize)
            && ret != -(sys::FI_ECANCELED as isize)
        {
            // An unexpected error from sread: don't spin on it.
            std::thread::sleep(Duration::from_millis(1));
        }
        stats.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
