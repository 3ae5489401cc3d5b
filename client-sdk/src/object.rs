//! What a read returns, and the read policy.

use bytes::Bytes;

/// Whether `get` may, must or must not read one-sided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FastPath {
    /// One-sided when possible, HTTP otherwise.
    #[default]
    Auto,
    /// HTTP only.
    Off,
    /// One-sided or an error; never HTTP.
    Required,
}

/// Which path served a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// A one-sided read over the fabric.
    Fabric,
    /// An HTTP GET.
    Http,
}

impl ReadPath {
    /// `"fabric"` or `"http"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fabric => "fabric",
            Self::Http => "http",
        }
    }
}

/// A value read from the gateway.
#[derive(Clone, Debug)]
pub struct Object {
    /// The payload.
    pub bytes: Bytes,
    /// Its version id.
    pub version: String,
    /// Its SHA-256 (hex), as stored by the gateway.
    pub sha256: String,
    /// Its media type.
    pub content_type: String,
    /// Which path served it.
    pub path: ReadPath,
}

/// Metadata of a value (from `HEAD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Version id.
    pub version: String,
    /// Payload length.
    pub length: u64,
    /// Entity tag (quoted SHA-256).
    pub etag: String,
    /// Media type.
    pub content_type: String,
}
