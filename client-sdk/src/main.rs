//! `rasa`: the command-line client of a Rasa gateway.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rasa_client::{Client, FastPath};
use sha2::{Digest, Sha256};

/// Command-line client for a Rasa gateway.
#[derive(Debug, Parser)]
#[command(name = "rasa", version, about)]
struct Cli {
    /// The gateway's HTTP endpoint.
    #[arg(
        long,
        env = "RASA_ENDPOINT",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    endpoint: String,

    /// Local address for the fabric endpoint (default: 127.0.0.1 for a loopback gateway).
    #[arg(long, env = "RASA_FABRIC_ADDR", global = true)]
    fabric_addr: Option<String>,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    /// One-sided when possible, HTTP otherwise.
    Auto,
    /// HTTP only.
    Off,
    /// One-sided or fail.
    Required,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Store FILE under KEY; prints the descriptor (JSON).
    Put {
        /// Object key.
        key: String,
        /// File to upload (`-` for standard input).
        file: PathBuf,
        /// Media type to store.
        #[arg(long)]
        content_type: Option<String>,
    },
    /// Read KEY to standard output or a file.
    Get {
        /// Object key.
        key: String,
        /// Write the value here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Whether to read one-sided.
        #[arg(long, value_enum, default_value_t = Mode::Auto)]
        fast_path: Mode,
        /// Print one JSON object `{key, version, length, sha256, path}` instead of the
        /// value (which goes to `--output` if given); `path` is `fabric` or `http`.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rasa: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let mode = match &cli.command {
        Cmd::Get {
            fast_path: Mode::Off,
            ..
        }
        | Cmd::Put { .. } => FastPath::Off,
        Cmd::Get {
            fast_path: Mode::Required,
            ..
        } => FastPath::Required,
        Cmd::Get {
            fast_path: Mode::Auto,
            ..
        } => FastPath::Auto,
    };
    let mut builder = Client::builder(&cli.endpoint).fast_path(mode);
    if let Some(a) = &cli.fabric_addr {
        builder = builder.fabric_addr(a);
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    match cli.command {
        Cmd::Put {
            key,
            file,
            content_type,
        } => {
            let body = if file.as_os_str() == "-" {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
                    .map_err(|e| format!("reading standard input: {e}"))?;
                v
            } else {
                tokio::fs::read(&file)
                    .await
                    .map_err(|e| format!("reading {}: {e}", file.display()))?
            };
            let d = client
                .put_typed(&key, body, content_type.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&d).expect("descriptor serializes")
            );
        }
        Cmd::Get {
            key, output, json, ..
        } => {
            let obj = client.get(&key).await.map_err(|e| e.to_string())?;
            if let Some(path) = &output {
                tokio::fs::write(path, &obj.bytes)
                    .await
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
            }
            if json {
                let out = serde_json::json!({
                    "key": key,
                    "version": obj.version,
                    "length": obj.bytes.len(),
                    "sha256": hex::encode(Sha256::digest(&obj.bytes)),
                    "path": obj.path.as_str(),
                });
                println!("{out}");
            } else if output.is_none() {
                std::io::stdout()
                    .write_all(&obj.bytes)
                    .map_err(|e| format!("writing standard output: {e}"))?;
            }
        }
    }
    Ok(())
}
