//! Closing a node releases every file descriptor it opened. A test binary of its own: it
//! counts the process's descriptors, which tests running alongside it in one process
//! (opening endpoints of their own) would disturb.

use rasa_fastpath::buffer::ArenaBuffer;
use rasa_fastpath::fabric::{FabricConfig, Node, ACCESS_READ};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn closing_a_node_releases_its_file_descriptors() {
    let cfg = FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into()));
    drop(Node::open(&cfg).unwrap()); // first use initialises libfabric
    let before = open_fds();
    for _ in 0..50 {
        let node = Node::open(&cfg).unwrap();
        let buf = ArenaBuffer::new(1 << 16).unwrap();
        let mr = node.register(buf, ACCESS_READ, 0).unwrap();
        drop(mr);
        drop(node);
    }
    let after = open_fds();
    assert!(
        after <= before + 2,
        "leaked descriptors: {before} before, {after} after 50 nodes"
    );
}
