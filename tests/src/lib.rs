//! # rasa-tests — end-to-end test harness
//!
//! Starts the real `rasa-gateway` binary on port 0 and drives it over real HTTP. The binary
//! is looked up next to the test executable (`target/<profile>/rasa-gateway`, built by
//! `make test` before the tests run) or at `$RASA_GATEWAY_BIN`. Set `RASA_TEST_LOG=1` to
//! see the gateway's logs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Path of the gateway binary under test.
pub fn gateway_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RASA_GATEWAY_BIN") {
        return p.into();
    }
    workspace_bin("rasa-gateway")
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
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://<addr>`.
    pub base: String,
}

impl Gateway {
    /// Starts a gateway with default settings plus `args`, on a free port.
    pub fn start(args: &[&str]) -> Gateway {
        let log = std::env::var_os("RASA_TEST_LOG").is_some();
        let mut child = Command::new(gateway_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", if log { "debug" } else { "warn" })
            .stdout(Stdio::piped())
            .stderr(if log { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("start rasa-gateway");
        // The gateway prints one line once it accepts connections: the signal we wait for.
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the gateway's first line");
        let url = line
            .trim()
            .strip_prefix("rasa-gateway listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the gateway: {line:?}"))
            .to_owned();
        let addr = url
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .expect("listening address");
        Gateway {
            child,
            addr,
            base: url,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        self.child.wait().expect("wait for the gateway")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 answer.
#[derive(Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body bytes as received.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// First value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` (raw bytes, which should ask for `Connection: close`) and reads the
/// whole answer. For requests an HTTP client library would refuse or rewrite.
pub fn raw_request(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).expect("send");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).expect("read answer");
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: buf[split + 4..].to_vec(),
    }
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
