//! What the gateway knows of a stored version beyond its frame ([`OriginMeta`]): its copy
//! at the origin, its tie to a cluster owner, the S3 entity tag, a rare media type.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// What the gateway knows of a version beyond its frame that most versions lack: its copy
/// at the origin, the entity tag S3 clients see, a media type too rare to intern.
/// Allocated on first use: a version with none of these pays one pointer for them.
#[derive(Debug, Default)]
pub struct OriginMeta(pub(super) once_cell::race::OnceBox<OriginState>);

#[derive(Debug, Default)]
pub(super) struct OriginState {
    /// The origin's entity tag (for conditional revalidation), once known.
    etag: std::sync::OnceLock<Box<str>>,
    /// When the origin last confirmed this version (ms since the epoch; 0 = never).
    validated_ms: AtomicU64,
    /// In a cluster, the owner (a tag of its node id and incarnation) this copy was
    /// written, fetched or confirmed under (0 = none): a copy whose key's owner has since
    /// changed is not served as current before it is confirmed again.
    tied: AtomicU64,
    /// The cluster view `tied` was taken in (its number in the member's history): the
    /// owner must have owned the key in every view since for the copy to be current.
    tied_at: AtomicU64,
    /// The entity tag S3 clients see, when it is not the SHA-256 (the MD5 an S3 upload
    /// was checked against), unquoted.
    s3_etag: std::sync::OnceLock<Box<str>>,
    /// The media type, when the intern table was full ([`super::version::MediaType::RARE`]).
    pub(super) media_type: std::sync::OnceLock<Box<str>>,
    /// User metadata and stored headers, when the upload had any.
    headers: std::sync::OnceLock<Box<super::ObjectHeaders>>,
    /// The payload's SHA-256, once computed (a one-sided write's trailer has none).
    pub(super) sha256: std::sync::OnceLock<[u8; 32]>,
}

/// Now, in milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl OriginMeta {
    pub(super) fn state(&self) -> &OriginState {
        self.0.get_or_init(Box::default)
    }

    /// Metadata of a copy the origin confirmed just now, with entity tag `etag`.
    pub fn confirmed(etag: Option<String>) -> Self {
        let m = Self::default();
        if let Some(e) = etag {
            m.set_etag(e);
        }
        m.touch();
        m
    }

    /// The origin's entity tag, once known.
    pub fn etag(&self) -> Option<&str> {
        self.0.get()?.etag.get().map(|e| &**e)
    }

    /// Records the origin's entity tag (the first one given stays).
    pub fn set_etag(&self, etag: String) {
        let _ = self.state().etag.set(etag.into_boxed_str());
    }

    /// Records that the origin confirmed the copy now.
    pub fn touch(&self) {
        self.state().validated_ms.store(now_ms(), Ordering::Release);
    }

    /// Records that the origin confirmed the copy `age` ago (a copy taken from a peer).
    pub fn confirmed_ago(&self, age: Duration) {
        let then = now_ms().saturating_sub(age.as_millis() as u64).max(1);
        self.state().validated_ms.store(then, Ordering::Release);
    }

    /// Ties the copy to the key's owner `tag` in view `at` (see [`OriginMeta::tied`]).
    pub fn tie(&self, tag: u64, at: u64) {
        let s = self.state();
        s.tied_at.store(at, Ordering::Release);
        s.tied.store(tag, Ordering::Release);
    }

    /// The view the tie was taken (or last checked) in.
    pub fn tied_at(&self) -> u64 {
        self.0
            .get()
            .map_or(0, |s| s.tied_at.load(Ordering::Acquire))
    }

    /// Whether the tie still holds, as `check(tag, at)` says: `Some(view)` when it held
    /// up to `view` (recorded, so the next check starts there), `None` when it does not.
    pub fn tie_holds(&self, check: impl FnOnce(u64, u64) -> Option<u64>) -> bool {
        match check(self.tied(), self.tied_at()) {
            Some(now) => {
                self.state().tied_at.fetch_max(now, Ordering::AcqRel);
                true
            }
            None => false,
        }
    }

    /// The owner tag the copy is tied to (0: none): in a cluster, the key's owner when the
    /// copy was last written, fetched or confirmed.
    pub fn tied(&self) -> u64 {
        self.0.get().map_or(0, |s| s.tied.load(Ordering::Acquire))
    }

    /// How long ago the origin last confirmed the copy (`None`: never).
    pub fn age(&self) -> Option<Duration> {
        let ms = self.0.get()?.validated_ms.load(Ordering::Acquire);
        (ms > 0).then(|| Duration::from_millis(now_ms().saturating_sub(ms)))
    }

    /// The entity tag S3 clients see, when set ([`StoredVersion::s3_etag`]).
    pub fn s3_etag(&self) -> Option<&str> {
        self.0.get()?.s3_etag.get().map(|e| &**e)
    }

    /// Records the entity tag S3 clients see.
    pub fn set_s3_etag(&self, etag: String) {
        let _ = self.state().s3_etag.set(etag.into_boxed_str());
    }

    /// User metadata and stored headers, when the version has any.
    pub fn headers(&self) -> Option<&super::ObjectHeaders> {
        self.0.get()?.headers.get().map(|h| &**h)
    }

    /// Records the version's user metadata and stored headers (the first given stay).
    pub fn set_headers(&self, headers: super::ObjectHeaders) {
        if !headers.is_empty() {
            let _ = self.state().headers.set(Box::new(headers));
        }
    }

    /// When the origin last confirmed the copy (ms since the epoch; 0 = never).
    pub(super) fn validated_ms(&self) -> u64 {
        self.0
            .get()
            .map_or(0, |s| s.validated_ms.load(Ordering::Acquire))
    }

    /// Records when the origin last confirmed the copy (ms since the epoch).
    pub(super) fn set_validated_ms(&self, ms: u64) {
        if ms > 0 {
            self.state().validated_ms.store(ms, Ordering::Release);
        }
    }

    pub(super) fn rare_media_type(&self) -> Option<&str> {
        self.0.get()?.media_type.get().map(|t| &**t)
    }

    /// A copy of this metadata (for a version copied to another arena); without its
    /// origin state when `with_origin` is false.
    pub fn duplicate(&self, with_origin: bool) -> Self {
        let m = Self::default();
        if let Some(s) = self.0.get() {
            if let (Some(e), true) = (s.etag.get(), with_origin) {
                m.set_etag(e.to_string());
            }
            if with_origin {
                m.state()
                    .validated_ms
                    .store(s.validated_ms.load(Ordering::Acquire), Ordering::Release);
            }
            if let Some(e) = s.s3_etag.get() {
                m.set_s3_etag(e.to_string());
            }
            if let Some(t) = s.media_type.get() {
                let _ = m.state().media_type.set(t.clone());
            }
            if let Some(h) = s.headers.get() {
                let _ = m.state().headers.set(h.clone());
            }
        }
        m
    }
}
