//! Zero-copy reads: [`Client::register`] hands out memory the fabric writes into directly
//! ([`RegisteredBuffer::from_owned`] registers the caller's own). Read into with
//! [`Client::get_into`] (or `get_many_into`), a [`RegisteredBuffer`] gets the value
//! one-sided with no copy at all: the payload lands at its front, the frame is validated
//! where it landed; [`RegisteredBuffer::get_many_at`] lands several values at offsets of
//! one buffer, in flight together. Over HTTP it is filled like any buffer (one copy).

use std::ops::Range;

use rasa_fastpath::reader::LandingBuffer;

use crate::{BufResult, Client, Error, Written};

/// Memory registered for one-sided reads to land in, for a caller that reads value after
/// value into the same place. Page-aligned, never moving; registered (`FI_READ`) on the
/// client's open fabric endpoints when made ([`Client::register`]), on
/// any other the first time it reads into it, and kept registered until dropped.
/// Dereferences to its bytes.
#[derive(Debug)]
pub struct RegisteredBuffer {
    pub(crate) landing: LandingBuffer,
}

impl RegisteredBuffer {
    /// Bytes it holds.
    pub fn capacity(&self) -> usize {
        self.landing.capacity()
    }

    /// Fabric endpoints it is registered with now (one per endpoint that read into it).
    pub fn registrations(&self) -> usize {
        self.landing.registrations()
    }

    /// Registers memory the caller owns (`owner.as_mut()`, taken once: a `Vec<u8>`, a boxed
    /// array, memory another runtime lends with a guard that pins it) for reads to land in
    /// with no copy; `owner` is kept, and dropped with the buffer. Empty memory is refused.
    pub fn from_owned<M: AsMut<[u8]> + Send + 'static>(owner: M) -> Result<Self, Error> {
        let landing = LandingBuffer::from_owned(owner).map_err(|_| {
            Error::Output("there is no memory to register in an empty buffer".into())
        })?;
        Ok(Self { landing })
    }

    /// Reads `keys` into this buffer, key `i`'s value landing at `offsets[i]` (its room runs
    /// to the next offset, the last to the end): one-sided with no copy, several in flight
    /// at once, as [`Client::get_many_into`] does. Offsets must not decrease and lie within
    /// the buffer ([`Error::Output`] otherwise, nothing read). One result per key, and the
    /// buffer, whole again.
    pub async fn get_many_at(
        self,
        client: &Client,
        keys: &[&str],
        offsets: &[usize],
    ) -> BufResult<Vec<Result<Written, Error>>, Self> {
        if keys.len() != offsets.len() {
            let why = format!("{} keys but {} offsets", keys.len(), offsets.len());
            return (Err(Error::Output(why)), self);
        }
        let len = self.capacity();
        if let Some(i) =
            (0..offsets.len()).find(|&i| offsets[i] > len || (i > 0 && offsets[i] < offsets[i - 1]))
        {
            let why = format!(
                "offsets must not decrease and lie within the buffer ({len} bytes); offset {i} is {}",
                offsets[i]
            );
            return (Err(Error::Output(why)), self);
        }
        let ends = offsets.iter().skip(1).copied().chain([len]);
        let regions: Vec<Range<usize>> = offsets.iter().zip(ends).map(|(&s, e)| s..e).collect();
        self.get_many_in(client, keys, &regions).await
    }

    /// Reads `keys` into this buffer, key `i`'s value landing in `regions[i]`, a range of
    /// bytes it may not outgrow ([`Error::BufferTooSmall`] for that key alone): one-sided
    /// with no copy, several in flight at once. The regions may come in any order (the
    /// rows of a pool, say) but must not overlap and must lie within the buffer
    /// ([`Error::Output`] otherwise, nothing read); the bytes between them are not touched.
    /// One result per key, in order, and the buffer, whole again.
    pub async fn get_many_in(
        mut self,
        client: &Client,
        keys: &[&str],
        regions: &[Range<usize>],
    ) -> BufResult<Vec<Result<Written, Error>>, Self> {
        if keys.len() != regions.len() {
            let why = format!("{} keys but {} regions", keys.len(), regions.len());
            return (Err(Error::Output(why)), self);
        }
        let mut order: Vec<usize> = (0..regions.len()).collect();
        order.sort_by_key(|&i| (regions[i].start, regions[i].end));
        if let Err(why) = disjoint_within(regions, &order, self.capacity()) {
            return (Err(Error::Output(why)), self);
        }
        // One go for every value whose descriptor is held (asked for together first); the
        // rest, one by one. A cluster's keys live on several members: one by one.
        let mut done: Vec<Option<Written>> = keys.iter().map(|_| None).collect();
        if client.inner.topology().await.is_none() {
            let fabric = &client.inner.fabric;
            let (got, landing) =
                crate::landmany::hold_and_land(fabric, keys, regions, self.landing).await;
            (done, self.landing) = (got, landing);
        }
        let rest: Vec<usize> = (0..keys.len()).filter(|&i| done[i].is_none()).collect();
        if rest.is_empty() {
            return (Ok(done.into_iter().flatten().map(Ok).collect()), self);
        }
        let rest_keys: Vec<&str> = rest.iter().map(|&i| keys[i]).collect();
        let rest_regions: Vec<Range<usize>> = rest.iter().map(|&i| regions[i].clone()).collect();
        let (each, buf) = self.get_each_in(client, &rest_keys, &rest_regions).await;
        let mut each = each.into_iter();
        let out = done
            .into_iter()
            .map(|d| d.map_or_else(|| each.next().expect("one result per key left"), Ok))
            .collect();
        (Ok(out), buf)
    }

    /// [`RegisteredBuffer::get_many_in`] key by key (regions checked), several in flight:
    /// the buffer cut into its regions, each read on its own, joined again.
    async fn get_each_in(
        mut self,
        client: &Client,
        keys: &[&str],
        regions: &[Range<usize>],
    ) -> (Vec<Result<Written, Error>>, Self) {
        let mut order: Vec<usize> = (0..regions.len()).collect();
        order.sort_by_key(|&i| (regions[i].start, regions[i].end));
        // Cut from the end: after each region the bytes up to the next (kept aside), then
        // the region itself; put back together in the opposite order.
        let mut layout = Vec::with_capacity(2 * regions.len());
        let mut parts: Vec<Option<RegisteredBuffer>> = regions.iter().map(|_| None).collect();
        for &i in order.iter().rev() {
            layout.push(Piece::Gap(self.landing.split_off(regions[i].end)));
            let landing = self.landing.split_off(regions[i].start);
            parts[i] = Some(RegisteredBuffer { landing });
            layout.push(Piece::Region(i));
        }
        let parts: Vec<RegisteredBuffer> = parts.into_iter().map(|p| p.expect("cut")).collect();
        let (out, mut back): (Vec<_>, Vec<_>) = client
            .many()
            .get_into(keys, parts)
            .await
            .into_iter()
            .map(|(r, part)| (r, Some(part.landing)))
            .unzip();
        for piece in layout.into_iter().rev() {
            let piece = match piece {
                Piece::Region(i) => back[i].take().expect("each region once"),
                Piece::Gap(bytes) => bytes,
            };
            self.landing
                .unsplit(piece)
                .expect("the pieces come back in order");
        }
        (out, self)
    }
}

