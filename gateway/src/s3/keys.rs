//! S3 access keys: SigV4 needs each secret on the server (it signs with it), and the token
//! file holds only hashes, so S3 keys live in a file of their own (`--s3-credentials-file`,
//! mode 0600), one per line:
//!
//! ```text
//! # name     scopes       access key id          secret
//! trainer    read         RASA6Q2T8XK4P0ZVN3WD   5bq3…(40 characters)
//! ingest     read,write   RASAM1J7C9HD2RY5KF0S   Tz9w…
//! ```
//!
//! `rasa-gateway s3-key new NAME --scopes read,write --file F` makes a key, appends its
//! line and prints the id and secret once (`new`, `list` and `revoke` are in
//! `credentials.rs`). The file is read again on SIGHUP. Scopes map to operations: `read` for GET/HEAD/LIST, `write` for PUT/DELETE/multipart, `write` and `read` for copy (it reads its source); `admin`
//! implies both. SigV2 is refused.

use crate::credfile::FileError;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};

use crate::grants::Grants;
use crate::tokens::Scope;

/// One access key.
#[derive(Clone, Debug)]
pub struct S3Key {
    /// The name logs use.
    pub name: String,
    /// What it may do, and in which namespaces (buckets).
    pub scopes: Grants,
    /// The access key id.
    pub id: String,
    secret: String,
}

impl S3Key {
    /// Whether this key may act with `scope` in namespace `ns` (a bucket).
    pub fn allows_in(&self, ns: &str, scope: Scope) -> bool {
        self.scopes.allows_in(ns, scope)
    }
}

/// The keys in force, and the file they came from ([`S3Keys::reload`] on SIGHUP).
#[derive(Debug)]
pub struct S3Keys {
    path: std::path::PathBuf,
    keys: RwLock<Arc<HashMap<String, S3Key>>>,
}

/// What is wrong with an entry of the S3 credentials file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyEntryError {
    /// Scopes that do not parse.
    #[error(transparent)]
    Grants(#[from] crate::grants::GrantError),
    /// A second key of the same name.
    #[error("a second key named '{0}'")]
    NameTwice(String),
    /// A second key with the same access key id.
    #[error("a second key with the id '{0}'")]
    IdTwice(String),
}

/// Parses the credentials file format (see the module documentation).
pub fn parse(text: &str) -> Result<HashMap<String, S3Key>, FileError> {
    let mut keys = HashMap::new();
    let mut names = std::collections::HashSet::new();
    for entry in crate::credfile::entries::<4>(text, "NAME SCOPES ACCESS_KEY_ID SECRET") {
        let (n, [name, scopes, id, secret]) = entry?;
        let at = |why: KeyEntryError| FileError::line(n, why);
        let scopes: Grants = scopes.parse().map_err(|e| at(KeyEntryError::Grants(e)))?;
        if !names.insert(name.to_owned()) {
            return Err(at(KeyEntryError::NameTwice(name.to_owned())));
        }
        let key = S3Key {
            name: name.to_owned(),
            scopes,
            id: id.to_owned(),
            secret: secret.to_owned(),
        };
        if keys.insert(id.to_owned(), key).is_some() {
            return Err(at(KeyEntryError::IdTwice(id.to_owned())));
        }
    }
    Ok(keys)
}

impl S3Keys {
    /// Loads `path`, refused when other users may read or write it (it holds plain
    /// secrets: SigV4 needs them); the error names the file and line.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        Ok(Self {
            keys: RwLock::new(Arc::new(Self::read(path)?)),
            path: path.to_owned(),
        })
    }

    /// The keys in `path`, by access key id; refused when other users may read or write
    /// the file (at start and on every reload: a file made readable later is not taken).
    pub fn read(path: &Path) -> Result<HashMap<String, S3Key>, FileError> {
        if let Some(mode) = crate::credfile::loose_mode(path) {
            return Err(FileError::Loose {
                what: "S3 credentials file",
                path: path.to_owned(),
                mode,
            });
        }
        let text = crate::credfile::read(path)?;
        parse(&text).map_err(|e| e.in_file("S3 credentials file", path))
    }

    /// Reads the file again and, if it parses, puts its keys in force; returns how many.
    /// On error the keys in force stay.
    pub fn reload(&self) -> Result<usize, FileError> {
        let fresh = Self::read(&self.path)?;
        let n = fresh.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(n)
    }

    /// How many keys are in force.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether no key is in force.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn current(&self) -> Arc<HashMap<String, S3Key>> {
        Arc::clone(&self.keys.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Both halves of access control, for `s3s`: [`S3Auth`] gives the secret of an access key
/// (so signatures can be checked), [`S3Access`] decides whether the key may run the
/// operation, in the namespace of the bucket it names. The second field: the
/// `--s3-bucket` buckets (in the default namespace; any other bucket is a namespace).
#[derive(Clone, Debug)]
pub struct Access(pub Arc<S3Keys>, pub Arc<Vec<String>>);

impl Access {
    /// The namespace bucket `bucket` is in.
    fn namespace<'a>(&self, bucket: &'a str) -> &'a str {
        if self.1.iter().any(|b| b == bucket) {
            crate::objects::namespaces::DEFAULT
        } else {
            bucket
        }
    }
}

/// The bucket of a copy's source (`x-amz-copy-source: BUCKET/KEY`, maybe URL-encoded and
/// with a leading `/`).
fn copy_source_bucket(headers: &http::HeaderMap) -> Option<String> {
    let raw = headers.get("x-amz-copy-source")?.to_str().ok()?;
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()?;
    let path = decoded.trim_start_matches('/');
    Some(path.split('/').next()?.to_owned())
}

