//! Descriptors, fabric info, operations, the OpenAPI document and Swagger UI, start-up and
//! shutdown.

use std::collections::BTreeSet;
use std::process::Command;

use rasa_openapi::{Descriptor, DescriptorBatchResponse, FabricInfo, ProblemCode};
use rasa_tests::{gateway_bin, Gateway};
use reqwest::StatusCode;
use serde_json::Value;

use crate::objects::assert_problem;

#[tokio::test]
async fn descriptors_single_and_batch() {
    let gw = Gateway::start(&["--max-batch-keys", "3", "--lease", "2s"]);
    let c = rasa_tests::http();
    let put: Descriptor = rasa_tests::json_of(c.put(gw.url("/v1/objects/a/1")).body("hello")).await;
    let r = c.get(gw.url("/v1/descriptors/a/1")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!((d.key.as_str(), d.length, d.lease_ms), ("a/1", 5, 2000));
    assert_eq!(
        (&d.version, &d.sha256, &d.checksum),
        (&put.version, &put.sha256, &put.checksum)
    );
    assert!(
        d.addr.is_some() && d.rkey.is_some(),
        "the fast path is on by default: {d:?}"
    );
    let r = c
        .get(gw.url("/v1/descriptors/missing"))
        .send()
        .await
        .unwrap();
    assert_problem(r, 404, ProblemCode::NotFound).await;

    let r = c
        .post(gw.url("/v1/descriptors"))
        .json(&serde_json::json!({"keys": ["missing", "a/1", "a/../x"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let b: DescriptorBatchResponse = r.json().await.unwrap();
    let keys: Vec<_> = b.results.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        ["missing", "a/1", "a/../x"],
        "answers keep request order"
    );
    assert_eq!(
        b.results[0].error.as_ref().unwrap().code,
        ProblemCode::NotFound
    );
    assert_eq!(
        b.results[1].descriptor.as_ref().unwrap().version,
        put.version
    );
    assert_eq!(
        b.results[2].error.as_ref().unwrap().code,
        ProblemCode::InvalidKey
    );

    let r = c
        .post(gw.url("/v1/descriptors"))
        .json(&serde_json::json!({"keys": ["a", "b", "c", "d"]}))
        .send()
        .await
        .unwrap();
    assert_problem(r, 400, ProblemCode::TooManyKeys).await;
    for (body, status) in [
        ("{", 400),
        (r#"{"keys": 1}"#, 422),
        (r#"{"keys": [], "x": 1}"#, 422),
    ] {
        let r = c
            .post(gw.url("/v1/descriptors"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_problem(r, status, ProblemCode::InvalidRequest).await;
    }
}

#[tokio::test]
async fn a_cluster_long_poll_longer_than_documented_is_refused() {
    // Found by schemathesis: `wait` beyond its documented maximum was accepted (and, as a
    // number of seconds past i64, ignored) on a gateway that is not clustered.
    let gw = Gateway::start(&["--fast-path", "off"]);
    let c = rasa_tests::http();
    for (query, status) in [
        ("wait=60", 200),
        ("wait=61", 400),
        ("wait=9223372036854775808", 400),
    ] {
        let r = c
            .get(gw.url(&format!("/v1/cluster?{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{query}");
    }
}

#[tokio::test]
async fn fabric_health_and_metrics() {
    let gw = Gateway::start(&[]);
    let c = rasa_tests::http();
    let f: FabricInfo = gw.get_json("/v1/fabric").await;
    assert!(f.enabled, "the fast path is on by default");
    assert_eq!(f.provider.as_deref(), Some("tcp;ofi_rxm"));
    assert_eq!(f.address_format.as_deref(), Some("FI_SOCKADDR_IN"));
    assert!(f.address.is_some());
    assert_eq!(f.incarnation.len(), 16);
    let off = Gateway::start(&["--fast-path", "off"]);
    let f: FabricInfo = off.get_json("/v1/fabric").await;
    assert!(
        !f.enabled && f.provider.is_none() && f.address.is_none(),
        "{f:?}"
    );
    c.put(off.url("/v1/objects/x"))
        .body("x")
        .send()
        .await
        .unwrap();
    let d: Descriptor = off.get_json("/v1/descriptors/x").await;
    assert_eq!(
        (d.addr, d.rkey),
        (None, None),
        "HTTP-only descriptors have no address"
    );
    for path in ["/healthz", "/readyz"] {
        let v: Value = gw.get_json(path).await;
        assert_eq!(v["status"], "ok", "{path}");
    }
    c.put(gw.url("/v1/objects/m"))
        .body("12345")
        .send()
        .await
        .unwrap();
    rasa_tests::bytes_of(c.get(gw.url("/v1/objects/m"))).await;
    let text = rasa_tests::text_of(c.get(gw.url("/metrics"))).await;
    assert!(text.contains("rasa_versions_stored_total 1"), "{text}");
    assert!(text.contains("rasa_bytes_stored_total 5"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("rasa_http_requests_total")
                && l.contains("route=\"/v1/objects/{*key}\"")
                && l.contains("method=\"PUT\"")
                && l.contains("status=\"201\"")),
        "{text}"
    );
}

/// Every route the gateway serves, as (method, OpenAPI path).
const ROUTES: &[(&str, &str)] = &[
    ("put", "/v1/objects/{key}"),
    ("get", "/v1/objects/{key}"),
    ("head", "/v1/objects/{key}"),
    ("delete", "/v1/objects/{key}"),
    ("get", "/v1/objects"),
    ("get", "/v1/descriptors/{key}"),
    ("post", "/v1/descriptors"),
    ("put", "/v1/ns/{ns}/objects/{key}"),
    ("get", "/v1/ns/{ns}/objects/{key}"),
    ("head", "/v1/ns/{ns}/objects/{key}"),
    ("delete", "/v1/ns/{ns}/objects/{key}"),
    ("get", "/v1/ns/{ns}/objects"),
    ("get", "/v1/ns/{ns}/descriptors/{key}"),
    ("post", "/v1/ns/{ns}/descriptors"),
    ("post", "/v1/batch/put"),
    ("post", "/v1/batch/reserve"),
    ("post", "/v1/batch/commit/{upload}"),
    ("post", "/v1/batch/delete"),
    ("post", "/v1/batch/exists"),
    ("post", "/v1/ns/{ns}/batch/put"),
    ("post", "/v1/ns/{ns}/batch/reserve"),
    ("post", "/v1/ns/{ns}/batch/commit/{upload}"),
    ("post", "/v1/ns/{ns}/batch/delete"),
    ("post", "/v1/ns/{ns}/batch/exists"),
    ("get", "/v1/fabric"),
    ("get", "/v1/cluster"),
    ("get", "/v1/stats"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

#[tokio::test]
async fn openapi_lists_every_route_and_matches_the_checked_in_file() {
    let gw = Gateway::start(&[]);
    let c = rasa_tests::http();
    let served: Value = gw.get_json("/openapi.json").await;
    let documented: BTreeSet<(String, String)> = served["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        documented, expected,
        "documented routes differ from served routes"
    );
    // Each documented route is really served (no fallback 404 for any of them).
    for (method, path) in ROUTES {
        let url = gw.url(&path.replace("{key}", "k").replace("{ns}", "default"));
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = c
            .request(m, url)
            .body("{\"keys\":[]}")
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        if r.status() == 404
            && r.headers()
                .get("content-type")
                .is_some_and(|t| t == "application/problem+json")
        {
            let p: rasa_openapi::Problem = r.json().await.unwrap();
            assert_ne!(
                p.code,
                ProblemCode::NoSuchRoute,
                "{method} {path} is documented but not routed"
            );
        }
    }
    // Every documented error body is a problem document.
    for (path, ops) in served["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for (status, resp) in op["responses"].as_object().unwrap() {
                if status.as_str() >= "400" {
                    if let Some(content) = resp.get("content").and_then(Value::as_object) {
                        let types: Vec<_> = content.keys().collect();
                        assert_eq!(
                            types,
                            ["application/problem+json"],
                            "{method} {path} {status}"
                        );
                    }
                }
            }
        }
    }
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
    let checked_in: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap_or_default())
            .unwrap_or(Value::Null);
    assert!(
        checked_in == served,
        "openapi/openapi.json is stale or missing: regenerate it with `make openapi` and commit it"
    );
}

#[tokio::test]
async fn swagger_ui_is_served_from_the_gateway_itself() {
    let gw = Gateway::start(&[]);
    let c = rasa_tests::http();
    let r = c.get(gw.url("/docs")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page_url = r.url().clone();
    let html = r.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    // Every asset the page loads is relative, and the gateway serves it.
    let assets: Vec<String> = ["src=\"", "href=\""]
        .iter()
        .flat_map(|attr| {
            html.split(attr)
                .skip(1)
                .map(|s| s.split('"').next().unwrap().to_owned())
        })
        .collect();
    assert!(assets.len() >= 4, "{assets:?}");
    for asset in &assets {
        assert!(
            !asset.contains("://") && !asset.starts_with("//"),
            "external asset {asset}"
        );
        let url = page_url.join(asset).unwrap();
        let r = c.get(url.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{url}");
        let body = r.text().await.unwrap();
        assert!(!body.is_empty(), "{url}");
        if asset.contains("initializer") {
            assert!(
                body.contains("/openapi.json"),
                "the UI must load our document: {body}"
            );
            assert!(!body.contains("petstore"), "{body}");
        }
    }
}

#[test]
fn bad_configuration_is_refused_with_one_line() {
    for args in [
        &["--arena-size", "1KiB"][..],
        &["--max-object-size", "2GiB"],
        &["--memory", "plenty"],
        &["--lease", "0s"],
    ] {
        let out = Command::new(gateway_bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or_default();
        assert!(first.contains(args[0]), "{args:?}: {err}");
    }
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let gw = Gateway::start(&[]);
    let status = gw.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn openapi_subcommand_prints_the_document() {
    let out = Command::new(gateway_bin()).arg("openapi").output().unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["info"]["title"], "Rasa gateway");
}

/// Parses the Prometheus text format into `name{labels}` → value.
fn scrape(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn metrics_move_by_the_right_amounts() {
    let gw = Gateway::start(&[
        "--memory",
        "256MiB",
        "--arena-size",
        "1MiB",
        "--max-object-size",
        "1MiB",
        // Exact arena bytes below: no spare memory faulted in beside them.
        "--warm-memory",
        "0",
    ]);
    let c = rasa_tests::http();
    for (k, n) in [("m/a", 10usize), ("m/b", 20), ("m/c", 30)] {
        let r = c
            .put(gw.url(&format!("/v1/objects/{k}?lease=true")))
            .body(vec![1u8; n])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    for k in ["m/a", "m/b"] {
        rasa_tests::bytes_of(c.get(gw.url(&format!("/v1/objects/{k}")))).await;
    }
    c.get(gw.url("/v1/objects/m/none")).send().await.unwrap();
    for k in ["m/a", "m/b"] {
        c.get(gw.url(&format!("/v1/descriptors/{k}")))
            .send()
            .await
            .unwrap();
    }
    let m = scrape(&rasa_tests::text_of(c.get(gw.url("/metrics"))).await);
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("{k} missing from {m:#?}"))
    };
    let route = "route=\"/v1/objects/{*key}\"";
    assert_eq!(get("rasa_versions_stored_total"), 3.0);
    assert_eq!(get("rasa_bytes_stored_total"), 60.0);
    assert_eq!(
        get(&format!(
            "rasa_http_requests_total{{{route},method=\"PUT\",status=\"201\"}}"
        )),
        3.0
    );
    assert_eq!(
        get(&format!(
            "rasa_http_requests_total{{{route},method=\"GET\",status=\"200\"}}"
        )),
        2.0
    );
    assert_eq!(
        get(&format!(
            "rasa_http_requests_total{{{route},method=\"GET\",status=\"404\"}}"
        )),
        1.0
    );
    assert_eq!(get("rasa_http_bytes_served_total"), 30.0);
    // Every PUT answer and every descriptor request hands out a lease on the fast path.
    assert_eq!(get("rasa_leases_granted_total"), 5.0);
    assert_eq!(get("rasa_descriptors_total{path=\"fabric\"}"), 5.0);
    assert_eq!(
        get("rasa_fastpath_bytes_advertised_total"),
        60.0 + 10.0 + 20.0
    );
    assert_eq!(get("rasa_memory_budget_bytes"), (256u64 << 20) as f64);
    assert_eq!(get("rasa_arena_bytes_allocated"), (1u64 << 20) as f64);
    assert_eq!(get("rasa_arenas{state=\"open\"}"), 1.0);
    assert_eq!(get("rasa_arenas_leased"), 1.0);
    assert_eq!(
        get("rasa_live_bytes"),
        (3 * (64 + 8 + 3 + 44) + 60) as f64,
        "frames: 64-byte headers + payloads + one 8-byte block-table entry each (none is over \
         a block) + trailers of the 3-byte key and 44 fixed bytes (SHA-256, time, media type, \
         key length)"
    );
    assert!(get("rasa_fabric_progress_wakeups_total") >= 0.0);
}
