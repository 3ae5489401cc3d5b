//! A namespace's routes through every member (issue 45, item 4): a listing of
//! `/v1/ns/{ns}/objects` asked of a member merges every member's page of that namespace, a
//! descriptor batch sends each owner its keys in that namespace, and a PUT's `Location`
//! names the namespaced path.

use rasa_openapi::{DescriptorBatchRequest, DescriptorBatchResponse, ObjectList};
use rasa_tests::etcd::{cluster_name, Etcd};
use rasa_tests::{pattern, temp_dir, Gateway};

use super::{all_see, fleet};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_is_listed_and_resolved_through_every_member() {
    let etcd = Etcd::start();
    let dir = temp_dir("cluster-ns");
    let ns_file = dir.join("namespaces");
    std::fs::write(&ns_file, "bravo 16MiB\n").unwrap();
    let extra = ["--namespaces".to_owned(), ns_file.display().to_string()];
    let gws = fleet(&etcd, &cluster_name("ns"), 3, "3s", &extra);
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 3).await;
    let http = rasa_tests::http();
    let keys: Vec<String> = (0..24).map(|i| format!("k{i:02}")).collect();
    for (i, k) in keys.iter().enumerate() {
        // Every PUT through the first member: forwarded to the key's owner.
        let r = http
            .put(gws[0].url(&format!("/v1/ns/bravo/objects/{k}")))
            .body(pattern(100, i as u64))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "PUT {k}");
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        assert!(
            location.starts_with(&format!("/v1/ns/bravo/objects/{k}?version=")),
            "{location}"
        );
        let r = http.get(gws[2].url(&location)).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {location} through another member");
    }
    for gw in &gws {
        let r = http
            .get(gw.url("/v1/ns/bravo/objects?limit=1000"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "the listing through {}", gw.base);
        let list: ObjectList = r.json().await.unwrap();
        let listed: Vec<&str> = list.items.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            listed, keys,
            "every member's keys of bravo, through {}",
            gw.base
        );
        let r = http
            .get(gw.url("/v1/objects?limit=1000"))
            .send()
            .await
            .unwrap();
        let list: ObjectList = r.json().await.unwrap();
        assert!(
            list.items.is_empty(),
            "the default namespace holds none of them"
        );

        let r = http
            .post(gw.url("/v1/ns/bravo/descriptors"))
            .json(&DescriptorBatchRequest { keys: keys.clone() })
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let batch: DescriptorBatchResponse = r.json().await.unwrap();
        let found = batch
            .results
            .iter()
            .filter(|d| d.descriptor.is_some())
            .count();
        assert_eq!(
            found,
            keys.len(),
            "each owner resolved its keys, through {}",
            gw.base
        );
    }
}
