//! A real etcd (Debian's `etcd-server`, installed by `make test`'s set-up) on free
//! loopback ports with a temporary data directory, for the cluster tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rasa_openapi::{ClusterView, MemberState};

use crate::{http, temp_dir, Gateway};

/// A running etcd, killed when dropped.
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    /// `etcd://127.0.0.1:<port>`, as `--cluster` takes it.
    pub endpoint: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Etcd {
    /// Starts etcd and waits until it serves clients (it says so in its log).
    pub fn start() -> Etcd {
        let dir = temp_dir("etcd");
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "rasa-test"])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("rasa-test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start etcd (Debian's etcd-server, installed by `make test`)");
        let err = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = dir.join("etcd.log");
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(log).ok();
            let mut tx = Some(tx);
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if line.contains("ready to serve client requests") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                if let Some(f) = file.as_mut() {
                    let _ = std::io::Write::write_all(f, format!("{line}\n").as_bytes());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("etcd says it is ready to serve client requests within 30 s");
        Etcd {
            child,
            dir,
            endpoint: format!("etcd://127.0.0.1:{client}"),
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to etcd.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} etcd failed");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The flags that make a gateway member `node` of cluster `name` on `etcd`.
pub fn member_args(etcd: &Etcd, name: &str, node: &str, ttl: &str) -> Vec<String> {
    [
        "--cluster",
        &etcd.endpoint,
        "--cluster-name",
        name,
        "--node-id",
        node,
        "--member-ttl",
        ttl,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A cluster name no other test uses.
pub fn cluster_name(tag: &str) -> String {
    format!("{tag}-{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u32
}

/// `GET /v1/cluster` on `gw`; with `after`, the long poll for the next change.
pub async fn view(gw: &Gateway, after: Option<i64>) -> ClusterView {
    let mut req = http().get(gw.url("/v1/cluster"));
    if let Some(rev) = after {
        req = req.query(&[("after", rev), ("wait", 5)]);
    }
    req.send()
        .await
        .expect("GET /v1/cluster")
        .json()
        .await
        .expect("a cluster view")
}

/// Follows `gw`'s view (long polls) until `done` holds for it; fails after `limit`,
/// naming `what`.
pub async fn wait_view(
    gw: &Gateway,
    what: &str,
    limit: Duration,
    done: impl Fn(&ClusterView) -> bool,
) -> ClusterView {
    let deadline = Instant::now() + limit;
    let mut v = view(gw, None).await;
    while !done(&v) {
        assert!(
            Instant::now() < deadline,
            "{} never saw {what} within {limit:?}; its view: {:?}",
            gw.base,
            v.members
                .iter()
                .map(|m| (&m.node_id, m.state))
                .collect::<Vec<_>>()
        );
        v = view(gw, Some(v.revision)).await;
    }
    v
}

/// The node ids serving in `v`, sorted.
pub fn serving(v: &ClusterView) -> Vec<String> {
    v.members
        .iter()
        .filter(|m| m.state == MemberState::Serving)
        .map(|m| m.node_id.clone())
        .collect()
}
