//! # rasa-openapi — Rasa's HTTP contract
//!
//! The wire types that the gateway sends and the SDK reads, in one place so the two can
//! never drift apart, each with a [`utoipa::ToSchema`] so the OpenAPI document describes
//! exactly what is serialized. The document itself is assembled by the gateway (which
//! owns the handlers) and checked in as `openapi/openapi.json`; an end-to-end test fails
//! when that file no longer matches what the gateway serves.
//!
//! This crate knows nothing of libfabric or of how values are stored.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub mod batch;
pub mod cluster;
pub mod key;
pub mod stats;
pub use batch::{
    DeleteBatchRequest, DeleteBatchResponse, DeleteResult, ExistsBatchRequest, ExistsBatchResponse,
    ExistsResult, PutBatchItem, PutBatchManifest, PutBatchResponse, UploadCommit, UploadRegion,
    UploadSlot, BATCH_CONTENT_TYPE,
};
pub use cluster::{
    ClusterMember, ClusterView, HotKey, MemberState, ReplicaRule, HOP_HEADER, TIMEOUT_HEADER,
};

/// Media type of every error body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Name of the response header that carries the version id of the bytes served.
pub const VERSION_HEADER: &str = "rasa-version";

/// Name of the response header (`true`) of an answer that comes from the gateway's origin
/// with no stored version behind it — an object too large to cache, streamed through, or
/// a HEAD that missed (answered with the origin's HEAD): no version, no SHA-256 `ETag`, no
/// descriptor.
pub const PASS_THROUGH_HEADER: &str = "rasa-pass-through";

/// Name of the response header with the stored version's frame checksum (XXH3-64, 16 hex
/// digits; see the frame format in `rasa-fastpath`), on every answer from a stored
/// version. An HTTP reader that knows the frame format [`FRAME_FORMAT_HEADER`] names
/// checks a whole body with it (~20 GB/s a core) rather than with the SHA-256 `ETag`
/// (~2 GB/s): the checksum covers the payload and a header rebuilt from the key, the
/// version id and the length.
pub const FRAME_CHECKSUM_HEADER: &str = "rasa-frame-checksum";

/// Name of the response header with the frame format the [`FRAME_CHECKSUM_HEADER`] is of.
pub const FRAME_FORMAT_HEADER: &str = "rasa-frame-format";

/// Name of the response header (`true`) of a cold object streamed while it is fetched
/// from the gateway's origin: its version, SHA-256 `ETag` and descriptor exist only once
/// it is stored, so the answer has none; a body cut short means the fetch failed.
pub const FILLING_HEADER: &str = "rasa-filling";

/// A body of raw bytes, of any media type.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct Binary(pub Vec<u8>);

