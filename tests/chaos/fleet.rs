//! The cluster under test: real members on a real etcd (and s3s-fs as the origin), each
//! behind relays a fault can cut — its link to etcd, and everything that reaches it (its
//! peers, its clients, their S3 requests) — and a process a fault can kill, restart (over
//! the same disk tier) and freeze.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rasa_tests::etcd::{serving, Etcd};
use rasa_tests::relay::Relay;
use rasa_tests::{temp_dir, Gateway, S3Server, S3_ACCESS_KEY, S3_SECRET_KEY};

/// How a run's cluster is set up.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// A read-through, write-through origin (s3s-fs).
    pub origin: bool,
    /// Each member keeps a disk tier, kept across its restarts.
    pub disk: bool,
    /// Near copies (`--cluster-near-cache`; only without an origin).
    pub near: bool,
    /// A bug planted in every member (`--test-plant`), or none.
    pub plant: Option<&'static str>,
    /// The kinds of fault injected (as `CHAOS_FAULTS` names them), when not every kind.
    pub faults: Option<&'static str>,
    /// Every fault on the member that owns most of the run's keys, not on one at random.
    pub on_owner: bool,
    /// How many keys the clients share (fewer: each key's history is busier).
    pub keys: usize,
}

impl std::fmt::Display for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "origin {}, disk {}, near copies {}",
            on(self.origin),
            on(self.disk),
            on(self.near)
        )?;
        if let Some(p) = self.plant {
            write!(f, ", planted bug '{p}'")?;
        }
        if let Some(k) = self.faults {
            write!(f, ", faults {k} only")?;
        }
        if self.keys != 4 {
            write!(f, ", {} keys", self.keys)?;
        }
        if self.on_owner {
            write!(f, ", every fault on the owner of most keys")?;
        }
        Ok(())
    }
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The member TTL: faults last longer or shorter than it.
pub const TTL: Duration = Duration::from_secs(3);
/// The lease of a descriptor: how stale a one-sided read holding one may be.
pub const LEASE: Duration = Duration::from_secs(2);

/// One member: its process (none while killed), its relays and its flags.
pub struct Member {
    /// `g1`, `g2`, …
    pub id: String,
    /// Where its process listens now (a port of its choosing each time it starts: a port
    /// picked for it beforehand can be taken meanwhile — by another process's connection,
    /// say — and then it cannot start).
    listen: Mutex<Option<SocketAddr>>,
    args: Vec<String>,
    log: PathBuf,
    /// Its `RUST_LOG` (`CHAOS_MEMBER_LOG`, else `warn`).
    log_filter: String,
    process: Mutex<Option<Gateway>>,
    /// Its link to etcd.
    pub etcd_link: Relay,
    /// Everything that reaches its HTTP API (peers and clients).
    pub front: Relay,
    /// Everything that reaches its S3 listener.
    pub s3_front: Relay,
}

/// The cluster: etcd, the origin, the members, the S3 key the clients sign with.
pub struct Fleet {
    /// etcd.
    pub etcd: Etcd,
    /// The origin, when the setup has one (kept running while the fleet lives).
    _origin: Option<S3Server>,
    /// The members.
    pub members: Vec<Member>,
    /// The S3 listeners' access key id and secret.
    pub s3_key: (String, String),
}

