//! How the disk tier touches the file system: never through a link, and never a file it
//! did not create.
//!
//! - Directories are made `0700` and files `0600` (created so, never `chmod`-ed after);
//!   the chain of directories from `--disk` down to a tier's own is checked: no link, a
//!   directory, owned by this process's user. An existing `--disk` others may read is
//!   warned about at start.
//! - Files are opened with `O_NOFOLLOW` (a planted link fails to open) and `O_NONBLOCK`
//!   (a planted FIFO cannot hang the start), then checked to be regular files of this
//!   user with one link.
//! - Each directory has an identity (`DIR/identity`: random, written at creation) that every
//!   segment's header repeats ([`SegmentHeader`]): a file that does not start with it is
//!   not one of the tier's, and is reported (one log line, `rasa_disk_foreign_files_total`)
//!   and left alone: never read as records, cut, deleted or written.
//! - A file is deleted only when the name still points at the file the tier opened (same
//!   device and inode, checked without following a link).

use super::error::DiskError;
use crate::catalog;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

/// The flags every open of an existing file adds: no link at the last component, no wait
/// on a FIFO.
fn guard_flags() -> i32 {
    (OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC).bits() as i32
}

/// This process's effective user.
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why `meta` (of a file the tier would use) is not the tier's, if it is not.
fn not_ours(meta: &std::fs::Metadata) -> Option<&'static str> {
    if !meta.file_type().is_file() {
        Some("not a regular file")
    } else if meta.uid() != euid() {
        Some("owned by another user")
    } else if meta.nlink() != 1 {
        Some("it has other hard links")
    } else {
        None
    }
}

/// Reports `path`, a file in a tier's directory that is not the tier's: one warning, one
/// count. It is left as it is.
pub(super) fn report_foreign(path: &Path, why: &str) {
    tracing::warn!(file = %path.display(), reason = why, "a file in the disk tier's directory is not one of its own; left alone");
    catalog::DISK_FOREIGN_FILES.counter().increment(1);
}

/// Makes `dir` (and what is missing above it) `0700`, then checks every directory from
/// `root` down to `dir`: a directory, not a link, owned by this user. `root` is `--disk`
/// (itself warned about when others may read it). The reason otherwise, in one line.
pub(super) fn make_dir(root: &Path, dir: &Path) -> Result<(), DiskError> {
    // Before creating anything: a link on the way would be followed by the creation.
    for (at, _) in chain(root, dir) {
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(DiskError::Link {
                dir: dir.to_owned(),
                link: at,
            });
        }
    }
    DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
        .map_err(|e| DiskError::io(dir, "create it", e))?;
    for (at, is_root) in chain(root, dir) {
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| DiskError::io(dir, format!("read {}", at.display()), e))?;
        let why = if meta.file_type().is_symlink() {
            Some("is a symbolic link")
        } else if !meta.is_dir() {
            Some("is not a directory")
        } else if meta.uid() != euid() {
            Some("belongs to another user")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(DiskError::NotOurs {
                dir: dir.to_owned(),
                at,
                why,
            });
        }
        if is_root && meta.mode() & 0o077 != 0 {
            tracing::warn!(
                dir = %at.display(),
                mode = format!("{:04o}", meta.mode() & 0o7777),
                "the disk tier's directory is open to other users: its files are 0600, but `chmod 700` it"
            );
        }
    }
    Ok(())
}

/// `root`, then each directory below it down to `dir` (whether it is `root`).
fn chain(root: &Path, dir: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = vec![(root.to_path_buf(), true)];
    if let Ok(rest) = dir.strip_prefix(root) {
        let mut at = root.to_path_buf();
        for part in rest.components() {
            at.push(part);
            out.push((at.clone(), false));
        }
    }
    out
}

/// Creates `path`, which must not exist, `0600`, without following a link.
pub(super) fn create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(guard_flags())
        .open(path)
}

/// Opens `path` (existing) for reading and writing if it is a regular file of this user
/// with one link; `Ok(Err(why))` when it is a file that is not the tier's.
pub(super) fn open_existing(path: &Path) -> io::Result<Result<File, &'static str>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(guard_flags())
        .open(path)
    {
        Ok(f) => f,
        // ELOOP: the name is a link.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(Err("a symbolic link"))
        }
        Err(e) => return Err(e),
    };
    Ok(match not_ours(&file.metadata()?) {
        Some(why) => Err(why),
        None => Ok(file),
    })
}

