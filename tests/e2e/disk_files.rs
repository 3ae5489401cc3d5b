//! The disk tier never touches a file it did not create: a planted link or a foreign file
//! named like a segment is reported and left alone (never cut, deleted or written), a
//! linked namespace directory is refused, and what it creates is private (0700/0600).

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use rasa_tests::{http, metric, pattern, temp_dir, wait_for_metric, Gateway};

use crate::disk::disk_args as args;

const LEN: usize = 200_000;

fn start_logged(dir: &Path, size: &str, extra: &[&str], log: &Path) -> Gateway {
    let a = args(dir, size, extra);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    Gateway::start_logged(&a, &[("RUST_LOG", "warn")], log)
}

/// PUTs `n` values of [`LEN`] bytes under `prefix` (more than memory holds: they spill).
/// A `503` with `Retry-After` (no room yet: the disk writer has not freed memory within
/// the short test lease, as on a loaded machine) is retried as its answer says, for 20 s
/// at most: these tests are about the files the tier makes, not how fast it spills.
async fn fill(gw: &Gateway, prefix: &str, n: u64) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for i in 0..n {
        loop {
            let r = http()
                .put(gw.url(&format!("{prefix}{i}")))
                .body(pattern(LEN, i))
                .send()
                .await
                .unwrap();
            let status = r.status();
            let retry_after = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            match retry_after {
                Some(secs) if status == 503 && std::time::Instant::now() < give_up => {
                    tokio::time::sleep(std::time::Duration::from_secs(secs.min(1))).await;
                }
                _ => {
                    assert!(status.is_success(), "PUT {prefix}{i}: {status}");
                    break;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_or_foreign_segment_is_reported_and_left_alone() {
    let base = temp_dir("disk-planted");
    let dir = base.join("tier");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = base.join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    symlink(&victim, dir.join("00000042.seg")).unwrap();
    let foreign = dir.join("00000043.seg");
    let foreign_text = b"somebody else's file, named like a segment\n".repeat(8);
    std::fs::write(&foreign, &foreign_text).unwrap();
    let log = base.join("gateway.log");

    // A 3 MiB tier under 16 MB of PUTs: segments are made, rolled and deleted oldest
    // first, next to the planted files.
    let gw = start_logged(&dir, "3MiB", &[], &log);
    fill(&gw, "/v1/objects/k", 80).await;
    wait_for_metric(&gw, "rasa_disk_evictions_total", 1.0).await;
    let r = http().get(gw.url("/v1/objects/k79")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        metric(&gw, "rasa_disk_foreign_files_total").await,
        2.0,
        "both files reported once"
    );
    gw.terminate();

    // And again after a restart (recovery reads the directory once more).
    let gw = start_logged(&dir, "3MiB", &[], &log);
    let r = http().get(gw.url("/v1/objects/k79")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the tier's own values are back");
    assert!(r.bytes().await.unwrap() == pattern(LEN, 79));
    drop(gw);

    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious\n",
        "the link's target is untouched"
    );
    assert!(
        std::fs::symlink_metadata(dir.join("00000042.seg"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link is left where it was"
    );
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        foreign_text,
        "the foreign file is untouched"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    for name in ["00000042.seg", "00000043.seg"] {
        assert!(
            text.lines()
                .any(|l| l.contains(name) && l.contains("not one of its own")),
            "the log names {name}:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_tier_creates_is_private_and_an_open_directory_is_warned_about() {
    let base = temp_dir("disk-modes");
    // Made by the gateway: 0700 from the start.
    let dir = base.join("made/by/gateway");
    let ns_file = base.join("namespaces");
    std::fs::write(&ns_file, "web 2MiB 3MiB\n").unwrap();
    let log = base.join("gateway.log");
    let gw = start_logged(
        &dir,
        "16MiB",
        &["--namespaces", ns_file.to_str().unwrap()],
        &log,
    );
    fill(&gw, "/v1/objects/k", 50).await;
    fill(&gw, "/v1/ns/web/objects/k", 20).await;
    gw.terminate(); // a clean stop writes memory down and leaves its marker
    let mut seen = (0, 0);
    walk(&base.join("made"), &mut |path, meta| {
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            seen.0 += 1;
        } else if path != log && path != ns_file {
            assert_eq!(mode, 0o600, "{}", path.display());
            seen.1 += 1;
        }
    });
    assert!(seen.0 >= 5, "made/by/gateway/ns/web: {seen:?}");
    assert!(
        seen.1 >= 6,
        "segments, locks, identities, markers: {seen:?}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("open to other users"), "{text}");

    // An existing directory others may read: warned about at start (and still used).
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = base.join("open.log");
    let gw = start_logged(&open, "16MiB", &[], &log);
    fill(&gw, "/v1/objects/k", 2).await;
    drop(gw);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("open to other users") && text.contains("0755"),
        "{text}"
    );
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let meta = std::fs::symlink_metadata(dir).unwrap();
    f(dir, &meta);
    if meta.is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            walk(&e.unwrap().path(), f);
        }
    }
}

#[test]
fn a_linked_namespace_directory_is_refused() {
    let base = temp_dir("disk-ns-link");
    let dir = base.join("tier");
    std::fs::create_dir_all(dir.join("ns")).unwrap();
    let elsewhere = base.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, dir.join("ns/alpha")).unwrap();
    let ns_file = base.join("namespaces");
    std::fs::write(&ns_file, "alpha 2MiB 3MiB\n").unwrap();
    let mut child = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["--listen", "127.0.0.1:0"])
        .args(args(
            &dir,
            "16MiB",
            &["--namespaces", ns_file.to_str().unwrap()],
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Refused at start: it exits at once. One that follows the link would run on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started over a linked ns/alpha (still running after 30 s)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success(), "refused at start");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("ns/alpha") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written where the link points"
    );
}
