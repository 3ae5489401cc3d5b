//! Single-flight: one origin fetch per key, however many requests wait for it.
//!
//! The first request for a key starts the fetch on a task of its own; later ones join it
//! and get its result or its error. A fetch holds a [`Permit`] for its key: when the
//! fetch ends (or its task unwinds) the permit's drop lets go of the key (a [`Keyed`]
//! entry, freed with its last holder), so the next request sees the store (or the
//! remembered "not found") instead — never a flight that will not land.
//!
//! A request that must not be answered with what the origin said before it arrived (a
//! member serving a key it does not own: the owner may have acknowledged a write or a
//! delete since, issue 65) joins only a fetch not yet sent when it arrived; when the one
//! running was sent earlier, it waits for a fetch chained after it, which every request
//! arriving meanwhile joins (two fetches of a key at most: one running, one waiting).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

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

/// The latest fetch of a key, and when it was sent to the origin (unset while it waits
/// for the one before it, or for its task to start).
#[derive(Debug)]
struct Latest {
    flight: InFlight,
    sent: Arc<OnceLock<Instant>>,
    /// Superseded by a write or delete of the key acknowledged here ([`Flights::bar`]):
    /// no request joins it, nor streams what it fills, any more.
    barred: bool,
}

/// The fetches running now, by key.
#[derive(Debug, Default)]
pub struct Flights {
    running: Keyed<Mutex<Option<Latest>>>,
}

