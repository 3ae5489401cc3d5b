//! Command line and environment configuration.
//!
//! Every flag has a `RASA_*` environment fallback. Sizes are written like `64MiB` or `1GB`,
//! durations like `10s` or `250ms`. Values that parse but do not make sense together are
//! refused at start with a one-line reason ([`Args::validate`]).

use crate::setting::SettingError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use commands::{Command, ConfigCommand, FabricCommand, TlsCommand, TokenCommand};

use crate::store::{StoreConfig, WARM_BY_DEFAULT};
use crate::units::{parse_duration, parse_size};

/// Rasa gateway: an object-store-style HTTP gateway whose values can also be read
/// one-sided over RDMA.
#[derive(Debug, Clone, Parser)]
#[command(name = "rasa-gateway", version = crate::VERSION, about, long_about = None)]
pub struct Args {
    /// Configuration file (TOML): every option below as a key in its section (`[memory]`
    /// `memory = "4GiB"`); flags and `RASA_*` variables override it. `rasa-gateway config
    /// example` prints a complete one.
    #[arg(long, env = "RASA_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to serve HTTP on. Port 0 picks a free port (printed at start).
    #[arg(
        long,
        env = "RASA_LISTEN",
        default_value = "127.0.0.1:8080",
        help_heading = "Server"
    )]
    pub listen: SocketAddr,

    /// Memory budget for stored values (all arenas together).
    #[arg(long, env = "RASA_MEMORY", default_value = "1GiB", value_parser = parse_size, help_heading = "Memory")]
    pub memory: u64,

    /// Size of one arena, the unit of memory registration and reclamation. A value larger
    /// than an arena gets an arena of its own.
    #[arg(long, env = "RASA_ARENA_SIZE", default_value = "64MiB", value_parser = parse_size, help_heading = "Memory")]
    pub arena_size: u64,

    /// Largest value a PUT may store; larger bodies are refused with 413.
    #[arg(long, env = "RASA_MAX_OBJECT_SIZE", default_value = "256MiB", value_parser = parse_size, help_heading = "Memory")]
    pub max_object_size: u64,

    /// Block size of the table of block checksums every stored value carries, which lets
    /// clients read ranges one-sided and validate only the blocks they cover (a power of
    /// two, 4KiB to 16MiB). `0` stores no table: ranges are then served over HTTP only.
    #[arg(long, env = "RASA_BLOCK_SIZE", default_value = "64KiB", value_parser = parse_size, help_heading = "Memory")]
    pub block_size: u64,

    /// Memory that values being uploaded may hold together until each is stored: a body
    /// arrives outside the memory one-sided readers can reach and is copied into an arena
    /// once complete, so no remote key ever opens the bytes of an unfinished or failed
    /// upload. An upload waiting for it longer than a lease plus twice the grace gets
    /// 503. At least one --arena-size is allowed (values larger than an arena get their
    /// own, registered only once written, and take none of it).
    #[arg(long, env = "RASA_UPLOAD_STAGING_MEMORY", default_value = "256MiB", value_parser = parse_size, help_heading = "Memory")]
    pub upload_staging_memory: u64,

    /// Spare memory kept faulted in ahead of writes (at start, in the background), part of
    /// --memory: writes find their pages in place. Default: --memory, at most 1 GiB. 0: off.
    #[arg(long, env = "RASA_WARM_MEMORY", value_parser = parse_size, help_heading = "Memory")]
    pub warm_memory: Option<u64>,

    /// How long a descriptor stays valid for one-sided reads.
    #[arg(long, env = "RASA_LEASE", default_value = "10s", value_parser = parse_duration, help_heading = "Memory")]
    pub lease: Duration,

    /// Extra time after the latest lease on an arena ends before its memory is reused
    /// (covers reads still in flight at the deadline).
    #[arg(long, env = "RASA_LEASE_GRACE", default_value = "1s", value_parser = parse_duration, help_heading = "Memory")]
    pub lease_grace: Duration,

    /// Most keys accepted in one batch request (descriptors, puts, deletes).
    #[arg(
        long,
        env = "RASA_MAX_BATCH_KEYS",
        default_value_t = 1000,
        help_heading = "Limits"
    )]
    pub max_batch_keys: usize,

    /// Most bytes of values in one put batch (`POST /v1/batch/put`); larger batches are
    /// refused with 413 before their values are read. Each value is also held to
    /// --max-object-size.
    #[arg(long, env = "RASA_MAX_BATCH_SIZE", default_value = "256MiB", value_parser = parse_size, help_heading = "Limits")]
    pub max_batch_size: u64,

    /// Longest time one remote key stays in force for new descriptors: then its arena is
    /// registered under a fresh key, and the old key is revoked once the leases handed out
    /// under it (plus --lease-grace) end. Bounds how long a descriptor — a capability for
    /// its whole arena — stays usable. `0s`: keys change only when an arena is reclaimed.
    #[arg(long, env = "RASA_KEY_LIFETIME", default_value = "10m", value_parser = parse_duration, help_heading = "Memory")]
    pub key_lifetime: Duration,

    /// One-sided reads: `auto` serves them when the provider opens (HTTP only otherwise, with
    /// a warning), `on` refuses to start without them, `off` serves HTTP only.
    #[arg(long, env = "RASA_FAST_PATH", value_enum, default_value_t = FastPathMode::Auto, help_heading = "Fast path")]
    pub fast_path: FastPathMode,

    /// libfabric provider for the fast path: `efa` on AWS, `tcp;ofi_rxm` or `sockets`
    /// elsewhere, `shm` for readers on this host; several at once separated by commas
    /// (`efa,shm`: local readers over shm, remote ones over EFA; the first is the primary).
    /// Without this flag, `FI_PROVIDER` is honoured, then `tcp;ofi_rxm`.
    #[arg(long, env = "RASA_FABRIC_PROVIDER", help_heading = "Fast path")]
    pub fabric_provider: Option<String>,

    /// Local address the fabric endpoint binds to. Default: the `--listen` IP, unless that
    /// is a wildcard (then the provider picks an interface).
    #[arg(long, env = "RASA_FABRIC_ADDR", help_heading = "Fast path")]
    pub fabric_addr: Option<String>,

    /// libfabric domain (NIC) to open, e.g. `rdmap16s27-rdm` on EFA (`rasa-gateway fabric
    /// check` lists them). Default: the first one the provider offers. On `efa` this, not
    /// `--fabric-addr`, selects the NIC.
    #[arg(long, env = "RASA_FABRIC_DOMAIN", help_heading = "Fast path")]
    pub fabric_domain: Option<String>,

    /// Read-through origin: `s3://bucket` or `s3://bucket/prefix`. Values the gateway does
    /// not hold are fetched from it on first access.
    #[arg(long, env = "RASA_ORIGIN", value_parser = parse_origin, help_heading = "Origin")]
    pub origin: Option<crate::origin::s3::S3Location>,

    /// S3 endpoint URL for non-AWS servers (MinIO, s3s-fs); implies path-style addressing.
    #[arg(
        long,
        env = "RASA_S3_ENDPOINT",
        requires = "origin",
        help_heading = "Origin"
    )]
    pub s3_endpoint: Option<String>,

    /// S3 region.
    #[arg(
        long,
        env = "RASA_S3_REGION",
        default_value = "us-east-1",
        help_heading = "Origin"
    )]
    pub s3_region: String,

    /// Use virtual-hosted-style addressing (`bucket.endpoint`) even with `--s3-endpoint`.
    #[arg(long, env = "RASA_S3_VIRTUAL_HOSTED", help_heading = "Origin")]
    pub s3_virtual_hosted: bool,

    /// Send unsigned (anonymous) requests to S3: for public buckets (open datasets), and
    /// endpoints that take no credentials.
    #[arg(
        long,
        env = "RASA_S3_ANONYMOUS",
        requires = "origin",
        help_heading = "Origin"
    )]
    pub s3_anonymous: bool,

    /// What PUT and DELETE do with the origin. `write-through` (the default with an origin)
    /// acknowledges a PUT only after S3 stored it and deletes in S3 too; `cache-only` keeps
    /// writes in the gateway (a DELETE then only drops the cached copy).
    #[arg(long, env = "RASA_WRITE_POLICY", value_enum, help_heading = "Origin")]
    pub write_policy: Option<crate::origin::WritePolicy>,

    /// Revalidate a cached origin object (conditional GET) once it is this old; `0s` never.
    #[arg(long, env = "RASA_ORIGIN_TTL", default_value = "60s", value_parser = parse_duration, help_heading = "Origin")]
    pub origin_ttl: Duration,

    /// Remember "not found at the origin" this long.
    #[arg(long, env = "RASA_NEGATIVE_TTL", default_value = "5s", value_parser = parse_duration, help_heading = "Origin")]
    pub negative_ttl: Duration,

    /// Memory for remembering "not found" and "too large" answers of the origin (the oldest
    /// are forgotten first past it; about 100 bytes plus the key each).
    #[arg(long, env = "RASA_NEGATIVE_CACHE_SIZE", default_value = "16MiB", value_parser = parse_size, help_heading = "Origin")]
    pub negative_cache_size: u64,

    /// What a cold ranged GET does besides fetching its range from the origin: `whole`
    /// also starts storing the whole object (later reads hit), `range` fetches only the range.
    #[arg(long, env = "RASA_ORIGIN_FILL", value_enum, default_value_t = crate::origin::RangeFill::Whole, help_heading = "Origin")]
    pub origin_fill: crate::origin::RangeFill,

    /// Longest wait for the origin (per request, and between body chunks): then 504.
    #[arg(long, env = "RASA_ORIGIN_TIMEOUT", default_value = "10s", value_parser = parse_duration, help_heading = "Origin")]
    pub origin_timeout: Duration,

    /// Namespaces file: a `NAME QUOTA` line per namespace (`train 4GiB`; `replicas=N` in a
    /// cluster), each with arenas, a memory budget and keys of its own, at `/v1/ns/{ns}/…`
    /// and as the S3 bucket of its name; read again on SIGHUP. The default namespace gets
    /// what --memory leaves after the quotas. Without it there is only the default one.
    #[arg(long, env = "RASA_NAMESPACES", help_heading = "Server")]
    pub namespaces: Option<PathBuf>,

    /// Token file: one `NAME SCOPES sha256:HEX` line per token (make one with
    /// `rasa-gateway token new`). With it every `/v1` route needs `Authorization: Bearer`;
    /// without it the gateway is open to anyone who can reach it.
    #[arg(long, env = "RASA_TOKEN_FILE", help_heading = "Server")]
    pub token_file: Option<PathBuf>,

    /// Serve `/metrics` without a token even when a token file is given (it needs `admin`
    /// otherwise).
    #[arg(long, env = "RASA_PUBLIC_METRICS", help_heading = "Server")]
    pub public_metrics: bool,

    /// PEM certificate chain: serve HTTPS instead of HTTP (needs --tls-key).
    #[arg(
        long,
        env = "RASA_TLS_CERT",
        requires = "tls_key",
        help_heading = "TLS"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(
        long,
        env = "RASA_TLS_KEY",
        requires = "tls_cert",
        help_heading = "TLS"
    )]
    pub tls_key: Option<PathBuf>,

    /// Most `/v1` requests handled at once; more are answered `503` with `Retry-After`
    /// at once rather than queued.
    #[arg(
        long,
        env = "RASA_MAX_CONCURRENT_REQUESTS",
        default_value_t = 512,
        help_heading = "Limits"
    )]
    pub max_concurrent_requests: usize,

    /// Largest request line plus headers; larger requests get `431`.
    #[arg(long, env = "RASA_MAX_HEADER_SIZE", default_value = "16KiB", value_parser = parse_size, help_heading = "Limits")]
    pub max_header_size: u64,

    /// Memory for request bodies held outside --memory, all together: PUT bodies sent
    /// without Content-Length (chunked), stored only once complete (413 when larger than
    /// this, 503 while the memory is in use), and in a cluster a batch's values for other
    /// members, held until the batch ends (each refused alone with 503 while the memory is
    /// in use). Bodies with Content-Length stream into the store's staging memory
    /// (--upload-staging-memory) and do not count.
    #[arg(long, env = "RASA_CHUNKED_UPLOAD_MEMORY", default_value = "256MiB", value_parser = parse_size, help_heading = "Limits")]
    pub chunked_upload_memory: u64,

    /// Longest time a client may take to send a complete request head (or a TLS
    /// handshake); then the connection is closed. Also closes idle keep-alive connections.
    #[arg(long, env = "RASA_HEADER_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = "Limits")]
    pub header_timeout: Duration,

    /// Longest time a response may wait for the client to read (no progress writing);
    /// then the connection is closed, releasing the memory the response holds.
    #[arg(long, env = "RASA_SEND_TIMEOUT", default_value = "60s", value_parser = parse_duration, help_heading = "Limits")]
    pub send_timeout: Duration,

    /// Longest pause between two chunks of a request body; then `408` and nothing stored.
    #[arg(long, env = "RASA_BODY_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = "Limits")]
    pub body_timeout: Duration,

    /// Enables `/v1/_test/*` routes that revoke keys and fabricate corrupt frames, for
    /// the fast-path test suite. Never enable in production.
    #[arg(long, env = "RASA_TEST_HOOKS", hide = true)]
    pub test_hooks: bool,

    /// Plants a known bug, with `--test-hooks` only: the chaos runs show their checker
    /// finds it. Never in production.
    #[arg(
        long,
        env = "RASA_TEST_PLANT",
        hide = true,
        requires = "test_hooks",
        value_enum
    )]
    pub test_plant: Option<crate::planted::Bug>,

    /// Connections, silent sockets, crawling uploads, allowed hosts.
    #[command(flatten, next_help_heading = "Limits")]
    pub edge: edge::EdgeArgs,

    /// The disk tier (`--disk DIR`, …).
    #[command(flatten, next_help_heading = "Disk")]
    pub disk: disk::DiskArgs,

    /// Cluster membership (`--cluster etcd://…`).
    #[command(flatten, next_help_heading = "Cluster")]
    pub cluster: crate::cluster::ClusterArgs,

    /// The S3-compatible listener (`--s3-listen`, …).
    #[command(flatten, next_help_heading = "S3")]
    pub s3: crate::s3::args::S3Args,

    /// Something to do instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Whether to serve one-sided reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FastPathMode {
    /// Serve them if the provider opens; HTTP only otherwise.
    Auto,
    /// Serve them or refuse to start.
    On,
    /// HTTP only.
    Off,
}

