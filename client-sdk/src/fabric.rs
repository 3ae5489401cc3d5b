//! One-sided reads: the fabric endpoint shared by a client, lease checks, frame
//! validation, and rebuilding the endpoint in the background after a failure.

use std::sync::Arc;
use std::time::Instant;

use base64::prelude::*;
use bytes::Bytes;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::{ReadError, Reader};
use rasa_openapi::Descriptor;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::cache::DescriptorCache;
use crate::descriptors::{deadline_of, remote_frame};
use crate::http::Transport;
use crate::stats::Counters;
use crate::{Error, Fallback, FastPath, Object, ReadPath};

/// What `ds` promise, addressed on the gateway endpoint `state` reads from.
pub(crate) fn frames_on<'a>(
    state: &FabricState,
    ds: impl Iterator<Item = &'a Descriptor>,
) -> Result<Vec<rasa_fastpath::reader::RemoteFrame>, Error> {
    let endpoint = match state {
        FabricState::Ready { endpoint, .. } => *endpoint,
        _ => 0,
    };
    ds.map(|d| {
        crate::descriptors::remote_frame_on(d, endpoint)?.ok_or_else(|| {
            Error::FastPath(format!(
                "the descriptor names no address on the gateway's fabric endpoint {endpoint}"
            ))
        })
    })
    .collect()
}

pub(crate) enum FabricState {
    /// Not asked yet.
    Unknown,
    /// The gateway or this machine has no fast path (reason).
    Unavailable(String),
    /// Connected to the gateway process `incarnation`.
    Ready {
        /// The endpoint.
        reader: Box<Reader>,
        /// Which of the gateway's endpoints it reads from (its index in `GET /v1/fabric`'s
        /// `endpoints`), and that endpoint's provider.
        endpoint: usize,
        /// The gateway's incarnation when its address was read (`GET /v1/fabric`).
        incarnation: String,
    },
}

/// The fabric endpoints towards one gateway, opened on first use and rebuilt in the
/// background after a failure, and the descriptors they read with: every one-sided read
/// goes through here.
pub(crate) struct FabricPool {
    /// The endpoints, each behind its own lock ([`FabricPool::endpoint`] picks one).
    pub(crate) slots: Box<[Arc<Mutex<FabricState>>]>,
    /// Where waiting for a busy endpoint starts next (round robin).
    pub(crate) next: std::sync::atomic::AtomicUsize,
    /// Set while an endpoint is rebuilt in the background; reads go over HTTP meanwhile.
    pub(crate) rebuilding: Arc<std::sync::atomic::AtomicBool>,
    /// The local address endpoints bind to.
    pub(crate) fabric_addr: Option<String>,
    /// The provider to insist on, if any ([`crate::ClientBuilder::fabric_provider`]).
    pub(crate) provider: Option<String>,
    /// How many of `slots` reads use: all, but on `shm` through libfabric (a gateway that
    /// publishes no host to attach to) no more than this machine has cores. libfabric
    /// 1.17's shm copies while holding the gateway region's spin lock, so its reads of one
    /// gateway copy one at a time; more readers than cores would spin on that lock while
    /// its holder waits for a core (16 readers of 1 MiB on 2 cores: 1.8 GB/s with 4
    /// endpoints, p99 55 ms). Reads by cross-memory attach take no such lock.
    pub(crate) in_use: std::sync::atomic::AtomicUsize,
    pub(crate) fast_path: FastPath,
    pub(crate) read_timeout: std::time::Duration,
    /// The request timeout: what a whole call has, from its first step
    /// ([`crate::timeouts::call_deadline`]).
    pub(crate) call_timeout: CallTimeout,
    pub(crate) verify_sha256: bool,
    /// The gateway's HTTP API (descriptors, its fabric address).
    pub(crate) http: Arc<Transport>,
    pub(crate) descriptors: Arc<DescriptorCache>,
    pub(crate) counters: Counters,
}

impl FabricPool {
    /// Whether this client already knows the fast path cannot work here (Auto mode then
    /// goes straight to HTTP).
    pub(crate) fn known_unavailable(&self) -> bool {
        self.fast_path == FastPath::Auto
            && self.slots[0]
                .try_lock()
                .is_ok_and(|s| matches!(*s, FabricState::Unavailable(_)))
    }

    /// An endpoint for one read: the first that is free (a client that reads one value at
    /// a time keeps using the first), else the next in turn, waited for (reads queue in
    /// order, each bounded by its own timeout).
    pub(crate) async fn endpoint(&self) -> tokio::sync::OwnedMutexGuard<FabricState> {
        let slots = &self.slots;
        let slots = &slots[..self
            .in_use
            .load(std::sync::atomic::Ordering::Relaxed)
            .clamp(1, slots.len())];
        for slot in slots.iter() {
            if let Ok(guard) = Arc::clone(slot).try_lock_owned() {
                return guard;
            }
        }
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Arc::clone(&slots[turn % slots.len()]).lock_owned().await
    }

