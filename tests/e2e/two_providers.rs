//! One gateway, two providers at once (issue 33): `--fabric-provider 'tcp;ofi_rxm,shm'`
//! registers every arena in both domains and lists both endpoints; a reader on the
//! gateway's host reads over shm, one that asks for tcp (or cannot use shm: another PID
//! namespace) over tcp, both at once, and each read goes where its client says.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath, ReadPath};
use rasa_openapi::{Descriptor, FabricInfo};
use rasa_tests::{pattern, put_value, sha256_hex, workspace_bin, Gateway};

use crate::faults::Frozen;

const TCP: &str = "tcp;ofi_rxm";

fn client(gw: &Gateway, provider: Option<&str>) -> Client {
    let mut b = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .read_timeout(Duration::from_secs(1));
    if let Some(p) = provider {
        b = b.fabric_provider(p);
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_two_providers_serves_a_shm_reader_and_a_tcp_reader_at_once() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm"]);
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let providers: Vec<&str> = info.endpoints.iter().map(|e| e.provider.as_str()).collect();
    assert_eq!(providers, [TCP, "shm"]);
    assert_eq!(
        info.provider.as_deref(),
        Some(TCP),
        "the first is the primary"
    );
    let host = info
        .host
        .as_ref()
        .expect("a gateway with shm publishes its host");
    assert_eq!(host.pid, gw.pid());

    let values: Vec<Vec<u8>> = (0..8)
        .map(|i| pattern((256 << 10) + i * 4099, i as u64))
        .collect();
    for (i, v) in values.iter().enumerate() {
        let d: Descriptor = put_value(&gw, &format!("two/{i}"), v).await;
        assert_eq!(
            d.endpoints.len(),
            1,
            "the frame's address on the second endpoint"
        );
    }
    let (local, remote) = (client(&gw, None), client(&gw, Some(TCP)));
    // Both at once, every value several times.
    let mut reads = Vec::new();
    for round in 0..4 {
        for (i, v) in values.iter().enumerate() {
            for c in [&local, &remote] {
                let (c, v, key) = (c.clone(), v.clone(), format!("two/{i}"));
                reads.push(tokio::spawn(async move {
                    let got = c.get(&key).await.unwrap();
                    assert_eq!(got.path, ReadPath::Fabric, "round {round}");
                    assert_eq!(sha256_hex(&got.bytes), sha256_hex(&v), "{key}");
                }));
            }
        }
    }
    for r in reads {
        r.await.unwrap();
    }
    assert_eq!(local.stats().fabric_provider.as_deref(), Some("shm"));
    assert_eq!(remote.stats().fabric_provider.as_deref(), Some(TCP));
    assert_eq!(local.stats().fabric_reads, 32);
    assert_eq!(remote.stats().fabric_reads, 32);

    // Which path each took, shown by freezing the gateway: shm's reader copies by itself,
    // tcp needs the gateway's progress thread and times out.
    let frozen = Frozen::stop(gw.pid());
    let started = Instant::now();
    let shm = local.get("two/3").await;
    let tcp = remote.get("two/3").await;
    let took = started.elapsed();
    drop(frozen);
    assert_eq!(shm.unwrap().bytes, values[3], "shm reads a frozen gateway");
    assert!(tcp.is_err(), "tcp cannot read a frozen gateway: {tcp:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// The CLI says which provider a read took; in another PID namespace (a container, as far
/// as shm goes) the gateway's host identity does not match and the CLI reads over tcp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_over_shm_beside_the_gateway_and_over_tcp_from_another_pid_namespace() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm"]);
    let body = pattern(100_000, 3);
    put_value(&gw, "cli/v", &body).await;
    let run = |unshared: bool| {
        let rasa = workspace_bin("rasa");
        let mut cmd = if unshared {
            let mut c = std::process::Command::new("unshare");
            c.args(["--pid", "--fork"]).arg(&rasa);
            c
        } else {
            std::process::Command::new(&rasa)
        };
        let out = cmd
            .args(["--endpoint", &gw.base, "--json", "get", "cli/v"])
            .args(["--fast-path", "required"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let here = run(false);
    assert_eq!(here["path"], "fabric");
    assert_eq!(here["provider"], "shm");
    assert_eq!(here["sha256"], sha256_hex(&body));
    let elsewhere = run(true);
    assert_eq!(elsewhere["path"], "fabric");
    assert_eq!(elsewhere["provider"], TCP, "{elsewhere}");
    assert_eq!(elsewhere["sha256"], sha256_hex(&body));
}

/// A reader the kernel does not let attach to the gateway's memory (another user) is told
/// so before any shm read, instead of libfabric falling back silently to shm's slow path
/// through the gateway's CPU; asked to, it reads over the gateway's other provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_without_cross_memory_attach_rights_is_told_why_and_reads_over_tcp() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm"]);
    let body = pattern(50_000, 4);
    put_value(&gw, "cma/v", &body).await;
    // As `nobody`: not the gateway's user, so process_vm_readv is refused (EPERM).
    let as_nobody = |extra: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(workspace_bin("rasa"))
            .args(["--endpoint", &gw.base, "--json", "get", "cma/v"])
            .args(["--fast-path", "required"])
            .args(extra)
            .output()
            .unwrap()
    };
    let shm = as_nobody(&["--read-provider", "shm"]);
    let err = String::from_utf8_lossy(&shm.stderr);
    assert!(!shm.status.success());
    assert!(
        err.contains("cross-memory attach to the gateway") && err.contains("not permitted"),
        "{err}"
    );
    let auto = as_nobody(&[]);
    assert!(
        auto.status.success(),
        "{}",
        String::from_utf8_lossy(&auto.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&auto.stdout).unwrap();
    assert_eq!(v["provider"], TCP);
    assert_eq!(v["sha256"], sha256_hex(&body));
}
