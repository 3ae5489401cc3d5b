//! Unit tests of the namespaces file and its quotas.
use super::*;

#[test]
fn the_file_parses_and_bad_lines_are_named() {
    let specs = parse("# c\ntrain 4GiB\n\nweb 16MiB # small\n").unwrap();
    assert_eq!(
        specs,
        [
            Spec {
                name: "train".into(),
                quota: 4 << 30,
                disk_quota: None,
                replicas: Vec::new(),
            },
            Spec {
                name: "web".into(),
                quota: 16 << 20,
                disk_quota: None,
                replicas: Vec::new(),
            }
        ]
    );
    for (text, needle) in [
        ("train", "line 1: expected"),
        ("Ml 1GiB", "namespace name"),
        ("a..b 1GiB", "namespace name"),
        ("10.0.0.1 1GiB", "namespace name"),
        (".ab 1GiB", "namespace name"),
        ("default 1GiB", "always exists"),
        ("train 1KiB", "below the minimum"),
        ("train lots", "quota"),
        ("train 1GiB\ntrain 2GiB", "line 2: train is listed twice"),
        ("train 1GiB 1KiB", "disk quota of train is below"),
        ("train 1GiB lots", "disk quota"),
        (
            "train 1GiB 1GiB extra",
            "expected 'NAME QUOTA [DISK_QUOTA] [replicas=[PREFIX=]N ...]'",
        ),
        ("train 1GiB replicas=0", "replicas=0: N is how many members"),
        ("train 1GiB replicas=17", "1 to 16"),
        (
            "train 1GiB replicas=a/../b=2",
            "replicas=a/../b=2: the prefix is not a key",
        ),
        ("train 1GiB replicas=three", "N is how many"),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.to_string().contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn a_disk_quota_is_optional() {
    let specs = parse("train 4GiB 100GiB\nweb 16MiB\n").unwrap();
    assert_eq!(specs[0].disk_quota, Some(100 << 30));
    assert_eq!(specs[1].disk_quota, None);
}

#[test]
fn replicas_are_named_for_the_whole_namespace_or_a_prefix_beside_a_disk_quota() {
    let specs =
        parse("hot 1GiB replicas=3\ntrain 4GiB replicas=ckpt/=2 8GiB replicas=1\n").unwrap();
    let rule = |ns: &str, prefix: &str, count| rasa_openapi::ReplicaRule {
        namespace: Some(ns.into()),
        prefix: prefix.into(),
        count,
    };
    assert_eq!(specs[0].replicas, [rule("hot", "", 3)]);
    assert_eq!(specs[1].disk_quota, Some(8 << 30));
    assert_eq!(
        specs[1].replicas,
        [rule("train", "ckpt/", 2), rule("train", "", 1)]
    );
    let rules = super::file::replica_rules(&specs);
    assert_eq!(
        rasa_openapi::cluster::replica_count(Some("train"), "ckpt/a", &rules),
        2
    );
    assert_eq!(
        rasa_openapi::cluster::replica_count(Some("train"), "b", &rules),
        1
    );
    assert_eq!(
        rasa_openapi::cluster::replica_count(Some("hot"), "b", &rules),
        3
    );
    assert_eq!(rasa_openapi::cluster::replica_count(None, "b", &rules), 1);
}

#[test]
fn small_namespaces_get_small_arenas() {
    assert_eq!(arena_size_for(16 << 20, 64 << 20), 4 << 20);
    assert_eq!(arena_size_for(4 << 30, 64 << 20), 64 << 20);
    assert_eq!(arena_size_for(1 << 20, 64 << 20), 256 << 10);
}
