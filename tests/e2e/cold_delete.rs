//! A delete acknowledged while a fill of its key is in flight stays a delete (found by the
//! chaos runs, issue 65): the fill fetched the origin's object before the delete reached
//! the origin, and published it after the delete — the key was back, with the deleted
//! value, until the next delete.

use rasa_openapi::FILLING_HEADER;
use rasa_tests::{pattern, Gateway, S3Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_during_a_fill_is_not_undone_when_the_fill_ends() {
    let s3 = S3Server::start();
    let value = pattern(64 << 20, 9);
    s3.put_file("pre/big", &value);
    let args = s3.gateway_args("pre");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    let c = rasa_tests::http();
    let url = gw.url("/v1/objects/big");
    let mut r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[FILLING_HEADER], "true", "a cold miss streams");
    // Its first bytes arrived: the fill is under way.
    let mut got = r.chunk().await.unwrap().expect("a first chunk").len();
    let d = c.delete(&url).send().await.unwrap();
    assert_eq!(
        d.status(),
        204,
        "the delete is acknowledged while the fill runs"
    );
    while let Some(chunk) = r.chunk().await.unwrap() {
        got += chunk.len();
    }
    // The read that started before the delete got the object whole (it overlapped the
    // delete: either answer is right); a read after the delete must not find it.
    assert_eq!(got, value.len());
    let after = c.get(&url).send().await.unwrap();
    assert_eq!(
        after.status(),
        404,
        "a read after an acknowledged delete found the deleted object"
    );
    assert!(
        s3.ops("DeleteObject", "pre/big") >= 1,
        "deleted at the origin"
    );
}

/// A delete the origin took is remembered as "not found" (issue 65): the next reads are
/// answered without asking the origin again — nor, in a cluster, adopting a copy the key's
/// previous owner holds, which an origin whose HEAD lags its deletes would confirm (s3s-fs
/// keeps a deleted object's entity tag, and names it again while the key's next PUT
/// lands: a chaos run's new owner served a value it had itself deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_origin_took_is_remembered_and_the_origin_not_asked_again() {
    let s3 = S3Server::start();
    let args = s3.gateway_args("pre");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    let c = rasa_tests::http();
    let url = gw.url("/v1/objects/gone");
    let put = c.put(&url).body(pattern(4096, 3)).send().await.unwrap();
    assert_eq!(put.status(), 201);
    let d = c.delete(&url).send().await.unwrap();
    assert_eq!(d.status(), 204);
    assert_eq!(
        s3.ops("DeleteObject", "pre/gone"),
        1,
        "deleted at the origin"
    );
    for _ in 0..3 {
        let after = c.get(&url).send().await.unwrap();
        assert_eq!(after.status(), 404);
    }
    assert_eq!(
        (
            s3.ops("GetObject", "pre/gone"),
            s3.ops("HeadObject", "pre/gone")
        ),
        (0, 0),
        "the origin was asked again after its own delete"
    );
    // A write afterwards is read back, as ever.
    let put = c.put(&url).body(pattern(4096, 4)).send().await.unwrap();
    assert_eq!(put.status(), 201);
    let back = c.get(&url).send().await.unwrap();
    assert_eq!(back.status(), 200);
    assert_eq!(back.bytes().await.unwrap(), pattern(4096, 4));
}
