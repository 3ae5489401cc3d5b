//! Binding listening sockets with an accept backlog fit for bursts of connections.

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
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}
