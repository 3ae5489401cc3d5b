//! The cluster's flags (`--cluster`, `--node-id`, …), flattened into the gateway's.

use crate::setting::SettingError;
use std::sync::Arc;
use std::time::Duration;

/// How a gateway answers a request for a key another member owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Forward it to the owner and stream the answer back (one hop; PUT bodies streamed).
    Proxy,
    /// Answer `307 Temporary Redirect` with the owner's URL in `Location`.
    Redirect,
}

/// Flags of a gateway that is one member of a cluster.
#[derive(Clone, Debug, clap::Args)]
pub struct ClusterArgs {
    /// Join a cluster whose membership lives in etcd: `etcd://HOST:PORT[,HOST:PORT…]`.
    /// Without it the gateway runs alone.
    #[arg(long = "cluster", env = "RASA_CLUSTER", value_parser = parse_etcd)]
    pub etcd: Option<EtcdEndpoints>,
    /// This node's stable id in the cluster (placement hashes it, so keep it across
    /// restarts). Default: the host name.
    #[arg(long, env = "RASA_NODE_ID", requires = "etcd")]
    pub node_id: Option<String>,
    /// The URL other members and clients reach this node at. Default: the scheme and
    /// the address the gateway listens on (which must then not be 0.0.0.0 or [::]).
    #[arg(long, env = "RASA_ADVERTISE_URL", requires = "etcd")]
    pub advertise_url: Option<String>,
    /// The cluster's name: its members live under `/rasa/<name>/` in etcd.
    #[arg(long, env = "RASA_CLUSTER_NAME", default_value = "default")]
    pub cluster_name: String,
    /// Time to live of this node's etcd lease: a node that stops renewing it (crashed,
    /// cut off) leaves the member list this long after. Renewed every third of it.
    #[arg(long, env = "RASA_MEMBER_TTL", default_value = "10s", value_parser = parse_ttl)]
    pub member_ttl: Duration,
    /// Tests only (with `--test-hooks`): a pause between the lease grant and the member
    /// record each time this node registers, so a test can look inside that moment.
    #[arg(long, env = "RASA_TEST_REGISTER_PAUSE", hide = true, requires = "test_hooks",
          default_value = "0s", value_parser = parse_pause)]
    pub test_register_pause: Duration,
    /// Placement weight: a node of weight 2 owns about twice the keys of weight 1.
    #[arg(long, env = "RASA_NODE_WEIGHT", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub node_weight: u32,
    /// A PEM file of certificate authorities to trust for other members' `https://` URLs,
    /// besides the system's (e.g. the `ca.pem` of `rasa-gateway tls self-signed`).
    #[arg(long, env = "RASA_CLUSTER_CA_FILE", requires = "etcd")]
    pub cluster_ca_file: Option<std::path::PathBuf>,
    /// What a node does with a request for a key another member owns.
    #[arg(long, env = "RASA_CLUSTER_ROUTING", value_enum, default_value_t = Routing::Proxy)]
    pub cluster_routing: Routing,
    /// The URL other members reach this node's S3 listener at (they forward S3 requests
    /// for the keys it owns there). Default: `--advertise-url` with the S3 listener's port.
    #[arg(long, env = "RASA_S3_ADVERTISE_URL", requires = "etcd")]
    pub s3_advertise_url: Option<String>,
    /// A PEM file of the certificate authorities that sign etcd's certificate: etcd is
    /// then reached over TLS (`https://` to the `--cluster` endpoints).
    #[arg(long, env = "RASA_ETCD_CA_FILE", requires = "etcd")]
    pub etcd_ca_file: Option<std::path::PathBuf>,
    /// This member's client certificate for etcd (PEM; with --etcd-key-file and
    /// --etcd-ca-file), for an etcd run with `--client-cert-auth`.
    #[arg(long, env = "RASA_ETCD_CERT_FILE", requires_all = ["etcd_key_file", "etcd_ca_file"])]
    pub etcd_cert_file: Option<std::path::PathBuf>,
    /// The private key of --etcd-cert-file (PEM; 0600: refused if other users may read it).
    #[arg(long, env = "RASA_ETCD_KEY_FILE", requires = "etcd_cert_file")]
    pub etcd_key_file: Option<std::path::PathBuf>,
    /// An etcd user to authenticate as (etcd's `auth enable`), with --etcd-password-file.
    #[arg(long, env = "RASA_ETCD_USER", requires_all = ["etcd", "etcd_password_file"])]
    pub etcd_user: Option<String>,
    /// A file holding --etcd-user's password on one line (0600: refused if other users may
    /// read it).
    #[arg(long, env = "RASA_ETCD_PASSWORD_FILE", requires = "etcd_user")]
    pub etcd_password_file: Option<std::path::PathBuf>,
    /// A file holding the secret every member of the cluster shares (one line, at least 16
    /// bytes, e.g. `openssl rand -hex 32`; 0600: refused if other users may read it).
    /// Members sign their records in etcd and the requests they pass each other with it:
    /// a record without a valid signature is ignored, a request marked as forwarded
    /// without one is a client's. Without it, anyone who can write etcd can join.
    #[arg(long, env = "RASA_CLUSTER_SECRET_FILE", requires = "etcd")]
    pub cluster_secret_file: Option<std::path::PathBuf>,
    /// Memory for near copies: plain reads of keys other members own are then served
    /// here from the owner's last answer, without the hop, for a one-second lease the
    /// owner grants and revokes before any write of the key is acknowledged. 0: off.
    /// Every member should have the same setting (an owner grants only when it has it).
    /// Not with a read-through origin (`--s3-bucket`), whose objects change elsewhere.
    #[arg(long, env = "RASA_CLUSTER_NEAR_CACHE", default_value = "0",
          value_parser = crate::units::parse_size)]
    pub cluster_near_cache: u64,
    /// Keys held by more than their owner: `PREFIX=N` (repeatable; comma-separated in
    /// the variable) makes the first N members of the placement of each key of the
    /// default namespace under PREFIX hold it — the owner and N−1 replicas, each serving
    /// reads of it (HTTP and one-sided, its own descriptor) from its own memory, so a
    /// fleet loading one checkpoint reads from every member. A replica is copied from the
    /// owner after each write (and on a reader's miss), and revoked before any write of
    /// its key is acknowledged (`docs/design/consistency.md`). Every member should have
    /// the same setting. Example: `--cluster-replicas checkpoints/=3`.
    #[arg(long = "cluster-replicas", env = "RASA_CLUSTER_REPLICAS", value_delimiter = ',',
          value_parser = parse_replica_rule, requires = "etcd")]
    pub cluster_replicas: Vec<rasa_openapi::ReplicaRule>,
    /// Memory this member gives replicas of keys other members own (within `--memory`);
    /// past it a key is not replicated here and its reads go to its owner. Default: a
    /// quarter of `--memory`.
    #[arg(long, env = "RASA_CLUSTER_REPLICA_MEMORY", value_parser = crate::units::parse_size)]
    pub cluster_replica_memory: Option<u64>,
    /// Keys become hot by demand: a key its owner sees read more than this many times a
    /// second (HTTP reads and descriptors, its replicas' reads included) over
    /// `--cluster-hot-window` is held by `--cluster-hot-replicas` members until its reads
    /// fall below half of it. 0: off.
    #[arg(long, env = "RASA_CLUSTER_HOT_READS", default_value = "0")]
    pub cluster_hot_reads: u32,
    /// How many members hold a key that became hot by demand, its owner included (2 to 16).
    #[arg(long, env = "RASA_CLUSTER_HOT_REPLICAS", default_value = "3",
          value_parser = clap::value_parser!(u32).range(2..=16))]
    pub cluster_hot_replicas: u32,
    /// The window a key's reads are counted over, for `--cluster-hot-reads` (1s to 10m).
    #[arg(long, env = "RASA_CLUSTER_HOT_WINDOW", default_value = "10s", value_parser = parse_window)]
    pub cluster_hot_window: Duration,
}

