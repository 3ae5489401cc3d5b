//! Media types the gateway assigns itself. A leaf module: both the HTTP layer and the
//! origin layer use it, so it lives below both.

/// The media type of a value stored without one (an upload without `Content-Type`, an
/// origin object without one).
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
