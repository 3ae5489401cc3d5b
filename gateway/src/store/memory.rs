//! The memory policy: making room when the budget is full (drain dead arenas, compact a
//! sparse one, evict the least recently used), driving reclamation, and the gauges that
//! describe memory. The lease invariant itself is enforced in [`super::arena`].

use crate::catalog;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::arena::{self, Arena};
use super::{Store, StoredVersion};

/// The store's memory, as the policy above sees it: [`Store::memory`]. Field access
/// reaches the store it describes.
#[derive(Clone, Copy)]
pub struct Memory<'a>(&'a Store);

impl std::ops::Deref for Memory<'_> {
    type Target = Store;
    fn deref(&self) -> &Store {
        self.0
    }
}

impl Store {
    /// Its memory: making room, reclamation, and what it holds.
    pub fn memory(&self) -> Memory<'_> {
        Memory(self)
    }

    /// Runs [`Memory::reclaim`] every `interval` until the store is dropped by everyone else,
    /// on tokio's blocking pool: revoking and registering memory (slow on EFA) must not
    /// hold up a worker that serves requests.
    pub async fn run_reclaimer(self: Arc<Self>, interval: Duration) {
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            store.one_sided().expire(std::time::Instant::now());
            let warm = Arc::clone(&store);
            if let Err(e) = tokio::task::spawn_blocking(move || store.memory().reclaim()).await {
                tracing::error!(error = %e, "a reclaim pass failed");
            }
            // Faulting memory in takes long (every page): on a thread of its own at the
            // lowest priority, so reclamation keeps its pace and readers and writers keep
            // their cores; one warm-up at a time.
            if arena::Warm::of(&warm.arenas).wanted() {
                let spawned =
                    std::thread::Builder::new()
                        .name("rasa-warm".into())
                        .spawn(move || {
                            rasa_fastpath::buffer::lower_priority();
                            arena::Warm::of(&warm.arenas).fill()
                        });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no thread to fault warm memory in");
                }
            }
        }
    }
}