/// A window of counted reads: 1 s to 10 min (a replica reports its reads about once a
/// second).
fn parse_window(s: &str) -> Result<Duration, SettingError> {
    let d = humantime::parse_duration(s).map_err(|e| SettingError::said(format!("'{s}': {e}")))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&d) {
        return Err(SettingError::said(format!("'{s}': give 1s to 10m")));
    }
    Ok(d)
}

/// `PREFIX=N`: keys under PREFIX held by N members (1 to 16).
fn parse_replica_rule(s: &str) -> Result<rasa_openapi::ReplicaRule, SettingError> {
    let (prefix, n) = s.rsplit_once('=').ok_or_else(|| {
        SettingError::said(format!("'{s}' is not PREFIX=N (e.g. checkpoints/=3)"))
    })?;
    let count = n
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=16).contains(n))
        .ok_or_else(|| {
            SettingError::said(format!("'{s}': N is how many members hold a key, 1 to 16"))
        })?;
    crate::key::validate(prefix)
        .or_else(|e| if prefix.is_empty() { Ok(()) } else { Err(e) })
        .map_err(|e| SettingError::said(format!("'{s}': the prefix is not a key: {e}")))?;
    Ok(rasa_openapi::ReplicaRule {
        namespace: None,
        prefix: prefix.to_owned(),
        count,
    })
}

