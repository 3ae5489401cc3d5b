//! Segment files: append-only files of records ([`super::record`]), named by a number that
//! only grows, deleted whole, oldest first, when the disk tier is full. Each starts with a
//! header naming its directory ([`files::SegmentHeader`]): a file without it is not the
//! tier's and is left alone. Recovery scans every file of the tier's, validating every
//! record; the first record that fails ends its file's scan and the file is cut there (a
//! tail torn by a crash is dropped, never served).

use super::error::DiskError;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::files::{self, SegmentHeader, ID_LEN, SEGMENT_HEADER};
use super::record::{Head, HEAD, TOMB, VALUE};
use super::Entry;

/// A segment file's name for its number.
pub(super) fn path_of(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:08x}.seg"))
}

/// The segment files in `dir`, by number.
pub(super) fn list(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".seg")) else {
            continue;
        };
        if let Ok(id) = u32::from_str_radix(stem, 16) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// What one segment file holds, in order: each key hash with its record (`None`: a
/// tombstone).
#[derive(Debug, Default)]
pub(super) struct Scanned {
    pub records: Vec<(u64, Option<Entry>)>,
    /// Bytes of valid records (the file is cut here).
    pub valid: u64,
    /// Bytes after the last valid record.
    pub torn: u64,
}

/// Reads segment `id` (`file`, opened and checked to be the tier's by [`open_ours`]) after
/// its header, validating every record; cuts off what follows the last valid one.
pub(super) fn scan(file: &File, id: u32) -> io::Result<Scanned> {
    let len = file.metadata()?.len();
    let mut reader = io::BufReader::with_capacity(4 << 20, file);
    io::Seek::seek(&mut reader, io::SeekFrom::Start(SEGMENT_HEADER))?;
    let mut out = Scanned {
        valid: SEGMENT_HEADER,
        ..Scanned::default()
    };
    let mut body = Vec::new();
    let mut head = [0u8; HEAD];
    while out.valid + HEAD as u64 <= len {
        if reader.read_exact(&mut head).is_err() {
            break;
        }
        let Some(h) = Head::parse(&head) else { break };
        if out.valid + h.record_len() > len {
            break;
        }
        body.resize(h.body_len as usize, 0);
        if reader.read_exact(&mut body).is_err() || !h.holds(&body) {
            break;
        }
        let entry = match h.kind {
            VALUE => {
                let Some(version) = body
                    .get(rasa_fastpath::frame::VERSION_AT..rasa_fastpath::frame::VERSION_AT + 8)
                else {
                    break;
                };
                let version = u64::from_le_bytes(version.try_into().expect("8 bytes"));
                match Entry::new(id, out.valid, h.record_len(), version) {
                    Some(e) => Some(e),
                    None => break,
                }
            }
            TOMB => None,
            _ => unreachable!("parse accepts these kinds only"),
        };
        out.records.push((h.key_hash, entry));
        out.valid += h.record_len();
    }
    out.torn = len.saturating_sub(out.valid);
    if out.torn > 0 {
        file.set_len(out.valid)?;
        file.sync_data()?;
    }
    Ok(out)
}

/// Opens segment `id` of `dir` when it is one of the tier's: a regular file of this user,
/// reached without a link, that starts with the header of `identity`. A file that is not
/// is reported by name and left alone (`None`).
pub(super) fn open_ours(dir: &Path, id: u32, identity: &[u8; ID_LEN]) -> io::Result<Option<File>> {
    let path = path_of(dir, id);
    let file = match files::open_existing(&path)? {
        Ok(f) => f,
        Err(why) => {
            files::report_foreign(&path, why);
            return Ok(None);
        }
    };
    let header = SegmentHeader {
        identity: *identity,
        id,
    };
    if !header.heads(&file) {
        files::report_foreign(
            &path,
            "it does not start with this directory's segment header",
        );
        return Ok(None);
    }
    Ok(Some(file))
}

/// The segment being written.
#[derive(Debug)]
pub(super) struct Active {
    pub id: u32,
    pub file: std::sync::Arc<File>,
    pub len: u64,
}