impl<'a> Memory<'a> {
    /// When the last lease handed out so far ends (the epoch when none was).
    pub fn leases_end(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.latest_lease_ms.load(Ordering::Relaxed))
    }

    /// Bytes of arena memory allocated now.
    pub fn allocated(&self) -> u64 {
        self.arenas.allocated()
    }

    /// Bytes of the current versions it holds.
    pub fn live_bytes(&self) -> u64 {
        self.arenas.observe(SystemTime::now()).1
    }

    /// Bytes of arena memory the store may allocate now.
    pub fn budget(&self) -> u64 {
        self.arenas.budget()
    }

    /// Changes the store's budget (a namespace's quota): reclamation gives back what is
    /// over it, evicting the least recently used values first.
    pub fn set_budget(&self, budget: u64) {
        self.arenas.set_budget(budget);
    }

    /// Makes unreachable what no longer needs to be reachable so its arenas can drain:
    /// sealed arenas without current versions first; if none is draining after that, the
    /// sparsest sealed arena is compacted (its current versions copied to the open arena,
    /// same version ids) when at most a quarter full, else the least recently used sealed
    /// arena is evicted whole. Eviction works on arenas, not single values, because memory
    /// comes back one arena (one memory region, one key) at a time: evicting scattered cold
    /// values would free nothing until every neighbour died too.
    pub fn make_room(&self) {
        self.drain_dead(SystemTime::now());
        if self.arenas.draining() > 0 {
            return;
        }
        let Some((arena, compact)) = self.arenas.take_victim() else {
            return;
        };
        if compact {
            self.compact(&arena);
        }
        let evicted = self.purge(&arena);
        if evicted > 0 {
            tracing::info!(
                arena = arena.id,
                evicted,
                "evicted the least recently used arena"
            );
        }
        self.arenas.drain(vec![arena]);
    }

    /// One reclamation pass: drains dead arenas and recycles those whose leases and grace
    /// have passed. Returns how many arenas became reusable. The gateway runs this
    /// periodically ([`Store::run_reclaimer`]); PUTs waiting for room run it too.
    pub fn reclaim(&self) -> usize {
        self.drain_dead(SystemTime::now());
        // A budget made smaller (a namespace's quota, or the default namespace's share):
        // give back what is recycled, then make room as a full budget would.
        if !self.arenas.release_over_budget() {
            self.make_room();
        }
        if let Some(lifetime) = self.config.key_lifetime {
            self.arenas.refresh_keys(SystemTime::now(), lifetime);
        }
        let freed = self.arenas.reclaim(SystemTime::now());
        if freed > 0 {
            self.room.notify_waiters();
        }
        freed
    }

    /// Publishes gauges that are cheaper to compute when scraped than to keep current:
    /// arenas by state, memory allocated and budget, bytes of current versions, arenas
    /// under a live lease, and the fast path's progress-thread activity.
    pub fn observe(&self) {
        let c = self.arenas.counts();
        for (state, n) in [
            ("open", c.open),
            ("sealed", c.sealed),
            ("draining", c.draining),
            ("free", c.free),
        ] {
            catalog::ARENAS.gauge_by(&[("state", state)]).set(n as f64);
        }
        catalog::ARENA_BYTES_ALLOCATED
            .gauge()
            .set(c.allocated as f64);
        catalog::ARENA_BYTES_WARM.gauge().set(c.warm as f64);
        catalog::MEMORY_BUDGET_BYTES
            .gauge()
            .set(self.arenas.budget() as f64);
        let (leased, live) = self.arenas.observe(SystemTime::now());
        catalog::ARENAS_LEASED.gauge().set(leased as f64);
        catalog::LIVE_BYTES.gauge().set(live as f64);
        if let Some(disk) = self.disk.as_ref() {
            disk.observe();
        }
        for f in self.fabric.iter().flat_map(|f| f.servers()) {
            let (st, provider) = (f.stats(), f.node().provided().provider().to_owned());
            catalog::FABRIC_PROGRESS_WAKEUPS
                .counter_by(&[("provider", provider.clone())])
                .absolute(st.wakeups.load(Ordering::Relaxed));
            catalog::FABRIC_PROGRESS_ERRORS
                .counter_by(&[("provider", provider)])
                .absolute(st.errors.load(Ordering::Relaxed));
        }
    }

    /// Arena life-cycle counters.
    pub fn arena_stats(&self) -> &'a arena::ArenaStats {
        &self.0.arenas.stats
    }

    /// Arena counts by state.
    pub fn arena_counts(&self) -> arena::ArenaCounts {
        self.arenas.counts()
    }

    /// Drains the arenas [`arena::Arenas::take_dead`] gives at `now`: their older versions
    /// dropped from the index, the arenas left to wait for local readers.
    pub(super) fn drain_dead(&self, now: SystemTime) {
        let dead = self.arenas.take_dead(now);
        if dead.is_empty() {
            return;
        }
        for a in &dead {
            self.purge(a);
        }
        self.arenas.drain(dead);
    }

    /// Makes every version in `arena` unreachable: retained older versions are dropped, and
    /// keys whose current version lives there are evicted. Returns the evicted keys' count.
    fn purge(&self, arena: &Arc<Arena>) -> u64 {
        let mut evicted = 0;
        // A member that is gone was dropped by everyone (the index included): nothing to do.
        for v in arena
            .take_members()
            .iter()
            .filter_map(std::sync::Weak::upgrade)
        {
            let (key, ver) = (v.key_bytes(), v.version());
            let mut index = self.index.write(key);
            match index.current(key) {
                Some(c) if c.version() == ver && Arc::ptr_eq(&c.arena, arena) => {
                    index.remove(key);
                    // A replica is another member's version: never this one's on disk.
                    let replica = v.origin.tied() == super::REPLICA_TIE;
                    if let Some(disk) = self.disk.as_ref().filter(|_| !replica) {
                        disk.spill(&v);
                    }
                    arena.sub_live(v.frame.len() as u64);
                    evicted += 1;
                }
                Some(_) => index.drop_older(key, ver),
                None => {}
            }
        }
        if evicted > 0 {
            self.arenas
                .stats
                .evicted
                .fetch_add(evicted, Ordering::Relaxed);
            catalog::EVICTIONS.counter().increment(evicted);
        }
        evicted
    }

    /// Copies the current versions living in `arena` to the open arena (same version ids,
    /// same frames) and moves their keys there, as far as room allows.
    fn compact(&self, arena: &Arc<Arena>) {
        let members = arena.take_members();
        let mut kept = Vec::new();
        let mut moved = 0u64;
        for member in members {
            let Some(old) = member.upgrade() else {
                continue;
            };
            let mut index = self.index.write(old.key_bytes());
            let current = index
                .current(old.key_bytes())
                .is_some_and(|c| c.version() == old.version() && Arc::ptr_eq(&c.arena, arena));
            if !current {
                kept.push(member);
                continue;
            }
            let Ok((to, mut slot)) = self.arenas.reserve_upload(old.frame.len(), true, false)
            else {
                kept.push(member);
                continue;
            };
            slot.as_mut_slice().copy_from_slice(old.frame.as_slice());
            let copy = Arc::new(StoredVersion {
                frame: slot.freeze(),
                arena: Arc::clone(&to),
                origin: old.origin.duplicate(true),
            });
            to.add_live(&copy, copy.frame.len() as u64);
            to.finish_pending();
            arena.sub_live(old.frame.len() as u64);
            index.move_current(copy);
            moved += 1;
        }
        // Whatever could not move stays a member, to be evicted by the purge that follows.
        arena.restore_members(kept);
        if moved > 0 {
            self.arenas
                .stats
                .compacted
                .fetch_add(moved, Ordering::Relaxed);
            catalog::COMPACTED.counter().increment(moved);
            tracing::info!(arena = arena.id, moved, "compacted a sparse arena");
        }
    }
}

/// Runs `f` (which may register memory) without blocking the other tasks of this tokio
/// worker: on a multi-threaded runtime the worker hands its tasks to others first.
pub(super) fn off_worker<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
