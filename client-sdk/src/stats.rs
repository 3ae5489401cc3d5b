//! Read counters, and why a read left the fast path.

use std::sync::{Arc, Mutex};

use rasa_fastpath::reader::ReadError;

use crate::{Client, ReadPath};

/// Why a read that could have gone one-sided went over HTTP (or failed, with
/// [`FastPath::Required`](crate::FastPath::Required)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fallback {
    /// The gateway or this machine has no fast path.
    Unavailable,
    /// The descriptor's lease ended before a read could start.
    LeaseExpired,
    /// The remote key was revoked (the version was reclaimed) or the range was out of bounds.
    KeyRevoked,
    /// The fabric connection was lost; the endpoint is being rebuilt.
    ConnectionLost,
    /// The read did not complete in time.
    Timeout,
    /// The bytes were not the promised frame (torn, stale or corrupt).
    FrameMismatch,
    /// The SHA-256 check (opt-in) failed.
    Sha256Mismatch,
    /// The endpoint is being rebuilt after a failure; reads go over HTTP meanwhile.
    Rebuilding,
    /// Another libfabric failure.
    FabricError,
    /// A range of a version whose frame has no block table (or a format this SDK does not
    /// know): ranges of it are read over HTTP.
    NoBlockTable,
}

impl Fallback {
    /// A short stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::LeaseExpired => "lease_expired",
            Self::KeyRevoked => "key_revoked",
            Self::ConnectionLost => "connection_lost",
            Self::Timeout => "timeout",
            Self::FrameMismatch => "frame_mismatch",
            Self::Sha256Mismatch => "sha256_mismatch",
            Self::Rebuilding => "rebuilding",
            Self::FabricError => "fabric_error",
            Self::NoBlockTable => "no_block_table",
        }
    }

    pub(crate) fn of(e: &ReadError) -> Self {
        match e {
            ReadError::KeyRevoked(_) => Self::KeyRevoked,
            ReadError::ConnectionLost(_) => Self::ConnectionLost,
            ReadError::UnknownPeer(_) => Self::FabricError,
            ReadError::Timeout(_) => Self::Timeout,
            ReadError::Expired => Self::LeaseExpired,
            ReadError::Frame(_) => Self::FrameMismatch,
            ReadError::Fabric(_) | ReadError::Output(_) | ReadError::OutOfRange { .. } => {
                Self::FabricError
            }
        }
    }
}

/// Read counters of a client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Values served one-sided.
    pub fabric_reads: u64,
    /// Values served over HTTP.
    pub http_reads: u64,
    /// Batches read one-sided in one go (`get_many_into` into registered memory: every
    /// frame in flight together); their values count in `fabric_reads` too.
    pub fabric_batches: u64,
    /// One-sided attempts that failed, by reason (each attempt counts once).
    pub fallbacks: std::collections::BTreeMap<&'static str, u64>,
    /// Requests sent again after a `503` with `Retry-After`.
    pub busy_retries: u64,
    /// Fabric endpoints opened, each at its first use (at most
    /// [`crate::ClientBuilder::fabric_endpoints`]; rebuilds after a failure not counted).
    pub fabric_endpoints: u64,
    /// Bytes the SDK copied on their way to the caller: from a fabric endpoint's registered
    /// scratch memory, or out of HTTP body chunks. A value delivered with one copy adds its
    /// length; a single-chunk HTTP body handed over as it came adds nothing.
    pub bytes_copied: u64,
    /// Values written one-sided (into an upload region over the fabric, then committed).
    pub fabric_writes: u64,
    /// Values written over HTTP (`PUT`, or a put batch's body).
    pub http_writes: u64,
    /// The provider one-sided reads go over (`shm` for a gateway on this host, else the
    /// gateway's remote provider), once an endpoint was opened.
    pub fabric_provider: Option<String>,
    /// The cluster members (node ids) in the view this client follows now; empty for a
    /// single gateway. Members that left it a moment ago are still tried after these when
    /// none of these answers (a view read during an etcd outage may list too few).
    pub cluster_members: Vec<String>,
}

/// The counters of a client, shared by a cluster client and its per-node clients.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters(Arc<Mutex<Stats>>);

impl Counters {
    fn with(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The counts so far.
    pub(crate) fn snapshot(&self) -> Stats {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A one-sided attempt failed for `why`.
    pub(crate) fn fallback(&self, why: Fallback) {
        self.with(|st| *st.fallbacks.entry(why.as_str()).or_default() += 1);
    }

    /// The followed view now lists `members`.
    pub(crate) fn members(&self, members: Vec<String>) {
        self.with(|st| st.cluster_members = members);
    }

    /// One-sided reads go over `provider`.
    pub(crate) fn provider(&self, provider: &str) {
        self.with(|st| st.fabric_provider = Some(provider.to_owned()));
    }

    /// `n` bytes copied on their way to the caller.
    pub(crate) fn copied(&self, n: usize) {
        self.with(|st| st.bytes_copied += n as u64);
    }

    /// A value was served over `path`.
    pub(crate) fn read(&self, path: ReadPath) {
        self.with(|st| match path {
            ReadPath::Fabric => st.fabric_reads += 1,
            ReadPath::Http => st.http_reads += 1,
        });
    }

    /// A batch was read one-sided in one go.
    pub(crate) fn batch(&self) {
        self.with(|st| st.fabric_batches += 1);
    }

    /// `n` values were stored over `path`.
    pub(crate) fn wrote(&self, path: ReadPath, n: usize) {
        self.with(|st| match path {
            ReadPath::Fabric => st.fabric_writes += n as u64,
            ReadPath::Http => st.http_writes += n as u64,
        });
    }

    /// A request was sent again after a `503`.
    pub(crate) fn busy_retry(&self) {
        self.with(|st| st.busy_retries += 1);
    }

    /// A fabric endpoint was opened.
    pub(crate) fn endpoint_opened(&self) {
        self.with(|st| st.fabric_endpoints += 1);
    }
}

impl Client {
    /// Read counters so far.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }
}
