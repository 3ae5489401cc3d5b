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
