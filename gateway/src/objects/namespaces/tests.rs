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
            },
            Spec {
                name: "web".into(),
                quota: 16 << 20,
                disk_quota: None,
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
            "expected 'NAME QUOTA [DISK_QUOTA]'",
        ),
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
fn small_namespaces_get_small_arenas() {
    assert_eq!(arena_size_for(16 << 20, 64 << 20), 4 << 20);
    assert_eq!(arena_size_for(4 << 30, 64 << 20), 64 << 20);
    assert_eq!(arena_size_for(1 << 20, 64 << 20), 256 << 10);
}
