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
    target: Arc<Mutex<Option<SocketAddr>>>,
    cut: Arc<AtomicBool>,
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
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (t, c, l) = (Arc::clone(&target), Arc::clone(&cut), Arc::clone(&links));
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = *t.lock().unwrap();
                let Some(to) = to.filter(|_| !c.load(Ordering::SeqCst)) else {
                    continue; // cut (or nowhere to go): the connection is dropped at once
                };
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Relay {
            addr,
            target,
            cut,
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