/// Opens or creates `path` (a lock or marker file of the tier), `0600`, without following a
/// link; refused when it exists and is not the tier's.
pub(super) fn open_or_create(path: &Path) -> io::Result<File> {
    match create(path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match open_existing(path)? {
            Ok(f) => Ok(f),
            Err(why) => Err(io::Error::other(format!("{} is {why}", path.display()))),
        },
        Err(e) => Err(e),
    }
}

/// Deletes `path` if it is still `file` (same device and inode; a name replaced since,
/// or made a link, is left alone and reported). Whether it was deleted.
pub(super) fn remove_if_same(path: &Path, file: &File) -> io::Result<bool> {
    let held = file.metadata()?;
    let now = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if now.dev() != held.dev() || now.ino() != held.ino() {
        report_foreign(path, "replaced since the disk tier opened it");
        return Ok(false);
    }
    std::fs::remove_file(path)?;
    Ok(true)
}

/// Bytes of a directory's identity.
pub(super) const ID_LEN: usize = 16;

/// The name of a directory's identity file.
pub(super) const IDENTITY: &str = "identity";

/// The identity of `dir` (`DIR/identity`), made when absent.
pub(super) fn identity(dir: &Path) -> Result<[u8; ID_LEN], DiskError> {
    let path = dir.join(IDENTITY);
    match create(&path) {
        Ok(f) => {
            let id: [u8; ID_LEN] = rand::random();
            let text = format!("{}\n", hex::encode(id));
            f.write_all_at(text.as_bytes(), 0)
                .and_then(|()| f.sync_all())
                .map_err(|e| DiskError::io(&path, "write it", e))?;
            Ok(id)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            read_identity(dir)?.ok_or_else(|| DiskError::Identity {
                path: path.clone(),
                why: "vanished while read".into(),
            })
        }
        Err(e) => Err(DiskError::io(&path, "create it", e)),
    }
}

/// The identity of `dir`, if it has one.
pub(super) fn read_identity(dir: &Path) -> Result<Option<[u8; ID_LEN]>, DiskError> {
    let path = dir.join(IDENTITY);
    let mut f = match open_existing(&path) {
        Ok(Ok(f)) => f,
        Ok(Err(why)) => {
            return Err(DiskError::Identity {
                path,
                why: format!("is {why}; not the disk tier's"),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DiskError::io(&path, "open it", e)),
    };
    let mut text = String::new();
    (&mut f)
        .take(64)
        .read_to_string(&mut text)
        .map_err(|e| DiskError::io(&path, "read it", e))?;
    hex::decode(text.trim())
        .ok()
        .and_then(|b| <[u8; ID_LEN]>::try_from(b).ok())
        .map(Some)
        .ok_or_else(|| DiskError::Identity {
            path: path.clone(),
            why: "is not a disk tier's identity".into(),
        })
}

/// Removes `path`, a file the tier made (a marker, its lock, its identity), if it is one
/// of the tier's; whether it was there. A foreign file of that name is reported, left.
pub(super) fn take_marker(path: &Path) -> bool {
    match open_existing(path) {
        Ok(Ok(f)) => remove_if_same(path, &f).unwrap_or(false),
        Ok(Err(why)) => {
            report_foreign(path, why);
            false
        }
        Err(_) => false,
    }
}

/// The head of every segment file: `"RSEG"`, the format, the directory's identity and the
/// segment's number. 32 bytes; records follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SegmentHeader {
    pub identity: [u8; ID_LEN],
    pub id: u32,
}

/// Bytes of a segment's header.
pub(super) const SEGMENT_HEADER: u64 = 32;
const SEGMENT_MAGIC: &[u8; 4] = b"RSEG";
const SEGMENT_FORMAT: u32 = 1;

impl SegmentHeader {
    /// Its bytes (the last 4: XXH3 of the first 28).
    pub fn encode(&self) -> [u8; SEGMENT_HEADER as usize] {
        let mut b = [0u8; SEGMENT_HEADER as usize];
        b[0..4].copy_from_slice(SEGMENT_MAGIC);
        b[4..8].copy_from_slice(&SEGMENT_FORMAT.to_le_bytes());
        b[8..24].copy_from_slice(&self.identity);
        b[24..28].copy_from_slice(&self.id.to_le_bytes());
        let check = xxhash_rust::xxh3::xxh3_64(&b[..28]) as u32;
        b[28..32].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Whether `file` starts with this header.
    pub fn heads(&self, file: &File) -> bool {
        let mut b = [0u8; SEGMENT_HEADER as usize];
        file.read_exact_at(&mut b, 0).is_ok() && b == self.encode()
    }
}
