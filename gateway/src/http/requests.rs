//! Requests counted by route, method and status, and their latency, with the metric
//! handles cached per thread: looking one up in the registry builds its labels (three
//! strings) and hashes them, allocations on every request otherwise.

use crate::catalog;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use metrics::{Counter, Histogram};

/// The handles of one (route, method, status), and the route they were made for.
struct Handles {
    route: Box<str>,
    requests: Counter,
    latency: Histogram,
}

/// Cache key: where the route's text lives (the router's, stable while it serves), the
/// method and the status. The route text is compared on every hit, so a reused address can
/// never pick another route's handles.
type Key = (usize, Method, u16);

thread_local! {
    static HANDLES: RefCell<HashMap<Key, Handles>> = RefCell::new(HashMap::new());
}

/// Methods whose handles are cached (any other is counted the slow way: a client can send
/// any number of made-up methods, and the cache must not grow with them).
const STANDARD: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::PUT,
    Method::POST,
    Method::DELETE,
    Method::OPTIONS,
    Method::PATCH,
    Method::TRACE,
    Method::CONNECT,
];

fn handles(route: &str, method: &Method, status: StatusCode) -> Handles {
    let labels = [
        ("route", route.to_owned()),
        ("method", method.to_string()),
        ("status", status.as_u16().to_string()),
    ];
    Handles {
        route: route.into(),
        requests: catalog::HTTP_REQUESTS.counter_by(&labels),
        latency: catalog::HTTP_REQUEST_DURATION_SECONDS.histogram_by(&labels[..2]),
    }
}

/// Counts one request of `route` (none: unmatched) that answered `status` after `took`.
pub(crate) fn count(route: Option<&str>, method: &Method, status: StatusCode, took: Duration) {
    let name = route.unwrap_or("unmatched");
    let record = |h: &Handles| {
        h.requests.increment(1);
        h.latency.record(took.as_secs_f64());
    };
    if !STANDARD.contains(method) {
        return record(&handles(name, method, status));
    }
    let key = (name.as_ptr() as usize, method.clone(), status.as_u16());
    HANDLES.with(|cache| {
        let mut cache = cache.borrow_mut();
        match cache.get(&key) {
            Some(h) if *h.route == *name => record(h),
            _ => {
                let h = handles(name, method, status);
                record(&h);
                cache.insert(key, h);
            }
        }
    });
}