impl Active {
    /// A new segment `id` of the directory of `identity`: created `0600` (never over an
    /// existing file), its header written.
    pub fn create(dir: &Path, id: u32, identity: &[u8; ID_LEN]) -> io::Result<Self> {
        let file = files::create(&path_of(dir, id))?;
        let header = SegmentHeader {
            identity: *identity,
            id,
        };
        file.write_all_at(&header.encode(), 0)?;
        Ok(Self {
            id,
            file: std::sync::Arc::new(file),
            len: SEGMENT_HEADER,
        })
    }

    /// Appends a record of `head` and `parts` (its body); returns where it starts.
    pub fn append(&mut self, head: &Head, parts: &[&[u8]]) -> io::Result<u64> {
        let at = self.len;
        let mut pos = at;
        let h = head.encode();
        for part in std::iter::once(&h[..]).chain(parts.iter().copied()) {
            self.file.write_all_at(part, pos)?;
            pos += part.len() as u64;
        }
        self.len = pos;
        Ok(at)
    }
}

/// Creates `dir` if missing (`0700`; every directory from `root` down checked by
/// [`files::make_dir`]) and takes its lock (`DIR/lock`, `0600`, held until the returned
/// file is dropped): a second process on the same directory would delete or overwrite the
/// first one's segments.
pub(super) fn lock_dir(root: &Path, dir: &Path) -> Result<File, DiskError> {
    files::make_dir(root, dir)?;
    let file = files::open_or_create(&dir.join("lock"))
        .map_err(|e| DiskError::io(dir, "open its lock file", e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(DiskError::Locked(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(DiskError::io(dir, "lock it", e)),
    }
}

/// Checks that `dir` (made by [`lock_dir`]) can hold a disk tier of `size` bytes: writable, with positional writes,
/// truncation and data sync (what segments need), and room for `size` beyond what its
/// segments `existing` hold already. The reason otherwise, in one line.
pub(super) fn check_dir(dir: &Path, size: u64, existing: u64) -> Result<(), DiskError> {
    // A name of its own each time (created, never opened over an existing file).
    let probe = dir.join(format!(".rasa-probe-{:016x}", rand::random::<u64>()));
    let tried = (|| -> io::Result<()> {
        let f = files::create(&probe)?;
        f.write_all_at(b"rasa", 4096)?;
        f.set_len(2)?;
        f.sync_data()?;
        let mut back = [0u8; 2];
        f.read_exact_at(&mut back, 0)?;
        if f.metadata()?.len() != 2 || back != [0, 0] {
            return Err(io::Error::other("a truncated file reads back wrong"));
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&probe);
    tried.map_err(|e| DiskError::io(dir, "use it for segment files", e))?;
    let st = rustix::fs::statvfs(dir)
        .map_err(|e| DiskError::io(dir, "read its file system's size", e.into()))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if free.saturating_add(existing) < size {
        return Err(DiskError::NoRoom {
            dir: dir.to_owned(),
            size: bytesize::ByteSize(size),
            free: bytesize::ByteSize(free),
            existing: bytesize::ByteSize(existing),
        });
    }
    Ok(())
}

/// Removes the disk tier in `dir` (a removed namespace's): its segments, lock, marker and
/// identity, then the directory. Files that are not the tier's are reported and left, and
/// the directory with them (the reason, in one line).
pub(crate) fn remove_tier(dir: &Path) -> Result<(), DiskError> {
    let identity = files::read_identity(dir)?;
    let ids = list(dir).map_err(|e| DiskError::io(dir, "list it", e))?;
    for id in ids {
        let ours = match &identity {
            Some(identity) => {
                open_ours(dir, id, identity).map_err(|e| DiskError::io(dir, "open a segment", e))?
            }
            None => {
                files::report_foreign(&path_of(dir, id), "its directory has no identity");
                None
            }
        };
        if let Some(file) = ours {
            files::remove_if_same(&path_of(dir, id), &file)
                .map_err(|e| DiskError::io(dir, format!("delete segment {id:08x}"), e))?;
        }
    }
    for name in ["lock", super::CLEAN, files::IDENTITY] {
        files::take_marker(&dir.join(name));
    }
    std::fs::remove_dir(dir).map_err(|source| DiskError::LeftInPlace {
        dir: dir.to_owned(),
        source,
    })
}
