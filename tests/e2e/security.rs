//! Security at the edge: tokens and scopes on every route, secrets kept out of logs, the
//! connection and request limits, and TLS through the SDK and CLI.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::objects::assert_problem;
use rasa_client::{Client, FastPath};
use rasa_gateway::http::{route_table, Access, HttpConfig};
use rasa_gateway::tokens::Scope;
use rasa_openapi::{Problem, ProblemCode, PROBLEM_JSON};
use rasa_tests::{
    http, metric, new_token, raw_request, temp_dir, wait_for_metric, workspace_bin, Gateway,
};
use reqwest::header::{AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};

/// Tokens of every kind, written by `rasa-gateway token new` into a fresh token file.
struct Tokens {
    file: PathBuf,
    read: String,
    write: String,
    admin: String,
}

impl Tokens {
    fn make() -> Tokens {
        let file = temp_dir("tokens").join("tokens");
        let t = Tokens {
            read: new_token(&file, "reader", "read"),
            write: new_token(&file, "writer", "write"),
            admin: new_token(&file, "operator", "admin"),
            file,
        };
        let stored = std::fs::read_to_string(&t.file).unwrap();
        for secret in [&t.read, &t.write, &t.admin] {
            assert!(
                !stored.contains(secret.as_str()),
                "the token file holds a secret"
            );
        }
        t
    }

    fn path(&self) -> &str {
        self.file.to_str().unwrap()
    }

    /// A gateway (HTTP only) that accepts these tokens, with `extra` flags.
    fn gateway(&self, extra: &[&str]) -> Gateway {
        let mut args = vec!["--token-file", self.path(), "--fast-path", "off"];
        args.extend_from_slice(extra);
        Gateway::start(&args)
    }
}

/// Who calls, in the matrix.
#[derive(Clone, Copy, Debug)]
enum Caller {
    Nobody,
    Stranger,
    Reader,
    Writer,
    Operator,
}

impl Caller {
    const ALL: [Caller; 5] = [
        Caller::Nobody,
        Caller::Stranger,
        Caller::Reader,
        Caller::Writer,
        Caller::Operator,
    ];

    fn secret(self, t: &Tokens) -> Option<&str> {
        match self {
            Caller::Nobody => None,
            Caller::Stranger => Some("rasa_not-a-token-this-gateway-knows"),
            Caller::Reader => Some(&t.read),
            Caller::Writer => Some(&t.write),
            Caller::Operator => Some(&t.admin),
        }
    }

    /// The scopes this caller's token was given (admin stands for all of them).
    fn has(self, scope: Scope) -> bool {
        match self {
            Caller::Nobody | Caller::Stranger => false,
            Caller::Reader => scope == Scope::Read,
            Caller::Writer => scope == Scope::Write,
            Caller::Operator => true,
        }
    }

    fn known(self) -> bool {
        !matches!(self, Caller::Nobody | Caller::Stranger)
    }
}

fn concrete(path: &str) -> String {
    path.replace("{*key}", "matrix/key")
        .replace("{file}", "app.js")
        .replace("{ns}", "default")
}

/// The access policy, written down independently of the router: reads need `read`,
/// writes `write`, operator routes `admin`; only the listed operational routes are public.
/// A new route that fits none of these fails the matrix until someone decides.
fn policy(method: Option<&Method>, path: &str) -> Access {
    // A namespace's routes are the default namespace's, in that namespace.
    let unnested = path
        .strip_prefix("/v1/ns/{ns}")
        .map(|rest| format!("/v1{rest}"));
    let path = unnested.as_deref().unwrap_or(path);
    match (method, path) {
        (Some(&Method::GET), "/healthz" | "/readyz" | "/openapi.json" | "/docs/") => Access::Public,
        // The status page is public; the figures it shows are not.
        (Some(&Method::GET), "/ui" | "/ui/{file}") => Access::Public,
        (Some(&Method::GET), "/metrics" | "/v1/stats") => Access::Scope(Scope::Admin),
        (_, p) if p.starts_with("/v1/_test/") => Access::Scope(Scope::Admin),
        (None, p) if p.starts_with("/v1/") => Access::AnyToken,
        (Some(&Method::PUT | &Method::DELETE), p) if p.starts_with("/v1/") => {
            Access::Scope(Scope::Write)
        }
        (Some(&Method::GET | &Method::HEAD), p) if p.starts_with("/v1/") => {
            Access::Scope(Scope::Read)
        }
        (Some(&Method::POST), "/v1/descriptors") => Access::Scope(Scope::Read),
        (m, p) => panic!("no access policy for {m:?} {p}: add it here and in route_specs"),
    }
}