/// Everything a client needs to read one immutable version: over HTTP by key and
/// version, or one-sided over the fabric by address and remote key until the lease ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Descriptor {
    /// The object key.
    #[schema(example = "photos/cat.jpg")]
    pub key: String,
    /// Version id: 16 lowercase hex digits, never reused (not even across restarts).
    #[schema(example = "5f3a9c0e00000001")]
    pub version: String,
    /// Payload length in bytes.
    pub length: u64,
    /// SHA-256 of the payload, lowercase hex; the `ETag` is this value in quotes. Empty
    /// only in the answer to a one-sided write's commit (`POST /v1/batch/commit/{upload}`):
    /// its SHA-256 is computed when a reader first needs it, not on the write path.
    #[schema(example = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")]
    pub sha256: String,
    /// Frame checksum (see `checksum_algorithm`) over payload and frame header, 16 hex
    /// digits. Fast-path readers validate every read against it.
    #[schema(example = "9d1b6f0a4c2e7d31")]
    pub checksum: String,
    /// Algorithm of `checksum`.
    #[schema(example = "xxh3-64")]
    pub checksum_algorithm: String,
    /// Media type given when the value was stored.
    #[schema(example = "image/jpeg")]
    pub content_type: String,
    /// When this version was stored (RFC 3339).
    pub created_at: String,
    /// Lease length in milliseconds. A fast-path reader must not start a read later than
    /// this long after it *sent* the request that returned this descriptor. `0` when the
    /// descriptor carries no remote address (nothing was leased).
    pub lease_ms: u64,
    /// The gateway's view of the lease end (RFC 3339). Clients should compute their own
    /// deadline from `lease_ms` and their send time, which is safe under clock skew.
    pub lease_expires_at: String,
    /// Remote address of the frame (header, then payload) on the fabric; `null` when the
    /// fast path is off, in the answer to a PUT without `?lease=true`, and to a PUT whose
    /// token may not read.
    pub addr: Option<u64>,
    /// Remote key of the memory region holding the frame; `null` when `addr` is (a key
    /// opens memory one-sided).
    pub rkey: Option<u64>,
    /// Length of the frame header that precedes the payload at `addr`.
    pub frame_header_len: u32,
    /// Format of the frame at `addr` (docs/design/frame-format.md). A reader that does
    /// not know it reads over HTTP instead.
    #[serde(default = "format_one")]
    #[schema(example = 2)]
    pub frame_format: u16,
    /// Block size of the frame's table of block checksums, in bytes; 0 when the frame has
    /// none (ranges are then read over HTTP).
    #[serde(default)]
    #[schema(example = 65536)]
    pub block_size: u32,
    /// Where the block table starts, in bytes from `addr` (header, payload, then the
    /// table: one XXH3-64 per block); `null` without a table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_table_offset: Option<u64>,
    /// The gateway process that holds the frame (its incarnation, 16 hex digits, as
    /// `GET /v1/fabric` reports it): a descriptor of another incarnation names memory of a
    /// process that has ended.
    #[serde(default)]
    pub incarnation: String,
    /// The cluster node that holds the frame (`--node-id`); absent for a single gateway.
    /// One-sided reads of this descriptor go to that node's fabric endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Where the frame is on the gateway's further fabric endpoints (`GET /v1/fabric`'s
    /// `endpoints` after the first, in that order), when it serves several providers at
    /// once: `addr` and `rkey` above are the first endpoint's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<RemoteRegion>,
}

/// Where a frame is on one fabric endpoint: its remote address and key there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RemoteRegion {
    /// Remote address of the frame on this endpoint.
    pub addr: u64,
    /// Remote key of the memory region holding the frame, in this endpoint's domain.
    pub rkey: u64,
}

fn format_one() -> u16 {
    1
}

/// Stable machine-readable error codes. New codes may appear; clients should treat
/// unknown ones by their HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    /// The key is empty, too long, not UTF-8, or has control characters or `.`/`..` segments.
    InvalidKey,
    /// The `version` parameter is not a version id.
    InvalidVersion,
    /// A header, query parameter or body is malformed.
    InvalidRequest,
    /// No object (or no such version) under this key.
    NotFound,
    /// No route matches the path.
    NoSuchRoute,
    /// `/v1/ns/{ns}/…` names a namespace the gateway does not have (`404`).
    NoSuchNamespace,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// An `If-Match` / `If-None-Match` / `If-Unmodified-Since` precondition failed.
    PreconditionFailed,
    /// The requested range does not overlap the object.
    RangeNotSatisfiable,
    /// The body is larger than the gateway's maximum object size.
    PayloadTooLarge,
    /// The gateway's memory budget cannot hold the value.
    InsufficientStorage,
    /// The body ended before its declared length, or the upload failed midway.
    IncompleteBody,
    /// The request body sent with `Content-Digest` does not match what arrived.
    DigestMismatch,
    /// Too many keys in one batch request.
    TooManyKeys,
    /// A one-sided upload's commit names no open upload: committed already, never
    /// reserved, or reclaimed when its lease ended (`404`; `410` when it just expired).
    NoSuchUpload,
    /// The gateway is shutting down, not ready, or out of reusable memory for now.
    Unavailable,
    /// The origin (S3) failed, refused access, or could not be reached.
    OriginUnavailable,
    /// The origin (S3) did not answer within `--origin-timeout`.
    OriginTimeout,
    /// A write this cluster member passed on to the key's owner reached it but got no
    /// answer (`504`): it may or may not have been stored. Read the key before writing
    /// it again. (When nothing reached the owner the answer is `503 unavailable`.)
    OwnerUnreachable,
    /// An unexpected failure inside the gateway.
    Internal,
    /// No bearer token, or one the gateway does not know (`401`, with `WWW-Authenticate`).
    Unauthorized,
    /// The token is valid but lacks the scope this route needs (`403`).
    Forbidden,
    /// The gateway is handling as many requests as `--max-concurrent-requests` allows;
    /// retry after `Retry-After` seconds (`503`).
    Overloaded,
    /// The request body stalled longer than `--body-timeout` (`408`); nothing was stored.
    RequestTimeout,
    /// The request's header section is larger than `--max-header-size` (`431`).
    HeadersTooLarge,
    /// A code this client version does not know.
    #[serde(other)]
    Unknown,
}