/// Provider used when neither `--fabric-provider` nor `FI_PROVIDER` names one.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// Smallest arena accepted: smaller ones would mostly hold headers and padding.
pub const MIN_ARENA_SIZE: u64 = 64 << 10;
/// Largest `--max-header-size` accepted: hyper's own read buffer (about 400 KiB) must stay
/// the larger bound, so that the gateway, not hyper, answers with a problem document.
pub const MAX_HEADER_SIZE: u64 = 256 << 10;
/// Longest lease accepted: longer ones would pin memory for too long after a delete.
pub const MAX_LEASE: Duration = Duration::from_secs(3600);

fn parse_origin(s: &str) -> Result<crate::origin::s3::S3Location, SettingError> {
    s.parse()
}

impl Args {
    /// Checks that the values make sense together; the error is one line naming the flags.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.s3.validate(self.cluster.etcd.is_some())?;
        self.edge.validate()?;
        self.disk.validate()?;
        self.cluster.validate()?;
        if self.arena_size < MIN_ARENA_SIZE {
            return Err(SettingError::said(format!(
                "--arena-size {} is below the minimum of {}",
                show(self.arena_size),
                show(MIN_ARENA_SIZE)
            )));
        }
        if self.arena_size > self.memory {
            return Err(SettingError::said(format!(
                "--arena-size {} does not fit in --memory {}",
                show(self.arena_size),
                show(self.memory)
            )));
        }
        if usize::try_from(self.arena_size).is_err() || usize::try_from(self.memory).is_err() {
            return Err(SettingError::said(
                "--memory does not fit this machine's address space",
            ));
        }
        if self.block_size != 0
            && (!self.block_size.is_power_of_two()
                || !(4 << 10..=16 << 20).contains(&self.block_size))
        {
            return Err(SettingError::said(format!(
                "--block-size {} must be 0 or a power of two from 4KiB to 16MiB",
                show(self.block_size)
            )));
        }
        let frame = self.max_object_size + rasa_fastpath::frame::HEADER_LEN as u64;
        if frame > self.memory {
            return Err(SettingError::said(format!(
                "--max-object-size {} does not fit in --memory {}",
                show(self.max_object_size),
                show(self.memory)
            )));
        }
        if self.lease.is_zero() || self.lease > MAX_LEASE {
            return Err(SettingError::said(format!(
                "--lease {} must be more than 0 and at most {}",
                humantime::format_duration(self.lease),
                humantime::format_duration(MAX_LEASE)
            )));
        }
        if self.write_policy == Some(crate::origin::WritePolicy::WriteThrough)
            && self.origin.is_none()
        {
            return Err(SettingError::said(
                "--write-policy write-through needs an --origin",
            ));
        }
        if self.origin.is_some() && self.origin_timeout.is_zero() {
            return Err(SettingError::said("--origin-timeout must be more than 0"));
        }
        if self.max_concurrent_requests == 0 {
            return Err(SettingError::said(
                "--max-concurrent-requests must be at least 1",
            ));
        }
        if !(1024..=MAX_HEADER_SIZE).contains(&self.max_header_size) {
            return Err(SettingError::said(format!(
                "--max-header-size {} must be between 1KiB and {}",
                show(self.max_header_size),
                show(MAX_HEADER_SIZE)
            )));
        }
        if self.header_timeout.is_zero()
            || self.body_timeout.is_zero()
            || self.send_timeout.is_zero()
        {
            return Err(SettingError::said(
                "--header-timeout, --body-timeout and --send-timeout must be more than 0",
            ));
        }
        if self.max_batch_keys == 0 {
            return Err(SettingError::said("--max-batch-keys must be at least 1"));
        }
        if self.max_batch_size == 0 {
            return Err(SettingError::said("--max-batch-size must be at least 1B"));
        }
        Ok(())
    }

    /// The effective write policy.
    pub fn effective_write_policy(&self) -> crate::origin::WritePolicy {
        self.write_policy.unwrap_or(if self.origin.is_some() {
            crate::origin::WritePolicy::WriteThrough
        } else {
            crate::origin::WritePolicy::CacheOnly
        })
    }

    /// The S3 origin's configuration, when there is an origin.
    pub fn s3_config(&self) -> Option<crate::origin::s3::S3Config> {
        Some(crate::origin::s3::S3Config {
            location: self.origin.clone()?,
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            path_style: self.s3_endpoint.is_some() && !self.s3_virtual_hosted,
            timeout: self.origin_timeout,
            anonymous: self.s3_anonymous,
        })
    }

    /// The cluster settings (`None` without `--cluster`), for a gateway listening on
    /// `listening` (and for S3 on `s3_listening`).
    pub fn cluster_config(
        &self,
        listening: std::net::SocketAddr,
        tls: bool,
        s3_listening: Option<std::net::SocketAddr>,
    ) -> Result<Option<crate::cluster::ClusterConfig>, SettingError> {
        self.cluster.config(listening, tls, s3_listening)
    }

    /// What both fronts enforce, from the flags (`--max-header-size` was checked to be
    /// within a few MiB by [`Args::validate`]).
    pub fn front_limits(&self) -> crate::front::Limits {
        crate::front::Limits {
            max_object_size: self.max_object_size,
            max_concurrent_requests: self.max_concurrent_requests,
            max_header_size: usize::try_from(self.max_header_size).unwrap_or(usize::MAX),
            body_timeout: self.body_timeout,
            min_upload_rate: self.edge.min_upload_rate,
        }
    }

    /// The host names an open listener answers to: `--allowed-host`, the host of
    /// `--advertise-url`, and `domains` with their subdomains (see [`crate::browser`]).
    pub fn host_policy(&self, domains: &[String]) -> crate::browser::HostPolicy {
        let mut names = self.edge.allowed_hosts.clone();
        if let Some(url) = &self.cluster.advertise_url {
            let authority = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
            names.push(authority.split('/').next().unwrap_or_default().to_owned());
        }
        crate::browser::HostPolicy::new(&names, domains)
    }

    /// The store's part of the configuration.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            memory_budget: self.memory,
            arena_size: self.arena_size as usize,
            lease: self.lease,
            grace: self.lease_grace,
            key_lifetime: (!self.key_lifetime.is_zero()).then_some(self.key_lifetime),
            block_size: self.block_size as u32,
            staging_memory: self.upload_staging_memory,
            warm_memory: self.warm_memory.unwrap_or(self.memory.min(WARM_BY_DEFAULT)),
        }
    }
}

fn show(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

mod commands;
pub mod describe;
pub mod disk;
pub mod edge;
mod fabric;
mod fast_path;
pub mod file;
#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
