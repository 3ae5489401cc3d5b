//! An origin that accepts connections and never answers: reads that miss get 504 in time,
//! hits are served meanwhile, and no connection leaks (split from `faults.rs`).

use futures_util::StreamExt;
use rasa_tests::Gateway;
use std::time::{Duration, Instant};

use crate::faults::proof;

/// An "S3" that accepts connections and never answers; it counts the connections it holds
/// open, so a test can see whether the gateway lets go of them.
struct BlackHole {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl BlackHole {
    fn start() -> BlackHole {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = open.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let counter = counter.clone();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    // Read (and ignore) until the gateway closes its side; never answer.
                    let mut buf = [0u8; 4096];
                    while matches!(std::io::Read::read(&mut conn, &mut buf), Ok(n) if n > 0) {}
                    counter.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        BlackHole { addr, open }
    }

    fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_origin_gives_504_in_time_keeps_hits_served_and_leaks_nothing() {
    let hole = BlackHole::start();
    let origin_timeout = Duration::from_millis(300);
    let gw = Gateway::start_with_s3(&[
        "--origin",
        "s3://bucket/p",
        "--s3-endpoint",
        &format!("http://{}", hole.addr),
        "--origin-timeout",
        "300ms",
        "--write-policy",
        "cache-only",
        "--public-metrics",
    ]);
    let http = rasa_tests::http();
    let hit = proof("hot", 1, 10_000);
    let r = http
        .put(gw.url("/v1/objects/hot"))
        .body(hit.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Memory in arenas (spare memory is faulted in beside them in the background).
    let allocated = rasa_tests::arena_bytes(&gw).await;

    // One miss: 504 origin_timeout, within the timeout plus slack.
    let t = Instant::now();
    let r = http
        .get(gw.url("/v1/objects/cold/first"))
        .send()
        .await
        .unwrap();
    let took = t.elapsed();
    crate::objects::assert_problem(r, 504, rasa_openapi::ProblemCode::OriginTimeout).await;
    assert!(
        took >= origin_timeout && took < Duration::from_secs(3),
        "{took:?}"
    );

    // 1000 misses of distinct keys, 50 at a time, while hits keep coming back at once.
    let misses = futures_util::stream::iter(0..1000)
        .map(|i| {
            let (http, url) = (http.clone(), gw.url(&format!("/v1/objects/cold/{i}")));
            async move { http.get(url).send().await.unwrap().status().as_u16() }
        })
        .buffer_unordered(50)
        .collect::<Vec<u16>>();
    let hits = async {
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            let body = http
                .get(gw.url("/v1/objects/hot"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert_eq!(body, hit);
            slowest = slowest.max(t.elapsed());
        }
        slowest
    };
    let (statuses, slowest_hit) = tokio::join!(misses, hits);
    assert!(
        statuses.iter().all(|s| *s == 504),
        "{:?}",
        statuses.iter().filter(|s| **s != 504).collect::<Vec<_>>()
    );
    assert!(
        slowest_hit < Duration::from_secs(2),
        "a hit waited {slowest_hit:?} behind the misses"
    );

    // Nothing is left behind: no fetch in flight, no request holding a slot, no memory
    // reserved, and the gateway lets go of its connections to the black hole.
    let text = rasa_tests::text_of(http.get(gw.url("/metrics"))).await;
    assert!(
        text.contains("\nrasa_origin_fetches_in_flight 0\n"),
        "{text}"
    );
    assert_eq!(
        rasa_tests::metric(&gw, "rasa_http_requests_active").await,
        0.0
    );
    assert_eq!(rasa_tests::arena_bytes(&gw).await, allocated);
    let deadline = Instant::now() + Duration::from_secs(10);
    while hole.open() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} connections to the origin still open",
            hole.open()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
