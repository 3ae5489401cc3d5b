//! What a version carries for its clients beyond its bytes and media type: user metadata
//! (S3's `x-amz-meta-*`) and the standard headers S3 stores with an object. Held by the
//! version (on the heap, only when there are any), never in its frame: one-sided readers
//! get bytes, HTTP and S3 clients get these with them.

/// At most this many bytes of user metadata (names and values) a version may carry, as S3.
pub const MAX_USER_METADATA: usize = 2048;

/// User metadata and stored headers of a version.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectHeaders {
    /// User metadata: names (lower case, without `x-amz-meta-`) and values, by name.
    pub metadata: Vec<(String, String)>,
    /// `Cache-Control`.
    pub cache_control: Option<String>,
    /// `Content-Disposition`.
    pub content_disposition: Option<String>,
    /// `Content-Encoding`.
    pub content_encoding: Option<String>,
    /// `Content-Language`.
    pub content_language: Option<String>,
    /// `Expires`, an HTTP date as sent.
    pub expires: Option<String>,
    /// Checksums the upload named and that were verified against its bytes, besides the
    /// SHA-256 every version has: algorithm (`crc32`, `crc32c`, `sha1`, `crc64nvme`) and
    /// value as the client sent it (S3's `x-amz-checksum-*`).
    pub checksums: Vec<(String, String)>,
}

/// User metadata over [`MAX_USER_METADATA`] bytes (their length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} bytes of user metadata; at most {MAX_USER_METADATA} are allowed")]
pub struct MetadataTooLarge(pub usize);

impl ObjectHeaders {
    /// Whether there is nothing to keep.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Bytes of user metadata, as S3 counts them against its 2 KiB limit.
    pub fn metadata_len(&self) -> usize {
        self.metadata.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Sets the user metadata from `pairs` (names lower-cased, sorted), or says why not:
    /// more than [`MAX_USER_METADATA`] bytes.
    pub fn with_metadata(
        mut self,
        pairs: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, MetadataTooLarge> {
        let mut metadata: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        metadata.sort();
        self.metadata = metadata;
        let len = self.metadata_len();
        if len > MAX_USER_METADATA {
            return Err(MetadataTooLarge(len));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_bounded_and_kept_in_name_order() {
        let h = ObjectHeaders::default()
            .with_metadata([("Zeta".into(), "1".into()), ("alpha".into(), "2".into())])
            .unwrap();
        assert_eq!(h.metadata[0].0, "alpha");
        assert_eq!(h.metadata[1].0, "zeta");
        assert!(!h.is_empty() && ObjectHeaders::default().is_empty());
        let big = ObjectHeaders::default().with_metadata([("k".into(), "v".repeat(2048))]);
        assert!(big.unwrap_err().to_string().contains("at most 2048"));
    }
}
