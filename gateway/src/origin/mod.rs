//! The origin: where values the gateway does not hold come from, and where write-through
//! PUTs and DELETEs go. Knows nothing of arenas.
//!
//! [`Origin`] is a small trait; [`s3::S3Origin`] implements it over any S3-compatible
//! endpoint. [`readthrough::ReadThrough`] puts it in front of the store: single-flight
//! misses, freshness, negative caching.

pub mod filling;
pub mod flight;
mod peerfill;
pub mod readthrough;
pub mod remembered;
pub mod s3;
mod ties;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;

/// A boxed future, as the trait's methods return (the trait is used as `dyn Origin`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A body streaming from the origin.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, OriginError>> + Send>>;

/// An object as the origin serves it.
pub struct OriginObject {
    /// Payload length (the origin's `Content-Length`).
    pub length: u64,
    /// Media type, when the origin has one.
    pub content_type: Option<String>,
    /// The origin's entity tag, for revalidation.
    pub etag: Option<String>,
    /// For a ranged fetch, the origin's `Content-Range` (`bytes a-b/total`).
    pub content_range: Option<String>,
    /// The payload.
    pub body: BodyStream,
}

impl std::fmt::Debug for OriginObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginObject")
            .field("length", &self.length)
            .field("content_type", &self.content_type)
            .field("etag", &self.etag)
            .finish()
    }
}

/// The answer to a (conditional) fetch.
#[derive(Debug)]
pub enum Fetch {
    /// The object (changed, when the fetch was conditional).
    Found(OriginObject),
    /// Unchanged since the entity tag given.
    NotModified,
    /// The origin has no such object.
    NotFound,
}

/// What the origin answered a fetch, for the log: `found ETAG`, `not modified`, `not
/// found` or `failed: WHY`.
pub fn said(fetched: &Result<Fetch, OriginError>) -> String {
    match fetched {
        Ok(Fetch::Found(o)) => format!("found {}", o.etag.as_deref().unwrap_or("-")),
        Ok(Fetch::NotModified) => "not modified".to_owned(),
        Ok(Fetch::NotFound) => "not found".to_owned(),
        Err(e) => format!("failed: {e}"),
    }
}

/// What the origin says of an object without sending it.
#[derive(Debug, Clone)]
pub struct OriginHead {
    /// Its length.
    pub length: u64,
    /// Its media type, when the origin has one.
    pub content_type: Option<String>,
    /// The origin's entity tag.
    pub etag: Option<String>,
    /// When the origin last modified it, when it says.
    pub modified: Option<std::time::SystemTime>,
}

/// One key of an origin listing.
#[derive(Debug, Clone)]
pub struct OriginEntry {
    /// The key (the gateway's: the origin's own prefix removed).
    pub key: String,
    /// Its length.
    pub size: u64,
    /// The origin's entity tag, unquoted.
    pub etag: String,
    /// When the origin last modified it.
    pub modified: std::time::SystemTime,
}

/// A page of an origin listing.
#[derive(Debug, Clone, Default)]
pub struct OriginPage {
    /// Keys, in order.
    pub objects: Vec<OriginEntry>,
    /// Common prefixes (with a delimiter), in order, in the gateway's key space.
    pub prefixes: Vec<String>,
    /// Whether more follow.
    pub truncated: bool,
}

/// Why the origin could not answer. Every variant maps to a gateway error naming the
/// origin (502 or 504), never to a wrong answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OriginError {
    /// The origin did not answer in time (`--origin-timeout`).
    #[error("the origin did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The origin refused the credentials (403).
    #[error("the origin denied access: {0}")]
    Denied(String),
    /// The origin could not be reached or failed.
    #[error("the origin failed: {0}")]
    Failed(String),
}

/// Why a read-through lookup failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The origin failed or timed out.
    #[error(transparent)]
    Origin(#[from] OriginError),
    /// The origin's object is larger than `--max-object-size` (it is streamed through,
    /// never cached).
    #[error(
        "the origin's object is {length} bytes, over the maximum object size of {limit} bytes"
    )]
    TooLarge {
        /// The object's length.
        length: u64,
        /// `--max-object-size`.
        limit: u64,
    },
    /// The store could not take the object (memory full of leased values, …).
    #[error("{0}")]
    Store(String),
    /// Memory is full of leased values; retry later.
    #[error("memory is full of leased values; retry in {0:?}")]
    Busy(std::time::Duration),
}

impl From<crate::store::StoreError> for FetchError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Busy { retry_after } => Self::Busy(retry_after),
            other => Self::Store(other.to_string()),
        }
    }
}

/// A source of truth behind the gateway.
pub trait Origin: Send + Sync + std::fmt::Debug {
    /// Fetches `key`; with `if_none_match`, only if its entity tag changed.
    fn get<'a>(
        &'a self,
        key: &'a str,
        if_none_match: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Fetch, OriginError>>;

    /// Fetches the byte range `range` (an HTTP `Range` value, `bytes=…`) of `key`, for
    /// objects that are streamed through rather than cached.
    fn get_range<'a>(
        &'a self,
        key: &'a str,
        range: &'a str,
    ) -> BoxFuture<'a, Result<Fetch, OriginError>>;

    /// Stores `body` under `key` (with its SHA-256 as the integrity checksum); returns the
    /// origin's entity tag.
    fn put<'a>(
        &'a self,
        key: &'a str,
        body: Bytes,
        sha256: [u8; 32],
        content_type: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, OriginError>>;

    /// The length, media type and entity tag of `key` (HEAD), without its body; `None`
    /// when the origin has no such object.
    fn head<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<OriginHead>, OriginError>>;

    /// A page of the keys under `prefix` after `start_after` (at most `max`, grouped by
    /// `delimiter`), in the gateway's key space.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        delimiter: Option<&'a str>,
        start_after: Option<&'a str>,
        max: usize,
    ) -> BoxFuture<'a, Result<OriginPage, OriginError>>;

    /// Deletes `key` (succeeds when absent).
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), OriginError>>;

    /// A short description for logs (`s3://bucket/prefix`).
    fn describe(&self) -> String;
}

/// What a cold ranged read does besides fetching its range (`--origin-fill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RangeFill {
    /// Also start storing the whole object, in the background.
    #[default]
    Whole,
    /// Fetch only the range.
    Range,
}

/// What a PUT does with the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WritePolicy {
    /// A PUT is acknowledged only after the origin stored it; a DELETE deletes there too.
    WriteThrough,
    /// PUTs and DELETEs stay in the gateway (lost on restart or eviction).
    CacheOnly,
}
