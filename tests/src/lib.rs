//! # rasa-tests — end-to-end test harness
//!
//! Starts the real `rasa-gateway` binary on port 0 and drives it over real HTTP. The binary
//! is looked up next to the test executable (`target/<profile>/rasa-gateway`, built by
//! `make test` before the tests run) or at `$RASA_GATEWAY_BIN`. Set `RASA_TEST_LOG=1` to
//! see the gateway's logs (`RASA_TEST_RUST_LOG` sets their filter, `debug` by default).

pub mod etcd;
pub mod history;
pub mod raw;
mod raw_http;
pub mod relay;
mod s3;
mod scratch;

pub use raw_http::{raw_request, RawResponse};
pub use s3::{s3_client_for, s3_client_with, S3Server, S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY};
pub use scratch::temp_dir;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A plain HTTP client for tests. reqwest is built with rustls but no built-in crypto
/// provider (the SDK brings its own configuration), so the process-wide default provider
/// is installed first.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    reqwest::Client::new()
}

/// Sends `req` and decodes its JSON answer (panics on a transport or decoding error).
pub async fn json_of<T: serde::de::DeserializeOwned>(req: reqwest::RequestBuilder) -> T {
    req.send()
        .await
        .expect("send the request")
        .json()
        .await
        .expect("a JSON answer")
}

/// Stores `value` under `key` over HTTP and returns its descriptor (panics unless `201`).
pub async fn put_value(gw: &Gateway, key: &str, value: &[u8]) -> rasa_openapi::Descriptor {
    // Asks for the remote address (and so a lease): callers read the value one-sided.
    let r = http()
        .put(gw.url(&format!("/v1/objects/{key}?lease=true")))
        .body(value.to_vec())
        .send()
        .await
        .expect("send the PUT");
    assert_eq!(r.status(), 201, "PUT {key}");
    r.json().await.expect("a descriptor")
}

/// Sends `req` and returns its body (panics on a transport error).
pub async fn bytes_of(req: reqwest::RequestBuilder) -> bytes::Bytes {
    req.send()
        .await
        .expect("send the request")
        .bytes()
        .await
        .expect("the answer's body")
}

/// Sends `req` and returns its body as text (panics on a transport error).
pub async fn text_of(req: reqwest::RequestBuilder) -> String {
    req.send()
        .await
        .expect("send the request")
        .text()
        .await
        .expect("the answer's text")
}

/// Path of the gateway binary under test.
pub fn gateway_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RASA_GATEWAY_BIN") {
        return p.into();
    }
    workspace_bin("rasa-gateway")
}

/// The workspace's root directory (the tests crate's parent).
pub fn workspace_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// Every `.rs` file under `dir`, recursively, appended to `out`.
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read a source directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Runs the `rasa` CLI against `gw` with `args`, to completion.
pub fn rasa_cli(gw: &Gateway, args: &[&str]) -> std::process::Output {
    Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &gw.base])
        .args(args)
        .output()
        .expect("run rasa")
}

/// Path of a binary of this workspace, next to the test executable.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-<hash> → target/<profile>/<name>
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join(name))
        .expect("target directory");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (make test does)",
        bin.display()
    );
    bin
}

/// A running gateway process, killed when dropped.
pub struct Gateway {
    child: std::sync::Mutex<Child>,
    /// Where its log goes, when started with [`Gateway::start_logged`].
    log: Option<PathBuf>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://<addr>`.
    pub base: String,
    /// The S3 listener's URL, as the gateway announced it (with `--s3-listen`).
    s3: Option<String>,
}

impl Gateway {
    /// Starts a gateway with default settings plus `args`, on a free port.
    pub fn start(args: &[&str]) -> Gateway {
        Self::start_env(args, &[])
    }

