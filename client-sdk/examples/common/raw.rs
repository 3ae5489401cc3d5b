//! What the benchmarks of the bare fastpath reader share: a reader aimed at the gateway,
//! and a descriptor kept fresh (resolved again once half its lease has passed).

use std::time::{Duration, Instant};

use base64::prelude::*;
use rasa_client::{Client, Descriptor};
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::{Reader, RemoteFrame};

/// A reader connected to `client`'s gateway over loopback, and the gateway's provider.
pub async fn raw_reader(client: &Client) -> (Reader, String) {
    let info = client.fabric_info().await.expect("gateway reachable");
    assert!(info.enabled, "the gateway's fast path is off");
    let provider = info.provider.expect("a provider when enabled");
    let addr = BASE64_STANDARD
        .decode(info.address.expect("an address when enabled"))
        .expect("base64 address");
    let cfg = FabricConfig::new(provider.clone(), Some("127.0.0.1".into()));
    (
        Reader::connect(cfg, addr).expect("reader connects"),
        provider,
    )
}

/// `key`'s descriptor, resolved again once half its lease has passed.
pub struct Fresh {
    key: String,
    d: Descriptor,
    at: Instant,
}

impl Fresh {
    /// Resolves `key` now.
    pub async fn new(client: &Client, key: &str) -> Self {
        Self {
            key: key.to_owned(),
            d: client.resolve(key).await.expect("resolve"),
            at: Instant::now(),
        }
    }

    /// The frame to read now.
    pub async fn frame(&mut self, client: &Client) -> RemoteFrame {
        if self.at.elapsed() > Duration::from_millis(self.d.lease_ms / 2) {
            *self = Self::new(client, &self.key).await;
        }
        rasa_client::remote_frame(&self.d)
            .expect("a valid descriptor")
            .expect("fast path on")
    }
}
