//! The end of an arena's life: key refresh while it is live, and reclamation (revoke its
//! key, wait for local readers, reset and register it again, or release it). Where
//! **the lease invariant** is enforced: see the module documentation of [`super`].

use crate::catalog;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rasa_fastpath::buffer::ArenaBuffer;

use super::{Arena, Arenas};

impl Arenas {
    /// Refreshes the key of every arena whose key is older than `lifetime` (new descriptors
    /// get the new key), and closes superseded keys whose leases have ended. Returns
    /// (keys refreshed, old keys closed).
    pub fn refresh_keys(&self, now: SystemTime, lifetime: Duration) -> (usize, usize) {
        let Some(fabric) = &self.fabric else {
            return (0, 0);
        };
        let (current, all): (Vec<Arc<Arena>>, Vec<Arc<Arena>>) = {
            let t = self.table();
            let current = t.open.iter().chain(&t.sealed).cloned().collect();
            let all = t
                .open
                .iter()
                .chain(&t.sealed)
                .chain(&t.draining)
                .cloned()
                .collect();
            (current, all)
        };
        let mut refreshed = 0;
        for a in current
            .iter()
            .filter(|a| a.key_age() >= lifetime.mul_f64(a.key_jitter))
        {
            match a.refresh_key(fabric, self.grace) {
                Ok(true) => refreshed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(arena = a.id, error = %e, "key refresh failed; the current key stays")
                }
            }
        }
        let closed: usize = all.iter().map(|a| a.close_retired(now)).sum();
        if refreshed > 0 {
            catalog::KEYS_REFRESHED
                .counter()
                .increment(refreshed as u64);
        }
        if closed > 0 {
            catalog::KEYS_RETIRED.counter().increment(closed as u64);
        }
        (refreshed, closed)
    }

    /// Recycles draining arenas whose leases (plus grace) have ended: revokes their keys,
    /// waits for local readers, resets and re-registers them under fresh keys (dedicated
    /// arenas are released instead). Returns how many became reusable.
    ///
    /// Revoking and registering (tens to hundreds of milliseconds per arena on EFA) happen
    /// outside the table lock, so PUTs and descriptor requests do not wait for them.
    pub fn reclaim(&self, now: SystemTime) -> usize {
        let ready: Vec<Arc<Arena>> = {
            let mut t = self.table();
            let (ready, waiting) = std::mem::take(&mut t.draining)
                .into_iter()
                .partition(|a| now >= a.lease_deadline() + self.grace);
            t.draining = waiting;
            self.reclaiming.fetch_add(ready.len(), Ordering::AcqRel);
            ready
        };
        let taken = ready.len();
        let mut waiting = Vec::new();
        let mut fresh = Vec::new();
        let mut spare = Vec::new();
        let mut released = 0u64;
        for arena in ready {
            if arena.revoke() {
                self.stats.keys_revoked.fetch_add(1, Ordering::Relaxed);
                catalog::KEYS_REVOKED.counter().increment(1);
            }
            // Local holders (an index entry on its way out, a request that looked the value
            // up) keep the arena; try again next time.
            let arena = match Arc::try_unwrap(arena) {
                Ok(a) => a,
                Err(shared) => {
                    waiting.push(shared);
                    continue;
                }
            };
            let Arena {
                id,
                mut buffer,
                dedicated,
                lease_deadline_ms,
                charged,
                ..
            } = arena;
            if !ArenaBuffer::reset(&mut buffer) {
                // An HTTP body still reads it: keep waiting, unregistered.
                let a = Arena::new(id, buffer, dedicated, None);
                a.lease_deadline_ms
                    .store(lease_deadline_ms.into_inner(), Ordering::Release);
                a.charged.store(charged.into_inner(), Ordering::Release);
                waiting.push(Arc::new(a));
                continue;
            }
            if dedicated {
                let charged = charged.into_inner();
                if charged == buffer.capacity() as u64 {
                    // Kept, still allocated, for the next upload region.
                    tracing::debug!(arena = id, "dedicated arena kept as spare memory");
                    spare.push(buffer);
                } else {
                    released += charged;
                    self.stats.released.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(arena = id, "dedicated arena released");
                }
                continue;
            }
            match super::register(self.fabric.as_ref(), &buffer) {
                Ok(region) => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    fresh.push(Arc::new(Arena::new(id, buffer, false, region)));
                    self.stats.recycled.fetch_add(1, Ordering::Relaxed);
                    catalog::ARENAS_RECYCLED.counter().increment(1);
                }
                Err(_) => released += buffer.capacity() as u64,
            }
        }
        let freed = taken - waiting.len();
        let mut t = self.table();
        t.allocated -= released;
        t.free.extend(fresh);
        for buffer in spare {
            t.put_spare(buffer);
        }
        t.draining.extend(waiting);
        self.reclaiming.fetch_sub(taken, Ordering::AcqRel);
        freed
    }
}
