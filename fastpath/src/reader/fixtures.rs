//! What the reader suites share: a server's frames made by hand (`store`).

use super::*;
use crate::frame::{self, key_hash, FrameHasher};
use crate::server::FabricServer;

pub(super) const TIMEOUT: Duration = Duration::from_secs(10);

pub(super) struct Stored {
    pub(super) region: MemoryRegion,
    pub(super) offset: usize,
    pub(super) frame: RemoteFrame,
    pub(super) payload: Vec<u8>,
}

/// Block size of the frames stored here: small, so that short payloads span many blocks.
pub(super) const BS: u32 = 4096;

pub(super) fn store(server: &FabricServer, payload: Vec<u8>, version: u64) -> Stored {
    let id = FrameIdentity {
        key_hash: key_hash("k"),
        version,
        payload_len: payload.len() as u64,
    };
    let len = frame::frame_len(id.payload_len, BS).unwrap();
    let buffer = ArenaBuffer::new(len + 4096).unwrap();
    // Put the frame at a non-zero offset so offset/virtual addressing both matter.
    let _pad = buffer.try_reserve(128, 64).unwrap();
    let mut slot = buffer.try_reserve(len, 64).unwrap();
    let (head, rest) = slot.as_mut_slice().split_at_mut(HEADER_LEN);
    let (body, table) = rest.split_at_mut(payload.len());
    body.copy_from_slice(&payload);
    frame::fill_table(&id, BS, body, 0, table);
    let mut h = FrameHasher::new();
    h.update(&payload);
    let (header, checksum) = h.seal(id, BS);
    head.copy_from_slice(&header);
    let offset = slot.offset();
    let _frozen = slot.freeze();
    let region = server.register(buffer).unwrap();
    let frame = RemoteFrame {
        addr: server.remote_addr(&region, offset),
        rkey: region.key(),
        identity: id,
        checksum,
        blocks: Some(BlockTable {
            block_size: BS,
            at: frame::table_at(id.payload_len),
        }),
    };
    Stored {
        region,
        offset,
        frame,
        payload,
    }
}