impl ProblemCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidKey => "invalid_key",
            Self::InvalidVersion => "invalid_version",
            Self::InvalidRequest => "invalid_request",
            Self::NotFound => "not_found",
            Self::NoSuchRoute => "no_such_route",
            Self::NoSuchNamespace => "no_such_namespace",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::PreconditionFailed => "precondition_failed",
            Self::RangeNotSatisfiable => "range_not_satisfiable",
            Self::PayloadTooLarge => "payload_too_large",
            Self::InsufficientStorage => "insufficient_storage",
            Self::IncompleteBody => "incomplete_body",
            Self::DigestMismatch => "digest_mismatch",
            Self::NoSuchUpload => "no_such_upload",
            Self::TooManyKeys => "too_many_keys",
            Self::Unavailable => "unavailable",
            Self::OriginUnavailable => "origin_unavailable",
            Self::OriginTimeout => "origin_timeout",
            Self::OwnerUnreachable => "owner_unreachable",
            Self::Internal => "internal",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::Overloaded => "overloaded",
            Self::RequestTimeout => "request_timeout",
            Self::HeadersTooLarge => "headers_too_large",
            Self::Unknown => "unknown",
        }
    }
}

/// An error, as `application/problem+json` (RFC 9457).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// URI naming the problem type: `urn:rasa:problem:<code>`.
    #[serde(rename = "type")]
    #[schema(example = "urn:rasa:problem:not_found")]
    pub type_uri: String,
    /// Short summary of the problem type.
    #[schema(example = "Not Found")]
    pub title: String,
    /// The HTTP status code.
    #[schema(example = 404)]
    pub status: u16,
    /// What went wrong with this request, for humans.
    #[schema(example = "no object under key 'photos/cat.jpg'")]
    pub detail: String,
    /// Stable machine-readable code.
    pub code: ProblemCode,
    /// The request path the problem is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// Percent-encodes an object key for a URL path (`/v1/objects/{key}`), keeping `/` as the
/// separator: everything but RFC 3986 unreserved characters and `/` is encoded.
pub fn key_to_path(key: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
    // Everything but unreserved characters and '/' (RFC 3986).
    const PATH: &AsciiSet = &CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}')
        .add(b'[')
        .add(b']')
        .add(b'\\')
        .add(b'^')
        .add(b'|')
        .add(b'&')
        .add(b'+')
        .add(b';')
        .add(b'=')
        .add(b':')
        .add(b'@')
        .add(b'$')
        .add(b',')
        .add(b'\'')
        .add(b'!')
        .add(b'(')
        .add(b')')
        .add(b'*');
    utf8_percent_encode(key, PATH).to_string()
}

/// One entry of an object listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ObjectSummary {
    /// The object key.
    pub key: String,
    /// Current version id.
    pub version: String,
    /// Payload length in bytes.
    pub length: u64,
    /// Entity tag (quoted SHA-256 hex), as in the `ETag` header.
    pub etag: String,
}

/// A page of an object listing, in key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ObjectList {
    /// Objects on this page.
    pub items: Vec<ObjectSummary>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// Request for several descriptors in one round trip.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DescriptorBatchRequest {
    /// Keys to resolve, answered in this order.
    #[schema(example = json!(["photos/cat.jpg", "photos/dog.jpg"]))]
    pub keys: Vec<String>,
}

/// The answer for one key of a batch: a descriptor or a problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DescriptorResult {
    /// The key as requested.
    pub key: String,
    /// The descriptor, when the key resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptor: Option<Descriptor>,
    /// Why the key did not resolve (`not_found`, `invalid_key`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