/// A piece of a buffer cut for [`RegisteredBuffer::get_many_in`]: the region of key `i`,
/// or the bytes between two regions, kept aside untouched.
enum Piece {
    Region(usize),
    Gap(LandingBuffer),
}

/// `Ok` when `regions` (visited in `order`, by start) neither overlap nor run past `len`.
fn disjoint_within(regions: &[Range<usize>], order: &[usize], len: usize) -> Result<(), String> {
    let mut end = 0;
    for &i in order {
        let r = &regions[i];
        if r.start > r.end || r.end > len {
            return Err(format!(
                "region {i} ({r:?}) does not lie within the buffer ({len} bytes)"
            ));
        }
        if r.start < end {
            return Err(format!("region {i} ({r:?}) overlaps another region"));
        }
        end = r.end;
    }
    Ok(())
}

impl std::ops::Deref for RegisteredBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.landing.as_slice()
    }
}

impl std::ops::DerefMut for RegisteredBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.landing.as_mut_slice()
    }
}

impl AsMut<[u8]> for RegisteredBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl AsRef<[u8]> for RegisteredBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Client {
    /// A zeroed buffer of `capacity` bytes that one-sided reads through
    /// [`Client::get_into`] write straight into (no copy): for callers that reuse a buffer.
    /// Registering costs a system call or two per endpoint (pinning pages on RDMA NICs),
    /// once; keep the buffer and read into it again.
    pub fn register(&self, capacity: usize) -> Result<RegisteredBuffer, Error> {
        let landing = LandingBuffer::new(capacity).map_err(|e| Error::Output(e.to_string()))?;
        let buf = RegisteredBuffer { landing };
        buf.register_with(self);
        Ok(buf)
    }
}

impl RegisteredBuffer {
    /// Registers it now on every fabric endpoint `client` has open (towards every member
    /// it knows, in a cluster) and that is not reading at this moment, so that the first
    /// batch into it costs what the next ones do ([`Client::register`] does this; a
    /// buffer made [`from_owned`](Self::from_owned) can); an endpoint opened later
    /// registers it on its first read into it. Returns on how many it was registered.
    pub fn register_with(&self, client: &Client) -> usize {
        let mut nodes = vec![std::sync::Arc::clone(&client.inner)];
        if let Some(t) = &client.inner.topology {
            nodes.extend(t.all().into_iter().map(|c| c.inner));
        }
        nodes
            .iter()
            .filter(|n| n.fast_path != crate::FastPath::Off)
            .map(|n| n.fabric.prepare(&self.landing))
            .sum()
    }
}

impl crate::fabric::FabricPool {
    /// Registers `landing` on each connected endpoint not in use now; how many.
    pub(crate) fn prepare(&self, landing: &LandingBuffer) -> usize {
        let mut done = 0;
        for slot in self.slots.iter() {
            let Ok(state) = slot.try_lock() else { continue };
            if let crate::fabric::FabricState::Ready { reader, .. } = &*state {
                match landing.prepare_on(reader) {
                    Ok(registered) => done += usize::from(registered),
                    Err(e) => {
                        tracing::debug!(error = %e, "registering a buffer ahead of its first read failed; its first read will")
                    }
                }
            }
        }
        done
    }
}
