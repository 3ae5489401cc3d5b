//! Keys and routes over real HTTP: invalid keys, keys with slashes and Unicode, unknown
//! routes and wrong methods, listings paged in key order (split from `objects.rs`).

use rasa_openapi::{ObjectList, Problem, ProblemCode};
use rasa_tests::{http, raw_request, Gateway};

use crate::objects::{assert_problem, put_ok};

#[test]
fn invalid_keys_are_refused_with_400() {
    let gw = Gateway::start(&[]);
    let long = format!("/v1/objects/{}", "k".repeat(1025));
    let paths = [
        "/v1/objects/",
        "/v1/objects/a/../b",
        "/v1/objects/./a",
        "/v1/objects/a/%2e%2e",
        "/v1/objects/a%00b",
        "/v1/objects/a%1Fb",
        "/v1/objects/%FF%FE",
        long.as_str(),
        "/v1/descriptors/a/../b",
    ];
    for path in paths {
        let methods: &[&str] = if path.starts_with("/v1/descriptors") {
            &["GET"]
        } else {
            &["GET", "PUT", "DELETE"]
        };
        for method in methods {
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx"
            );
            let r = raw_request(gw.addr, req.as_bytes());
            assert_eq!(r.status, 400, "{method} {path}");
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
            let p: Problem = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(p.code, ProblemCode::InvalidKey, "{method} {path}: {p:?}");
        }
    }
    // Nothing was stored by any of them.
    let r = raw_request(
        gw.addr,
        b"GET /v1/objects HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let list: ObjectList = serde_json::from_slice(&r.body).unwrap();
    assert!(list.items.is_empty());
}

#[tokio::test]
async fn keys_with_slashes_and_unicode_round_trip() {
    let gw = Gateway::start(&[]);
    let c = http();
    for (path, key) in [
        ("a/b/c.txt", "a/b/c.txt"),
        ("caf%C3%A9/%E2%9C%93", "café/✓"),
        ("with%20space%3F", "with space?"),
        ("a%2Fb", "a/b"),
    ] {
        let d = put_ok(&c, &gw, path, key.as_bytes().to_vec()).await;
        assert_eq!(d.key, key);
        let r = c
            .get(gw.url(&format!("/v1/objects/{path}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap(), key.as_bytes());
    }
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_are_problems() {
    let gw = Gateway::start(&[]);
    let c = http();
    assert_problem(
        c.get(gw.url("/nope")).send().await.unwrap(),
        404,
        ProblemCode::NoSuchRoute,
    )
    .await;
    assert_problem(
        c.get(gw.url("/v2/objects/a")).send().await.unwrap(),
        404,
        ProblemCode::NoSuchRoute,
    )
    .await;
    let r = c.post(gw.url("/v1/objects/a")).send().await.unwrap();
    let allow = r.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("PUT") && allow.contains("GET"), "{allow}");
    assert_problem(r, 405, ProblemCode::MethodNotAllowed).await;
    assert_problem(
        c.delete(gw.url("/v1/fabric")).send().await.unwrap(),
        405,
        ProblemCode::MethodNotAllowed,
    )
    .await;
}

#[tokio::test]
async fn listing_pages_through_keys_in_order() {
    let gw = Gateway::start(&[]);
    let c = http();
    for k in ["p/3", "p/1", "q/1", "p/2"] {
        put_ok(&c, &gw, k, k.as_bytes().to_vec()).await;
    }
    let page = |q: &str| {
        let url = gw.url(&format!("/v1/objects?{q}"));
        let c = c.clone();
        async move { c.get(url).send().await.unwrap() }
    };
    let first: ObjectList = page("prefix=p/&limit=2").await.json().await.unwrap();
    let keys: Vec<_> = first.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["p/1", "p/2"]);
    assert_eq!(first.next_after.as_deref(), Some("p/2"));
    assert_eq!(first.items[0].length, 3);
    assert!(first.items[0].etag.starts_with('"'));
    let second: ObjectList = page("prefix=p/&limit=2&after=p/2")
        .await
        .json()
        .await
        .unwrap();
    let keys: Vec<_> = second.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["p/3"]);
    assert_eq!(second.next_after, None);
    assert_problem(page("limit=0").await, 400, ProblemCode::InvalidRequest).await;
    assert_problem(page("limit=many").await, 400, ProblemCode::InvalidRequest).await;
}
