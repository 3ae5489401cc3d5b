//! Single-flight: one origin fetch per key, however many requests wait for it.
//!
//! The first request for a key starts the fetch on a task of its own; later ones join it
//! and get its result or its error. A fetch holds a [`Permit`] for its key: when the
//! fetch ends (or its task unwinds) the permit's drop lets go of the key (a [`Keyed`]
//! entry, freed with its last holder), so the next request sees the store (or the
//! remembered "not found") instead — never a flight that will not land.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::{FutureExt, Shared};
use tokio::sync::watch;

use super::filling::Filling;
use super::{BoxFuture, FetchError};
use crate::keyed::{Entry, Keyed};
use crate::store::StoredVersion;

/// A fetch's result, shared by every request that joined it.
pub type Flight = Shared<BoxFuture<'static, Result<Option<Arc<StoredVersion>>, FetchError>>>;

/// A fetch in flight, and the object it is filling once it has started storing it.
pub type InFlight = (Flight, watch::Receiver<Option<Arc<Filling>>>);

/// The fetches running now, by key.
#[derive(Debug, Default)]
pub struct Flights {
    running: Keyed<Mutex<Option<InFlight>>>,
}

/// A running fetch's hold on its key: where it announces the object it fills, and whose
/// drop (with the fetch's end) frees the key.
#[derive(Debug)]
pub struct Permit {
    _key: Entry<Mutex<Option<InFlight>>>,
    filling: watch::Sender<Option<Arc<Filling>>>,
}

impl Permit {
    /// Requests waiting for this fetch may stream `f` from here on.
    pub fn filling(&self, f: Arc<Filling>) {
        self.filling.send_replace(Some(f));
    }

    /// Whether the fill announced an object long enough to be streamed to the requests
    /// waiting for it (`at_least` bytes): then they got its first bytes already.
    pub fn streamed(&self, at_least: u64) -> bool {
        self.filling
            .borrow()
            .as_ref()
            .is_some_and(|f| f.length >= at_least)
    }
}

impl Flights {
    /// Joins the fetch of `key` in flight, or starts `fetch` (given the key's permit) on a
    /// task of its own, so that it completes — and the version is stored — even when every
    /// request that wanted it went away.
    pub fn join_or_start<F>(&self, key: &str, fetch: F) -> InFlight
    where
        F: FnOnce(Permit) -> BoxFuture<'static, Result<Option<Arc<StoredVersion>>, FetchError>>,
    {
        let entry = self.running.enter(key);
        let mut slot = entry.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = slot.as_ref() {
            crate::catalog::SINGLEFLIGHT_JOINS.counter().increment(1);
            return f.clone();
        }
        let (tx, rx) = watch::channel(None);
        let permit = Permit {
            _key: entry.clone(),
            filling: tx,
        };
        // A fetch that panics ends like one that failed: its waiters get an error and its
        // permit is dropped with it (a poisoned shared future would hold the key forever).
        let fetch = std::panic::AssertUnwindSafe(fetch(permit)).catch_unwind();
        let fetch: BoxFuture<'static, _> = Box::pin(fetch.map(|done| {
            done.unwrap_or_else(|_| {
                Err(FetchError::Store(
                    "the origin fetch failed unexpectedly (see the gateway's log)".into(),
                ))
            })
        }));
        let flight = fetch.shared();
        *slot = Some((flight.clone(), rx.clone()));
        drop(slot);
        tokio::spawn(flight.clone());
        (flight, rx)
    }

    /// The fill of `key` under way, once it has started storing the object.
    pub fn filling(&self, key: &str) -> Option<Arc<Filling>> {
        let slot = self.running.peek(key)?;
        let slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_ref().and_then(|(_, rx)| rx.borrow().clone())
    }

    /// Fetches running now.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no fetch is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_for_one_key_share_one_fetch_and_the_key_is_free_after() {
        let flights = Arc::new(Flights::default());
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let start = |permit: Permit| -> BoxFuture<'static, _> {
            let started = Arc::clone(&started);
            Box::pin(async move {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = wait.await;
                drop(permit);
                Ok(None)
            })
        };
        let (first, _) = flights.join_or_start("k", start);
        let (second, _) = flights.join_or_start("k", |_| unreachable!("joined, not started"));
        assert_eq!(flights.len(), 1);
        go.send(()).unwrap();
        assert!(first.await.unwrap().is_none());
        assert!(second.await.unwrap().is_none());
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(flights.is_empty(), "the permit's drop ends the flight");
    }

    #[tokio::test]
    async fn a_fetch_that_panics_fails_its_waiters_and_frees_its_key() {
        let flights = Arc::new(Flights::default());
        let (flight, _) = flights.join_or_start("k", |permit| {
            Box::pin(async move {
                let _permit = permit;
                panic!("the fetch failed hard");
            })
        });
        let failed = flight.await.unwrap_err();
        assert!(failed.to_string().contains("unexpectedly"), "{failed}");
        assert!(
            flights.is_empty(),
            "no flight stays behind that will not land"
        );
    }
}
