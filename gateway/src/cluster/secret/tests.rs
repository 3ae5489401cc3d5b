use std::os::unix::fs::PermissionsExt;

use std::sync::Arc;

use axum::body::Body;
use http::{HeaderValue, Method, Request};
use http_body_util::BodyExt;
use rasa_openapi::cluster::PEER_FILL_HEADER;
use rasa_openapi::{ClusterMember, HOP_HEADER};

use super::*;

fn secret(text: &str) -> ClusterSecret {
    let dir = std::env::temp_dir().join(format!("rasa-secret-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = ClusterSecret::load(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    s
}

fn member(url: &str) -> ClusterMember {
    serde_json::from_value(serde_json::json!({
        "node_id": "g1", "incarnation": "00000000000000aa", "url": url,
        "state": "serving", "weight": 1,
        "fabric": {"enabled": false, "incarnation": "00000000000000aa"}
    }))
    .unwrap()
}

#[test]
fn a_secret_readable_by_others_or_too_short_is_refused() {
    let dir = std::env::temp_dir().join(format!("rasa-secret-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = ClusterSecret::load(&path).unwrap_err();
    assert!(
        err.to_string().starts_with("--cluster-secret-file"),
        "{err}"
    );
    std::fs::write(&path, "short\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = ClusterSecret::load(&path).unwrap_err();
    assert!(err.to_string().contains("at least 16"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_record_verifies_under_its_key_contents_lease_and_time_only() {
    let s = secret("0123456789abcdef0123456789abcdef\n");
    let other = secret("fedcba9876543210fedcba9876543210");
    let m = member("http://10.0.0.1:8080");
    let key = "/rasa/a/members/g1";
    let mac = s.sign_record(key, &m, 7, 1000);
    assert!(s.verify_record(key, &m, 7, 1000, &mac));
    assert!(
        !s.verify_record("/rasa/a/members/g2", &m, 7, 1000, &mac),
        "another key"
    );
    assert!(!s.verify_record(key, &member("http://evil:1"), 7, 1000, &mac));
    assert!(!s.verify_record(key, &m, 8, 1000, &mac), "another lease");
    assert!(!s.verify_record(key, &m, 7, 1001, &mac), "another time");
    assert!(
        !other.verify_record(key, &m, 7, 1000, &mac),
        "another secret"
    );
    assert!(!s.verify_record(key, &m, 7, 1000, "zz"));
}

/// The value a member writes at `key` under `lease`, honoured until `expires_ms`.
fn record_value(s: &ClusterSecret, key: &str, lease: i64, expires_ms: u64) -> Vec<u8> {
    let member = member("http://10.0.0.1:8080");
    let mac = s.sign_record(key, &member, lease, expires_ms);
    serde_json::to_vec(&Signed {
        member,
        lease: Some(lease),
        expires_ms: Some(expires_ms),
        mac: Some(mac),
    })
    .unwrap()
}

/// Review III, finding 1: a record saved from etcd and written back after its member
/// left is honoured only under the lease it was signed for, and only until its time.
#[test]
fn a_record_is_honoured_only_under_its_lease_and_before_its_time() {
    let s = secret("0123456789abcdef0123456789abcdef");
    let key = "/rasa/a/members/g1";
    let later = now_ms() + 60_000;
    let value = record_value(&s, key, 7, later);
    let r = record::check(Some(&s), key, &value, 7).unwrap();
    assert_eq!(r.expires_ms, Some(later));
    let why = record::check(Some(&s), key, &value, 0).err().unwrap();
    assert!(why.to_string().contains("no lease"), "{why}");
    let why = record::check(Some(&s), key, &value, 8).err().unwrap();
    assert!(why.to_string().contains("lease 8"), "{why}");
    let past = record_value(&s, key, 7, now_ms() - 1);
    let why = record::check(Some(&s), key, &past, 7).err().unwrap();
    assert!(why.to_string().contains("expired"), "{why}");
    // A record of an older member (no lease, no time) is refused under a secret.
    let m = member("http://10.0.0.1:8080");
    let bare = serde_json::to_vec(&m).unwrap();
    assert!(record::check(Some(&s), key, &bare, 7).is_err());
    assert!(
        record::check(None, key, &bare, 0).is_ok(),
        "without a secret etcd is trusted"
    );
    assert!(
        record::check(None, "/rasa/a/members/g2", &bare, 0).is_err(),
        "another key"
    );
}

const PATH: &str = "/v1/objects/k";

#[test]
fn a_hop_proof_holds_once_for_its_receiver_method_path_and_body() {
    let s = secret("0123456789abcdef0123456789abcdef");
    let body = HopBody::of(&[b"value"]);
    let proof = s.proof("g1", "g2", &Method::PUT, PATH, &body);
    let p = proof.to_str().unwrap();
    assert!(s.check("g2", p, &Method::GET, PATH).is_err(), "method");
    assert!(
        s.check("g2", p, &Method::PUT, "/v1/objects/j").is_err(),
        "path"
    );
    let elsewhere = s.check("g1", p, &Method::PUT, PATH).unwrap_err();
    assert!(
        elsewhere.to_string().contains("another member"),
        "{elsewhere}"
    );
    let other_body = p.replace(
        &hex::encode(match &body {
            HopBody::Digest(d) => d,
            _ => unreachable!(),
        }),
        &hex::encode([0u8; 32]),
    );
    assert!(
        s.check("g2", &other_body, &Method::PUT, PATH).is_err(),
        "body"
    );
    assert_eq!(s.check("g2", p, &Method::PUT, PATH), Ok(body));
    let again = s.check("g2", p, &Method::PUT, PATH).unwrap_err();
    assert!(again.to_string().contains("replay"), "{again}");
    let forged = p.replacen("g1 ", "g3 ", 1);
    assert!(s.check("g2", &forged, &Method::PUT, PATH).is_err());
    let old = format!("g1 g2 {} 0000000000000001 e 00", now_ms() - 3_600_000);
    assert!(s
        .check("g2", &old, &Method::PUT, PATH)
        .unwrap_err()
        .to_string()
        .contains("clock"));
}

#[test]
fn nonces_are_kept_for_two_windows_and_their_count_is_bounded() {
    let mut n = hop::Nonces::default();
    let w = PROOF_WITHIN.as_millis() as u64;
    let t = 1_000_000_000;
    assert!(n.spend(1, t, t));
    assert!(!n.spend(1, t, t + w), "within the window");
    assert!(!n.spend(1, t, t + 2 * w), "still kept");
    assert!(n.spend(2, t + 2 * w + 1, t + 2 * w + 1));
    assert!(
        n.spend(1, t + 2 * w + 2, t + 2 * w + 2),
        "let go once no proof of it can pass"
    );
}

fn request(s: &Arc<ClusterSecret>, to: &str, body: &HopBody, sent: Body) -> Request<Body> {
    let mut req = Request::put(PATH).body(sent).unwrap();
    req.headers_mut()
        .insert(HOP_HEADER, HeaderValue::from_static("1"));
    let proof = s.proof("g1", to, &Method::PUT, PATH, body);
    req.headers_mut().insert(PROOF_HEADER, proof);
    req
}

async fn read(req: Request<Body>) -> Result<Vec<u8>, String> {
    let body = req.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok(body.to_bytes().to_vec())
}

#[tokio::test]
async fn admit_binds_a_proven_body_and_takes_an_unproven_marker_off() {
    let s = Arc::new(secret("0123456789abcdef0123456789abcdef"));
    let mut req = Request::put(PATH).body(Body::empty()).unwrap();
    req.headers_mut()
        .insert(HOP_HEADER, HeaderValue::from_static("1"));
    req.headers_mut()
        .insert(PEER_FILL_HEADER, HeaderValue::from_static("1"));
    let req = s.admit("g2", req);
    assert!(
        !req.headers().contains_key(HOP_HEADER) && !req.headers().contains_key(PEER_FILL_HEADER)
    );

    let covered = HopBody::of(&[b"value"]);
    let ok = s.admit("g2", request(&s, "g2", &covered, Body::from("value")));
    assert!(ok.headers().contains_key(HOP_HEADER));
    assert_eq!(read(ok).await.unwrap(), b"value");
    // Review III, finding 2: the proof replayed with another body, or to another member.
    let swapped = s.admit("g2", request(&s, "g2", &covered, Body::from("other")));
    assert!(
        swapped.headers().contains_key(HOP_HEADER),
        "the head is proven"
    );
    let err = read(swapped).await.unwrap_err();
    assert!(err.contains("not the one"), "{err}");
    let elsewhere = s.admit("g1", request(&s, "g2", &covered, Body::from("value")));
    assert!(!elsewhere.headers().contains_key(HOP_HEADER));
    // A proof of no body refuses one.
    let none = s.admit("g2", request(&s, "g2", &HopBody::Empty, Body::from("x")));
    assert!(read(none).await.is_err());
}

/// A body as [`seal::Sealing`] sends it, received through [`ClusterSecret::admit`];
/// `tamper` changes its bytes or trailers on the way.
async fn sealed_round_trip(
    length: Option<u64>,
    value: &'static [u8],
    tamper: impl FnOnce(Vec<http_body::Frame<bytes::Bytes>>) -> Vec<http_body::Frame<bytes::Bytes>>,
) -> Result<Vec<u8>, String> {
    let s = Arc::new(secret("0123456789abcdef0123456789abcdef"));
    let covered = HopBody::Sealed(length);
    let proof = s.proof("g1", "g2", &Method::PUT, PATH, &covered);
    let inner = http_body_util::Full::new(bytes::Bytes::from_static(value));
    let mut sealed = seal::Sealing::new(inner, Arc::clone(&s), proof.clone());
    let mut frames = Vec::new();
    while let Some(f) = sealed.frame().await {
        frames.push(f.unwrap());
    }
    let frames = tamper(frames);
    let stream =
        futures_util::stream::iter(frames.into_iter().map(Ok::<_, std::convert::Infallible>));
    let mut req = Request::put(PATH)
        .body(Body::new(http_body_util::StreamBody::new(stream)))
        .unwrap();
    req.headers_mut()
        .insert(HOP_HEADER, HeaderValue::from_static("1"));
    req.headers_mut().insert(PROOF_HEADER, proof);
    let req = s.admit("g2", req);
    if let Some(n) = length {
        assert_eq!(req.headers()["content-length"], n.to_string().as_str());
    }
    read(req).await
}

#[tokio::test]
async fn a_sealed_body_passes_whole_and_breaks_off_when_changed() {
    assert_eq!(
        sealed_round_trip(Some(5), b"value", |f| f).await.unwrap(),
        b"value"
    );
    assert_eq!(
        sealed_round_trip(None, b"value", |f| f).await.unwrap(),
        b"value"
    );
    let changed = sealed_round_trip(Some(5), b"value", |mut f| {
        f[0] = http_body::Frame::data(bytes::Bytes::from_static(b"VALUE"));
        f
    });
    assert!(changed
        .await
        .unwrap_err()
        .contains("not the one its sender sealed"));
    let unsealed = sealed_round_trip(Some(5), b"value", |mut f| {
        f.pop();
        f
    });
    assert!(unsealed.await.unwrap_err().contains("without its seal"));
    let longer = sealed_round_trip(Some(4), b"value", |f| f);
    assert!(longer.await.unwrap_err().contains("past"));
}
