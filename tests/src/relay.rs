//! A TCP relay in front of a real server that a test can cut and heal: a partition
//! between one process and that server (a gateway and etcd, say), without network
//! namespaces.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// A running relay.
pub struct Relay {
    /// Where to connect instead of the server.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Relay {
    /// Relays connections to `target` (on the current tokio runtime).
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address");
        let cut = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (c, l) = (Arc::clone(&cut), Arc::clone(&links));
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // cut: the connection is dropped at once
                }
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Relay { addr, cut, links }
    }

    /// Cuts every relayed connection and refuses new ones until [`Relay::heal`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Relays again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}
