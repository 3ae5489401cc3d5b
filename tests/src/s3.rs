//! A real S3-compatible server (`s3s-fs`) for the read-through tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{temp_dir, Gateway};

/// A real S3-compatible server (`s3s-fs`) over a temporary directory, with one bucket.
/// It logs every request it routes; [`S3Server::ops`] counts them from outside the gateway.
pub struct S3Server {
    child: Option<Child>,
    root: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    port: u16,
    log: std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>,
    signed: bool,
}

/// Credentials the test server accepts.
pub const S3_ACCESS_KEY: &str = "rasa-test-access";
/// Secret of [`S3_ACCESS_KEY`].
pub const S3_SECRET_KEY: &str = "rasa-test-secret-0123456789";
/// The bucket every test server has.
pub const S3_BUCKET: &str = "rasa-bucket";

impl S3Server {
    /// Starts `s3s-fs` (installed by `make test`'s set-up) on a free port.
    pub fn start() -> S3Server {
        Self::start_with(true)
    }

    /// Starts `s3s-fs` without credentials: it takes only unsigned (anonymous) requests,
    /// like a public bucket.
    pub fn start_anonymous() -> S3Server {
        Self::start_with(false)
    }

    fn start_with(signed: bool) -> S3Server {
        let root = temp_dir("s3");
        std::fs::create_dir_all(root.join(S3_BUCKET)).unwrap();
        let mut s = S3Server {
            child: None,
            root,
            endpoint: String::new(),
            port: 0,
            log: Default::default(),
            signed,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let bin = std::env::var_os("RASA_S3S_FS_BIN").unwrap_or_else(|| "s3s-fs".into());
        let mut cmd = Command::new(&bin);
        cmd.args(["--host", "127.0.0.1", "--port", &self.port.to_string()]);
        if self.signed {
            cmd.args(["--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY]);
        }
        let mut child = cmd
            .arg(&self.root)
            .env("RUST_LOG", "s3s=debug,s3s_fs=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin:?} (installed by `make test`): {e}"));
        let out = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::clone(&self.log);
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("server is running at ").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(url.trim().to_owned());
                    }
                }
                if line.contains("resolved route") {
                    log.0.lock().unwrap().push(line);
                    log.1.notify_all();
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("s3s-fs announces its address");
        self.port = url.rsplit(':').next().unwrap().parse().unwrap();
        self.endpoint = url;
        self.child = Some(child);
    }

    /// How many requests of S3 operation `op` (e.g. `GetObject`) for object `key` the
    /// server has routed so far.
    pub fn ops(&self, op: &str, key: &str) -> usize {
        self.settle();
        let op = format!("op: {op},");
        let key = format!("key: \"{key}\"");
        self.log
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&op) && l.contains(&key))
            .count()
    }

    /// Waits until the log holds every request routed so far: sends an unsigned HEAD of a
    /// fresh marker key (refused, but routed and logged like any request) and waits, 10 s
    /// at most, for its line: the log is one ordered pipe, so what came before is in.
    fn settle(&self) {
        use std::io::{Read, Write};
        static MARKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MARKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mark = format!(".rasa-test-mark-{}-{n}", std::process::id());
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap_or_else(|e| {
            panic!("s3s-fs on port {} (to count its requests): {e}", self.port)
        });
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let head = format!(
            "HEAD /{S3_BUCKET}/{mark} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        );
        conn.write_all(head.as_bytes())
            .expect("send the marker HEAD");
        let _ = conn.read_to_end(&mut Vec::new());
        let (lines, grown) = &*self.log;
        let (lines, waited) = grown
            .wait_timeout_while(lines.lock().unwrap(), Duration::from_secs(10), |l| {
                !l.iter().rev().any(|l| l.contains(&mark))
            })
            .unwrap();
        drop(lines);
        assert!(
            !waited.timed_out(),
            "s3s-fs never logged the marker request {mark} (10 s)"
        );
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Writes an object straight into the server's directory (s3s-fs serves files).
    pub fn put_file(&self, key: &str, body: &[u8]) {
        let path = self.root.join(S3_BUCKET).join(key);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, body).expect("write the object");
    }

    /// Kills the server (the data stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, over the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Gateway flags that make it a read-through cache of this server's bucket under `prefix`.
    pub fn gateway_args(&self, prefix: &str) -> Vec<String> {
        vec![
            "--origin".into(),
            format!("s3://{S3_BUCKET}/{prefix}"),
            "--s3-endpoint".into(),
            self.endpoint.clone(),
        ]
    }

    /// The bytes the bucket holds under `key` (read straight from the server).
    pub async fn object(&self, key: &str) -> bytes::Bytes {
        self.client()
            .await
            .get_object()
            .bucket(S3_BUCKET)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject {key} from s3s-fs: {e}"))
            .body
            .collect()
            .await
            .expect("the object's body")
            .into_bytes()
    }

    /// An aws-sdk-s3 client for this server, to write and check the bucket directly.
    pub async fn client(&self) -> aws_sdk_s3::Client {
        s3_client_for(&self.endpoint).await
    }
}

/// An S3 client for `endpoint` (path-style, us-east-1) with the test credentials.
pub async fn s3_client_for(endpoint: &str) -> aws_sdk_s3::Client {
    s3_client_with(endpoint, S3_ACCESS_KEY, S3_SECRET_KEY)
}

/// An S3 client for `endpoint` (path-style, us-east-1) signing with `id` and `secret`.
pub fn s3_client_with(endpoint: &str, id: &str, secret: &str) -> aws_sdk_s3::Client {
    let creds = aws_sdk_s3::config::Credentials::new(id, secret, None, None, "test");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(creds)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The S3 test credentials, as a gateway's environment.
const S3_ENV: [(&str, &str); 2] = [
    ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY),
    ("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY),
];

impl Gateway {
    /// Starts a gateway with the S3 test credentials in its environment.
    pub fn start_with_s3(args: &[&str]) -> Gateway {
        Self::start_env(args, &S3_ENV)
    }

    /// [`Gateway::start_at`] with the S3 test credentials in its environment.
    pub fn start_at_with_s3(addr: std::net::SocketAddr, args: &[&str]) -> Gateway {
        Self::start_at_env(addr, args, &S3_ENV)
    }
}