/// etcd's client endpoints, as `http://HOST:PORT` URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdEndpoints(pub Vec<String>);

fn parse_etcd(s: &str) -> Result<EtcdEndpoints, SettingError> {
    let rest = s
        .strip_prefix("etcd://")
        .ok_or_else(|| SettingError::said(format!("'{s}' is not etcd://HOST:PORT[,HOST:PORT…]")))?;
    let mut out = Vec::new();
    for hp in rest.split(',').map(str::trim) {
        let (host, port) = hp
            .rsplit_once(':')
            .ok_or_else(|| SettingError::said(format!("'{hp}' in --cluster has no :PORT")))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(SettingError::said(format!(
                "'{hp}' in --cluster is not HOST:PORT"
            )));
        }
        out.push(format!("http://{hp}"));
    }
    Ok(EtcdEndpoints(out))
}

fn parse_pause(s: &str) -> Result<Duration, SettingError> {
    humantime::parse_duration(s).map_err(|e| SettingError::said(format!("'{s}': {e}")))
}

fn parse_ttl(s: &str) -> Result<Duration, SettingError> {
    let d = humantime::parse_duration(s).map_err(|e| SettingError::said(format!("'{s}': {e}")))?;
    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
        return Err(SettingError::said(format!(
            "'{s}': etcd leases count whole seconds; give at least 1s"
        )));
    }
    Ok(d)
}

