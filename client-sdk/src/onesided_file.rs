//! `put_file` one-sided: a file written straight into an upload region a piece at a time
//! (read, hashed into the frame checksum, written one-sided, on the blocking pool), then
//! committed; memory does not grow with the file. Over HTTP when the fast path is off or
//! the file is small, or when no region could be had or a write failed (the file is then
//! sent from its start; the region left behind is reclaimed when its lease ends).

use std::io::Read;
use std::path::Path;

use rasa_fastpath::frame::FrameHasher;
use rasa_fastpath::reader::RemoteWrite;
use rasa_openapi::Descriptor;

use crate::client::Node;
use crate::files::{OnProgress, REPORT_EVERY};
use crate::onesided::{commit_deadline, region_on, slot_identity};
use crate::{Error, FastPath, ReadPath};

/// Bytes of the file read and written at a time.
const PIECE: usize = 8 << 20;

impl Node {
    /// Stores the file at `path` as a new version of `key`: one-sided when
    /// [`Node::writes_one_sided`], else streamed over HTTP; `on` told the bytes read so far.
    pub(crate) async fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: Option<&str>,
        on: Option<&OnProgress>,
    ) -> Result<Descriptor, Error> {
        let input = |e: std::io::Error| Error::Input(format!("reading {}: {e}", path.display()));
        let length = tokio::fs::metadata(path).await.map_err(input)?.len();
        if self.writes_one_sided(length) {
            match self
                .put_file_one_sided(key, path, length, content_type, on)
                .await
            {
                Err(Error::FastPath(why)) if self.fast_path != FastPath::Required => {
                    tracing::debug!(%why, "one-sided write refused; the file goes over HTTP");
                }
                done => return done,
            }
        }
        let d = self.http.put_file(key, path, content_type, on).await?;
        self.counters.wrote(ReadPath::Http, 1);
        Ok(d)
    }

    async fn put_file_one_sided(
        &self,
        key: &str,
        path: &Path,
        length: u64,
        content_type: Option<&str>,
        on: Option<&OnProgress>,
    ) -> Result<Descriptor, Error> {
        rasa_openapi::key::validate(key).map_err(|why| Error::invalid_key(key, &why))?;
        let input = |e: std::io::Error| Error::Input(format!("reading {}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(input)?;
        let region = self
            .reserve(std::iter::once((key, length)), content_type)
            .await?;
        let slot = &region.items[0];
        if let Some(p) = &slot.error {
            return Err(Error::Problem(p.clone()));
        }
        let id = slot_identity(slot, key, length)?;
        let deadline = commit_deadline(&region);
        let state = self.fabric.ready_endpoint(deadline).await?;
        let start = region_on(&region, &state)?;
        let (base, rkey) = (start.addr + slot.offset, start.rkey);
        let timeout = deadline
            .saturating_duration_since(std::time::Instant::now())
            .min(self.fabric.call_timeout.left());
        let on = on.cloned();
        let (written, _) = self
            .fabric
            .on_reader(state, file, move |reader, file| {
                let started = std::time::Instant::now();
                let mut hasher = FrameHasher::new();
                let mut buf = vec![0u8; PIECE.min(length as usize)];
                let mut at = 0u64;
                loop {
                    let n = match fill(file, &mut buf, at, on.as_ref()) {
                        Ok(n) => n,
                        Err(e) => return Ok(Err(e)),
                    };
                    if n == 0 {
                        break;
                    }
                    if at + n as u64 > length {
                        break; // grew while read: refused below
                    }
                    hasher.update(&buf[..n]);
                    let left = timeout.saturating_sub(started.elapsed());
                    let piece = RemoteWrite {
                        addr: base + at,
                        rkey,
                        bytes: &buf[..n],
                    };
                    reader.write_many(&[piece], &|_, _| {}, left)?;
                    at += n as u64;
                }
                if at != length {
                    let why = format!("it changed while read ({length} bytes, then {at} or more)");
                    return Ok(Err(std::io::Error::other(why)));
                }
                Ok(Ok(hasher.seal(id, 0).1))
            })
            .await;
        let checksum = written?.map_err(input)?;
        let mut one = self
            .commit(&region, &[key], vec![format!("{checksum:016x}")], true)
            .await?;
        one.pop().expect("one result").map_err(Error::Problem)
    }
}

/// Reads from `file` until `buf` is full or the file ends, a MiB at a time, each told to
/// `on` (`before` bytes were read earlier); the bytes read.
fn fill(
    file: &mut std::fs::File,
    buf: &mut [u8],
    before: u64,
    on: Option<&OnProgress>,
) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let end = buf.len().min(n + REPORT_EVERY as usize);
        match file.read(&mut buf[n..end]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if let Some(f) = on {
                    f(before + n as u64);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
