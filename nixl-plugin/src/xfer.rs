//! One NIXL transfer: its items, the task that moves them on the runtime, and the state
//! NIXL polls (`checkXfer`) until it ends.

use std::ffi::{c_char, c_int};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use rasa_client::{Client, Error};

use crate::{Region, DONE, FAILED, INVALID, IN_PROGRESS, MISMATCH, NOT_FOUND};

/// How long [`Xfer::wait_end`] gives a transfer beyond its own timeout.
const END_MARGIN: Duration = Duration::from_secs(5);

/// One descriptor pair of a transfer, as the C++ engine lays it out: local memory and
/// the key (with the offset in its value) it moves to or from.
#[repr(C)]
pub struct Item {
    /// The key (UTF-8, not NUL-terminated).
    pub key: *const c_char,
    /// Its length.
    pub key_len: usize,
    /// Where in the value the bytes start (reads only; writes store whole values).
    pub offset: u64,
    /// The local memory's address.
    pub addr: usize,
    /// Its length: the bytes moved.
    pub len: usize,
    /// The registration the local memory lies in (null: none; reads then copy nothing
    /// either, but register the memory for this transfer alone).
    pub region: *const Region,
}

/// Memory NIXL lent, viewed as bytes: what a [`rasa_client::RegisteredBuffer`] lands reads in and a
/// write's `Bytes` are made of. It does not own the memory.
pub(crate) struct Raw {
    ptr: *mut u8,
    len: usize,
}

impl Raw {
    /// # Safety
    /// `addr..addr+len` is memory that stays valid (and is not freed) while the `Raw`
    /// and anything made of it lives: NIXL keeps registered memory until it deregisters
    /// it, and a transfer's memory until the transfer is released, which waits for it.
    pub(crate) unsafe fn new(addr: usize, len: usize) -> Self {
        Self {
            ptr: addr as *mut u8,
            len,
        }
    }
}

// SAFETY: plain memory, used from one task at a time (a registration is taken out of its
// place while a read lands in it; a write only reads it).
unsafe impl Send for Raw {}