/// A problem document with `code` (a HEAD answer carries only the media type).
async fn check_problem(r: reqwest::Response, method: &Method, code: ProblemCode, what: &str) {
    if method == Method::HEAD {
        assert_eq!(r.headers()["content-type"], PROBLEM_JSON, "{what}");
    } else {
        let status = r.status().as_u16();
        assert_problem(r, status, code).await;
    }
}

/// Every route the router serves, called by every kind of caller: no token and unknown
/// tokens get 401 with a challenge, tokens without the route's scope get 403, the rest get
/// through (whatever the handler then says). The list comes from the router's own table,
/// so a route added later is in this matrix without anyone touching it.
#[tokio::test]
async fn every_route_demands_its_scope() {
    let tokens = Tokens::make();
    let gw = tokens.gateway(&["--test-hooks"]);
    let config = HttpConfig {
        test_hooks: true,
        ..HttpConfig::new(1 << 20, 10)
    };
    let table = route_table(&config);
    assert!(table.len() >= 15, "suspiciously few routes: {table:?}");
    for route in &table {
        assert_eq!(
            route.access,
            policy(route.method.as_ref(), route.path),
            "{:?} {} is not declared with the access the policy gives it",
            route.method,
            route.path
        );
    }
    let c = http();
    let mut checked = 0;
    for route in &table {
        let methods = match &route.method {
            Some(m) => vec![m.clone()],
            None => vec![Method::GET, Method::PUT, Method::DELETE],
        };
        for method in methods {
            for caller in Caller::ALL {
                let mut req = c.request(method.clone(), gw.url(&concrete(route.path)));
                if method == Method::PUT {
                    req = req.body("v");
                }
                if route.path == "/v1/descriptors" {
                    req = req.json(&serde_json::json!({"keys": ["matrix/key"]}));
                }
                if let Some(secret) = caller.secret(&tokens) {
                    req = req.bearer_auth(secret);
                }
                let r = req.send().await.unwrap();
                let status = r.status();
                let what = format!("{method} {} as {caller:?}", route.path);
                let (needs_token, scope) = match route.access {
                    Access::Public => (false, None),
                    Access::AnyToken => (true, None),
                    Access::Scope(s) => (true, Some(s)),
                };
                if needs_token && !caller.known() {
                    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
                    let challenge = r.headers()[WWW_AUTHENTICATE].to_str().unwrap().to_owned();
                    assert!(
                        challenge.starts_with("Bearer realm=\"rasa\""),
                        "{what}: {challenge}"
                    );
                    assert_eq!(
                        challenge.contains("invalid_token"),
                        caller.secret(&tokens).is_some(),
                        "{what}: {challenge}"
                    );
                    check_problem(r, &method, ProblemCode::Unauthorized, &what).await;
                } else if let Some(s) = scope.filter(|s| !caller.has(*s)) {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}");
                    let challenge = r.headers()[WWW_AUTHENTICATE].to_str().unwrap().to_owned();
                    assert!(
                        challenge.contains(&format!("error=\"insufficient_scope\", scope=\"{s}\"")),
                        "{what}: {challenge}"
                    );
                    check_problem(r, &method, ProblemCode::Forbidden, &what).await;
                } else {
                    assert!(
                        status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                        "{what}: {status}"
                    );
                    assert!(
                        !status.is_server_error() || route.path == "/v1/fabric",
                        "{what}: {status}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 75, "only {checked} calls checked");

    // What the matrix lets through really works: a writer stores, a reader reads.
    let put = c
        .put(gw.url("/v1/objects/matrix/real"))
        .bearer_auth(&tokens.write)
        .body("bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let got = c
        .get(gw.url("/v1/objects/matrix/real"))
        .bearer_auth(&tokens.read)
        .send()
        .await
        .unwrap();
    assert_eq!(got.text().await.unwrap(), "bytes");
}

/// `--public-metrics` opens `/metrics` (and only it) to scrapers without a token.
#[tokio::test]
async fn public_metrics_opens_only_metrics() {
    let tokens = Tokens::make();
    let gw = tokens.gateway(&["--public-metrics"]);
    let c = http();
    let m = c.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(m.status(), StatusCode::OK);
    let list = c.get(gw.url("/v1/objects")).send().await.unwrap();
    assert_eq!(list.status(), StatusCode::UNAUTHORIZED);
}

/// Secrets, good or bad, never appear in the gateway's log, even at `trace`, while the
/// log does record the refusals by token name.
#[tokio::test]
async fn tokens_never_reach_the_logs() {
    let tokens = Tokens::make();
    let dir = temp_dir("log");
    let log = dir.join("gateway.log");
    let gw = Gateway::start_logged(
        &["--token-file", tokens.path(), "--fast-path", "off"],
        &[("RUST_LOG", "trace")],
        &log,
    );
    let wrong = "rasa_wrong-secret-that-must-not-be-logged";
    let c = http();
    for (secret, method) in [
        (&tokens.write, Method::PUT),
        (&tokens.read, Method::GET),
        (&tokens.read, Method::PUT),
        (&wrong.to_owned(), Method::GET),
    ] {
        let r = c
            .request(method, gw.url("/v1/objects/logged"))
            .bearer_auth(secret)
            .body("x")
            .send()
            .await
            .unwrap();
        assert!(r.status().as_u16() < 500);
    }
    // The SDK and CLI send their token too.
    let sdk = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .token(&tokens.admin)
        .build()
        .unwrap();
    sdk.put("logged/sdk", b"y".to_vec()).await.unwrap();
    assert_eq!(&sdk.get("logged/sdk").await.unwrap().bytes[..], b"y");
    let status = gw.terminate();
    assert!(status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("reader"),
        "the scope refusal should be logged by name:\n{text}"
    );
    assert!(
        text.contains("TRACE") || text.contains("DEBUG"),
        "the log is not at trace level"
    );
    for secret in [
        &tokens.read,
        &tokens.write,
        &tokens.admin,
        &wrong.to_owned(),
    ] {
        let body = &secret[5..];
        assert!(!text.contains(body), "a secret reached the log");
    }
}

/// A client trickling its headers is cut off after `--header-timeout` while other
/// clients are served meanwhile.
#[tokio::test]
async fn slowloris_is_closed_while_others_are_served() {
    let gw = Gateway::start(&["--header-timeout", "1s", "--fast-path", "off"]);
    let addr = gw.addr;
    let slow = std::thread::spawn(move || {
        let start = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        // The pause between bytes is the attack's pace, not a synchronisation.
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: rasa\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        loop {
            if s.write_all(b"x").is_err() {
                return (start.elapsed(), Vec::new());
            }
            match s.read(&mut buf) {
                Ok(0) => return (start.elapsed(), Vec::new()),
                Ok(n) => return (start.elapsed(), buf[..n].to_vec()),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(start.elapsed() < Duration::from_secs(30), "never closed");
                }
                Err(_) => return (start.elapsed(), Vec::new()),
            }
        }
    });
    // While the slow client holds its connection, others get answers.
    let c = http();
    let mut served = 0;
    while !slow.is_finished() {
        let r = c.get(gw.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        served += 1;
        tokio::task::yield_now().await;
        if served >= 3 {
            break;
        }
    }
    assert!(served >= 1);
    let (elapsed, answer) = tokio::task::spawn_blocking(move || slow.join().unwrap())
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&answer).contains(" 200 "),
        "the trickled request was served"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(10),
        "closed after {elapsed:?}, expected about 1 s"
    );
    // And the gateway still serves (a new client: the pooled connection sat idle past
    // --header-timeout, which closes idle keep-alive connections too, and may be half
    // closed when reused).
    let r = http().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A PUT whose body stops arriving gets 408 after `--body-timeout`, stores nothing and
/// leaves the current version in place.
#[tokio::test]
async fn stalled_body_gets_408_and_loses_nothing() {
    let gw = Gateway::start(&["--body-timeout", "500ms", "--fast-path", "off"]);
    let c = http();
    let put = c
        .put(gw.url("/v1/objects/stall"))
        .body("v1")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let stalled = HeldUpload::start(
        gw.url("/v1/objects/stall"),
        b"first chunk".to_vec(),
        Some(1000),
    )
    .await;
    let r = stalled.response.await.unwrap().unwrap();
    assert_problem(r, 408, ProblemCode::RequestTimeout).await;
    let got = c.get(gw.url("/v1/objects/stall")).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "v1");
}

/// A PUT whose body the test feeds by hand: its first chunk is sent at once, the rest
/// when the test sends on the returned channel (dropping it ends the body).
struct HeldUpload {
    more: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    response: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
}

impl HeldUpload {
    async fn start(url: String, first: Vec<u8>, content_length: Option<usize>) -> HeldUpload {
        let (more, rx) = tokio::sync::mpsc::channel(1);
        more.send(Ok(first)).await.unwrap();
        let mut req = http()
            .put(url)
            .body(reqwest::Body::wrap_stream(tokio_stream(rx)));
        if let Some(len) = content_length {
            req = req.header("content-length", len.to_string());
        }
        HeldUpload {
            more,
            response: tokio::spawn(req.send()),
        }
    }

    /// Sends the last chunk and returns the answer.
    async fn finish(self, last: Vec<u8>) -> reqwest::Response {
        self.more.send(Ok(last)).await.unwrap();
        drop(self.more);
        self.response.await.unwrap().unwrap()
    }
}

/// A stream over a channel's items, for request bodies the test feeds by hand.
fn tokio_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// With every slot held, more `/v1` requests are shed at once with 503 and `Retry-After`
/// (health stays up); once the slots free up, the gateway serves again and the held
/// uploads complete intact.
#[tokio::test]
async fn excess_requests_are_shed_then_served() {
    let gw = Gateway::start(&[
        "--max-concurrent-requests",
        "2",
        "--body-timeout",
        "60s",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let mut uploads = Vec::new();
    for i in 0..2u8 {
        let url = gw.url(&format!("/v1/objects/held/{i}"));
        uploads.push(HeldUpload::start(url, vec![b'a' + i; 10], Some(20)).await);
    }
    // Wait until both uploads hold a slot.
    wait_for_metric(&gw, "rasa_http_requests_active", 2.0).await;
    let burst: Vec<_> = (0..16)
        .map(|_| tokio::spawn(http().get(gw.url("/v1/objects/held/0")).send()))
        .collect();
    for r in burst {
        let r = r.await.unwrap().unwrap();
        assert_eq!(r.headers()[RETRY_AFTER], "1");
        assert_problem(r, 503, ProblemCode::Overloaded).await;
    }
    assert!(metric(&gw, "rasa_http_requests_shed_total").await >= 16.0);
    let health = c.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK, "health must not be shed");
    for (i, upload) in (0u8..).zip(uploads) {
        let r = upload.finish(vec![b'a' + i; 10]).await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    for i in 0..2u8 {
        let got = c
            .get(gw.url(&format!("/v1/objects/held/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), StatusCode::OK);
        assert_eq!(got.bytes().await.unwrap().to_vec(), vec![b'a' + i; 20]);
    }
}

/// Request heads larger than `--max-header-size` get 431 as a problem document; smaller
/// ones are served.
#[tokio::test]
async fn oversized_headers_get_431() {
    let gw = Gateway::start(&["--max-header-size", "4KiB", "--fast-path", "off"]);
    let req = |filler: usize| {
        format!(
            "GET /healthz HTTP/1.1\r\nHost: rasa\r\nX-Filler: {}\r\nConnection: close\r\n\r\n",
            "f".repeat(filler)
        )
    };
    let big = raw_request(gw.addr, req(5000).as_bytes());
    assert_eq!(big.status, 431);
    assert_eq!(big.header("content-type"), Some(PROBLEM_JSON));
    let p: Problem = serde_json::from_slice(&big.body).unwrap();
    assert_eq!(p.code, ProblemCode::HeadersTooLarge);
    let small = raw_request(gw.addr, req(3000).as_bytes());
    assert_eq!(small.status, 200);
}

/// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it, as PEM files.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rasa test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// HTTPS with a certificate from a CA made here: the SDK and the CLI trust it through
/// their CA file option and send their token; without the CA the connection is refused.
#[tokio::test]
async fn tls_round_trip_through_the_sdk_and_cli() {
    let dir = temp_dir("tls");
    let (ca, cert, key) = test_pki(&dir);
    let tokens = Tokens::make();
    let gw = Gateway::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--token-file",
        tokens.path(),
    ]);
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    let url = format!("https://localhost:{}", gw.addr.port());

    let client = Client::builder(&url)
        .ca_file(&ca)
        .token(&tokens.write)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let value = rasa_tests::pattern(300_000, 7);
    let d = client.put("tls/value", value.clone()).await.unwrap();
    assert_eq!(d.sha256, rasa_tests::sha256_hex(&value));
    let reader = Client::builder(&url)
        .ca_file(&ca)
        .token(&tokens.read)
        .build()
        .unwrap();
    let got = reader.get("tls/value").await.unwrap();
    assert_eq!(got.bytes, value);
    // The reader's token cannot write, over TLS as over HTTP.
    let err = reader.put("tls/other", b"x".to_vec()).await.unwrap_err();
    assert_eq!(err.code(), Some(ProblemCode::Forbidden));

    // Without the test CA the certificate is not trusted.
    let stranger = Client::builder(&url)
        .token(&tokens.read)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let err = stranger.get("tls/value").await.unwrap_err();
    assert!(matches!(err, rasa_client::Error::Http(_)), "{err}");

    // The CLI: token from RASA_TOKEN, CA from --ca-file.
    let out_file = dir.join("out.bin");
    let out = tokio::process::Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &url, "--ca-file"])
        .arg(&ca)
        .args(["get", "tls/value", "--fast-path", "off", "-o"])
        .arg(&out_file)
        .env("RASA_TOKEN", &tokens.read)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&out_file).unwrap(), value);
    let out = tokio::process::Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &url, "--ca-file"])
        .arg(&ca)
        .args(["get", "tls/value", "--fast-path", "off", "-o"])
        .arg(&out_file)
        .env_remove("RASA_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plain HTTP to the TLS port gets no answer in the clear.
    let plain = http()
        .get(format!("http://{}/healthz", gw.addr))
        .header(AUTHORIZATION, "Bearer x")
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

/// SIGHUP reloads the token file: a token added since start works, one removed is refused
/// at once, and a file that no longer parses changes nothing — all without a restart, so
/// the values in memory stay.
#[tokio::test]
async fn sighup_reloads_the_token_file() {
    let tokens = Tokens::make();
    let gw = tokens.gateway(&["--public-metrics"]);
    let c = http();
    let status = |secret: String, path: &'static str| {
        let req = c.get(gw.url(path)).bearer_auth(secret);
        async move { req.send().await.unwrap().status() }
    };
    let put = c
        .put(gw.url("/v1/objects/kept"))
        .bearer_auth(&tokens.write)
        .body("still here")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    assert_eq!(
        status(tokens.read.clone(), "/v1/objects/kept").await,
        StatusCode::OK
    );

    // Add a token and revoke the reader, with the gateway's own subcommands.
    let late = new_token(&tokens.file, "late", "read");
    let revoked = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["token", "revoke", "reader", "--file"])
        .arg(&tokens.file)
        .status()
        .unwrap();
    assert!(revoked.success());
    let listed = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["token", "list", "--file"])
        .arg(&tokens.file)
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert_eq!(listed, "writer\twrite\noperator\tadmin\nlate\tread\n");
    assert_eq!(
        status(late.clone(), "/v1/objects/kept").await,
        StatusCode::UNAUTHORIZED
    );
    hangup_and_wait(&gw, "ok").await;
    assert_eq!(
        status(late.clone(), "/v1/objects/kept").await,
        StatusCode::OK
    );
    assert_eq!(
        status(tokens.read.clone(), "/v1/objects/kept").await,
        StatusCode::UNAUTHORIZED
    );

    // A broken file is refused and the tokens in force stay.
    std::fs::write(&tokens.file, "not a token file").unwrap();
    hangup_and_wait(&gw, "error").await;
    let got = c
        .get(gw.url("/v1/objects/kept"))
        .bearer_auth(&late)
        .send()
        .await
        .unwrap();
    assert_eq!(got.text().await.unwrap(), "still here");
}

