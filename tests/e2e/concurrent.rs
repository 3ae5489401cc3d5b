//! One-sided reads in flight together from one client: many tasks calling `get`,
//! `get_range` and `get_into` at once are served by several fabric endpoints (no more than
//! the client allows), every value exact; a client reading one value at a time keeps one.

use std::sync::Arc;

use rasa_client::{Client, FastPath, ReadPath};
use rasa_tests::{pattern, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_client_reads_one_sided_from_many_tasks_at_once() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let http = rasa_tests::http();
    let values: Vec<Vec<u8>> = (0..8)
        .map(|i| pattern((1 << 20) + i * 1000, i as u64))
        .collect();
    for (i, v) in values.iter().enumerate() {
        let r = http
            .put(gw.url(&format!("/v1/objects/c/{i}")))
            .body(v.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let values = Arc::new(values);

    // One value at a time: one endpoint.
    let serial = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    for i in 0..8 {
        assert!(serial.get(&format!("c/{i}")).await.unwrap().bytes == values[i]);
    }
    assert_eq!(serial.stats().fabric_endpoints, 1);

    // Sixteen tasks at once on one client allowed three endpoints.
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .fabric_endpoints(3)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (c, values) = (c.clone(), Arc::clone(&values));
        tasks.push(tokio::spawn(async move {
            for n in 0..12usize {
                let i = (t * 5 + n) % values.len();
                let key = format!("c/{i}");
                let want = &values[i];
                match n % 3 {
                    0 => {
                        let obj = c.get(&key).await.unwrap();
                        assert_eq!(obj.path, ReadPath::Fabric);
                        assert!(obj.bytes == *want, "{key}: bytes differ");
                    }
                    1 => {
                        let (start, end) = (1000 * t as u64, 1000 * t as u64 + 70_000);
                        let obj = c.get_range(&key, start..end).await.unwrap();
                        assert_eq!(obj.path, ReadPath::Fabric);
                        assert!(obj.bytes[..] == want[start as usize..end as usize]);
                    }
                    _ => {
                        let (r, buf) = c.get_into(&key, vec![0u8; want.len()]).await;
                        assert_eq!(r.unwrap().path, ReadPath::Fabric);
                        assert!(buf == *want, "{key}: get_into bytes differ");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = c.stats();
    assert_eq!(s.fabric_reads, 16 * 12, "{s:?}");
    assert!(s.fallbacks.is_empty(), "{s:?}");
    assert!(
        (2..=3).contains(&s.fabric_endpoints),
        "16 tasks at once used {} endpoints (allowed 3)",
        s.fabric_endpoints
    );
}
