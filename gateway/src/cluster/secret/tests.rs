use std::os::unix::fs::PermissionsExt;

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
    assert!(err.starts_with("--cluster-secret-file"), "{err}");
    std::fs::write(&path, "short\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = ClusterSecret::load(&path).unwrap_err();
    assert!(err.contains("at least 16"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_record_verifies_under_its_key_and_contents_only() {
    let s = secret("0123456789abcdef0123456789abcdef\n");
    let other = secret("fedcba9876543210fedcba9876543210");
    let m = member("http://10.0.0.1:8080");
    let mac = s.sign_record("/rasa/a/members/g1", &m);
    assert!(s.verify_record("/rasa/a/members/g1", &m, &mac));
    assert!(
        !s.verify_record("/rasa/a/members/g2", &m, &mac),
        "another key"
    );
    assert!(!s.verify_record("/rasa/a/members/g1", &member("http://evil:1"), &mac));
    assert!(
        !other.verify_record("/rasa/a/members/g1", &m, &mac),
        "another secret"
    );
    assert!(!s.verify_record("/rasa/a/members/g1", &m, "zz"));
}

#[test]
fn a_hop_proof_holds_once_for_its_method_and_path() {
    let s = secret("0123456789abcdef0123456789abcdef");
    let proof = s.proof("g1", &Method::PUT, "/v1/objects/k");
    let p = proof.to_str().unwrap();
    assert!(
        s.check(p, &Method::GET, "/v1/objects/k").is_some(),
        "method"
    );
    assert!(s.check(p, &Method::PUT, "/v1/objects/j").is_some(), "path");
    assert_eq!(s.check(p, &Method::PUT, "/v1/objects/k"), None);
    let again = s.check(p, &Method::PUT, "/v1/objects/k").unwrap();
    assert!(again.contains("replay"), "{again}");
    let forged = p.replace("g1 ", "g2 ");
    assert!(s.check(&forged, &Method::PUT, "/v1/objects/k").is_some());
    let old = format!("g1 {} 0000000000000001 00", now_ms() - 3_600_000);
    assert!(s
        .check(&old, &Method::PUT, "/v1/objects/k")
        .unwrap()
        .contains("clock"));
}

#[test]
fn admit_takes_an_unproven_hop_marker_off() {
    let s = secret("0123456789abcdef0123456789abcdef");
    let mut h = HeaderMap::new();
    h.insert(HOP_HEADER, HeaderValue::from_static("1"));
    h.insert(PEER_FILL_HEADER, HeaderValue::from_static("1"));
    assert!(s.admit(&mut h, &Method::PUT, "/v1/objects/k"));
    assert!(!h.contains_key(HOP_HEADER) && !h.contains_key(PEER_FILL_HEADER));
    let mut h = HeaderMap::new();
    h.insert(HOP_HEADER, HeaderValue::from_static("1"));
    h.insert(PROOF_HEADER, s.proof("g1", &Method::PUT, "/v1/objects/k"));
    assert!(!s.admit(&mut h, &Method::PUT, "/v1/objects/k"));
    assert!(h.contains_key(HOP_HEADER));
    // The same proof again is a replay: the marker goes.
    assert!(s.admit(&mut h, &Method::PUT, "/v1/objects/k"));
    assert!(!h.contains_key(HOP_HEADER));
}
