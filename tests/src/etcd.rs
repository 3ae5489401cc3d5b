//! A real etcd (Debian's `etcd-server`, installed by `make test`'s set-up) on free
//! loopback ports with a temporary data directory, for the cluster tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rasa_openapi::{ClusterView, MemberState};

use crate::{http, temp_dir, Gateway};

/// Certificates for an etcd over TLS (made with rcgen in a temporary directory): a CA,
/// etcd's server certificate for 127.0.0.1, and a member's client certificate.
pub struct EtcdTls {
    /// The CA's certificate (PEM).
    pub ca: PathBuf,
    /// etcd's certificate and key.
    pub server_cert: PathBuf,
    /// etcd's key.
    pub server_key: PathBuf,
    /// A member's client certificate.
    pub client_cert: PathBuf,
    /// Its key (0600).
    pub client_key: PathBuf,
}

impl EtcdTls {
    /// A new CA and certificates signed by it.
    pub fn make() -> EtcdTls {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("etcd-tls");
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "rasa test etcd CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let leaf = |cn: &str, hosts: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(hosts).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.subject_alt_names
                .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
            p.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server, server_key) = leaf("etcd", vec!["localhost".into()]);
        let (client, client_key) = leaf("rasa-member", vec![]);
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            p
        };
        EtcdTls {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server),
            server_key: write("server-key.pem", &server_key),
            client_cert: write("client.pem", &client),
            client_key: write("client-key.pem", &client_key),
        }
    }

    /// The flags that make a member reach etcd with these certificates.
    pub fn member_flags(&self) -> Vec<String> {
        [
            ("--etcd-ca-file", &self.ca),
            ("--etcd-cert-file", &self.client_cert),
            ("--etcd-key-file", &self.client_key),
        ]
        .iter()
        .flat_map(|(f, p)| [f.to_string(), p.display().to_string()])
        .collect()
    }
}

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
        Self::start_with(None)
    }

    /// Starts etcd serving clients over TLS only, with `--client-cert-auth`: a client
    /// needs a certificate of `tls`'s CA.
    pub fn start_tls(tls: &EtcdTls) -> Etcd {
        Self::start_with(Some(tls))
    }

    /// Starts etcd; one that exits before it is ready (a port another test took between
    /// `free_port` and etcd's bind: its log says "address already in use") is started
    /// again on other ports, up to three times.
    fn start_with(tls: Option<&EtcdTls>) -> Etcd {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::try_start(tls) {
                Ok(etcd) => return etcd,
                Err(log) if tries < 3 => {
                    eprintln!("etcd exited before it was ready; again:\n{log}")
                }
                Err(log) => panic!("etcd exited before it was ready, three times:\n{log}"),
            }
        }
    }

    /// Starts etcd once: it, or its log when it exited before it was ready.
    fn try_start(tls: Option<&EtcdTls>) -> Result<Etcd, String> {
        let dir = temp_dir("etcd");
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut tls_args: Vec<String> = Vec::new();
        if let Some(t) = tls {
            tls_args = vec![
                "--cert-file".into(),
                t.server_cert.display().to_string(),
                "--key-file".into(),
                t.server_key.display().to_string(),
                "--trusted-ca-file".into(),
                t.ca.display().to_string(),
                "--client-cert-auth".into(),
            ];
        }
        let mut child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "rasa-test"])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("rasa-test={peer_url}")])
            .args(&tls_args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start etcd (Debian's etcd-server, installed by `make test`)");
        let err = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = dir.join("etcd.log");
        let log_path = log.clone();
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
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // Its stderr closed: it exited. (The log thread has written it all.)
                let _ = child.wait();
                return Err(std::fs::read_to_string(&log_path).unwrap_or_default());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("etcd did not say it is ready to serve client requests within 30 s")
            }
        }
        Ok(Etcd {
            child,
            dir,
            endpoint: format!("etcd://127.0.0.1:{client}"),
        })
    }

    /// Turns etcd's authentication on (through its JSON gateway, as `etcdctl` would):
    /// `root` with password `root_pw`, and `user` with `password`, whose role may read and
    /// write `/rasa/` only.
    pub async fn enable_auth(&self, root_pw: &str, user: &str, password: &str) {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let base = self.endpoint.replace("etcd://", "http://");
        let steps = [
            (
                "user/add",
                serde_json::json!({"name": "root", "password": root_pw}),
            ),
            (
                "user/grant",
                serde_json::json!({"user": "root", "role": "root"}),
            ),
            (
                "user/add",
                serde_json::json!({"name": user, "password": password}),
            ),
            ("role/add", serde_json::json!({"name": "rasa"})),
            (
                "role/grant",
                serde_json::json!({"name": "rasa", "perm": {
                "permType": "READWRITE", "key": b64("/rasa/"), "range_end": b64("/rasa0")}}),
            ),
            (
                "user/grant",
                serde_json::json!({"user": user, "role": "rasa"}),
            ),
            ("enable", serde_json::json!({})),
        ];
        for (path, body) in steps {
            let r = http()
                .post(format!("{base}/v3/auth/{path}"))
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("etcd auth/{path}: {e}"));
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            assert!(status.is_success(), "etcd auth/{path}: {status} {text}");
        }
    }

    /// Puts `value` at `key` (no lease) as any client with access to etcd could: over TLS
    /// with `tls`'s client certificate when given.
    pub async fn put_as_client(&self, tls: Option<&EtcdTls>, key: &str, value: &str) {
        use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
        let host = self.endpoint.trim_start_matches("etcd://");
        let (url, options) = match tls {
            None => (format!("http://{host}"), None),
            Some(t) => {
                let read = |p: &PathBuf| std::fs::read(p).unwrap();
                let options = TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(read(&t.ca)))
                    .identity(Identity::from_pem(
                        read(&t.client_cert),
                        read(&t.client_key),
                    ));
                (
                    format!("https://{host}"),
                    Some(ConnectOptions::new().with_tls(options)),
                )
            }
        };
        let mut client = etcd_client::Client::connect([url], options)
            .await
            .expect("connect to etcd as a client");
        client.put(key, value, None).await.expect("etcd put");
    }

    /// The value at `key` (plain etcd, no TLS), as anyone who can read etcd sees it.
    pub async fn get_value(&self, key: &str) -> Option<String> {
        let mut client = self.plain_client().await;
        let resp = client.get(key, None).await.expect("etcd get");
        resp.kvs()
            .first()
            .map(|kv| kv.value_str().unwrap().to_owned())
    }

    /// Puts `value` at `key` under a lease granted with the id `lease` (plain etcd): what
    /// an etcd writer can do once a lease with that id has ended.
    pub async fn put_under_lease(&self, key: &str, value: &str, lease: i64, ttl: i64) {
        use etcd_client::{LeaseGrantOptions, PutOptions};
        let mut client = self.plain_client().await;
        client
            .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(lease)))
            .await
            .expect("etcd grants a lease with a chosen id");
        client
            .put(key, value, Some(PutOptions::new().with_lease(lease)))
            .await
            .expect("etcd put under the lease");
    }

    async fn plain_client(&self) -> etcd_client::Client {
        let host = self.endpoint.trim_start_matches("etcd://");
        etcd_client::Client::connect([format!("http://{host}")], None)
            .await
            .expect("connect to etcd as a client")
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

/// Waits until `gw` is ready (`/readyz` answers `200`): a member that just registered owns
/// its keys only a moment later, once the others have seen it (until then it is fenced).
pub async fn wait_ready(gw: &Gateway, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let r = http().get(gw.url("/readyz")).send().await;
        if r.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} was not ready within {limit:?}",
            gw.base
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node ids serving in `v`, sorted.
pub fn serving(v: &ClusterView) -> Vec<String> {
    v.members
        .iter()
        .filter(|m| m.state == MemberState::Serving)
        .map(|m| m.node_id.clone())
        .collect()
}

/// A `Rasa-Hop-Proof` for `method` on `path` (with its query) from member `node` to
/// member `to`, with `body` (`None`: no body), under the secret in `secret_file`, made as
/// `docs/design/cluster.md` says (not with the gateway's code): what lets a test ask one member
/// for what it holds itself in a cluster with a secret.
pub fn hop_proof(
    secret_file: &std::path::Path,
    (node, to): (&str, &str),
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> String {
    use hmac::Mac;
    let secret = std::fs::read_to_string(secret_file).expect("read the secret");
    let key = secret.trim_end_matches(['\r', '\n']);
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    // Unique per process and call: a receiver takes each nonce once.
    let nonce = u64::from(std::process::id()) << 32
        | NONCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nonce = format!("{nonce:016x}");
    let body = match body {
        None => "e".to_owned(),
        Some(b) => format!("d:{}", blake3::hash(b).to_hex()),
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    let parts: [&[u8]; 8] = [
        b"rasa-hop-v2",
        node.as_bytes(),
        to.as_bytes(),
        at.as_bytes(),
        nonce.as_bytes(),
        body.as_bytes(),
        method.as_bytes(),
        path.as_bytes(),
    ];
    for p in parts {
        mac.update(&(p.len() as u64).to_be_bytes());
        mac.update(p);
    }
    let tag = hex::encode(mac.finalize().into_bytes());
    format!("{node} {to} {at} {nonce} {body} {tag}")
}

static NONCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
