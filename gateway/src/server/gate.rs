//! How many connections a listener holds open (`--max-connections`), and what a
//! connection beyond that bound gets.
//!
//! Up to the bound, connections are served normally. At the bound, a new connection takes
//! the place of the oldest one that has not sent its first byte yet (a silent connection
//! is worth the least), so a flood of silent sockets cannot lock clients out. When every
//! open connection is talking, a small reserve ([`RESERVE`]) is still accepted but only for
//! health and admin routes (each serves one request under a short first-byte timeout), so
//! `/healthz`, `/readyz` and `/metrics` answer while the gateway is full; beyond the
//! reserve a new connection is closed as soon as it is accepted, which frees its
//! descriptor at once instead of leaving it in the kernel's backlog. Reaching the bound is logged once per
//! episode and counted (`rasa_connections_refused_total{listener}`); the open count is the
//! gauge `rasa_connections_open{listener}`.

use crate::catalog;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// Connections accepted past `--max-connections` for health and admin routes only.
pub const RESERVE: usize = 32;

/// File descriptors kept aside for everything but client connections (arenas' files,
/// fabric endpoints and their peers, the origin's and etcd's connections, logs).
const FDS_KEPT: u64 = 1024;

/// The default `--max-connections` for each of `listeners` listeners under an open-file
/// limit of `fd_limit`: three quarters of what is left after [`FDS_KEPT`], shared between
/// the listeners (the last quarter is for fabric connections), at least 64.
pub fn default_max_connections(fd_limit: u64, listeners: usize) -> usize {
    let usable = fd_limit.saturating_sub(FDS_KEPT) * 3 / 4;
    let each = usable / listeners.max(1) as u64;
    usize::try_from(each).unwrap_or(usize::MAX).max(64)
}

/// Raises the soft open-file limit to the hard one (as Go and nginx do: the soft default of
/// 1024 is far below what a gateway with thousands of clients needs) and returns the limit
/// now in force.
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// A listener's count of open connections.
#[derive(Debug)]
pub struct Gate {
    listener: &'static str,
    max: usize,
    open: AtomicUsize,
    /// Whether the bound was reached and not yet left (one log line per episode).
    full: AtomicBool,
    next_id: AtomicU64,
    /// Connections waiting for their first byte, oldest first, each with the signal that
    /// closes it to make room.
    silent: Mutex<BTreeMap<u64, Arc<Notify>>>,
}

/// What an accepted connection may do.
#[derive(Debug)]
pub enum Admission {
    /// Serve it.
    Served(Ticket),
    /// Over the bound, within the reserve: health and admin routes only.
    Reserve(Ticket),
    /// Over the bound and the reserve: close it now.
    Refused,
}

/// One open connection's place; dropping it frees the place.
///
/// A connection counts as silent (the first to make room at the bound) from the moment it
/// is admitted until [`Ticket::first_byte`] sees its first byte, not only once its task
/// runs: an accept loop that outruns the connections' tasks still finds silent ones to
/// displace, so `/healthz` is served in a flood of silent sockets.
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    /// Signalled (a permit kept if nobody waits yet) when a newer connection takes this
    /// one's place.
    displaced: Arc<Notify>,
}

impl Ticket {
    /// Waits for the connection's first byte, at most `timeout`, or until a newer
    /// connection takes its place (before this call too); false (close it) when none came,
    /// the peer left, or it was displaced.
    pub async fn first_byte(&self, stream: &tokio::net::TcpStream, timeout: Duration) -> bool {
        let mut probe = [0u8; 1];
        let outcome = tokio::select! {
            biased;
            () = self.displaced.notified() => Err("displaced"),
            peeked = tokio::time::timeout(timeout, stream.peek(&mut probe)) => match peeked {
                Ok(Ok(n)) => Ok(n > 0),
                Ok(Err(_)) => Ok(false),
                Err(_) => Err("first_byte_timeout"),
            },
        };
        self.spoke();
        match outcome {
            Ok(spoke) => spoke,
            Err(reason) => {
                catalog::CONNECTIONS_CLOSED
                    .counter_by(&[("listener", self.gate.listener), ("reason", reason)])
                    .increment(1);
                tracing::debug!(
                    listener = self.gate.listener,
                    reason,
                    "closed a connection that sent nothing"
                );
                false
            }
        }
    }

    /// No longer silent: it cannot be displaced from now on.
    fn spoke(&self) {
        self.gate.silent().remove(&self.id);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.spoke();
        let gate = &self.gate;
        let now = gate.open.fetch_sub(1, Ordering::AcqRel) - 1;
        gate.gauge(now);
        // Leaving the episode once well below the bound, so a count hovering at the
        // bound does not log on every connection.
        if now < gate.max - gate.max / 10 && gate.full.swap(false, Ordering::AcqRel) {
            tracing::info!(
                listener = gate.listener,
                open = now,
                "connections back below --max-connections"
            );
        }
    }
}