#[async_trait::async_trait]
impl S3Auth for Access {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.current().get(access_key) {
            Some(k) => Ok(SecretKey::from(k.secret.clone())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key id is not in the gateway's S3 credentials file"
            )),
        }
    }
}

/// The scope an S3 operation needs.
pub fn scope_of(operation: &str) -> Scope {
    match operation {
        "GetObject"
        | "HeadObject"
        | "ListObjects"
        | "ListObjectsV2"
        | "ListObjectVersions"
        | "HeadBucket"
        | "ListBuckets"
        | "GetBucketLocation"
        | "GetBucketVersioning" => Scope::Read,
        // Uploads in progress belong to writers: their ids and keys are not for readers.
        _ => Scope::Write,
    }
}

/// Every scope an S3 operation needs: a copy also reads its source (as S3 requires),
/// so a write-only key cannot copy what it may not read.
pub fn scopes_of(operation: &str) -> &'static [Scope] {
    match operation {
        "CopyObject" | "UploadPartCopy" => &[Scope::Write, Scope::Read],
        op if scope_of(op) == Scope::Read => &[Scope::Read],
        _ => &[Scope::Write],
    }
}

/// Whether the request is signed with SigV2 (header or query), which is refused.
fn sig_v2(cx: &S3AccessContext<'_>) -> bool {
    let header = cx
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS "));
    let query = cx
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("AWSAccessKeyId=")));
    header || query
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if sig_v2(cx) {
            return Err(s3_error!(
                AccessDenied,
                "Signature Version 2 is not accepted: sign requests with SigV4"
            ));
        }
        let Some(creds) = cx.credentials() else {
            return Err(s3_error!(AccessDenied, "the request is not signed"));
        };
        let keys = self.0.current();
        let Some(key) = keys.get(&creds.access_key) else {
            return Err(s3_error!(InvalidAccessKeyId));
        };
        // Whether CreateBucket may make a new bucket and DeleteBucket remove one: read by
        // their handlers (CreateBucket of a bucket that exists needs `write` in it only).
        cx.extensions_mut()
            .insert(BucketRights(key.scopes.allows(Scope::Buckets)));
        let op = cx.s3_op().name();
        let bucket = match cx.s3_path() {
            s3s::path::S3Path::Root => None,
            s3s::path::S3Path::Bucket { bucket } | s3s::path::S3Path::Object { bucket, .. } => {
                Some(bucket.to_string())
            }
        };
        let source = copy_source_bucket(cx.headers());
        for need in scopes_of(op) {
            // A copy reads its source's bucket and writes its own.
            let at = match (need, &source) {
                (Scope::Read, Some(src)) if scopes_of(op).len() > 1 => Some(src.as_str()),
                _ => bucket.as_deref(),
            };
            let allowed = match at {
                Some(b) => key.allows_in(self.namespace(b), *need),
                None => key.scopes.allows_somewhere(*need),
            };
            if !allowed {
                let place = at.map_or_else(String::new, |b| format!(" on bucket {b:?}"));
                return Err(s3_error!(
                    AccessDenied,
                    "the access key '{}' lacks the '{need}' scope {op} needs{place}",
                    key.name
                ));
            }
        }
        Ok(())
    }
}

/// Whether the caller may make and remove buckets (the `buckets` scope, or `admin`; anyone
/// on an open listener), set by the access check for the handlers.
#[derive(Clone, Copy, Debug)]
pub struct BucketRights(pub bool);

/// Without a credentials file: anyone may do anything (like the native API without
/// tokens), but SigV2 is still refused.
#[derive(Clone, Copy, Debug)]
pub struct Open;

#[async_trait::async_trait]
impl S3Access for Open {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if sig_v2(cx) {
            return Err(s3_error!(
                AccessDenied,
                "Signature Version 2 is not accepted: sign requests with SigV4"
            ));
        }
        cx.extensions_mut().insert(BucketRights(true));
        Ok(())
    }
}

/// A new access key id: `RASA` and 16 random characters of `A-Z0-9` (20, as AWS's).
pub fn new_key_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut id = String::from("RASA");
    for _ in 0..16 {
        id.push(ALPHABET[rand::random_range(0..ALPHABET.len())] as char);
    }
    id
}

/// A new secret: 240 random bits, base64url (40 characters, as AWS's).
pub fn new_secret() -> String {
    use base64::Engine;
    let bytes: [u8; 30] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_refuses_bad_lines() {
        let keys = parse("# c\nbob read AKID1 sec1\n\nann read,write AKID2 sec2 # x\n").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys["AKID2"].scopes,
            Grants::everywhere(&[Scope::Read, Scope::Write])
        );
        assert!(parse("bob read AKID1")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse("bob reed AKID1 s")
            .unwrap_err()
            .to_string()
            .contains("unknown scope"));
        assert!(parse("a read X s\nb read X t")
            .unwrap_err()
            .to_string()
            .contains("id 'X'"));
        assert!(parse("a read X s\na read Y t")
            .unwrap_err()
            .to_string()
            .contains("named 'a'"));
    }

    #[test]
    fn operations_need_their_scope() {
        assert_eq!(scope_of("GetObject"), Scope::Read);
        assert_eq!(scope_of("ListObjectsV2"), Scope::Read);
        assert_eq!(scope_of("PutObject"), Scope::Write);
        assert_eq!(scope_of("CompleteMultipartUpload"), Scope::Write);
        assert_eq!(scope_of("DeleteObjects"), Scope::Write);
        assert_eq!(scopes_of("CopyObject"), [Scope::Write, Scope::Read]);
        assert_eq!(scopes_of("GetObject"), [Scope::Read]);
        assert_eq!(scopes_of("PutObject"), [Scope::Write]);
        let id = new_key_id();
        assert!(id.len() == 20 && id.starts_with("RASA"));
        assert_eq!(new_secret().len(), 40);
    }
}
