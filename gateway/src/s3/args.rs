//! The S3 listener's flags (`--s3-*`, flattened into the gateway's) and the `s3-key`
//! subcommand.

use crate::setting::SettingError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Bucket, EtagMode};
use crate::units::{parse_duration, parse_size};

/// The S3-compatible listener.
#[derive(Debug, Clone, clap::Args)]
pub struct S3Args {
    /// Serve the S3 API on this address too (e.g. `127.0.0.1:9000`), for S3 tools:
    /// aws-cli, boto3, s5cmd, Arrow… It cannot share the native port (SigV4 signs the
    /// exact path). Same TLS, timeouts, limits and shutdown as the native listener.
    #[arg(long, env = "RASA_S3_LISTEN")]
    pub s3_listen: Option<SocketAddr>,

    /// A bucket the S3 listener serves: `NAME` (its keys are the gateway's keys) or
    /// `NAME=PREFIX` (S3 key `k` is gateway key `PREFIX` + `k`). Repeatable. With
    /// `--origin s3://B/P` and no `--s3-bucket`, the bucket is `B`, whose keys under `P`
    /// are the ones the gateway caches — tools change only their endpoint.
    #[arg(long = "s3-bucket", env = "RASA_S3_BUCKETS", value_delimiter = ',', value_parser = Bucket::parse)]
    pub s3_buckets: Vec<Bucket>,

    /// Domains for virtual-host-style requests (`BUCKET.DOMAIN`); path-style always works.
    #[arg(long = "s3-domain", env = "RASA_S3_DOMAINS", value_delimiter = ',')]
    pub s3_domains: Vec<String>,

    /// S3 access keys (made with `rasa-gateway s3-key new`), reloaded on SIGHUP. Without
    /// it the S3 listener is open to anyone who can reach it (like the native API without
    /// --token-file).
    #[arg(long, env = "RASA_S3_CREDENTIALS_FILE")]
    pub s3_credentials_file: Option<PathBuf>,

    /// The ETag of objects uploaded without `Content-MD5`: `sha256` (the quoted SHA-256,
    /// computed anyway) or `md5` (an extra MD5 pass over every upload, for tools that
    /// insist on MD5 ETags).
    #[arg(long, env = "RASA_S3_ETAG", value_enum, default_value_t = EtagMode::Sha256)]
    pub s3_etag: EtagMode,

    /// Memory all multipart uploads' staged parts may hold together; a part beyond it is
    /// answered `503 SlowDown`.
    #[arg(long, env = "RASA_MULTIPART_MEMORY", default_value = "1GiB", value_parser = parse_size)]
    pub multipart_memory: u64,

    /// Most multipart uploads in progress at once (each also holds ~1 KiB of
    /// --multipart-memory); one more is answered `503 SlowDown`.
    #[arg(long, env = "RASA_MULTIPART_MAX_UPLOADS", default_value_t = 10_000)]
    pub multipart_max_uploads: usize,

    /// Let S3 keys with the `buckets` scope (or `admin`) create and delete buckets
    /// (`write` alone may not): CreateBucket adds a namespace of --s3-bucket-quota to the --namespaces file (which
    /// the gateway then owns) and DeleteBucket removes an empty one. Without it buckets are
    /// the operator's (CreateBucket of an existing one still succeeds, as S3 answers its
    /// owner).
    #[arg(long, env = "RASA_S3_CREATE_BUCKETS", requires = "namespaces")]
    pub s3_create_buckets: bool,

    /// The quota of a bucket made by CreateBucket (--s3-create-buckets).
    #[arg(long, env = "RASA_S3_BUCKET_QUOTA", default_value = "256MiB", value_parser = parse_size)]
    pub s3_bucket_quota: u64,

    /// A multipart upload not completed within this long is abandoned and its parts freed.
    #[arg(long, env = "RASA_MULTIPART_EXPIRY", default_value = "1h", value_parser = parse_duration)]
    pub multipart_expiry: Duration,
}

/// `rasa-gateway s3-key …`
#[derive(Debug, Clone, clap::Subcommand)]
pub enum S3KeyCommand {
    /// Make an S3 access key: append its line (name, scopes, access key id, secret) to the
    /// credentials file (created 0600) and print the id and secret once on stdout.
    New {
        /// The key's name, as logs show it.
        name: String,
        /// Comma-separated scopes: read (GET, HEAD, LIST), write (PUT, DELETE, multipart,
        /// copy), admin (both, and buckets); each for every bucket (namespace) or, as
        /// NAMESPACE:SCOPE (`ml:read`), for one; buckets (gateway-wide only): CreateBucket
        /// and DeleteBucket with --s3-create-buckets.
        #[arg(long)]
        scopes: crate::grants::Grants,
        /// The credentials file to append to.
        #[arg(long, env = "RASA_S3_CREDENTIALS_FILE")]
        file: PathBuf,
    },
    /// List the keys of a credentials file: names, scopes and access key ids (never the
    /// secrets).
    List {
        /// The credentials file.
        #[arg(long, env = "RASA_S3_CREDENTIALS_FILE")]
        file: PathBuf,
    },
    /// Remove a key from the credentials file. A running gateway drops it on SIGHUP.
    Revoke {
        /// The key's name.
        name: String,
        /// The credentials file.
        #[arg(long, env = "RASA_S3_CREDENTIALS_FILE")]
        file: PathBuf,
    },
}

impl S3Args {
    /// Refuses combinations that cannot work (`clustered`: the gateway joins a cluster).
    pub fn validate(&self, clustered: bool) -> Result<(), SettingError> {
        if self.s3_create_buckets && clustered {
            return Err(SettingError::said("--s3-create-buckets is not available with --cluster: each member has a namespaces file of its own, so a bucket made on one would be missing on the others (give every member the same --namespaces file and --s3-bucket flags)"));
        }
        Ok(())
    }

    /// The buckets to serve: as given, else the origin's bucket (see `--s3-bucket`).
    pub fn buckets(
        &self,
        origin: Option<&crate::origin::s3::S3Location>,
    ) -> Result<Vec<Bucket>, SettingError> {
        if !self.s3_buckets.is_empty() {
            return Ok(self.s3_buckets.clone());
        }
        match origin {
            Some(o) => Ok(vec![Bucket::of_origin(&o.bucket, &o.prefix)]),
            None => Err(SettingError::said(
                "--s3-listen needs a bucket to serve: --s3-bucket NAME[=PREFIX] (or an --origin, whose bucket it then serves)",
            )),
        }
    }
}
