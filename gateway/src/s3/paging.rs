//! What a listing page holds: this member's, or another's fetched to merge with it (the
//! types both `listing` and `cluster::peers` use, in a file of their own so that neither
//! uses the other).

/// One listed key.
pub(crate) struct Listed {
    pub(crate) key: String,
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) modified: std::time::SystemTime,
    /// Its version id, when the gateway holds it (not for an origin's listing).
    pub(crate) version: Option<String>,
}

/// A page of a listing.
#[derive(Default)]
pub(crate) struct Page {
    pub(crate) contents: Vec<Listed>,
    pub(crate) prefixes: Vec<String>,
    /// Where the next page starts (after this S3 key), when there is one.
    pub(crate) next: Option<String>,
}