impl Fleet {
    /// Starts `n` members set up as `setup`, and waits until each sees all of them.
    pub async fn start(n: usize, setup: Setup, tag: &str) -> Fleet {
        let dir = temp_dir("chaos");
        if std::env::var_os("CHAOS_MEMBER_LOG").is_some() {
            println!("  members' logs: {}/g*.log", dir.display());
        }
        let etcd = Etcd::start();
        let origin = setup.origin.then(S3Server::start);
        let keys = dir.join("s3-keys");
        let s3_key = rasa_tests::new_s3_key(&keys, "chaos", "read,write");
        let name = rasa_tests::etcd::cluster_name(tag);
        let etcd_addr: SocketAddr = etcd
            .endpoint
            .trim_start_matches("etcd://")
            .parse()
            .expect("etcd's address");
        let mut members = Vec::new();
        for i in 1..=n {
            let id = format!("g{i}");
            let etcd_link = Relay::start(etcd_addr).await;
            // Pointed at the member's listeners each time it starts (ports of its choosing).
            let front = Relay::unset().await;
            let s3_front = Relay::unset().await;
            let mut args: Vec<String> = [
                "--cluster",
                &format!("etcd://{}", etcd_link.addr),
                "--cluster-name",
                &name,
                "--node-id",
                &id,
                "--member-ttl",
                &format!("{}s", TTL.as_secs()),
                "--advertise-url",
                &format!("http://{}", front.addr),
                "--s3-advertise-url",
                &format!("http://{}", s3_front.addr),
                "--s3-listen",
                "127.0.0.1:0",
                "--s3-bucket",
                "data",
                "--s3-credentials-file",
                keys.to_str().expect("a UTF-8 path"),
                "--lease",
                &format!("{}s", LEASE.as_secs()),
                "--memory",
                "64MiB",
                "--max-object-size",
                "1MiB",
                "--fast-path",
                "on",
                "--fabric-provider",
                "tcp;ofi_rxm",
            ]
            .map(str::to_owned)
            .to_vec();
            if let Some(o) = &origin {
                args.extend(o.gateway_args(&format!("{name}/")));
            }
            if setup.disk {
                let disk = dir.join(format!("disk-{id}"));
                args.extend(["--disk".into(), disk.display().to_string()]);
                args.extend(["--disk-size".into(), "64MiB".into()]);
                args.extend(["--disk-segment-size".into(), "8MiB".into()]);
            }
            if let Some(p) = setup.plant {
                args.extend(["--test-hooks".into(), "--test-plant".into(), p.into()]);
            }
            if setup.near {
                args.extend(["--cluster-near-cache".into(), "8MiB".into()]);
            }
            let log = dir.join(format!("{id}.log"));
            let m = Member {
                id,
                listen: Mutex::new(None),
                args,
                log,
                log_filter: std::env::var("CHAOS_MEMBER_LOG").unwrap_or_else(|_| "warn".into()),
                process: Mutex::new(None),
                etcd_link,
                front,
                s3_front,
            };
            m.start();
            members.push(m);
        }
        let fleet = Fleet {
            etcd,
            _origin: origin,
            members,
            s3_key,
        };
        fleet.wait_whole(Duration::from_secs(20)).await;
        fleet
    }

    /// Waits until every member sees every member serving.
    pub async fn wait_whole(&self, within: Duration) {
        let n = self.members.len();
        let deadline = tokio::time::Instant::now() + within;
        for m in &self.members {
            loop {
                if m.sees_serving().await == Some(n) {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{} did not see {n} serving members within {within:?}:\n{}",
                    m.id,
                    self.postmortem()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// What each member's log says last, for a failed run.
    pub fn postmortem(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(&m.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- {} ({}):\n{tail}", m.id, m.log.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Member {
    /// Starts its process (again), at its address, over its disk tier.
    pub fn start(&self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env = [
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY),
            ("RUST_LOG", self.log_filter.as_str()),
        ];
        let gw = Gateway::start_logged_at("127.0.0.1:0", &args, &env, &self.log);
        let s3: SocketAddr = gw
            .s3_url()
            .trim_start_matches("http://")
            .parse()
            .expect("the S3 listener's address");
        self.front.point_at(gw.addr);
        self.s3_front.point_at(s3);
        *self.listen.lock().unwrap() = Some(gw.addr);
        *self.process.lock().unwrap() = Some(gw);
    }

    /// Kills its process (SIGKILL): no goodbye, its lease ends by itself.
    pub fn kill(&self) {
        if let Some(gw) = self.process.lock().unwrap().take() {
            drop(gw); // kills and reaps
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to its process, if it runs.
    pub fn signal(&self, signal: &str) {
        if let Some(gw) = self.process.lock().unwrap().as_ref() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{signal}"), &gw.pid().to_string()])
                .status();
        }
    }

    /// Its URL as clients reach it (through its front relay).
    pub fn base(&self) -> String {
        format!("http://{}", self.front.addr)
    }

    /// Its S3 listener's URL as clients reach it.
    pub fn s3_base(&self) -> String {
        format!("http://{}", self.s3_front.addr)
    }

    /// How many serving members it sees (asked at its own address, past the relays).
    async fn sees_serving(&self) -> Option<usize> {
        let listen = (*self.listen.lock().unwrap())?;
        let url = format!("http://{listen}/v1/cluster");
        let resp = rasa_tests::http()
            .get(url)
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .ok()?;
        let view: rasa_openapi::ClusterView = resp.json().await.ok()?;
        Some(serving(&view).len())
    }
}

/// The S3 bucket the members serve (each S3 key is the gateway's key).
pub const BUCKET: &str = "data";
