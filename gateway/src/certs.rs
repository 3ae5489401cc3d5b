//! `rasa-gateway tls self-signed`: a private CA and a server certificate signed by it.
//!
//! Why a CA and a leaf, not one self-signed certificate: the usual one-liner
//! (`openssl req -x509 …`) marks its certificate `CA:TRUE`, which webpki-based clients
//! (rustls, so the SDK before pinning, and many others) refuse as a server certificate.
//! A CA that signs a leaf works with every client: curl `--cacert ca.pem`, the SDK's
//! `ca_file`, `rasa --ca-file`, Python's `ssl`.

use crate::credfile::FileError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be written (or is there already: never overwritten).
    #[error(transparent)]
    File(#[from] crate::credfile::FileError),
    /// A file of that name exists.
    #[error("{} exists; not overwriting it", .0.display())]
    Exists(std::path::PathBuf),
    /// A key or certificate could not be made.
    #[error("{what}: {source}")]
    Make {
        /// Which.
        what: &'static str,
        /// Why.
        #[source]
        source: rcgen::Error,
    },
    /// A flag refused.
    #[error(transparent)]
    Setting(#[from] crate::setting::SettingError),
    /// The clock is before 1970.
    #[error("the clock is before 1970")]
    Clock,
}

/// Writes `ca.pem`, `cert.pem` and `key.pem` into `out` for `hosts` (names or IP
/// addresses), valid for `days` from today, and prints the flags to use on both sides.
pub fn self_signed(hosts: &[String], out: &Path, days: u32) -> Result<(), CertError> {
    if days == 0 {
        return Err(crate::setting::SettingError::said("--days must be at least 1").into());
    }
    std::fs::create_dir_all(out).map_err(|e| FileError::io("create", out, e))?;
    let paths: [PathBuf; 3] = ["ca.pem", "cert.pem", "key.pem"].map(|f| out.join(f));
    if let Some(p) = paths.iter().find(|p| p.exists()) {
        return Err(CertError::Exists(p.clone()));
    }
    let fail = |what: &'static str, source: rcgen::Error| CertError::Make { what, source };

    let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("Rasa private CA for {}", hosts[0]),
    );
    set_validity(&mut ca, days)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("CA", e))?;

    let key = KeyPair::generate().map_err(|e| fail("server key", e))?;
    let mut leaf = CertificateParams::new(hosts.to_vec())
        .map_err(|e| fail("server certificate (is every --host a name or an IP?)", e))?;
    leaf.distinguished_name
        .push(DnType::CommonName, hosts[0].clone());
    set_validity(&mut leaf, days)?;
    let cert = leaf
        .signed_by(&key, &ca_cert, &ca_key)
        .map_err(|e| fail("server certificate", e))?;

    write(&paths[0], ca_cert.pem().as_bytes(), 0o644)?;
    write(&paths[1], cert.pem().as_bytes(), 0o644)?;
    write(&paths[2], key.serialize_pem().as_bytes(), 0o600)?;
    let [ca_pem, cert_pem, key_pem] = paths.map(|p| p.display().to_string());
    println!("wrote {ca_pem} (give it to clients), {cert_pem} and {key_pem} (the gateway's)");
    println!("valid for {days} days, for: {}", hosts.join(", "));
    println!();
    println!("gateway: rasa-gateway --tls-cert {cert_pem} --tls-key {key_pem} …");
    println!(
        "clients: rasa --endpoint https://{}:8080 --ca-file {ca_pem} …",
        bracket(&hosts[0])
    );
    println!(
        "         curl --cacert {ca_pem} https://{}:8080/healthz",
        bracket(&hosts[0])
    );
    println!("         Client::builder(\"https://…\").ca_file(\"{ca_pem}\")");
    Ok(())
}

/// `[::1]` for an IPv6 address in a URL.
fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Valid from the start of today (UTC) for `days`.
fn set_validity(params: &mut CertificateParams, days: u32) -> Result<(), CertError> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| CertError::Clock)?;
    let today =
        humantime::format_rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(now.as_secs()))
            .to_string();
    let ymd: Vec<i32> = today[..10]
        .split('-')
        .map(|p| p.parse().unwrap_or(1))
        .collect();
    let start = rcgen::date_time_ymd(ymd[0], ymd[1] as u8, ymd[2] as u8);
    params.not_before = start;
    params.not_after = start + Duration::from_secs(u64::from(days) * 86_400);
    Ok(())
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, mode);
    #[cfg(not(unix))]
    let _ = mode;
    opts.open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| FileError::io("write", path, e))
}