impl Gate {
    /// A gate for `listener` (the metrics' label: `http` or `s3`) holding at most `max`
    /// connections open (plus the reserve).
    pub fn new(listener: &'static str, max: usize) -> Arc<Self> {
        Arc::new(Self {
            listener,
            max: max.max(1),
            open: AtomicUsize::new(0),
            full: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            silent: Mutex::default(),
        })
    }

    fn silent(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        self.silent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a connection just admitted, silent until it speaks.
    fn ticket(self: &Arc<Self>) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let displaced = Arc::new(Notify::new());
        self.silent().insert(id, Arc::clone(&displaced));
        Ticket {
            gate: Arc::clone(self),
            id,
            displaced,
        }
    }

    fn gauge(&self, open: usize) {
        catalog::CONNECTIONS_OPEN
            .gauge_by(&[("listener", self.listener)])
            .set(open as f64);
    }

    /// Admits one accepted connection.
    pub fn admit(self: &Arc<Self>) -> Admission {
        let now = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        if now <= self.max {
            self.gauge(now);
            return Admission::Served(self.ticket());
        }
        if !self.full.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                listener = self.listener,
                max = self.max,
                "connection limit reached (--max-connections): new connections displace silent ones, else get only health and admin routes, or are closed"
            );
        }
        // Full: the oldest connection that has said nothing yet makes room (its place is
        // freed as soon as its task sees the signal; until then it is counted open).
        let oldest = self.silent().pop_first();
        if let Some((_, displaced)) = oldest {
            displaced.notify_one();
            self.gauge(now);
            return Admission::Served(self.ticket());
        }
        catalog::CONNECTIONS_REFUSED
            .counter_by(&[("listener", self.listener)])
            .increment(1);
        if now <= self.max + RESERVE {
            self.gauge(now);
            return Admission::Reserve(self.ticket());
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        Admission::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair: the gateway's side, and the peer's kept open.
    async fn connection() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (listener.accept().await.unwrap().0, peer)
    }

    #[tokio::test]
    async fn a_new_connection_displaces_the_oldest_silent_one() {
        let gate = Gate::new("test", 1);
        let (conn, _peer) = connection().await;
        let Admission::Served(first) = gate.admit() else {
            panic!("the first connection is served")
        };
        let waiting = tokio::spawn(async move {
            let spoke = first.first_byte(&conn, Duration::from_secs(3600)).await;
            drop(first);
            spoke
        });
        // Let it wait for its first byte: it is woken, where the next test's connection is
        // displaced before it waits.
        tokio::task::yield_now().await;
        assert!(matches!(gate.admit(), Admission::Served(_)));
        assert!(!waiting.await.unwrap(), "the silent connection is closed");
    }

    /// An accept loop that outruns its connections' tasks: none has looked for its first
    /// byte yet, and a connection past the bound still displaces the oldest (which then
    /// closes at once), rather than being refused.
    #[tokio::test]
    async fn a_connection_is_silent_from_its_admission() {
        let gate = Gate::new("test", 1);
        let Admission::Served(first) = gate.admit() else {
            panic!("the first connection is served")
        };
        let Admission::Served(second) = gate.admit() else {
            panic!("the second displaces the first, whose task has not run yet")
        };
        let (conn, _peer) = connection().await;
        let closed = tokio::time::timeout(
            Duration::from_secs(5),
            first.first_byte(&conn, Duration::from_secs(3600)),
        );
        assert!(!closed
            .await
            .expect("displaced before it waited: closed at once"));
        drop(first);
        // The second speaks: no longer displaceable, so a third goes to the reserve.
        let (conn, mut peer) = connection().await;
        tokio::io::AsyncWriteExt::write_all(&mut peer, b"G")
            .await
            .unwrap();
        assert!(second.first_byte(&conn, Duration::from_secs(5)).await);
        assert!(matches!(gate.admit(), Admission::Reserve(_)));
    }

    /// Admits one connection, which then speaks at once (so none is displaced).
    fn admit_speaking(gate: &Arc<Gate>) -> Admission {
        let admission = gate.admit();
        if let Admission::Served(t) | Admission::Reserve(t) = &admission {
            t.spoke();
        }
        admission
    }

    #[test]
    fn admits_up_to_the_bound_then_the_reserve_then_refuses() {
        let gate = Gate::new("test", 2);
        let a = admit_speaking(&gate);
        let b = admit_speaking(&gate);
        assert!(matches!(a, Admission::Served(_)));
        assert!(matches!(b, Admission::Served(_)));
        let reserve: Vec<_> = (0..RESERVE).map(|_| admit_speaking(&gate)).collect();
        assert!(reserve.iter().all(|r| matches!(r, Admission::Reserve(_))));
        assert!(matches!(gate.admit(), Admission::Refused));
        drop(reserve);
        drop(a);
        assert!(matches!(gate.admit(), Admission::Served(_)));
    }

    #[test]
    fn default_bound_leaves_room_for_the_rest_of_the_process() {
        assert_eq!(default_max_connections(20_000, 1), 14_232);
        assert_eq!(default_max_connections(20_000, 2), 7_116);
        assert_eq!(default_max_connections(1024, 2), 64);
    }
}
