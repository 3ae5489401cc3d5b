//! Why a store operation failed.

use std::time::Duration;

use super::arena::ReserveError;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The memory budget cannot hold the value.
    #[error("memory budget exhausted: {needed} more bytes needed, {allocated} of {budget} in use")]
    InsufficientStorage {
        /// Bytes the value needed.
        needed: u64,
        /// Bytes allocated when it was refused.
        allocated: u64,
        /// The budget.
        budget: u64,
    },
    /// The body did not have the declared length.
    #[error("the body has {got} bytes but {declared} were declared")]
    LengthMismatch {
        /// Declared length.
        declared: u64,
        /// Bytes that arrived (so far, when too many).
        got: u64,
    },
    /// Registering memory with the fabric failed.
    #[error("fabric registration failed: {0}")]
    Fabric(String),
    /// Memory is full and nothing became reusable in time (leases still running).
    #[error("memory is full of leased values; retry in {retry_after:?}")]
    Busy {
        /// When retrying makes sense.
        retry_after: Duration,
    },
    /// A conditional write's precondition did not hold at commit.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A one-sided write's bytes in memory do not hash to the frame checksum its client
    /// computed before writing: nothing of it was stored.
    #[error("the bytes written one-sided for '{key}' hash to frame checksum {got:016x}, not {said:016x} as the client computed: nothing was stored for it (was the buffer changed while it was written?)")]
    ChecksumMismatch {
        /// The value's key.
        key: String,
        /// The client's checksum.
        said: u64,
        /// The checksum of the bytes in memory.
        got: u64,
    },
    /// A one-sided upload refused as a whole.
    #[error(transparent)]
    Upload(#[from] super::onesided::UploadError),
    /// A conditional write named a current version (`If-Match`) and the key has none:
    /// HTTP answers 412 (RFC 9110), S3 `404 NoSuchKey`.
    #[error("precondition failed: {0}")]
    NoCurrentVersion(String),
}

impl From<ReserveError> for StoreError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::NeedRoom | ReserveError::NeedAllocation => StoreError::Busy {
                retry_after: Duration::from_secs(1),
            },
            ReserveError::Never(e) => e,
        }
    }
}
