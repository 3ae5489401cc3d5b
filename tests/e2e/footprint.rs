//! The gateway's own memory: libfabric's provider queues are sized for what Rasa does
//! (RMA reads only), unless the environment says otherwise.

use rasa_client::{Client, FastPath};
use rasa_tests::{pattern, proc_status_kib, Gateway};

/// Measured here (debug build, `tcp;ofi_rxm` 1.17, after one-sided reads): 51 MiB with
/// Rasa's provider defaults, 101 MiB with the provider's own.
const RSS_LIMIT_MIB: u64 = 72;

#[tokio::test]
async fn provider_queues_are_sized_for_rma_reads() {
    // The process's own memory: no spare arena memory faulted in ahead of writes.
    let gw = Gateway::start(&["--fast-path", "on", "--warm-memory", "0"]);
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    c.put("v", pattern(1 << 20, 1)).await.unwrap();
    for _ in 0..10 {
        assert!(c.get("v").await.unwrap().bytes == pattern(1 << 20, 1));
    }
    let rss = proc_status_kib(gw.pid(), "VmRSS:") / 1024;
    println!("gateway RSS after one-sided reads: {rss} MiB");
    assert!(
        rss < RSS_LIMIT_MIB,
        "the gateway holds {rss} MiB after a few one-sided reads (limit {RSS_LIMIT_MIB})"
    );
}
