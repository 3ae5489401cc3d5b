//! `rasa`: the command-line client of a Rasa gateway, on top of the SDK.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
pub(crate) use rasa_client::with_causes;
use rasa_client::{Client, FastPath};

mod batch;
mod fabric;
mod output;
mod ranges;
mod reference;
use output::{sha256_of_file, Hashing};
use ranges::ByteRange;

/// Transfers at least this large get a progress bar (on a terminal, without `--json`).
const PROGRESS_MIN: u64 = 4 << 20;

/// What `--version` prints: this version and, in a release, the commit it was built from
/// (`make dist` builds with `RASA_BUILD` set to `VERSION (commit HASH)`).
const VERSION: &str = match option_env!("RASA_BUILD") {
    Some(build) => build,
    None => concat!(env!("CARGO_PKG_VERSION"), " (built from source)"),
};

/// Command-line client for a Rasa gateway.
#[derive(Debug, Parser)]
#[command(name = "rasa", version = VERSION, about)]
struct Cli {
    /// The gateway's HTTP endpoint; for a cluster, one or more members separated by commas.
    #[arg(
        long,
        env = "RASA_ENDPOINT",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    endpoint: String,

    /// Bearer token for a gateway run with --token-file (sent on every request).
    #[arg(long, env = "RASA_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,

    /// The namespace the keys are in (a gateway run with --namespaces); default: the
    /// default namespace.
    #[arg(long, env = "RASA_NAMESPACE", global = true)]
    namespace: Option<String>,

    /// Extra CA certificates (PEM) to trust for an https:// endpoint.
    #[arg(long, env = "RASA_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,

    /// Give up once the command has waited this long for its answer to start (cluster
    /// discovery, a descriptor, the one-sided read, the HTTP fallback and a failover
    /// included), or a transfer stops moving for this long, e.g. `30s`, `500ms`.
    /// Connecting is bounded by the smaller of this and 3 s.
    #[arg(long, env = "RASA_TIMEOUT", global = true, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,

    /// Local address for the fabric endpoint (default: 127.0.0.1 for a loopback gateway).
    #[arg(long, env = "RASA_FABRIC_ADDR", global = true)]
    fabric_addr: Option<String>,

    /// The gateway fabric endpoint to read through, by provider (`shm`, `tcp;ofi_rxm`,
    /// `efa`), for a gateway serving several. Default: `shm` when the gateway is on this
    /// host and cross-memory attach works, else its other provider.
    #[arg(long, env = "RASA_READ_PROVIDER", global = true)]
    read_provider: Option<String>,

