//! Requests an HTTP client library would refuse or rewrite, sent as raw bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A raw HTTP/1.1 answer.
#[derive(Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body bytes as received.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// First value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` (raw bytes, which should ask for `Connection: close`) and reads the
/// whole answer. For requests an HTTP client library would refuse or rewrite.
pub fn raw_request(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).expect("send");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).expect("read answer");
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: buf[split + 4..].to_vec(),
    }
}
