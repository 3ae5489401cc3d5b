//! `GET /ui`: the status page, served from files compiled into the binary (no CDN). The
//! page is public; the figures it polls (`/v1/stats`) need an `admin` token when the
//! gateway has a token file, and the page asks for one.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rasa_openapi::ProblemCode;

use super::{error, AppState};

const INDEX: &[u8] = include_bytes!("../../ui/index.html");

/// The page and its assets: name, media type, bytes. The chart library (uPlot, MIT) is
/// vendored from the npm registry by `scripts/vendor-ui.sh`.
const FILES: &[(&str, &str, &[u8])] = &[
    ("index.html", "text/html; charset=utf-8", INDEX),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/app.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/vendor/uPlot.min.css"),
    ),
];

/// What the page may load and do: its own files and API only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The status page. It says whether the gateway wants a token (`data-auth`), so the page
/// asks for one before its first request rather than after a `401`.
pub async fn page(State(st): State<AppState>) -> Response {
    let mut resp = serve("index.html");
    if st.config.tokens.is_some() {
        let html = std::str::from_utf8(INDEX).unwrap_or_default();
        let html = html.replacen(r#"data-auth="open""#, r#"data-auth="token""#, 1);
        *resp.body_mut() = Body::from(html);
    }
    resp
}

/// A file of the status page (`/ui/app.js`, …); `404` for any other name.
pub async fn asset(Path(file): Path<String>) -> Response {
    serve(&file)
}

fn serve(name: &str) -> Response {
    let Some((_, media, bytes)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        let p = error::problem(
            StatusCode::NOT_FOUND,
            ProblemCode::NoSuchRoute,
            format!("the status page has no file {name:?}"),
        );
        return error::problem_response(&p);
    };
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(media)),
            // Small and served from memory: always revalidated, so a new binary's page is
            // never mixed with an old one's script.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                HeaderName::from_static("referrer-policy"),
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        *bytes,
    )
        .into_response()
}
