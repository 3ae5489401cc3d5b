//! Certificates as users make them: the `openssl req -x509` one-liner (a self-signed
//! certificate marked `CA:TRUE`, which webpki refuses as a server certificate unless it is
//! pinned), the pair `rasa-gateway tls self-signed` writes, and a wrong CA.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rasa_client::{Client, FastPath};
use rasa_tests::{gateway_bin, pattern, temp_dir, workspace_bin, Gateway};

/// The one-liner from the README of every web server, with `san` as subjectAltName.
fn openssl_one_liner(dir: &Path, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-days", "30", "-subj", "/CN=localhost", "-addext"])
        .arg(format!("subjectAltName={san}"))
        .output()
        .expect("run openssl (make test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn https_gateway(cert: &Path, key: &Path) -> Gateway {
    Gateway::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
}

fn rasa(gw: &Gateway, ca: &Path, args: &[&str]) -> Output {
    Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &gw.base, "--timeout", "5s", "--ca-file"])
        .arg(ca)
        .args(args)
        .output()
        .expect("run rasa")
}

async fn round_trip(gw: &Gateway, ca: &Path) {
    let client = Client::builder(&gw.base)
        .ca_file(ca)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let body = pattern(100_000, 5);
    client.put("tls/v", body.clone()).await.unwrap();
    assert_eq!(client.get("tls/v").await.unwrap().bytes, body);
    let out = rasa(gw, ca, &["stat", "tls/v"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_openssl_one_liner_certificate_works_when_given_as_the_ca_file() {
    let dir = temp_dir("tls-oneliner");
    let (cert, key) = openssl_one_liner(&dir, "DNS:localhost,IP:127.0.0.1");
    let gw = https_gateway(&cert, &key);
    assert!(gw.base.starts_with("https://127.0.0.1:"), "{}", gw.base);
    round_trip(&gw, &cert).await;
}

#[tokio::test]
async fn a_pinned_certificate_must_still_name_the_host() {
    let dir = temp_dir("tls-wrong-name");
    let (cert, key) = openssl_one_liner(&dir, "DNS:elsewhere.example");
    let gw = https_gateway(&cert, &key);
    let out = rasa(&gw, &cert, &["stat", "k"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate"), "{err}");
    assert!(
        err.contains("NotValidForName") || err.contains("not valid for"),
        "{err}"
    );
}

#[tokio::test]
async fn the_generated_ca_and_certificate_work_and_a_wrong_ca_is_refused_with_its_reason() {
    let dir = temp_dir("tls-generated");
    let out = Command::new(gateway_bin())
        .args([
            "tls",
            "self-signed",
            "--host",
            "localhost",
            "--host",
            "127.0.0.1",
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("run rasa-gateway tls self-signed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    assert!(
        said.contains(&format!("--tls-cert {}", cert.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("--ca-file {}", ca.display())),
        "{said}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "key.pem mode {mode:o}");
    }
    // Running it again does not overwrite the files.
    let again = Command::new(gateway_bin())
        .args(["tls", "self-signed", "--host", "localhost", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not overwriting"));

    let gw = https_gateway(&cert, &key);
    round_trip(&gw, &ca).await;
    // curl trusts the CA too.
    let curl = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca)
        .arg(gw.url("/healthz"))
        .output()
        .expect("run curl");
    assert!(
        curl.status.success(),
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );

    // Another CA (from the one-liner) is not this server's issuer: refused, and the CLI
    // says why instead of a bare "error sending request".
    let other = temp_dir("tls-other-ca");
    let (wrong, _) = openssl_one_liner(&other, "DNS:localhost,IP:127.0.0.1");
    let out = rasa(&gw, &wrong, &["stat", "tls/v"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid peer certificate"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
}
