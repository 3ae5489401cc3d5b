//! Closing silent connections on a socket provider's fabric port.
//!
//! `tcp;ofi_rxm` and `sockets` accept TCP connections on the fabric port and then wait,
//! without a time limit, for the peer's connection request; a peer that connects and sends
//! nothing holds a file descriptor of the gateway forever. libfabric offers no bound, so
//! [`close_silent`] finds such connections among the process's own sockets and shuts them
//! down (`shutdown(2)`, not `close(2)`: the descriptor stays the provider's, which sees the
//! connection end and closes it itself).
//!
//! A connection is silent when it was accepted on the fabric port, is established, has
//! received **no byte at all**, and has existed for at least the timeout (the kernel's
//! "last data received" clock starts when the connection is set up). A peer that sent its
//! connection request is never touched, however idle.

use std::io;
use std::time::Duration;

/// The TCP port of a provider address of format `FI_SOCKADDR_IN` or `FI_SOCKADDR_IN6`
/// (`struct sockaddr_in{,6}` bytes: family, then the port in network order).
pub fn port_of_address(address: &[u8]) -> Option<u16> {
    if address.len() < 4 {
        return None;
    }
    let family = i32::from(u16::from_ne_bytes([address[0], address[1]]));
    (family == libc::AF_INET || family == libc::AF_INET6)
        .then(|| u16::from_be_bytes([address[2], address[3]]))
}

/// Shuts down every connection accepted on local TCP `port` that has received nothing for
/// `timeout`; returns how many it shut down.
pub fn close_silent(port: u16, timeout: Duration) -> io::Result<usize> {
    let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let mut closed = 0;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:"));
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if is_socket && silent(fd, port, timeout_ms) {
            // SAFETY: shutdown(2) on a descriptor number only changes the state of the
            // socket it names (no memory is involved). The checks just made on that
            // descriptor (local port, established, nothing ever received, older than the
            // timeout) make it a silent connection of the fabric port: a descriptor closed
            // and reused in between would name a new connection, which is younger.
            if unsafe { libc::shutdown(fd, libc::SHUT_RDWR) } == 0 {
                closed += 1;
            }
        }
    }
    Ok(closed)
}

/// Whether descriptor `fd` is an established TCP connection on local `port` that has
/// received no byte in its `timeout_ms` or more of life.
fn silent(fd: libc::c_int, port: u16, timeout_ms: u32) -> bool {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `addr` is writable for `len` bytes, and getsockname writes at most that.
    let named = unsafe { libc::getsockname(fd, (&raw mut addr).cast(), &mut len) };
    if named != 0 {
        return false;
    }
    let local_port = match i32::from(addr.ss_family) {
        libc::AF_INET | libc::AF_INET6 => {
            // SAFETY: for both families the port is the 2 bytes after the family, and
            // `addr` holds at least 4 initialised bytes.
            let bytes: [u8; 4] = unsafe { std::ptr::read((&raw const addr).cast()) };
            u16::from_be_bytes([bytes[2], bytes[3]])
        }
        _ => return false,
    };
    if local_port != port {
        return false;
    }
    // SAFETY: all-zero bytes are a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes; the kernel writes at most that.
    let got = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    const TCP_ESTABLISHED: u8 = 1;
    got == 0
        && info.tcpi_state == TCP_ESTABLISHED
        && info.tcpi_bytes_received == 0
        && info.tcpi_last_data_recv >= timeout_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_port_of_a_sockaddr_in() {
        let addr = [2u8, 0, 0xb2, 0xb9, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(port_of_address(&addr), Some(45753));
        assert_eq!(port_of_address(&[1, 0]), None);
    }

    #[test]
    fn shuts_down_only_connections_that_never_sent_a_byte() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent_peer = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (silent_conn, _) = listener.accept().unwrap();
        let mut talking_peer = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (talking_conn, _) = listener.accept().unwrap();
        talking_peer.write_all(b"hello").unwrap();
        // Wait until the byte is in: a signal, not a guess.
        let mut probe = [0u8; 5];
        talking_conn.peek(&mut probe).unwrap();
        // Not yet old enough: nothing is touched.
        assert_eq!(close_silent(port, Duration::from_secs(3600)).unwrap(), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(close_silent(port, Duration::from_millis(10)).unwrap(), 1);
        // The silent peer sees its connection end; the talking one is untouched.
        let mut buf = [0u8; 1];
        silent_peer
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(std::io::Read::read(&mut &silent_peer, &mut buf).unwrap(), 0);
        talking_conn.set_nonblocking(true).unwrap();
        assert_eq!(talking_conn.peek(&mut probe).unwrap(), 5);
        drop(silent_conn);
    }
}