/// A running fetch's hold on its key: where it announces the object it fills, and whose
/// drop (with the fetch's end) frees the key.
#[derive(Debug)]
pub struct Permit {
    _key: Entry<Mutex<Option<Latest>>>,
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
    /// request that wanted it went away. With `arrived` (when the request came), a fetch
    /// sent to the origin before then is not joined: `fetch` is chained after it.
    pub fn join_or_start<F>(&self, key: &str, arrived: Option<Instant>, fetch: F) -> InFlight
    where
        F: FnOnce(Permit) -> BoxFuture<'static, Result<Option<Arc<StoredVersion>>, FetchError>>,
    {
        let entry = self.running.enter(key);
        let mut slot = entry.lock().unwrap_or_else(PoisonError::into_inner);
        let before = match slot.as_ref() {
            Some(latest) => {
                let sent = latest.sent.get().copied();
                let early = arrived
                    .zip(sent)
                    .is_some_and(|(arrived, sent)| sent < arrived);
                if !latest.barred && !early {
                    tracing::debug!(key, "joined the origin fetch in flight");
                    crate::catalog::SINGLEFLIGHT_JOINS.counter().increment(1);
                    return latest.flight.clone();
                }
                Some(latest.flight.0.clone())
            }
            None => None,
        };
        let (tx, rx) = watch::channel(None);
        let permit = Permit {
            _key: entry.clone(),
            filling: tx,
        };
        let sent = Arc::new(OnceLock::new());
        let fetch = fetch(permit);
        let when = Arc::clone(&sent);
        let fetch = async move {
            if let Some(before) = before {
                let _ = before.await; // its answer is not ours: it was asked too early
            }
            let _ = when.set(Instant::now());
            fetch.await
        };
        // A fetch that panics ends like one that failed: its waiters get an error and its
        // permit is dropped with it (a poisoned shared future would hold the key forever).
        let fetch = std::panic::AssertUnwindSafe(fetch).catch_unwind();
        let fetch: BoxFuture<'static, _> = Box::pin(fetch.map(|done| {
            done.unwrap_or_else(|_| {
                Err(FetchError::Store(
                    "the origin fetch failed unexpectedly (see the gateway's log)".into(),
                ))
            })
        }));
        let flight = fetch.shared();
        *slot = Some(Latest {
            flight: (flight.clone(), rx.clone()),
            sent,
            barred: false,
        });
        drop(slot);
        tokio::spawn(flight.clone());
        (flight, rx)
    }

    /// The fill of `key` under way, once it has started storing the object (not one a
    /// write or delete has barred).
    pub fn filling(&self, key: &str) -> Option<Arc<Filling>> {
        let slot = self.running.peek(key)?;
        let slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_ref()
            .filter(|l| !l.barred)
            .and_then(|l| l.flight.1.borrow().clone())
    }

    /// Bars the fetch of `key` in flight, if any, from requests arriving from now on: a
    /// write or delete of the key is about to be acknowledged, and what that fetch got
    /// from the origin may be older (its own store is refused by the fill ticket; this
    /// keeps the requests that would join it from being answered with it). They start a
    /// fetch chained after it instead.
    pub fn bar(&self, key: &str) {
        if let Some(slot) = self.running.peek(key) {
            let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(latest) = slot.as_mut() {
                latest.barred = true;
            }
        }
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
        let (first, _) = flights.join_or_start("k", None, start);
        let (second, _) = flights.join_or_start("k", None, |_| unreachable!("joined, not started"));
        assert_eq!(flights.len(), 1);
        go.send(()).unwrap();
        assert!(first.await.unwrap().is_none());
        assert!(second.await.unwrap().is_none());
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(flights.is_empty(), "the permit's drop ends the flight");
    }

    /// A fetch for the test: counts when it is sent, answers when `go` says.
    fn held(
        sent: &Arc<std::sync::atomic::AtomicUsize>,
        go: tokio::sync::oneshot::Receiver<()>,
    ) -> impl FnOnce(Permit) -> BoxFuture<'static, Result<Option<Arc<StoredVersion>>, FetchError>>
    {
        let sent = Arc::clone(sent);
        move |permit| {
            Box::pin(async move {
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = go.await;
                drop(permit);
                Ok(None)
            })
        }
    }

    /// Issue 65 (`cold_delete`): a request arriving after a delete was acknowledged was
    /// answered by a fill that began before it. Once barred, a fetch is joined by no one,
    /// and its fill is streamed to no one; the next request starts a fetch of its own.
    #[tokio::test]
    async fn a_barred_fetch_is_joined_by_no_later_request() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let flights = Arc::new(Flights::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let (go_first, first_waits) = tokio::sync::oneshot::channel::<()>();
        let (first, _) = flights.join_or_start("k", None, held(&sent, first_waits));
        let (_, joined) = flights.join_or_start("k", None, |_| unreachable!("joined"));
        drop(joined);
        flights.bar("k");
        assert!(flights.filling("k").is_none());
        let (go_second, second_waits) = tokio::sync::oneshot::channel::<()>();
        let (second, _) = flights.join_or_start("k", None, held(&sent, second_waits));
        go_first.send(()).unwrap();
        first.await.unwrap();
        go_second.send(()).unwrap();
        second.await.unwrap();
        assert_eq!(
            sent.load(SeqCst),
            2,
            "a fetch of its own, after the barred one"
        );
        flights.bar("nothing in flight"); // a no-op
    }

    #[tokio::test]
    async fn a_request_never_joins_a_fetch_sent_before_it_arrived() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let flights = Arc::new(Flights::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let (go_first, first_waits) = tokio::sync::oneshot::channel::<()>();
        let (first, _) = flights.join_or_start("k", None, held(&sent, first_waits));
        while sent.load(SeqCst) == 0 {
            tokio::task::yield_now().await; // until the first fetch is sent
        }
        // Arrived after the first fetch was sent: a second fetch, chained after it, which
        // a request arriving while it waits joins.
        let (go_second, second_waits) = tokio::sync::oneshot::channel::<()>();
        let (second, _) =
            flights.join_or_start("k", Some(Instant::now()), held(&sent, second_waits));
        let (third, _) = flights.join_or_start("k", Some(Instant::now()), |_| {
            unreachable!("joined the chained fetch, not sent yet")
        });
        // Without `arrived` (no such constraint) a request joins the latest fetch.
        let (fourth, _) = flights.join_or_start("k", None, |_| unreachable!("joined"));
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            sent.load(SeqCst),
            1,
            "the chained fetch waits for the first to end"
        );
        go_first.send(()).unwrap();
        assert!(first.await.unwrap().is_none());
        let chained = async {
            while sent.load(SeqCst) == 1 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), chained)
            .await
            .expect("a second fetch, sent once the first had ended");
        assert!(!flights.is_empty(), "the chained fetch holds the key");
        go_second.send(()).unwrap();
        for f in [second, third, fourth] {
            assert!(f.await.unwrap().is_none());
        }
        assert_eq!(sent.load(SeqCst), 2);
        assert!(flights.is_empty());
    }

    #[tokio::test]
    async fn a_fetch_that_panics_fails_its_waiters_and_frees_its_key() {
        let flights = Arc::new(Flights::default());
        let (flight, _) = flights.join_or_start("k", None, |permit| {
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
