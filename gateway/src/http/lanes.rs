//! The read route reached directly ([`super::hot`]) answers exactly as through the router:
//! every request of a matrix (methods, keys, queries, conditions, ranges, browser and
//! credential headers; open and with tokens) is sent both ways, and status, headers (but
//! `Date`) and body must be the same.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use tower::ServiceExt;

use super::tests::test_state as state;
use super::{app, App, HttpConfig};

/// What is compared of an answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

async fn answer(app: App, req: Request<Body>) -> Answer {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let mut headers: Vec<_> = resp
        .headers()
        .iter()
        .filter(|(n, _)| *n != header::DATE)
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    headers.sort();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    Answer {
        status,
        headers,
        body: body.to_vec(),
    }
}

/// A request of the matrix.
fn request(method: &str, uri: &str, extra: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    for (n, v) in extra {
        b = b.header(*n, *v);
    }
    b.body(Body::empty()).unwrap()
}

/// Stores two versions of `k` through the router; the current one's entity tag and
/// version id.
async fn store(app: &App, auth: &[(&str, &str)]) -> (String, String) {
    for body in ["first", "the second value of k, longer than the first"] {
        let mut req = request("PUT", "/v1/objects/k", auth);
        *req.body_mut() = Body::from(body);
        let resp = app.clone().oneshot(req).await.unwrap();
        assert!(resp.status().is_success(), "PUT: {}", resp.status());
    }
    let resp = app
        .clone()
        .oneshot(request("HEAD", "/v1/objects/k", auth))
        .await
        .unwrap();
    let h = |n: &str| resp.headers()[n].to_str().unwrap().to_owned();
    (h("etag"), h("rasa-version"))
}

/// Sends every request of the matrix both ways under `auths`; returns how many.
async fn compare(config: HttpConfig, auths: &[Vec<(&str, &str)>]) -> usize {
    let app = app(state(config));
    let routed = app.routed_only();
    let (etag, version) = store(&routed, &auths[0]).await;
    let long = format!("/v1/objects/{}", "x".repeat(5000));
    let paths = [
        "/v1/objects/k".to_owned(),
        "/v1/objects/missing".to_owned(),
        "/v1/objects/a%2Fb".to_owned(),
        "/v1/objects/%ff".to_owned(),
        "/v1/objects//k".to_owned(),
        format!("/v1/objects/k?version={version}"),
        "/v1/objects/k?version=zzz".to_owned(),
        "/v1/objects/k?version=0000000000000001".to_owned(),
        "/v1/objects/k?other=1".to_owned(),
        long,
    ];
    let big = "b".repeat(20 << 10);
    let variants: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("if-none-match", &etag)],
        vec![("if-none-match", "\"other\"")],
        vec![("if-match", "\"other\"")],
        vec![("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT")],
        vec![("range", "bytes=0-3")],
        vec![("range", "bytes=5000-")],
        vec![("range", "nonsense")],
        vec![("range", "bytes=0-3"), ("if-range", "\"other\"")],
        vec![("host", "evil.example")],
        vec![("origin", "https://evil.example")],
        vec![("x-big", &big)],
    ];
    let mut n = 0;
    for method in ["GET", "HEAD"] {
        for path in &paths {
            for variant in &variants {
                for auth in auths {
                    let extra: Vec<_> = variant.iter().chain(auth).copied().collect();
                    let direct = request(method, path, &extra);
                    assert!(super::hot::reads_a_value(&direct), "{method} {path}");
                    let a = answer(app.clone(), direct).await;
                    let b = answer(routed.clone(), request(method, path, &extra)).await;
                    assert_eq!(a, b, "{method} {path} {extra:?}: direct vs routed");
                    n += 1;
                }
            }
        }
    }
    n
}

#[tokio::test]
async fn an_open_gateway_reads_the_same_either_way() {
    let mut config = HttpConfig::new(1 << 20, 10);
    config.limits.max_header_size = 16 << 10;
    assert_eq!(compare(config, &[vec![]]).await, 240);
}

#[tokio::test]
async fn a_gateway_with_tokens_reads_the_same_either_way() {
    let dir = std::env::temp_dir().join(format!("rasa-lanes-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("tokens");
    let line = |name: &str, scopes: &str, secret: &str| {
        crate::tokens::file_line(name, &scopes.parse().unwrap(), secret).unwrap()
    };
    let text = [
        line("both", "read,write", "rasa_both"),
        line("writer", "write", "rasa_writer"),
        line("elsewhere", "other:read", "rasa_elsewhere"),
    ]
    .join("\n");
    std::fs::write(&file, text).unwrap();
    let mut config = HttpConfig::new(1 << 20, 10);
    config.tokens = Some(Arc::new(crate::tokens::TokenFile::load(&file).unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
    let auths = [
        vec![("authorization", "Bearer rasa_both")],
        vec![],
        vec![("authorization", "Bearer rasa_unknown")],
        vec![("authorization", "Basic abc")],
        vec![("authorization", "Bearer rasa_writer")],
        vec![("authorization", "Bearer rasa_elsewhere")],
    ];
    assert_eq!(compare(config, &auths).await, 240 * auths.len());
}

#[test]
fn only_reads_of_a_value_in_the_default_namespace_take_the_direct_way() {
    let direct = |method: &str, uri: &str| super::hot::reads_a_value(&request(method, uri, &[]));
    assert!(direct("GET", "/v1/objects/k"));
    assert!(direct("HEAD", "/v1/objects/a/b?version=1"));
    assert!(
        !direct("GET", "/v1/objects/"),
        "the empty key has a route of its own"
    );
    assert!(!direct("GET", "/v1/objects"));
    assert!(!direct("GET", "/v1/objectsk"));
    assert!(!direct("GET", "/v1/ns/abc/objects/k"));
    assert!(!direct("GET", "/v1/descriptors/k"));
    for method in ["PUT", "DELETE", "POST", "OPTIONS", "PATCH"] {
        assert!(!direct(method, "/v1/objects/k"), "{method}");
    }
}
