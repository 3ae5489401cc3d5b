//! An open gateway (no token file) against web pages: a `Host` that does not name it
//! (DNS rebinding) and cross-site writes are refused; stored values are inert in a
//! browser (nosniff, sandboxing CSP) and `/docs` has a policy of its own.

use rasa_tests::{new_token, raw_request, temp_dir, Gateway, RawResponse};

fn send(
    gw: &Gateway,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {}\r\n", gw.addr));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw_request(gw.addr, &bytes)
}

#[test]
fn an_open_gateway_refuses_foreign_hosts_and_cross_site_writes() {
    let gw = Gateway::start(&["--fast-path", "off", "--allowed-host", "cache.internal"]);
    let port = gw.addr.port();
    let evil = "https://evil.example";
    // A cross-site simple request (no preflight) changes nothing.
    let r = send(
        &gw,
        "PUT",
        "/v1/objects/k",
        &[("Origin", evil), ("Content-Type", "text/plain")],
        b"x",
    );
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("forbidden"));
    let r = send(
        &gw,
        "DELETE",
        "/v1/objects/k",
        &[("Sec-Fetch-Site", "cross-site")],
        b"",
    );
    assert_eq!(r.status, 403);
    let r = send(
        &gw,
        "POST",
        "/v1/descriptors",
        &[("Origin", "null"), ("Content-Type", "text/plain")],
        br#"{"keys":["k"]}"#,
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        send(&gw, "GET", "/v1/objects/k", &[], b"").status,
        404,
        "nothing was stored"
    );
    // Same origin (the status page, a tool): fine.
    let me = format!("http://{}", gw.addr);
    assert_eq!(
        send(&gw, "PUT", "/v1/objects/k", &[("Origin", &me)], b"v").status,
        201
    );
    assert_eq!(send(&gw, "PUT", "/v1/objects/k2", &[], b"v").status, 201);
    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 names itself in Host.
    let rebound = format!("evil.example:{port}");
    let r = send(&gw, "GET", "/v1/objects/k", &[("Host", &rebound)], b"");
    assert_eq!(r.status, 403, "a foreign Host read a value");
    for host in [
        format!("localhost:{port}"),
        format!("cache.internal:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        assert_eq!(
            send(&gw, "GET", "/v1/objects/k", &[("Host", &host)], b"").status,
            200,
            "{host}"
        );
    }
}

#[test]
fn with_tokens_the_host_is_not_checked() {
    let file = temp_dir("web-tokens").join("tokens");
    let token = new_token(&file, "reader", "read");
    let gw = Gateway::start(&["--fast-path", "off", "--token-file", file.to_str().unwrap()]);
    let bearer = format!("Bearer {token}");
    let r = send(
        &gw,
        "GET",
        "/v1/objects/k",
        &[("Host", "evil.example"), ("Authorization", &bearer)],
        b"",
    );
    assert_eq!(r.status, 404, "a token holder names any host");
}

#[test]
fn stored_values_are_inert_in_a_browser_and_docs_have_a_policy() {
    let gw = Gateway::start(&["--fast-path", "off"]);
    let page = b"<script>fetch('/v1/objects/secret')</script>";
    assert_eq!(
        send(
            &gw,
            "PUT",
            "/v1/objects/page.html",
            &[("Content-Type", "text/html")],
            page
        )
        .status,
        201
    );
    for method in ["GET", "HEAD"] {
        let r = send(&gw, method, "/v1/objects/page.html", &[], b"");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("text/html"));
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{method}"
        );
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.starts_with("sandbox"), "{method}: CSP {csp:?}");
    }
    let r = send(&gw, "GET", "/docs/", &[], b"");
    assert_eq!(r.status, 200);
    let csp = r.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp:?}"
    );
}
