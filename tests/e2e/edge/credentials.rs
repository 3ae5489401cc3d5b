//! Credential files: a token file (hashes) other users may read is loaded with a warning
//! naming it, an S3 credentials file (plain secrets) is refused; `s3-key list` shows keys
//! without their secrets and `s3-key revoke` removes one.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use rasa_tests::{gateway_bin, new_token, temp_dir, Gateway};

fn gateway_cmd(args: &[&str]) -> std::process::Output {
    Command::new(gateway_bin())
        .args(args)
        .output()
        .expect("run rasa-gateway")
}

#[test]
fn a_token_file_readable_by_others_is_loaded_with_a_warning() {
    let dir = temp_dir("loose-tokens");
    let file = dir.join("tokens");
    new_token(&file, "reader", "read");
    let log = dir.join("log");
    let path = file.to_str().unwrap();
    // Written 0600: no warning.
    let gw = Gateway::start_logged(
        &["--fast-path", "off", "--token-file", path],
        &[("RUST_LOG", "warn")],
        &log,
    );
    drop(gw);
    assert!(!std::fs::read_to_string(&log).unwrap().contains("chmod 600"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let gw = Gateway::start_logged(
        &["--fast-path", "off", "--token-file", path],
        &[("RUST_LOG", "warn")],
        &log,
    );
    // The gateway loads its files before it announces itself: the line is written.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(path) && text.contains("0644") && text.contains("chmod 600"),
        "{text}"
    );
    drop(gw);
}

/// Review III, finding 7: a world-readable S3 credentials file (plain secrets) was only
/// warned about. It is refused at start, naming the file and the fix.
#[test]
fn an_s3_credentials_file_readable_by_others_is_refused() {
    let dir = temp_dir("loose-s3-keys");
    let file = dir.join("s3-keys");
    rasa_tests::new_s3_key(&file, "writer", "read,write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.to_str().unwrap();
    let out = gateway_cmd(&[
        "--listen",
        "127.0.0.1:0",
        "--fast-path",
        "off",
        "--s3-listen",
        "127.0.0.1:0",
        "--s3-bucket",
        "data",
        "--s3-credentials-file",
        path,
    ]);
    assert!(!out.status.success(), "the gateway started");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(path) && err.contains("0644") && err.contains("chmod 600"),
        "{err}"
    );
}

#[test]
fn s3_keys_are_listed_without_secrets_and_revoked_by_name() {
    let file = temp_dir("s3-keys").join("s3-credentials");
    let path = file.to_str().unwrap();
    let mut secrets = Vec::new();
    for (name, scopes) in [("trainer", "read"), ("ingest", "read,write")] {
        let out = gateway_cmd(&["s3-key", "new", name, "--scopes", scopes, "--file", path]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8(out.stdout).unwrap();
        let (id, secret) = printed.trim().split_once(' ').unwrap();
        secrets.push((id.to_owned(), secret.to_owned()));
    }
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = gateway_cmd(&["s3-key", "list", "--file", path]);
    assert!(out.status.success());
    let listed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        listed,
        format!(
            "ingest\tread,write\t{}\ntrainer\tread\t{}\n",
            secrets[1].0, secrets[0].0
        )
    );
    assert!(
        secrets.iter().all(|(_, s)| !listed.contains(s.as_str())),
        "a secret was listed"
    );
    let out = gateway_cmd(&["s3-key", "revoke", "trainer", "--file", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed =
        String::from_utf8(gateway_cmd(&["s3-key", "list", "--file", path]).stdout).unwrap();
    assert_eq!(listed, format!("ingest\tread,write\t{}\n", secrets[1].0));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = gateway_cmd(&["s3-key", "revoke", "nobody", "--file", path]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no S3 key named 'nobody'"));
}