/// Sends SIGHUP and waits until the gateway counts one more reload with `result`.
async fn hangup_and_wait(gw: &Gateway, result: &str) {
    let name = format!("rasa_token_reloads_total{{result=\"{result}\"}}");
    rasa_tests::hangup_and_wait(gw, &name).await;
}

/// The SDK waits out a `503` with `Retry-After` and retries (nothing was done by the
/// refused request); with retries off it returns the `503` at once.
#[tokio::test]
async fn the_sdk_waits_out_a_busy_gateway() {
    let gw = Gateway::start(&[
        "--max-concurrent-requests",
        "1",
        "--body-timeout",
        "60s",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let put = c
        .put(gw.url("/v1/objects/busy"))
        .body("value")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    // Hold the only slot with an upload that has not finished.
    let held = HeldUpload::start(gw.url("/v1/objects/held"), b"half".to_vec(), Some(8)).await;
    wait_for_metric(&gw, "rasa_http_requests_active", 1.0).await;

    let impatient = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .retries_when_busy(0)
        .build()
        .unwrap();
    let err = impatient.get("busy").await.unwrap_err();
    assert_eq!(err.code(), Some(ProblemCode::Overloaded));
    assert_eq!(impatient.stats().busy_retries, 0);

    let patient = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .retries_when_busy(5)
        .build()
        .unwrap();
    let waiting = {
        let patient = patient.clone();
        tokio::spawn(async move { patient.get("busy").await })
    };
    // Once the patient client has been turned away, free the slot.
    wait_for_metric(&gw, "rasa_http_requests_shed_total", 2.0).await;
    let r = held.finish(b"more".to_vec()).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let got = waiting.await.unwrap().expect("served after waiting");
    assert_eq!(&got.bytes[..], b"value");
    assert!(patient.stats().busy_retries >= 1);
}

/// A client that asks for a large value and stops reading is cut off after
/// `--send-timeout`, so it cannot pin the memory its response refers to; others are
/// served meanwhile.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    let gw = Gateway::start(&["--send-timeout", "1s", "--fast-path", "off"]);
    let c = http();
    let value = vec![7u8; 64 << 20]; // far more than loopback socket buffers hold
    let put = c
        .put(gw.url("/v1/objects/big"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let mut s = TcpStream::connect(gw.addr).unwrap();
    s.write_all(b"GET /v1/objects/big HTTP/1.1\r\nHost: rasa\r\n\r\n")
        .unwrap();
    // Do not read. The gateway's writes stall, then time out.
    let others = async {
        loop {
            let r = c.get(gw.url("/healthz")).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "others are served meanwhile");
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        () = wait_for_metric(&gw, "rasa_http_send_timeouts_total", 1.0) => {}
        () = others => unreachable!(),
    }
    let received = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf); // ends with EOF or a reset
        buf.len()
    })
    .await
    .unwrap();
    assert!(
        received < value.len(),
        "got the whole value: {received} bytes"
    );
    // The value itself is intact for a client that reads.
    let got = c.get(gw.url("/v1/objects/big")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), value.len());
}

