//! Why a disk tier could not be opened or removed, each reason naming the directory.

use std::path::PathBuf;

/// Why a disk tier could not be opened, checked or removed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// A file-system call on the tier's directory or one of its files failed.
    #[error("--disk {}: cannot {doing}: {source}", at.display())]
    Io {
        /// The directory or file.
        at: PathBuf,
        /// What was being done.
        doing: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory on the way is a symbolic link (never followed).
    #[error("--disk {}: {} is a symbolic link; the disk tier does not follow links (give the directory it points to)", dir.display(), link.display())]
    Link {
        /// The tier's directory.
        dir: PathBuf,
        /// The link.
        link: PathBuf,
    },
    /// A directory on the way is not one of this user's directories.
    #[error("--disk {}: {} {why}; the disk tier uses only directories of its own", dir.display(), at.display())]
    NotOurs {
        /// The tier's directory.
        dir: PathBuf,
        /// What is wrong where.
        at: PathBuf,
        /// What is wrong (`is not a directory`, `belongs to another user`).
        why: &'static str,
    },
    /// Another process holds the directory's lock.
    #[error("--disk {}: in use by another process (its lock file is held)", .0.display())]
    Locked(PathBuf),
    /// The file system cannot hold `--disk-size`.
    #[error("--disk {}: --disk-size is {size} but its file system has {free} free (plus {existing} in its segments)", dir.display())]
    NoRoom {
        /// The tier's directory.
        dir: PathBuf,
        /// `--disk-size`.
        size: bytesize::ByteSize,
        /// Free on its file system.
        free: bytesize::ByteSize,
        /// Held by its segments already.
        existing: bytesize::ByteSize,
    },
    /// A file where the tier's identity belongs is not one.
    #[error("--disk: {} {why}", path.display())]
    Identity {
        /// The identity file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A removed tier's directory holds files that are not the tier's (they are left).
    #[error("{}: left in place ({source}): it holds files that are not the disk tier's", dir.display())]
    LeftInPlace {
        /// The directory.
        dir: PathBuf,
        /// Why it could not be removed.
        #[source]
        source: std::io::Error,
    },
}

impl DiskError {
    /// Doing `doing` at `at` failed with `source`.
    pub(super) fn io(
        at: &std::path::Path,
        doing: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            at: at.to_owned(),
            doing: doing.into(),
            source,
        }
    }
}