    /// Starts a gateway with `args` and extra environment variables.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let log = std::env::var_os("RASA_TEST_LOG").is_some();
        Self::spawn(
            args,
            env,
            if log { Stdio::inherit() } else { Stdio::null() },
        )
    }

    /// Starts a gateway with `args` whose log (at the `RUST_LOG` filter in `env`, else
    /// `debug`) goes to the file `log`.
    pub fn start_logged(args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Gateway {
        Self::start_logged_at("127.0.0.1:0", args, env, log)
    }

    /// [`Gateway::start_logged`] listening on `listen` (the log file is appended to, so a
    /// restarted gateway's log follows its predecessor's).
    pub fn start_logged_at(
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Gateway {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the log file");
        let mut env = env.to_vec();
        if !env.iter().any(|(k, _)| *k == "RUST_LOG") {
            env.push(("RUST_LOG", "debug"));
        }
        let mut gw = Self::spawn_at(listen, args, &env, Stdio::from(file));
        gw.log = Some(log.to_owned());
        gw
    }

    /// Starts a gateway listening on `addr` (e.g. the address of one that was stopped).
    pub fn start_at(addr: SocketAddr, args: &[&str]) -> Gateway {
        Self::start_at_env(addr, args, &[])
    }

    /// [`Gateway::start_at`] with `env` added to its environment.
    pub fn start_at_env(addr: SocketAddr, args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let log = std::env::var_os("RASA_TEST_LOG").is_some();
        Self::spawn_at(
            &addr.to_string(),
            args,
            env,
            if log { Stdio::inherit() } else { Stdio::null() },
        )
    }

    fn spawn(args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Gateway {
        Self::spawn_at("127.0.0.1:0", args, env, stderr)
    }

    fn spawn_at(listen: &str, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Gateway {
        let log = std::env::var_os("RASA_TEST_LOG").is_some();
        let mut child = Command::new(gateway_bin())
            .args(["--listen", listen])
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RASA_TEST_RUST_LOG")
                    .unwrap_or_else(|_| if log { "debug" } else { "warn" }.to_owned()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start rasa-gateway");
        // The gateway prints one line once it accepts connections: the signal we wait for;
        // a second names its S3 listener, so tests bind it at port 0 (a port picked free
        // beforehand can be taken by another test's gateway before this one binds it).
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        out.read_line(&mut line)
            .expect("read the gateway's first line");
        let s3 = args.contains(&"--s3-listen").then(|| {
            let mut s3_line = String::new();
            out.read_line(&mut s3_line)
                .expect("read the gateway's S3 line");
            s3_line
                .trim()
                .strip_prefix("rasa-gateway S3 on ")
                .unwrap_or_else(|| panic!("unexpected S3 line from the gateway: {s3_line:?}"))
                .to_owned()
        });
        let url = line
            .trim()
            .strip_prefix("rasa-gateway listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the gateway: {line:?}"))
            .to_owned();
        let addr = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .and_then(|a| a.parse().ok())
            .expect("listening address");
        Gateway {
            child: std::sync::Mutex::new(child),
            log: None,
            addr,
            base: url,
            s3,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How the process ended, if it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.child().try_wait().ok().flatten()
    }

    /// What a test prints when the gateway may have died under it: whether it is running or
    /// how it ended (exit code or signal), and the last lines of its log (when logged).
    pub fn postmortem(&self) -> String {
        let state = match self.exit_status() {
            None => "the gateway is still running".to_owned(),
            Some(s) => format!("the gateway exited: {s}"),
        };
        let Some(log) = &self.log else {
            return format!("{state} (its log was not kept: start it with Gateway::start_logged)");
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!("{state}; last lines of {}:\n{tail}", log.display())
    }

    /// The S3 listener's URL (`http://127.0.0.1:PORT`); panics if it was started without
    /// `--s3-listen`.
    pub fn s3_url(&self) -> String {
        self.s3.clone().expect("a gateway started with --s3-listen")
    }

    /// Full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        self.child().wait().expect("wait for the gateway")
    }

    /// Waits for the process to exit (after a signal a test sent), at most `timeout`.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(s) = self.exit_status() {
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let mut child = self.child();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Makes a token with `rasa-gateway token new`, appending it to `file`; returns the secret.
pub fn new_token(file: &std::path::Path, name: &str, scopes: &str) -> String {
    made_by("token", file, name, scopes)
}

/// Adds an S3 access key named `name` with `scopes` to the credentials file `file` (made
/// if absent) with `rasa-gateway s3-key new`; its id and secret.
pub fn new_s3_key(file: &std::path::Path, name: &str, scopes: &str) -> (String, String) {
    let printed = made_by("s3-key", file, name, scopes);
    let (id, secret) = printed.split_once(' ').expect("an id and a secret");
    (id.to_owned(), secret.to_owned())
}

/// What `rasa-gateway KIND new NAME --scopes SCOPES --file FILE` prints, trimmed.
fn made_by(kind: &str, file: &std::path::Path, name: &str, scopes: &str) -> String {
    let out = Command::new(gateway_bin())
        .args([kind, "new", name, "--scopes", scopes, "--file"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("run rasa-gateway {kind} new: {e}"));
    assert!(
        out.status.success(),
        "{kind} new failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .trim()
        .to_owned()
}

/// A `… kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// SHA-256 of `data`, lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// Deterministic pseudo-random bytes (so failures reproduce).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The fast-path frame a descriptor names (which must carry a fabric address).
pub fn remote(d: &rasa_openapi::Descriptor) -> rasa_fastpath::reader::RemoteFrame {
    rasa_client::remote_frame(d)
        .expect("a well-formed descriptor")
        .expect("the descriptor carries a fabric address")
}

/// The sum of a metric's samples (all label sets) on the gateway's `/metrics`; 0 if absent.
pub async fn metric(gw: &Gateway, name: &str) -> f64 {
    metric_in(&text_of(http().get(gw.url("/metrics"))).await, name)
}

/// The sum of the samples of metric `name` in one scrape's `text`.
pub fn metric_in(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// Bytes of arena memory holding values: allocated less the spare memory faulted in (or
/// being faulted in) beside it in the background (`--warm-memory`), from one scrape.
pub async fn arena_bytes(gw: &Gateway) -> f64 {
    let text = text_of(http().get(gw.url("/metrics"))).await;
    metric_in(&text, "rasa_arena_bytes_allocated") - metric_in(&text, "rasa_arena_bytes_warm")
}

/// Requests the gateway answered on `route` (as routes are declared:
/// `/v1/descriptors/{*key}`), whatever their method and status.
pub async fn requests_to(gw: &Gateway, route: &str) -> f64 {
    let text = text_of(http().get(gw.url("/metrics"))).await;
    let label = format!("route=\"{route}\"");
    text.lines()
        .filter(|l| l.starts_with("rasa_http_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// Waits until the gateway's metric `name` reaches `at_least` (the gateway's own account
/// of what happened, so no guessing with sleeps); fails after 30 s.
pub async fn wait_for_metric(gw: &Gateway, name: &str, at_least: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metric(gw, name).await < at_least {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never reached {at_least}"
        );
        tokio::task::yield_now().await;
    }
}

impl Gateway {
    /// `GET path` on this gateway, answered with JSON, decoded as `T` (panics otherwise).
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        http()
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: not the expected JSON: {e}"))
    }
}

/// Sends the gateway SIGHUP and waits until the counter `name` (with its labels, e.g.
/// `rasa_token_reloads_total{result="ok"}`) has counted one more reload.
pub async fn hangup_and_wait(gw: &Gateway, name: &str) {
    let before = metric(gw, name).await;
    let status = Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -HUP failed");
    wait_for_metric(gw, name, before + 1.0).await;
}
