//! Security at the edge: tokens and scopes on every route, secrets kept out of logs, the
//! connection and request limits, and TLS through the SDK and CLI.

use std::path::PathBuf;

use crate::objects::assert_problem;
use rasa_client::{Client, FastPath};
use rasa_gateway::http::{route_table, Access, HttpConfig};
use rasa_gateway::tokens::Scope;
use rasa_openapi::{ProblemCode, PROBLEM_JSON};
use rasa_tests::{http, new_token, temp_dir, Gateway};
use reqwest::header::WWW_AUTHENTICATE;
use reqwest::{Method, StatusCode};

/// Tokens of every kind, written by `rasa-gateway token new` into a fresh token file.
pub(crate) struct Tokens {
    file: PathBuf,
    pub(crate) read: String,
    pub(crate) write: String,
    admin: String,
    metrics: String,
}

impl Tokens {
    pub(crate) fn make() -> Tokens {
        let file = temp_dir("tokens").join("tokens");
        let t = Tokens {
            read: new_token(&file, "reader", "read"),
            write: new_token(&file, "writer", "write"),
            admin: new_token(&file, "operator", "admin"),
            metrics: new_token(&file, "prometheus", "metrics"),
            file,
        };
        let stored = std::fs::read_to_string(&t.file).unwrap();
        for secret in [&t.read, &t.write, &t.admin, &t.metrics] {
            assert!(
                !stored.contains(secret.as_str()),
                "the token file holds a secret"
            );
        }
        t
    }

    pub(crate) fn path(&self) -> &str {
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
    Scraper,
}

impl Caller {
    const ALL: [Caller; 6] = [
        Caller::Nobody,
        Caller::Stranger,
        Caller::Reader,
        Caller::Writer,
        Caller::Operator,
        Caller::Scraper,
    ];

    fn secret(self, t: &Tokens) -> Option<&str> {
        match self {
            Caller::Nobody => None,
            Caller::Stranger => Some("rasa_not-a-token-this-gateway-knows"),
            Caller::Reader => Some(&t.read),
            Caller::Writer => Some(&t.write),
            Caller::Operator => Some(&t.admin),
            Caller::Scraper => Some(&t.metrics),
        }
    }

    /// The scopes this caller's token was given (admin stands for all of them).
    fn has(self, scope: Scope) -> bool {
        match self {
            Caller::Nobody | Caller::Stranger => false,
            Caller::Reader => scope == Scope::Read,
            Caller::Writer => scope == Scope::Write,
            Caller::Operator => true,
            Caller::Scraper => scope == Scope::Metrics,
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
        // A scraper's token (`metrics`) reads /metrics and nothing else.
        (Some(&Method::GET), "/metrics") => Access::Scope(Scope::Metrics),
        (Some(&Method::GET), "/v1/stats") => Access::Scope(Scope::Admin),
        // Between members, who hold no client token: a proven hop marker instead (403
        // without one); it only drops near copies.
        (Some(&Method::POST), "/v1/cluster/near") => Access::Public,
        // The same for replicas: an owner's word of a write (the replica copies the key
        // from its owner, as any member may), and the frame an owner hands a replica.
        (Some(&Method::POST), "/v1/cluster/replica") => Access::Public,
        (Some(&Method::GET), "/v1/cluster/replica/{*key}") => Access::Public,
        (_, p) if p.starts_with("/v1/_test/") => Access::Scope(Scope::Admin),
        (None, p) if p.starts_with("/v1/") => Access::AnyToken,
        (Some(&Method::PUT | &Method::DELETE), p) if p.starts_with("/v1/") => {
            Access::Scope(Scope::Write)
        }
        (Some(&Method::GET | &Method::HEAD), p) if p.starts_with("/v1/") => {
            Access::Scope(Scope::Read)
        }
        (Some(&Method::POST), "/v1/descriptors" | "/v1/batch/exists") => Access::Scope(Scope::Read),
        (
            Some(&Method::POST),
            "/v1/batch/put"
            | "/v1/batch/delete"
            | "/v1/batch/reserve"
            | "/v1/batch/commit/{upload}",
        ) => Access::Scope(Scope::Write),
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
    assert_eq!(
        listed,
        "writer\twrite\noperator\tadmin\nprometheus\tmetrics\nlate\tread\n"
    );
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