impl ClusterArgs {
    /// The cluster settings, when `--cluster` is given: the node id defaults to the host
    /// name, the advertised URL to the address the gateway listens on.
    pub fn config(
        &self,
        listening: std::net::SocketAddr,
        tls: bool,
        s3_listening: Option<std::net::SocketAddr>,
    ) -> Result<Option<crate::cluster::ClusterConfig>, SettingError> {
        let c = self;
        let Some(etcd) = &c.etcd else {
            return Ok(None);
        };
        let node_id = match &c.node_id {
            Some(id) => id.clone(),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .ok_or_else(|| {
                    SettingError::said("--node-id is needed: the host name cannot be read")
                })?,
        };
        let advertise_url = match &c.advertise_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None if listening.ip().is_unspecified() => {
                return Err(SettingError::said(format!(
                    "--advertise-url is needed: the gateway listens on {listening}, which other members cannot dial"
                )))
            }
            None => format!("{}://{listening}", if tls { "https" } else { "http" }),
        };
        let s3_url = match (&c.s3_advertise_url, s3_listening) {
            (_, None) => None,
            (Some(url), Some(_)) => Some(url.trim_end_matches('/').to_owned()),
            (None, Some(at)) => Some(with_port(&advertise_url, at.port())?),
        };
        Ok(Some(crate::cluster::ClusterConfig {
            etcd: etcd.0.clone(),
            name: c.cluster_name.clone(),
            node_id,
            advertise_url,
            member_ttl: c.member_ttl,
            register_pause: c.test_register_pause,
            replicas: c.cluster_replicas.clone(),
            weight: c.node_weight,
            routing: c.cluster_routing,
            ca_file: c.cluster_ca_file.clone(),
            s3_url,
            secret: match &c.cluster_secret_file {
                Some(path) => Some(Arc::new(super::secret::ClusterSecret::load(path)?)),
                None => None,
            },
            access: super::etcd_access::EtcdAccess::load(&super::etcd_access::EtcdAccessFiles {
                ca: c.etcd_ca_file.clone(),
                identity: c.etcd_cert_file.clone().zip(c.etcd_key_file.clone()),
                user: c.etcd_user.clone().zip(c.etcd_password_file.clone()),
            })?,
        }))
    }

    /// Checks what clap cannot: a node id and an advertised URL that others can use.
    pub fn validate(&self) -> Result<(), SettingError> {
        if let Some(id) = &self.node_id {
            if id.is_empty()
                || id.len() > 128
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(SettingError::said(format!(
                    "--node-id '{id}': use 1-128 letters, digits, '-', '_' or '.'"
                )));
            }
        }
        if let Some(url) = &self.advertise_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(SettingError::said(format!(
                    "--advertise-url '{url}': give http://HOST:PORT or https://HOST:PORT"
                )));
            }
        }
        if let Some(url) = &self.s3_advertise_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(SettingError::said(format!(
                    "--s3-advertise-url '{url}': give http://HOST:PORT or https://HOST:PORT"
                )));
            }
        }
        if self.cluster_name.is_empty() || self.cluster_name.contains('/') {
            return Err(SettingError::said(format!(
                "--cluster-name '{}': give a non-empty name without '/'",
                self.cluster_name
            )));
        }
        Ok(())
    }
}

/// `url` (`scheme://host[:port]`) with its port replaced by `port`: where the S3 listener of
/// a node advertised at `url` is.
fn with_port(url: &str, port: u16) -> Result<String, SettingError> {
    let mut u = reqwest::Url::parse(url)
        .map_err(|e| SettingError::said(format!("--advertise-url '{url}': {e}")))?;
    u.set_port(Some(port)).map_err(|()| {
        SettingError::said(format!(
            "--advertise-url '{url}' takes no port: give --s3-advertise-url"
        ))
    })?;
    Ok(u.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s3_url_is_the_advertised_one_with_the_s3_port() {
        assert_eq!(
            with_port("http://10.0.0.7:8080", 9000).unwrap(),
            "http://10.0.0.7:9000"
        );
        assert_eq!(
            with_port("https://cache-a.internal", 9000).unwrap(),
            "https://cache-a.internal:9000"
        );
        assert_eq!(
            with_port("http://[::1]:8080", 9001).unwrap(),
            "http://[::1]:9001"
        );
    }

    #[test]
    fn etcd_endpoints_and_ttls() {
        assert_eq!(
            parse_etcd("etcd://127.0.0.1:2379,etcd-2:2379").unwrap().0,
            ["http://127.0.0.1:2379", "http://etcd-2:2379"]
        );
        assert!(parse_etcd("http://x:1").is_err());
        assert!(parse_etcd("etcd://x").is_err());
        assert!(parse_etcd("etcd://x:port").is_err());
        assert!(parse_ttl("500ms").is_err());
        assert_eq!(parse_ttl("3s").unwrap(), Duration::from_secs(3));
    }
}
