//! One-sided writes into an upload region, on every provider here: the bytes land; the
//! region's key never reads; once the region is closed, its key writes no more.

use std::sync::Arc;
use std::time::Duration;

use super::RemoteWrite;
use crate::buffer::ArenaBuffer;
use crate::fabric::{plan, FabricConfig};
use crate::reader::{ReadError, Reader, RemoteFrame};
use crate::server::FabricServer;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Small and large values, over 8 MiB in all (by cross-memory attach two threads write).
fn values() -> Vec<Vec<u8>> {
    [1usize, 4096, (3 << 20) + 17, (6 << 20) + 5]
        .into_iter()
        .enumerate()
        .map(|(i, len)| (0..len).map(|b| (b * 13 + i * 7) as u8).collect())
        .collect()
}

fn writes_land_and_the_key_only_writes(provider: &str, cma: bool) {
    let served = FabricConfig::new(provider, Some("127.0.0.1".into()));
    let server = FabricServer::start(&served)
        .unwrap_or_else(|e| panic!("provider {provider} must be available here: {e}"));
    let cfg = match cma {
        true => served.with_cma(std::process::id()),
        false => served,
    };
    let mut client = Reader::connect(cfg, server.address().to_vec()).unwrap();
    let values = values();
    let total: usize = values.iter().map(|v| v.len().next_multiple_of(64)).sum();
    let buffer = ArenaBuffer::new(total + 4096).unwrap();
    let mut whole = buffer.try_reserve(buffer.capacity(), 1).unwrap();
    let region = server.register_writable(Arc::clone(&buffer)).unwrap();
    let mut at = 100; // not at the region's start: offsets and addresses both matter
    let mut placed = Vec::new();
    for v in &values {
        placed.push(at);
        at = (at + v.len()).next_multiple_of(64);
    }
    let writes: Vec<RemoteWrite<'_>> = values
        .iter()
        .zip(&placed)
        .map(|(v, &at)| RemoteWrite {
            addr: server.remote_addr(&region, at),
            rkey: region.key(),
            bytes: v,
        })
        .collect();
    // Each value is seen whole and in order as it is written (the PUT hashes it there).
    let seen: Vec<std::sync::Mutex<Vec<u8>>> = values.iter().map(|_| Default::default()).collect();
    let see = |i: usize, piece: &[u8]| seen[i].lock().unwrap().extend_from_slice(piece);
    client.write_many(&writes, &see, TIMEOUT).unwrap();
    for (i, v) in values.iter().enumerate() {
        assert!(
            *seen[i].lock().unwrap() == v[..],
            "{provider}: value {i} seen wrong"
        );
    }
    let landed = whole.as_mut_slice();
    for (v, &at) in values.iter().zip(&placed) {
        assert!(
            landed[at..at + v.len()] == v[..],
            "{provider}: {} bytes at {at}",
            v.len()
        );
    }
    if !plan::checks_remote_keys(provider) {
        // shm moves bytes by cross-memory attach: no key is checked on this host, reads
        // or writes (the operating system's process boundary is the guard).
        return;
    }
    // The upload key never reads: not even the bytes its own holder wrote.
    let as_frame = RemoteFrame {
        addr: server.remote_addr(&region, placed[1]),
        rkey: region.key(),
        identity: crate::frame::FrameIdentity {
            key_hash: 0,
            version: 0,
            payload_len: 64,
        },
        checksum: 0,
        blocks: None,
    };
    let read = client.read(&as_frame, TIMEOUT);
    assert!(
        matches!(read, Err(ReadError::KeyRevoked(_))),
        "{provider}: a read with the upload key: {read:?}"
    );
    // Closed: the key writes no more, and the memory is unchanged.
    let (addr, rkey) = (writes[0].addr, writes[0].rkey);
    drop(region);
    let late = [0xEEu8; 64];
    let wrote = client.write_many(
        &[RemoteWrite {
            addr,
            rkey,
            bytes: &late,
        }],
        &|_, _| {},
        TIMEOUT,
    );
    assert!(
        matches!(wrote, Err(ReadError::KeyRevoked(_))),
        "{provider}: a write after the region closed: {wrote:?}"
    );
    assert_eq!(whole.as_mut_slice()[placed[0]], values[0][0], "{provider}");
}

#[test]
fn writes_on_tcp_rxm() {
    writes_land_and_the_key_only_writes("tcp;ofi_rxm", false);
}

#[test]
fn writes_on_sockets() {
    writes_land_and_the_key_only_writes("sockets", false);
}

#[test]
fn writes_on_shm() {
    writes_land_and_the_key_only_writes("shm", false);
}

#[test]
fn writes_on_shm_by_cross_memory_attach() {
    writes_land_and_the_key_only_writes("shm", true);
}