/// Bodies without Content-Length are gathered in memory before they are stored; together
/// they stay under `--chunked-upload-memory`: a larger one gets 413, one that arrives while
/// the memory is taken gets 503, and both succeed once there is room.
#[tokio::test]
async fn chunked_uploads_share_a_bounded_memory() {
    let gw = Gateway::start(&[
        "--chunked-upload-memory",
        "64KiB",
        "--max-object-size",
        "1MiB",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let chunked = |key: &str, parts: Vec<Vec<u8>>| {
        let stream = futures_util::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        c.put(gw.url(&format!("/v1/objects/{key}")))
            .body(reqwest::Body::wrap_stream(stream))
            .send()
    };
    let r = chunked("too-big", vec![vec![1; 40 << 10], vec![2; 40 << 10]])
        .await
        .unwrap();
    assert_problem(r, 413, ProblemCode::PayloadTooLarge).await;

    // Hold 40 KiB of the 64 with an upload that has not finished.
    let held = HeldUpload::start(gw.url("/v1/objects/first"), vec![3; 40 << 10], None).await;
    wait_for_metric(
        &gw,
        "rasa_http_chunked_upload_bytes",
        f64::from(40u32 << 10),
    )
    .await;
    let r = chunked("second", vec![vec![4; 40 << 10]]).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key(RETRY_AFTER));
    let r = held.finish(Vec::new()).await; // the first upload ends here, complete
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = chunked("second", vec![vec![4; 40 << 10]]).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(metric(&gw, "rasa_http_chunked_upload_bytes").await, 0.0);
    let got = c.get(gw.url("/v1/objects/first")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), 40 << 10);
}
