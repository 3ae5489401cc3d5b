//! The cluster in one room: which member serves a key, passing a request on to it, failing
//! over, suspecting a member that did not answer, asking every member for its part and
//! filling from a peer are decided in `gateway/src/cluster/` ([`Peers`]), for both fronts
//! and the origin; elsewhere only the wire formats. Checked over the source text: a front
//! that asks the membership for a key's owner itself, or sends a request to a member with
//! its own client, fails here.
//!
//! [`Peers`]: ../../../gateway/src/cluster/peers.rs

use std::path::Path;

use rasa_tests::rust_files;

#[test]
fn routing_forwarding_fan_out_and_peer_fill_live_in_cluster() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    // What only `cluster/` does: placement and failover (`owner`, `next_choice`,
    // `others_for`, `suspects`), choosing the members to ask (`snapshot().members`), the
    // answer deadline of a forwarded request. (`/readyz` may report `fenced()`, and the
    // native API answers a peer fill's request: those are not decisions.)
    let decisions = [
        "cluster.owner(",
        ".next_choice(",
        ".others_for(",
        ".suspects()",
        "send_forwarded",
        "snapshot().members",
    ];
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(src.join("cluster"))) {
        let text = std::fs::read_to_string(f).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for what in decisions.iter().filter(|d| code.contains(**d)) {
                found.push(format!("{}:{}: {what}", f.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the cluster's decisions made outside gateway/src/cluster/:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_old_rooms_of_the_cluster_are_gone() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    // Peer fill used to live in the origin; the forwarding engine in the native front.
    assert!(
        !src.join("origin/peers.rs").exists(),
        "peer fill is cluster/fill.rs"
    );
    let forward = std::fs::read_to_string(src.join("http/forward.rs")).expect("http/forward.rs");
    assert!(
        !forward.contains("STALE_CONNECTION") && !forward.contains("next_choice"),
        "the native front's forward.rs only maps outcomes; failover is cluster/forward.rs"
    );
}
