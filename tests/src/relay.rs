//! A TCP relay in front of a real server that a test can cut and heal: a partition
//! between one process and that server (a gateway and etcd, say), without network
//! namespaces. A cut closes the connections and refuses new ones (a partition that fails
//! fast); a silence holds every byte and every new connection until healed (one that
//! drops packets, as a firewall's `DROP` does: TCP delivers what was held once it heals,
//! if neither side gave up meanwhile).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// A running relay.
pub struct Relay {
    /// Where to connect instead of the server.
    pub addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    cut: Arc<AtomicBool>,
    silent: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Relay {
    /// Relays connections to `target` (on the current tokio runtime).
    pub async fn start(target: SocketAddr) -> Relay {
        let relay = Self::unset().await;
        relay.point_at(target);
        relay
    }

    /// A relay to a server that has no address yet ([`Relay::point_at`] gives it): one to
    /// advertise before the server starts on a port of its choosing. Until then, a
    /// connection is dropped at once.
    pub async fn unset() -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address");
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let cut = Arc::new(AtomicBool::new(false));
        let silent = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (t, c, l) = (Arc::clone(&target), Arc::clone(&cut), Arc::clone(&links));
        let q = Arc::clone(&silent);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = *t.lock().unwrap();
                let Some(to) = to.filter(|_| !c.load(Ordering::SeqCst)) else {
                    continue; // cut (or nowhere to go): the connection is dropped at once
                };
                let q = Arc::clone(&q);
                let link = tokio::spawn(async move {
                    heard(&q).await;
                    if let Ok(server) = tokio::net::TcpStream::connect(to).await {
                        let (cr, cw) = client.split();
                        let (sr, sw) = tokio::io::split(server);
                        let _ = tokio::join!(pump(cr, sw, &q), pump(sr, cw, &q));
                    }
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Relay {
            addr,
            target,
            cut,
            silent,
            links,
        }
    }

    /// Relays new connections to `target` (a server started, or started again, there).
    pub fn point_at(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = Some(target);
    }

    /// Cuts every relayed connection and refuses new ones until [`Relay::heal`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Holds every byte, both ways, and every new connection, until [`Relay::heal`].
    pub fn silence(&self) {
        self.silent.store(true, Ordering::SeqCst);
    }

    /// Relays again (what a silence held goes on its way).
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        self.silent.store(false, Ordering::SeqCst);
    }
}

/// Returns once the relay is not silent.
async fn heard(silent: &AtomicBool) {
    while silent.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Copies `from` to `to` until either ends, holding what it read while the relay is
/// silent.
async fn pump(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    silent: &AtomicBool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        heard(silent).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}
