//! etcd as a production etcd runs (issue 45, item 1): over TLS with client certificates,
//! and with etcd's users. Members that prove themselves join and serve; a member that
//! cannot refuses to start with one line naming etcd and the reason.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use rasa_tests::etcd::{cluster_name, member_args, Etcd, EtcdTls};
use rasa_tests::{pattern, temp_dir, Gateway};

use super::{all_see, member_with};

/// Runs a member with `args`, which must refuse to start: its one-line reason, which
/// names etcd.
fn refused_at_start(args: &[String]) -> String {
    refused_naming(args, "etcd")
}

/// Runs a member with `args`, which must refuse to start: its reason, which names `what`.
pub(super) fn refused_naming(args: &[String], what: &str) -> String {
    let mut child = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "off") // the refusal is printed, not logged
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a member with {args:?} started (still running after 30 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.starts_with("rasa-gateway: ") && err.contains(what),
        "{err}"
    );
    err
}

/// A PUT through the first member and a GET through the last.
async fn serves(gws: &[Gateway]) {
    let http = rasa_tests::http();
    for i in 0..8 {
        let url = |gw: &Gateway| gw.url(&format!("/v1/objects/s/{i}"));
        let r = http
            .put(url(&gws[0]))
            .body(pattern(64, i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let r = http.get(url(&gws[gws.len() - 1])).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.bytes().await.unwrap() == pattern(64, i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_reach_etcd_over_tls_with_client_certificates() {
    let tls = EtcdTls::make();
    let etcd = Etcd::start_tls(&tls);
    let name = cluster_name("tls");
    let gws: Vec<Gateway> = ["g1", "g2"]
        .iter()
        .map(|node| {
            let mut args = member_args(&etcd, &name, node, "3s");
            args.extend(tls.member_flags());
            member_with(&args)
        })
        .collect();
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 2).await;
    serves(&gws).await;

    // Without TLS, and with etcd's CA but no client certificate: refused at start.
    let plain = member_args(&etcd, &name, "g3", "3s");
    let mut no_cert = plain.clone();
    no_cert.extend(["--etcd-ca-file".to_owned(), tls.ca.display().to_string()]);
    for (args, hint) in [(plain, "--etcd-ca-file"), (no_cert, "--etcd-cert-file")] {
        let err = refused_at_start(&args);
        assert!(
            err.contains("cannot reach etcd at") && err.contains(hint) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // A key others may read is refused before any connection.
    let loose = temp_dir("etcd-loose").join("key.pem");
    std::fs::copy(&tls.client_key, &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut args = member_args(&etcd, &name, "g3", "3s");
    args.extend(tls.member_flags());
    let at = args.iter().position(|a| a == "--etcd-key-file").unwrap();
    args[at + 1] = loose.display().to_string();
    let err = refused_at_start(&args);
    assert!(
        err.contains("--etcd-key-file") && err.contains("other users"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_authenticate_as_an_etcd_user() {
    let etcd = Etcd::start();
    etcd.enable_auth("root-pw", "rasa", "member-pw").await;
    let dir = temp_dir("etcd-user");
    let password = |name: &str, text: &str, mode: u32| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    };
    let good = password("good", "member-pw\n", 0o600);
    let name = cluster_name("users");
    let user_args = |node: &str, file: &str| {
        let mut a = member_args(&etcd, &name, node, "3s");
        a.extend(["--etcd-user", "rasa", "--etcd-password-file", file].map(str::to_owned));
        a
    };
    let gws: Vec<Gateway> = ["g1", "g2"]
        .iter()
        .map(|node| member_with(&user_args(node, &good)))
        .collect();
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_see(&refs, 2).await;
    serves(&gws).await;

    let wrong = password("wrong", "guess\n", 0o600);
    let loose = password("loose", "member-pw\n", 0o644);
    for (args, says) in [
        (
            member_args(&etcd, &name, "g3", "3s"),
            "cannot reach etcd at",
        ),
        (user_args("g3", &wrong), "cannot reach etcd at"),
        (user_args("g3", &loose), "other users"),
    ] {
        let err = refused_at_start(&args);
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}
