//! The edge holds against hostile clients (found by the review of issue 29), one file per
//! finding group:
//! silent and surplus connections, keys the SDK must send exactly, open mode against web
//! pages, crawling uploads, response headers, credentials files, a frozen gateway.

mod connections;
mod credentials;
mod frozen;
mod keys;
mod uploads;
mod web;
