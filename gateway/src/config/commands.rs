//! The gateway's subcommands: something to do instead of serving.

use std::path::PathBuf;

use clap::Subcommand;

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Print the OpenAPI document (JSON) and exit. `make openapi` writes it to
    /// `openapi/openapi.json`.
    Openapi,
    /// Manage bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// TLS certificates.
    #[command(subcommand)]
    Tls(TlsCommand),
    /// The fast path's fabric on this host.
    #[command(subcommand)]
    Fabric(FabricCommand),
    /// S3 access keys for the S3 listener.
    #[command(subcommand, name = "s3-key")]
    S3Key(crate::s3::args::S3KeyCommand),
    /// The configuration file: an example, a check, the effective configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print the metrics reference (Markdown) that docs/reference/metrics.md holds.
    #[command(hide = true)]
    Metrics,
}

/// `rasa-gateway config …`
#[derive(Debug, Clone, Subcommand)]
pub enum ConfigCommand {
    /// Print a complete configuration file: every key in its section with its default and
    /// one line of meaning (keys without a default commented out).
    Example,
    /// Check a configuration file as the gateway would start with it (in this environment):
    /// unknown keys (with the nearest known one) and bad values are named by line.
    Check {
        /// The file to check.
        file: PathBuf,
    },
    /// Print the effective configuration (defaults, the file, `RASA_*` variables and flags
    /// together) as a configuration file, each key with where its value came from;
    /// secrets masked.
    Show,
    /// Print the configuration reference (a Markdown table) that docs/configuration.md holds.
    #[command(hide = true)]
    Reference,
}

/// `rasa-gateway fabric …`
#[derive(Debug, Clone, Subcommand)]
pub enum FabricCommand {
    /// Check this host before going live: libfabric versions and origin, providers and
    /// domains, the provider the gateway would choose (with these flags) and how it
    /// registers memory, native or emulated RDMA read, locked-memory limit against
    /// --memory, huge pages. One verdict per item, with the fix; exit status 1 if any fails.
    Check {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `rasa-gateway tls …`
#[derive(Debug, Clone, Subcommand)]
pub enum TlsCommand {
    /// Make a private CA and a server certificate signed by it, for a gateway without a
    /// certificate from a public CA: writes ca.pem (for clients), cert.pem and key.pem (for
    /// the gateway, key mode 0600) into --out, and prints the flags for both sides. The
    /// CA's own key is not kept.
    SelfSigned {
        /// A name or IP address clients use to reach the gateway (repeat for several).
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
        /// Directory to write the files into (created if missing; existing files are not
        /// overwritten).
        #[arg(long)]
        out: PathBuf,
        /// How long the certificates are valid, in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
}

/// `rasa-gateway token …`
#[derive(Debug, Clone, Subcommand)]
pub enum TokenCommand {
    /// Make a new token: append its line (name, scopes, hash) to the token file and print
    /// the secret once on stdout. The file never holds the secret.
    New {
        /// The token's name, as logs and errors show it.
        name: String,
        /// Comma-separated scopes: read, write, admin (admin implies the others), each for
        /// every namespace or, as NAMESPACE:SCOPE (`ml:read`), for one.
        #[arg(long)]
        scopes: crate::grants::Grants,
        /// The token file to append to (created if missing, mode 0600).
        #[arg(long, env = "RASA_TOKEN_FILE")]
        file: PathBuf,
    },
    /// List the tokens in a token file: names and scopes (the file holds no secrets).
    List {
        /// The token file.
        #[arg(long, env = "RASA_TOKEN_FILE")]
        file: PathBuf,
    },
    /// Remove a token from the token file. A running gateway drops it on SIGHUP.
    Revoke {
        /// The token's name.
        name: String,
        /// The token file.
        #[arg(long, env = "RASA_TOKEN_FILE")]
        file: PathBuf,
    },
}
