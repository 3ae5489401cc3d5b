//! What a descriptor's holder can do without the SDK: read every byte the memory region
//! behind its remote key covers, frame or not (the trust tests' attacker).

use std::time::Duration;

use base64::prelude::*;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::{LandingBuffer, Reader};
use rasa_openapi::FabricInfo;

/// Every byte of the region `{"addr", "len", "rkey"}` (as `/v1/_test/region/{key}` answers
/// it) of the gateway whose `/v1/fabric` answered `fabric`, read one-sided over
/// `tcp;ofi_rxm`.
pub async fn read_region(region: &serde_json::Value, fabric: &FabricInfo) -> Vec<u8> {
    let (addr, len, rkey) = (
        region["addr"].as_u64().expect("a registered region"),
        region["len"].as_u64().expect("its length") as usize,
        region["rkey"].as_u64().expect("its key"),
    );
    let address = BASE64_STANDARD
        .decode(fabric.address.as_deref().expect("a fabric address"))
        .expect("base64");
    tokio::task::spawn_blocking(move || {
        let cfg = FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into()));
        let mut reader = Reader::connect(cfg, address).expect("a fabric connection");
        let mut dst = LandingBuffer::new(len).expect("landing memory");
        reader
            .direct()
            .read_raw(addr, rkey, len, &mut dst, Duration::from_secs(10))
            .expect("the whole region reads");
        dst.as_slice().to_vec()
    })
    .await
    .expect("the reader thread")
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `len` bytes of `<tag>` repeated: a marker to plant and look for.
pub fn marker(tag: &str, len: usize) -> Vec<u8> {
    format!("<{tag}>")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(len)
        .collect()
}