impl AsMut<[u8]> for Raw {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` is valid, writable memory as `Raw::new`'s contract says.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl AsRef<[u8]> for Raw {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as above; read only.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The runtime transfers run on: one per process, made on first use.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rasa-nixl")
            .enable_all()
            .build()
            .expect("the tokio runtime of the Rasa NIXL plugin could not start")
    })
}

/// A transfer: its outcome once it has one, and the signal its end gives.
pub struct Xfer {
    state: Mutex<Option<(c_int, Option<String>)>>,
    ended: Condvar,
    limit: Duration,
}

impl Xfer {
    /// [`IN_PROGRESS`], or the outcome and why it failed.
    pub(crate) fn state(&self) -> (c_int, Option<String>) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.clone().unwrap_or((IN_PROGRESS, None))
    }

    fn end(&self, code: c_int, why: Option<String>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some((code, why));
        self.ended.notify_all();
    }

    /// Waits for the transfer to end (its own timeout and [`END_MARGIN`] at most); false
    /// when it did not.
    pub(crate) fn wait_end(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (s, _) = self
            .ended
            .wait_timeout_while(s, self.limit + END_MARGIN, |s| s.is_none())
            .unwrap_or_else(|e| e.into_inner());
        s.is_some()
    }
}

/// What one item asks, checked: its key and where its bytes are.
struct Job {
    key: String,
    offset: u64,
    addr: usize,
    len: usize,
    region: Option<&'static Region>,
}

fn jobs(items: &[Item], write: bool) -> Result<Vec<Job>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let key = crate::text(it.key, it.key_len)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| format!("item {i}: no key, or not UTF-8"))?;
            if it.addr == 0 && it.len > 0 {
                return Err(format!("item {i} ({key}): a null address"));
            }
            if write && it.offset != 0 {
                return Err(format!(
                    "item {i} ({key}): a write at offset {} — Rasa stores whole values (immutable versions), so a write starts at 0",
                    it.offset
                ));
            }
            // SAFETY: the engine passes a region it registered and keeps until the
            // transfers on it are released (NIXL deregisters memory after that).
            let region = (!it.region.is_null()).then(|| unsafe { &*it.region });
            if let Some(r) = region {
                if it.addr < r.base || it.addr + it.len > r.base + r.len {
                    return Err(format!("item {i} ({key}): the memory is outside its registration"));
                }
            }
            Ok(Job {
                key: key.to_owned(),
                offset: it.offset,
                addr: it.addr,
                len: it.len,
                region,
            })
        })
        .collect()
}

/// Checks `items` and starts moving them; the transfer, or why nothing was started.
pub(crate) fn start(
    client: &Client,
    limit: Duration,
    write: bool,
    items: &[Item],
) -> Result<Arc<Xfer>, String> {
    let jobs = jobs(items, write)?;
    let x = Arc::new(Xfer {
        state: Mutex::new(None),
        ended: Condvar::new(),
        limit,
    });
    let (client, done) = (client.clone(), Arc::clone(&x));
    runtime().spawn(async move {
        let work = async {
            if write {
                put(&client, &jobs).await
            } else {
                get(&client, &jobs).await
            }
        };
        let (code, why) = match tokio::time::timeout(limit, work).await {
            Ok(Ok(())) => (DONE, None),
            Ok(Err((code, why))) => (code, Some(why)),
            Err(_) => (
                FAILED,
                Some(format!(
                    "the transfer took longer than its timeout ({limit:?})"
                )),
            ),
        };
        done.end(code, why);
    });
    Ok(x)
}

type Failure = (c_int, String);

/// The NIXL code for an SDK error on `key`.
fn failure(key: &str, e: &Error) -> Failure {
    let code = match e.code() {
        Some(rasa_openapi::ProblemCode::NotFound) => NOT_FOUND,
        _ => FAILED,
    };
    (code, format!("{key}: {e}"))
}

/// A write: every buffer as its key's new version, in one `put_many`.
async fn put(client: &Client, jobs: &[Job]) -> Result<(), Failure> {
    let items: Vec<(&str, Bytes)> = jobs
        .iter()
        // SAFETY: the engine keeps the memory valid until the transfer is released,
        // which waits for this task to end.
        .map(|j| {
            (
                j.key.as_str(),
                Bytes::from_owner(unsafe { Raw::new(j.addr, j.len) }),
            )
        })
        .collect();
    let all = client
        .many()
        .put(&items)
        .await
        .map_err(|e| failure("the batch", &e))?;
    for (j, r) in jobs.iter().zip(all) {
        r.map_err(|p| failure(&j.key, &Error::Problem(p)))?;
    }
    Ok(())
}

/// A read: whole values from offset 0 land in their registration in one go; a part of a
/// value (an offset, or a value longer than the memory) is a range read.
async fn get(client: &Client, jobs: &[Job]) -> Result<(), Failure> {
    let mut ranged: Vec<&Job> = Vec::new();
    let mut by_region: Vec<(&'static Region, Vec<&Job>)> = Vec::new();
    for j in jobs {
        match j.region {
            Some(r) if j.offset == 0 => {
                match by_region.iter_mut().find(|(g, _)| std::ptr::eq(*g, r)) {
                    Some((_, v)) => v.push(j),
                    None => by_region.push((r, vec![j])),
                }
            }
            _ => ranged.push(j),
        }
    }
    for (region, group) in by_region {
        ranged.extend(land(client, region, &group).await?);
    }
    for j in ranged {
        range(client, j).await?;
    }
    Ok(())
}

/// Lands `group`'s values in `region` (one `get_many_in`); the jobs a range read must do
/// instead (values longer than their memory, or the registration busy with another read).
async fn land<'a>(
    client: &Client,
    region: &Region,
    group: &[&'a Job],
) -> Result<Vec<&'a Job>, Failure> {
    let taken = region
        .buffer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(buf) = taken else {
        return Ok(group.to_vec());
    };
    let keys: Vec<&str> = group.iter().map(|j| j.key.as_str()).collect();
    let spans: Vec<Range<usize>> = group
        .iter()
        .map(|j| j.addr - region.base..j.addr - region.base + j.len)
        .collect();
    let (out, buf) = buf.get_many_in(client, &keys, &spans).await;
    *region.buffer.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
    let each = out.map_err(|e| failure("the batch", &e))?;
    let mut again = Vec::new();
    for (j, r) in group.iter().zip(each) {
        match r {
            Ok(w) if w.length == j.len as u64 => {}
            Ok(w) => return Err(short(j, w.length)),
            Err(Error::BufferTooSmall { .. }) => again.push(*j),
            Err(e) => return Err(failure(&j.key, &e)),
        }
    }
    Ok(again)
}

fn short(j: &Job, had: u64) -> Failure {
    (
        MISMATCH,
        format!(
            "{}: {} bytes asked for at offset {}, the value has {had} there",
            j.key, j.len, j.offset
        ),
    )
}

/// Bytes `offset..offset+len` of one value, into its memory.
async fn range(client: &Client, j: &Job) -> Result<(), Failure> {
    if j.len == 0 {
        return Ok(());
    }
    let end = j
        .offset
        .checked_add(j.len as u64)
        .ok_or((INVALID, format!("{}: the range overflows", j.key)))?;
    // SAFETY: the engine keeps the memory valid until the transfer is released, which
    // waits for this task to end.
    let raw = unsafe { Raw::new(j.addr, j.len) };
    let (r, _) = client.get_range_into(&j.key, j.offset..end, raw).await;
    match r {
        Ok(w) if w.length == j.len as u64 => Ok(()),
        Ok(w) => Err(short(j, w.length)),
        Err(e) => Err(failure(&j.key, &e)),
    }
}