impl DescriptorResult {
    /// The result for `key`: its descriptor, or the problem that kept it from one.
    pub fn of(key: String, r: Result<Descriptor, Problem>) -> Self {
        let (descriptor, error) = match r {
            Ok(d) => (Some(d), None),
            Err(p) => (None, Some(p)),
        };
        Self {
            key,
            descriptor,
            error,
        }
    }

    /// The descriptor, or the problem; neither (a gateway fault) is said as a problem.
    pub fn into_result(self) -> Result<Descriptor, Problem> {
        match (self.descriptor, self.error) {
            (Some(d), _) => Ok(d),
            (None, Some(p)) => Err(p),
            (None, None) => Err(Problem {
                type_uri: "urn:rasa:problem:unknown".into(),
                title: "Unknown".into(),
                status: 500,
                detail: "the gateway returned neither a descriptor nor a problem".into(),
                code: ProblemCode::Unknown,
                instance: None,
            }),
        }
    }
}

/// Answer to a [`DescriptorBatchRequest`]: one result per requested key, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DescriptorBatchResponse {
    /// One result per requested key, in request order.
    pub results: Vec<DescriptorResult>,
}

/// How SDK clients reach the gateway's fast path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FabricInfo {
    /// Whether one-sided reads are served. When `false`, use HTTP.
    pub enabled: bool,
    /// libfabric provider name (e.g. `efa`, `tcp;ofi_rxm`), when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The gateway endpoint's address (`fi_getname`), base64, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// libfabric address format of `address`, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_format: Option<String>,
    /// Whether descriptor addresses are virtual addresses (`true`) or offsets into the
    /// memory region (`false`), when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_addressing: Option<bool>,
    /// Random id of this gateway process (16 hex digits), drawn at every start; the version
    /// ids it assigns count up from it.
    pub incarnation: String,
    /// Every fabric endpoint, the one above first: a gateway may serve local readers over
    /// `shm` and remote ones over `efa` or `tcp;ofi_rxm` at once. A descriptor's
    /// `endpoints` give a frame's address and key on the second and later ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<FabricEndpoint>,
    /// The gateway's host, when one of its endpoints is `shm` (which only readers on that
    /// host, in its PID namespace and allowed to ptrace it, can use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<FabricHost>,
}

/// One fabric endpoint of the gateway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FabricEndpoint {
    /// libfabric provider name (`efa`, `tcp;ofi_rxm`, `shm`, …).
    pub provider: String,
    /// The endpoint's address (`fi_getname`), base64.
    pub address: String,
    /// libfabric address format of `address`.
    pub address_format: String,
    /// Whether descriptor addresses on this endpoint are virtual addresses (`true`) or
    /// offsets into the memory region (`false`).
    pub virtual_addressing: bool,
}

/// Where the gateway runs, for readers deciding whether they can use `shm`: the same boot
/// id and PID namespace, and the probe read with `process_vm_readv` from `pid`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FabricHost {
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    #[schema(example = "0f3c9a52-6d8e-4b1f-9a7d-2c5e8b1d4f60")]
    pub boot_id: String,
    /// The gateway's PID namespace (`/proc/self/ns/pid`).
    #[schema(example = "pid:[4026531836]")]
    pub pid_namespace: String,
    /// The gateway's process id in that namespace.
    pub pid: u32,
    /// Address, in the gateway's memory, of `probe`'s bytes.
    pub probe_addr: u64,
    /// What a reader finds at `probe_addr` when cross-memory attach works (ASCII).
    #[schema(example = "rasa-probe 5f3a9c0e00000000")]
    pub probe: String,
}

/// Liveness / readiness answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` when healthy / ready.
    #[schema(example = "ok")]
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_codes_serialize_as_their_wire_names() {
        for code in [
            ProblemCode::InvalidKey,
            ProblemCode::NoSuchRoute,
            ProblemCode::NoSuchNamespace,
            ProblemCode::RangeNotSatisfiable,
            ProblemCode::InsufficientStorage,
            ProblemCode::Unauthorized,
            ProblemCode::HeadersTooLarge,
            ProblemCode::RequestTimeout,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        let unknown: ProblemCode = serde_json::from_str("\"from_the_future\"").unwrap();
        assert_eq!(unknown, ProblemCode::Unknown);
    }
}
