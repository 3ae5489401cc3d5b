//! Rendezvous placement, simulated: how many of 1 M keys move when one of N members
//! leaves or joins, how evenly keys spread, and what ranking the members costs per key.
//! Prints a Markdown table (`bench/cluster.sh` puts it in `bench/results.md`).

use std::time::Instant;

use rasa_openapi::cluster::{owner, placement};
use rasa_openapi::{ClusterMember, FabricInfo, MemberState};

fn member(i: usize) -> ClusterMember {
    ClusterMember {
        node_id: format!("node-{i:04}"),
        incarnation: "0000000000000001".into(),
        url: format!("http://10.0.{}.{}:8080", i / 250, i % 250),
        state: MemberState::Serving,
        weight: 1,
        fabric: FabricInfo {
            enabled: false,
            provider: None,
            address: None,
            address_format: None,
            virtual_addressing: None,
            incarnation: "0000000000000001".into(),
            endpoints: Vec::new(),
            host: None,
        },
        s3_url: None,
        hot: Vec::new(),
    }
}

fn main() {
    let keys: Vec<String> = (0..1_000_000)
        .map(|i| format!("dataset/shard-{i:07}"))
        .collect();
    println!("| members N | keys moved when one leaves (ideal 1/N) | when one joins (ideal 1/(N+1)) | max/mean keys per member | owner of a key | full order (failover) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for n in [3usize, 10, 100] {
        let members: Vec<ClusterMember> = (0..n).map(member).collect();
        let fewer = &members[..n - 1];
        let more: Vec<ClusterMember> = (0..=n).map(member).collect();
        let mut per = vec![0usize; n];
        let (mut left, mut joined) = (0usize, 0usize);
        for k in &keys {
            let o = owner(k, &members).expect("an owner");
            let idx: usize = o.node_id[5..].parse().expect("numbered");
            per[idx] += 1;
            if owner(k, fewer).expect("an owner").node_id != o.node_id {
                left += 1;
            }
            if owner(k, &more).expect("an owner").node_id != o.node_id {
                joined += 1;
            }
        }
        let mean = keys.len() as f64 / n as f64;
        let max = *per.iter().max().expect("members") as f64;
        let sample = &keys[..100_000];
        let t = Instant::now();
        let mut sink = 0usize;
        for k in sample {
            sink += owner(k, &members).map_or(0, |m| m.weight as usize);
        }
        let owner_ns = t.elapsed().as_nanos() as f64 / sample.len() as f64;
        let t = Instant::now();
        for k in sample {
            sink += placement(k, &members).len();
        }
        let order_ns = t.elapsed().as_nanos() as f64 / sample.len() as f64;
        assert_eq!(sink, sample.len() * (n + 1));
        let pct = |x: usize| 100.0 * x as f64 / keys.len() as f64;
        println!(
            "| {n} | {:.2} % ({:.2} %) | {:.2} % ({:.2} %) | {:.3} | {:.0} ns ({:.1} ns a member) | {:.0} ns |",
            pct(left),
            100.0 / n as f64,
            pct(joined),
            100.0 / (n + 1) as f64,
            max / mean,
            owner_ns,
            owner_ns / n as f64,
            order_ns,
        );
    }
}
