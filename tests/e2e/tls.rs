//! Certificates as users make them: the `openssl req -x509` one-liner (a self-signed
//! certificate marked `CA:TRUE`, which webpki refuses as a server certificate unless it is
//! pinned), the pair `rasa-gateway tls self-signed` writes, and a wrong CA; TLS end to end
//! through the SDK and the CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::security::Tokens;
use rasa_client::{Client, FastPath};
use rasa_openapi::ProblemCode;
use rasa_tests::{gateway_bin, http, pattern, temp_dir, workspace_bin, Gateway};
use reqwest::header::AUTHORIZATION;

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

/// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it, as PEM files.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rasa test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// HTTPS with a certificate from a CA made here: the SDK and the CLI trust it through
/// their CA file option and send their token; without the CA the connection is refused.
#[tokio::test]
async fn tls_round_trip_through_the_sdk_and_cli() {
    let dir = temp_dir("tls");
    let (ca, cert, key) = test_pki(&dir);
    let tokens = Tokens::make();
    let gw = Gateway::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--token-file",
        tokens.path(),
    ]);
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    let url = format!("https://localhost:{}", gw.addr.port());

    let client = Client::builder(&url)
        .ca_file(&ca)
        .token(&tokens.write)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let value = rasa_tests::pattern(300_000, 7);
    let d = client.put("tls/value", value.clone()).await.unwrap();
    assert_eq!(d.sha256, rasa_tests::sha256_hex(&value));
    let reader = Client::builder(&url)
        .ca_file(&ca)
        .token(&tokens.read)
        .build()
        .unwrap();
    let got = reader.get("tls/value").await.unwrap();
    assert_eq!(got.bytes, value);
    // The reader's token cannot write, over TLS as over HTTP.
    let err = reader.put("tls/other", b"x".to_vec()).await.unwrap_err();
    assert_eq!(err.code(), Some(ProblemCode::Forbidden));

    // Without the test CA the certificate is not trusted.
    let stranger = Client::builder(&url)
        .token(&tokens.read)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let err = stranger.get("tls/value").await.unwrap_err();
    assert!(matches!(err, rasa_client::Error::Http(_)), "{err}");

    // The CLI: token from RASA_TOKEN, CA from --ca-file.
    let out_file = dir.join("out.bin");
    let out = tokio::process::Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &url, "--ca-file"])
        .arg(&ca)
        .args(["get", "tls/value", "--fast-path", "off", "-o"])
        .arg(&out_file)
        .env("RASA_TOKEN", &tokens.read)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&out_file).unwrap(), value);
    let out = tokio::process::Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &url, "--ca-file"])
        .arg(&ca)
        .args(["get", "tls/value", "--fast-path", "off", "-o"])
        .arg(&out_file)
        .env_remove("RASA_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plain HTTP to the TLS port gets no answer in the clear.
    let plain = http()
        .get(format!("http://{}/healthz", gw.addr))
        .header(AUTHORIZATION, "Bearer x")
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}