    /// [`FabricPool::endpoint`], waited for no longer than the call has left.
    pub(crate) async fn endpoint_within_call(
        &self,
    ) -> Result<tokio::sync::OwnedMutexGuard<FabricState>, Error> {
        let left = self.call_timeout.left();
        tokio::time::timeout(left, self.endpoint())
            .await
            .map_err(|_| self.call_timeout.timed_out())
    }

    /// Whether the endpoint is being rebuilt after a failure (reads go over HTTP meanwhile).
    pub(crate) fn rebuilding(&self) -> bool {
        self.rebuilding.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reads `key` one-sided, or fails (never falls back to HTTP). A stale, revoked, torn
    /// or timed-out read drops the cached descriptor and gets one more try with a fresh one.
    pub(crate) async fn get(&self, key: &str) -> Result<Object, Error> {
        let mut last = None;
        for attempt in 0..2 {
            if attempt > 0 && self.call_timeout.left().is_zero() {
                break; // the call's time is up: no second try
            }
            let (d, deadline) = self.descriptor(key, attempt > 0).await?;
            match self.read_one(&d, deadline).await {
                Ok(obj) => return Ok(obj),
                Err(e) => {
                    self.descriptors.forget(key);
                    last = Some(e);
                    if self.rebuilding() {
                        break; // the endpoint is down for a while: don't wait for it
                    }
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Reads the version `d` names one-sided. `sent` is when the request that returned `d`
    /// was sent: the lease is counted from then.
    pub(crate) async fn read_descriptor(
        &self,
        d: &Descriptor,
        sent: Instant,
    ) -> Result<Object, Error> {
        self.read_one(d, deadline_of(d, sent)).await
    }

    pub(crate) async fn read_one(
        &self,
        d: &Descriptor,
        deadline: Instant,
    ) -> Result<Object, Error> {
        let mut r = self.read_frames(&[(d, deadline)]).await?;
        r.pop().expect("one result")
    }

    pub(crate) async fn read_descriptors(
        &self,
        ds: &[&Descriptor],
        sent: Instant,
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        let with: Vec<(&Descriptor, Instant)> =
            ds.iter().map(|d| (*d, deadline_of(d, sent))).collect();
        self.read_frames(&with).await
    }

    /// The core of every one-sided read: checks leases, reads all frames in one go,
    /// validates, counts, and rebuilds the endpoint in the background after a failure.
    pub(crate) async fn read_frames(
        &self,
        ds: &[(&Descriptor, Instant)],
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        if ds.is_empty() {
            return Ok(Vec::new());
        }
        let mut earliest = None::<Instant>;
        for (d, deadline) in ds {
            if remote_frame(d)?.is_none() {
                self.counters.fallback(Fallback::Unavailable);
                return Err(Error::FastPath(crate::descriptors::why_http_only(d)));
            }
            earliest = Some(earliest.map_or(*deadline, |e: Instant| e.min(*deadline)));
        }
        let earliest = earliest.expect("non-empty");
        let state = self.ready_endpoint(earliest).await?;
        let frames = frames_on(&state, ds.iter().map(|(d, _)| *d))?;
        // Within the call's time too: a frozen gateway ends the call by its deadline.
        let call_left = self.call_timeout.left();
        let timeout = earliest
            .saturating_duration_since(Instant::now())
            .min(self.read_timeout)
            .min(call_left);
        if call_left.is_zero() {
            return Err(self.call_timeout.timed_out());
        }
        let (results, ()) = self
            .on_reader(state, (), move |reader, _| {
                reader.read_many(&frames, timeout)
            })
            .await;
        let results = results?;
        let mut out = Vec::with_capacity(ds.len());
        for ((d, _), r) in ds.iter().zip(results) {
            out.push(match r {
                Err(e) => {
                    self.counters.fallback(Fallback::FrameMismatch);
                    Err(Error::FastPath(format!("frame rejected: {e}")))
                }
                Ok(payload)
                    if self.verify_sha256 && hex::encode(Sha256::digest(&payload)) != d.sha256 =>
                {
                    self.counters.fallback(Fallback::Sha256Mismatch);
                    Err(Error::FastPath(
                        "SHA-256 mismatch on a one-sided read".into(),
                    ))
                }
                Ok(payload) => {
                    self.counters.read(ReadPath::Fabric);
                    self.counters.copied(payload.len()); // out of the scratch memory
                    Ok(Object {
                        bytes: Bytes::from(payload),
                        version: d.version.clone(),
                        sha256: d.sha256.clone(),
                        content_type: d.content_type.clone(),
                        path: ReadPath::Fabric,
                    })
                }
            });
        }
        Ok(out)
    }

    /// A connected endpoint for reads that must start before `deadline`, unless it is being
    /// rebuilt, the lease is over, or the fast path is unavailable (each counted).
    pub(crate) async fn ready_endpoint(
        &self,
        deadline: Instant,
    ) -> Result<OwnedMutexGuard<FabricState>, Error> {
        if self.rebuilding() {
            self.counters.fallback(Fallback::Rebuilding);
            return Err(Error::FastPath(
                "the fabric endpoint is being rebuilt".into(),
            ));
        }
        if Instant::now() >= deadline {
            self.counters.fallback(Fallback::LeaseExpired);
            return Err(Error::FastPath(
                "the descriptor's lease ended before the read".into(),
            ));
        }
        let mut state = self.endpoint_within_call().await?;
        if let Err(e) = self.connect(&mut state).await {
            self.counters.fallback(Fallback::Unavailable);
            return Err(e);
        }
        Ok(state)
    }

    /// Runs `read` with the connected reader of `state` on the blocking pool, handing it
    /// `buf` (the pool owns it meanwhile; it comes back with the result). A failure is
    /// counted and leaves the endpoint to [`FabricPool::after_failure`]; counting a success is
    /// the caller's.
    pub(crate) async fn on_reader<B: Send + 'static, T: Send + 'static>(
        &self,
        mut state: OwnedMutexGuard<FabricState>,
        mut buf: B,
        read: impl FnOnce(&mut Reader, &mut B) -> Result<T, ReadError> + Send + 'static,
    ) -> crate::BufResult<T, B> {
        let task = tokio::task::spawn_blocking(move || {
            let r = match &mut *state {
                FabricState::Ready { reader, .. } => read(reader, &mut buf),
                _ => unreachable!("a connected endpoint"),
            };
            (state, r, buf)
        });
        let (state, r, buf) = match task.await {
            Ok(done) => done,
            // The task owned the buffer; a panic there is a bug, not a read failure.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("the runtime stopped during a one-sided read: {e}"),
        };
        match r {
            Ok(v) => {
                drop(state);
                (Ok(v), buf)
            }
            Err(e) => {
                self.after_failure(&e, state);
                (Err(Error::FastPath(e.to_string())), buf)
            }
        }
    }

    /// Counts a failed one-sided read and, when the reader dropped its endpoint, rebuilds
    /// it in the background. A revoked key on a provider whose endpoint survives it (efa,
    /// sockets) only meant a stale descriptor: the endpoint stays as it is.
    pub(crate) fn after_failure(&self, e: &ReadError, state: OwnedMutexGuard<FabricState>) {
        self.counters.fallback(Fallback::of(e));
        let kept = matches!(&*state, FabricState::Ready { reader, .. } if reader.is_connected());
        if kept {
            drop(state);
        } else {
            self.rebuild_in_background(state);
        }
    }

    /// After a fabric failure the reader has dropped its endpoint; build a new one on the
    /// blocking pool while reads go over HTTP.
    ///
    /// A failure may mean the gateway restarted (a new process has a new fabric address and
    /// new keys), so the gateway is asked again (`GET /v1/fabric`, within the request
    /// timeout): a new incarnation drops every cached descriptor (they name the old
    /// process's memory) and the endpoint is aimed at the new address. If the gateway does
    /// not answer, the endpoint is rebuilt towards the address it had.
    pub(crate) fn rebuild_in_background(
        &self,
        mut state: tokio::sync::OwnedMutexGuard<FabricState>,
    ) {
        let flag = Arc::clone(&self.rebuilding);
        flag.store(true, std::sync::atomic::Ordering::Release);
        let (http, descriptors) = (Arc::clone(&self.http), Arc::clone(&self.descriptors));
        tokio::spawn(async move {
            let now = http.fabric_info().await.ok();
            if let (
                FabricState::Ready {
                    reader,
                    incarnation,
                    endpoint,
                },
                Some(info),
            ) = (&mut *state, now)
            {
                // The same provider's endpoint, wherever the restarted gateway lists it.
                let same = crate::choose::endpoints(&info)
                    .into_iter()
                    .enumerate()
                    .find(|(_, e)| e.provider == reader.provider());
                let address = same.and_then(|(i, e)| {
                    *endpoint = i;
                    BASE64_STANDARD.decode(e.address).ok()
                });
                if info.incarnation != *incarnation {
                    tracing::info!(
                        old = %incarnation,
                        new = %info.incarnation,
                        "the gateway restarted; dropping its old descriptors"
                    );
                    descriptors.clear();
                    // A new process: its endpoints, and the pid shm readers attach to, are
                    // chosen again at the next read.
                    *state = FabricState::Unknown;
                } else if let Some(address) = address.filter(|_| info.enabled) {
                    reader.retarget(address);
                }
            }
            let rebuilt = tokio::task::spawn_blocking(move || {
                if let FabricState::Ready { reader, .. } = &mut *state {
                    if let Err(e) = reader.reconnect() {
                        tracing::warn!(error = %e, "fabric endpoint rebuild failed; will retry on the next read");
                    }
                }
                drop(state);
            })
            .await;
            if let Err(e) = rebuilt {
                tracing::warn!(error = %e, "fabric endpoint rebuild task failed");
            }
            flag.store(false, std::sync::atomic::Ordering::Release);
        });
    }

    /// Makes sure `state` holds a connected reader (asking the gateway on first use).
    pub(crate) async fn connect(&self, state: &mut FabricState) -> Result<(), Error> {
        match state {
            FabricState::Ready { .. } => return Ok(()),
            FabricState::Unavailable(why) => return Err(Error::FastPath(why.clone())),
            FabricState::Unknown => {}
        }
        let info = self.http.fabric_info().await?;
        let (endpoint, chosen) = match crate::choose::choose(&info, self.provider.as_deref()) {
            Ok(c) => c,
            Err(why) => {
                *state = FabricState::Unavailable(why.clone());
                return Err(Error::FastPath(why));
            }
        };
        let incarnation = info.incarnation;
        let address = BASE64_STANDARD
            .decode(&chosen.address)
            .map_err(|_| Error::Protocol("fabric address is not base64".into()))?;
        let provider = chosen.provider;
        self.counters.provider(&provider);
        let mut cfg = FabricConfig::new(provider.clone(), self.fabric_addr.clone());
        match (rasa_fastpath::fabric::plan::is_shm(&provider), &info.host) {
            // On the gateway's host (choose probed it): read by cross-memory attach.
            (true, Some(host)) => cfg = cfg.with_cma(host.pid),
            (true, None) => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                self.in_use
                    .fetch_min(cores, std::sync::atomic::Ordering::Relaxed);
            }
            (false, _) => {}
        }
        let connected = tokio::task::spawn_blocking(move || Reader::connect(cfg, address))
            .await
            .map_err(|e| Error::FastPath(format!("connect task failed: {e}")))?;
        match connected {
            Ok(r) => {
                *state = FabricState::Ready {
                    reader: Box::new(r),
                    incarnation,
                    endpoint,
                };
                self.counters.endpoint_opened();
                Ok(())
            }
            Err(e) => {
                let why = format!("cannot open a fabric endpoint: {e}");
                *state = FabricState::Unavailable(why.clone());
                Err(Error::FastPath(why))
            }
        }
    }

    /// A descriptor of `key` that may still be read from now on: the one held while its
    /// deadline is ahead (unless `fresh`), else a new one (and its deadline).
    pub(crate) async fn descriptor(
        &self,
        key: &str,
        fresh: bool,
    ) -> Result<(Descriptor, Instant), Error> {
        if let Some((d, deadline)) = self.descriptors.fresh(key).filter(|_| !fresh) {
            return Ok((Descriptor::clone(&d), deadline));
        }
        // A member that could not answer itself relays the owner's descriptor, which this
        // member's endpoint cannot read: asked once more (a replica may have its copy by
        // then), else read another way.
        for _ in 0..2 {
            let sent = Instant::now();
            let d = self.http.descriptors().one(key).await?;
            if self.descriptors.foreign(&d) {
                continue;
            }
            let deadline = deadline_of(&d, sent);
            self.descriptors.insert(key, d.clone(), deadline);
            return Ok((d, deadline));
        }
        Err(Error::FastPath(format!(
            "the descriptor of {key} names another member than the one asked"
        )))
    }
}

/// How long a one-sided read may take when the call set no deadline of its own (the
/// client's request timeout).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallTimeout(pub(crate) std::time::Duration);

impl CallTimeout {
    /// What the current call has left of its time ([`crate::timeouts::call_deadline`]).
    pub(crate) fn left(self) -> std::time::Duration {
        crate::timeouts::within_call(self.0, self.0)
    }

    /// The error of a one-sided read that the call's deadline ended.
    fn timed_out(self) -> Error {
        Error::Timeout {
            endpoint: "the fabric".into(),
            kind: crate::TimeoutKind::FastPathRead,
            after: self.0,
        }
    }
}
