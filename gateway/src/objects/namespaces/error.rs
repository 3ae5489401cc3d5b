//! Why the namespaces file, or a change to the namespaces, was refused.

use std::path::PathBuf;

use crate::credfile::FileError;
use crate::store::disk::DiskError;
use crate::units::UnitError;

/// What is wrong with a line of the namespaces file.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not a namespace name.
    #[error(transparent)]
    Name(#[from] rasa_openapi::key::BadNamespace),
    /// The default namespace, which is not listed.
    #[error(
        "'{}' always exists and gets what --memory leaves after the quotas",
        super::DEFAULT
    )]
    Default,
    /// A quota that is not a size.
    #[error("quota: {0}")]
    Quota(UnitError),
    /// A quota below [`super::MIN_QUOTA`].
    #[error("quota {quota} bytes of {name} is below the minimum of 1MiB")]
    QuotaTooSmall {
        /// The namespace.
        name: String,
        /// Its quota.
        quota: u64,
    },
    /// A disk quota that is not a size.
    #[error("disk quota: {0}")]
    DiskQuota(UnitError),
    /// A disk quota below [`super::MIN_DISK_QUOTA`].
    #[error("the disk quota of {0} is below the minimum of 2MiB")]
    DiskQuotaTooSmall(String),
    /// A `replicas=` field that says no rule.
    #[error("{0}")]
    Replicas(String),
    /// A second line for the same namespace.
    #[error("{0} is listed twice")]
    Twice(String),
    /// More than [`super::MAX_NAMESPACES`].
    #[error("{0} namespaces: at most {max}", max = super::MAX_NAMESPACES)]
    TooMany(usize),
}

/// Why the namespaces file (or an edit of it) was not put in force; what was in force stays.
#[derive(Debug, thiserror::Error)]
pub enum NamespacesError {
    /// The file could not be read or written, or holds an error.
    #[error(transparent)]
    File(#[from] FileError),
    /// The quotas add up to more than `--memory`.
    #[error("namespaces file {}: the quotas add up to {total} bytes, more than --memory ({memory} bytes)", path.display())]
    OverMemory {
        /// The file.
        path: PathBuf,
        /// The quotas' sum.
        total: u64,
        /// `--memory`.
        memory: u64,
    },
    /// A namespace's budget would be smaller than one of its arenas.
    #[error("namespaces file {}: {name} would get {budget} bytes, less than one of its arenas ({arena} bytes); restart to resize its arenas", path.display())]
    BelowArena {
        /// The file.
        path: PathBuf,
        /// The namespace.
        name: String,
        /// What it would get.
        budget: u64,
        /// Its arena size.
        arena: u64,
    },
    /// A new namespace's disk tier could not be opened.
    #[error("namespace {name}: {source}")]
    Disk {
        /// The namespace.
        name: String,
        /// Why.
        #[source]
        source: DiskError,
    },
    /// There is no namespaces file to edit.
    #[error("this gateway has no namespaces file (--namespaces): its buckets are the operator's --s3-bucket")]
    NoFile,
}