    /// Machine-readable output: one JSON object (or array) on standard output.
    #[arg(long, global = true)]
    json: bool,

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
    /// Store FILE under KEY; prints the descriptor.
    Put {
        /// Object key.
        key: String,
        /// File to upload (`-` for standard input).
        file: PathBuf,
        /// Media type to store.
        #[arg(long)]
        content_type: Option<String>,
    },
    /// Read KEY to standard output or a file. With `--json`, prints
    /// `{key, version, length, sha256, path}` instead (`path`: `fabric` or `http`).
    Get {
        /// Object key.
        key: String,
        /// Write the value here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Whether to read one-sided.
        #[arg(long, value_enum, default_value_t = Mode::Auto)]
        fast_path: Mode,
        /// Also check the SHA-256 of the value (the frame checksum is always checked).
        #[arg(long)]
        verify: bool,
        /// Only these bytes: `START-END` (END included, as in HTTP), `START-` or `-N` (the
        /// last N). Read one-sided when the version has a block table, each block
        /// validated; `--verify` does not apply.
        #[arg(long, conflicts_with = "verify", allow_hyphen_values = true)]
        range: Option<ByteRange>,
    },
    /// Store several files, in one request per batch (up to 1000 values, 64 MiB):
    /// `KEY=FILE`, or FILE stored under `--prefix` and its file name. Prints one line per
    /// value; fails if any was not stored (the others are).
    PutMany {
        /// `KEY=FILE` or FILE, one per value.
        #[arg(required = true)]
        values: Vec<String>,
        /// Put before the file name of a FILE given without a key.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Delete KEY (succeeds when absent too); several keys go in one request per batch.
    Rm {
        /// Object keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Show KEY's current version, length, ETag and media type.
    Stat {
        /// Object key.
        key: String,
    },
    /// List keys (in key order).
    Ls {
        /// Only keys starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// Stop after this many keys (default: all).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// The fast path on this host.
    #[command(subcommand)]
    Fabric(FabricCmd),
    /// Print the CLI reference (Markdown) that docs/reference/cli.md holds.
    #[command(hide = true)]
    Reference,
}

#[derive(Debug, Subcommand)]
enum FabricCmd {
    /// Check this client host: libfabric versions and origin, providers and domains, the
    /// provider a one-sided read would use (the gateway's, asked at --endpoint, or
    /// --provider), native or emulated RDMA read, locked-memory limit, huge pages. Exit
    /// status 1 if any item fails.
    Check {
        /// Provider to check (default: the gateway's, else tcp;ofi_rxm).
        #[arg(long, env = "RASA_FABRIC_PROVIDER")]
        provider: Option<String>,
        /// Domain (NIC) to open, e.g. rdmap16s27-rdm on EFA.
        #[arg(long, env = "RASA_FABRIC_DOMAIN")]
        domain: Option<String>,
        /// Largest value to be read one-sided (its scratch buffer is registered).
        #[arg(long, default_value = "256MiB", value_parser = parse_size)]
        largest: u64,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{e} (write sizes like 64MiB)"))
}

fn main() -> ExitCode {
    // Before any thread exists (the environment may only change then); a reader's few
    // reads in flight need far smaller provider queues than the defaults.
    if let Err(why) = rasa_fastpath::library::apply_provider_defaults() {
        eprintln!("rasa: libfabric provider defaults not applied: {why}");
    }
    let cli = Cli::parse();
    // One command, one transfer at a time: a single-threaded runtime spares the hand-offs
    // between worker threads (a 256 MiB read spent more time in futex wake-ups than in
    // reading the socket); file writes and SHA-256 still run on the blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rasa: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rasa: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bar(len: u64, json: bool, what: &str) -> Option<ProgressBar> {
    if json || len < PROGRESS_MIN || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    Some(pb)
}

/// The fabric provider a read over `path` went through (`null` over HTTP).
fn provider_of(client: &Client, path: rasa_client::ReadPath) -> Option<String> {
    (path == rasa_client::ReadPath::Fabric)
        .then(|| client.stats().fabric_provider)
        .flatten()
}

fn print_json(v: &serde_json::Value) {
    println!("{v}");
}

async fn run(cli: Cli) -> Result<(), String> {
    if let Cmd::Fabric(FabricCmd::Check {
        provider,
        domain,
        largest,
    }) = &cli.command
    {
        return match fabric::check(&cli, provider.clone(), domain.clone(), *largest).await? {
            true => Ok(()),
            false => Err("the fabric check failed (see FAIL above)".into()),
        };
    }
    if let Cmd::Reference = &cli.command {
        print!("{}", reference::markdown());
        return Ok(());
    }
    let client = client_for(&cli)?;
    let json = cli.json;
    match cli.command {
        Cmd::Put {
            key,
            file,
            content_type,
        } => put(&client, &key, &file, content_type.as_deref(), json).await?,
        Cmd::Get {
            key,
            output,
            range: Some(range),
            ..
        } => ranges::get(&client, &key, range, output.as_deref(), json).await?,
        Cmd::Get { key, output, .. } => get(&client, &key, output.as_deref(), json).await?,
        Cmd::PutMany { values, prefix } => batch::put_many(&client, &prefix, &values, json).await?,
        Cmd::Rm { keys } => batch::rm(&client, &keys, json).await?,
        Cmd::Stat { key } => stat(&client, &key, json).await?,
        Cmd::Fabric(_) | Cmd::Reference => unreachable!("handled above"),
        Cmd::Ls { prefix, limit } => ls(&client, &prefix, limit, json).await?,
    }
    Ok(())
}

/// The SDK client the command line describes (the fast path only for `get`).
fn client_for(cli: &Cli) -> Result<Client, String> {
    let mode = match &cli.command {
        Cmd::Get {
            fast_path: Mode::Required,
            ..
        } => FastPath::Required,
        Cmd::Get {
            fast_path: Mode::Auto,
            ..
        } => FastPath::Auto,
        _ => FastPath::Off,
    };
    let verify = matches!(&cli.command, Cmd::Get { verify: true, .. });
    let mut builder = Client::builder(&cli.endpoint)
        .timeout(cli.timeout)
        .connect_timeout(cli.timeout.min(Duration::from_secs(3)))
        .fast_path(mode)
        // `rasa put` prints a descriptor to read one-sided (another process, a script):
        // it asks for the remote address, and so a lease.
        .lease_puts(matches!(&cli.command, Cmd::Put { .. }))
        .verify_sha256(verify);
    if let Some(a) = &cli.fabric_addr {
        builder = builder.fabric_addr(a);
    }
    if let Some(p) = &cli.read_provider {
        builder = builder.fabric_provider(p);
    }
    if let Some(ns) = &cli.namespace {
        builder = builder.namespace(ns);
    }
    if let Some(t) = &cli.token {
        builder = builder.token(t);
    }
    if let Some(ca) = &cli.ca_file {
        builder = builder.ca_file(ca);
    }
    builder.build().map_err(|e| with_causes(&e))
}

/// `rasa put`: from a file (streamed with its length) or standard input; prints the descriptor.
async fn put(
    client: &Client,
    key: &str,
    file: &std::path::Path,
    content_type: Option<&str>,
    json: bool,
) -> Result<(), String> {
    let d = if file.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
            .map_err(|e| format!("reading standard input: {e}"))?;
        client.put_typed(key, v, content_type).await
    } else {
        // Streamed from disk with its length: memory does not grow with the file.
        let len = std::fs::metadata(file).map_or(0, |m| m.len());
        let pb = bar(len, json, &format!("put {key}"));
        let mut transfer = rasa_client::FileTransfer::new(client);
        if let Some(pb) = pb.clone() {
            transfer = transfer.on_progress(move |sent| pb.set_position(sent));
        }
        let d = transfer.put_file(key, &file, content_type).await;
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        d
    }
    .map_err(|e| with_causes(&e))?;
    let v = serde_json::to_value(&d).expect("descriptor serializes");
    if json {
        print_json(&v);
    } else {
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    }
    Ok(())
}

/// `rasa get`: to standard output or a file, streamed; with `--json`, what was received.
async fn get(
    client: &Client,
    key: &str,
    output: Option<&std::path::Path>,
    json: bool,
) -> Result<(), String> {
    let spinner = (!json && std::io::stderr().is_terminal() && output.is_some()).then(|| {
        let s = ProgressBar::new_spinner();
        s.set_message(format!("get {key}"));
        s.enable_steady_tick(Duration::from_millis(100));
        s
    });
    // Streamed: memory does not grow with the value. A file is written under a
    // temporary name and renamed once complete and validated.
    // A device or pipe (`-o /dev/null`) cannot be read back: with `--json`, it is
    // written through a hashing writer instead.
    let device = output.filter(|p| std::fs::metadata(p).is_ok_and(|m| !m.is_file()));
    let out: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match device {
        Some(p) if json => Box::new(
            tokio::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .await
                .map_err(|e| format!("opening {}: {e}", p.display()))?,
        ),
        _ => Box::new(tokio::io::sink()),
    };
    let mut hashing = Hashing::new(out);
    let written = match &output {
        Some(_) if json && device.is_some() => client.get_to(key, &mut hashing).await,
        Some(path) => client.get_to_file(key, path).await,
        None if json => client.get_to(key, &mut hashing).await,
        None => {
            let mut out = tokio::io::BufWriter::with_capacity(1 << 20, tokio::io::stdout());
            client.get_to(key, &mut out).await
        }
    }
    .map_err(|e| with_causes(&e))?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if json {
        // The SHA-256 of the bytes received, computed here (not the gateway's word).
        let sha256 = match &output {
            Some(path) if device.is_none() => sha256_of_file(path)?,
            _ => hashing.hex(),
        };
        print_json(&serde_json::json!({
            "key": key,
            "version": written.version,
            "length": written.length,
            "sha256": sha256,
            "path": written.path.as_str(),
            "provider": provider_of(client, written.path),
        }));
    } else if output.is_some() && std::io::stderr().is_terminal() {
        eprintln!("{} bytes via {}", written.length, written.path.as_str());
    }
    Ok(())
}

/// `rasa stat`.
async fn stat(client: &Client, key: &str, json: bool) -> Result<(), String> {
    let m = client.head(key).await.map_err(|e| with_causes(&e))?;
    if json {
        print_json(&serde_json::json!({
            "key": key,
            "version": m.version,
            "length": m.length,
            "etag": m.etag,
            "content_type": m.content_type,
        }));
    } else {
        println!("key:          {key}");
        println!("version:      {}", m.version);
        println!("length:       {}", m.length);
        println!("etag:         {}", m.etag);
        println!("content-type: {}", m.content_type);
    }
    Ok(())
}

/// `rasa ls`: every page up to `limit` keys.
async fn ls(client: &Client, prefix: &str, limit: Option<usize>, json: bool) -> Result<(), String> {
    let mut after: Option<String> = None;
    let mut items = Vec::new();
    let want = limit.unwrap_or(usize::MAX);
    loop {
        let page = client
            .list(prefix, after.as_deref(), (want - items.len()).min(1000))
            .await
            .map_err(|e| with_causes(&e))?;
        items.extend(page.items);
        match page.next_after {
            Some(next) if items.len() < want => after = Some(next),
            _ => break,
        }
    }
    if json {
        print_json(&serde_json::to_value(&items).expect("json"));
    } else {
        for i in &items {
            println!("{:>12}  {}  {}", i.length, i.version, i.key);
        }
    }
    Ok(())
}
