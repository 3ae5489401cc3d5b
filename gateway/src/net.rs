//! Sockets and what arrives on them: listening sockets with an accept backlog fit for
//! bursts of connections, the size of a request's head as it came on the wire, the
//! headers that belong to one connection, and an error's causes on one line.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel completes and queues before the gateway accepts them. Rust's
/// standard `bind` asks for 128: a burst of more new connections than that within one
/// scheduling hiccup drops SYNs, and each dropped one costs its client a 1 s retransmit.
/// The kernel caps it at `net.core.somaxconn` (4096 on current Linux).
pub const BACKLOG: u32 = 4096;

/// A listener on `addr` (address reuse on, as the standard library sets it) with
/// [`BACKLOG`].
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    reserve(addr)?.listen(BACKLOG)
}

/// A socket bound to `addr` but not yet listening: the port (and, for port 0, its number)
/// is this process's, while connections to it are refused — not queued unanswered — until
/// [`TcpSocket::listen`] with [`BACKLOG`]. On Linux the bind fails while another socket
/// listens there, so holding it also proves no other process serves that port.
pub fn reserve(addr: SocketAddr) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// The size of a request's head as it came on the wire (request line and header fields,
/// HTTP/1.1 framing), which `--max-header-size` bounds on both listeners.
pub fn head_size<B>(req: &http::Request<B>) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + " HTTP/1.1\r\n ".len();
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
        + 2
}

/// `err` and its causes on one line, each once (`a: b: c`).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// Headers that belong to one connection, never forwarded (RFC 9110, 7.6.1).
const HOP_BY_HOP: [http::HeaderName; 6] = [
    http::header::CONNECTION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::PROXY_AUTHORIZATION,
];

/// Removes the headers of one connection (and `Keep-Alive`) from `headers`: what a
/// forwarded request or relayed answer must not carry on.
pub fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    for h in &HOP_BY_HOP {
        headers.remove(h);
    }
    headers.remove("keep-alive");
}
