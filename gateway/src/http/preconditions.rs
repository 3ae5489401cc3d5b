//! Conditional requests (RFC 9110 §13) and byte ranges (RFC 9110 §14).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use headers::{HeaderMapExt, IfModifiedSince, IfRange, IfUnmodifiedSince, LastModified};

use rasa_fastpath::frame::FRAME_FORMAT;
use rasa_openapi::{FRAME_CHECKSUM_HEADER, FRAME_FORMAT_HEADER, VERSION_HEADER};

use super::ApiError;
pub use crate::objects::conditions::Outcome;
use crate::objects::conditions::{Conditions, Tag, Tags, Validators};
pub use crate::range::RangeOutcome;
use crate::store::{StoreError, StoredVersion};

/// The version header's name.
pub(super) const VERSION: HeaderName = HeaderName::from_static(VERSION_HEADER);
const FRAME_CHECKSUM: HeaderName = HeaderName::from_static(FRAME_CHECKSUM_HEADER);
const FORMAT_NAME: HeaderName = HeaderName::from_static(FRAME_FORMAT_HEADER);

/// `Last-Modified` of a version: its creation time, truncated to the second as HTTP dates are.
pub fn last_modified(v: &StoredVersion) -> SystemTime {
    let secs = v
        .created()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The conditional headers of a request, parsed (malformed ones are refused with 400) into
/// the object service's [`Conditions`], which evaluates them for both fronts.
#[derive(Debug, Default)]
pub struct Preconditions(Conditions);

fn typed<H: headers::Header>(h: &HeaderMap) -> Result<Option<H>, ApiError> {
    h.typed_try_get::<H>()
        .map_err(|_| ApiError::InvalidRequest(format!("malformed {} header", H::name())))
}

/// `If-Match`/`If-None-Match` as a regular expression, for the OpenAPI document: `*`, or
/// a comma-separated list of quoted entity tags (optionally weak, `W/"…"`) whose characters
/// are RFC 9110's `etagc` in visible ASCII. `entity_tags` is the
/// rule; a test checks this pattern agrees with them.
pub(crate) const ENTITY_TAGS_PATTERN: &str =
    r#"^[ \t]*(?:\*|(?:W/)?"[!#-~]*"(?:[ \t]*,[ \t]*(?:W/)?"[!#-~]*")*)[ \t]*$"#;

/// The entity tags of every `name` header (`*` or `"a", W/"b"`; several lines are one
/// list). Strict: an unquoted tag is a client bug worth a clear 400.
fn tags_of(h: &HeaderMap, name: header::HeaderName) -> Result<Option<Tags>, ApiError> {
    let mut all: Option<Tags> = None;
    for value in h.get_all(&name) {
        let tags = value.to_str().ok().and_then(entity_tags).ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "malformed {name} header: expected * or a list of quoted entity tags"
            ))
        })?;
        all = Some(match (all, tags) {
            (Some(Tags::List(mut a)), Tags::List(b)) => {
                a.extend(b);
                Tags::List(a)
            }
            (Some(Tags::Any), _) | (_, Tags::Any) => Tags::Any,
            (None, tags) => tags,
        });
    }
    Ok(all)
}

#[cfg(test)]
fn is_entity_tag_list(s: &str) -> bool {
    entity_tags(s).is_some()
}

/// `*`, or `#entity-tag` (RFC 9110 §8.8.3): quoted tags, optionally weak (`W/`), whose
/// characters are `etagc` in visible ASCII (commas included: `"a,b"` is one tag), separated
/// by commas with optional spaces and tabs around them. `None` when malformed.
fn entity_tags(s: &str) -> Option<Tags> {
    let s = s.trim_matches([' ', '\t']);
    if s == "*" {
        return Some(Tags::Any);
    }
    let mut tags = Vec::new();
    let b = s.as_bytes();
    let ows = |i: &mut usize| {
        while matches!(b.get(*i), Some(b' ' | b'\t')) {
            *i += 1;
        }
    };
    let mut i = 0;
    loop {
        let weak = b[i..].starts_with(b"W/");
        if weak {
            i += 2;
        }
        if b.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let start = i;
        while let Some(&c) = b.get(i).filter(|c| **c != b'"') {
            if !(c == 0x21 || (0x23..=0x7e).contains(&c)) {
                return None;
            }
            i += 1;
        }
        if b.get(i) != Some(&b'"') {
            return None;
        }
        tags.push(Tag {
            opaque: s[start..i].to_owned(),
            weak,
        });
        i += 1;
        ows(&mut i);
        match b.get(i) {
            None => return Some(Tags::List(tags)),
            Some(b',') => {
                i += 1;
                ows(&mut i);
            }
            Some(_) => return None,
        }
    }
}

impl Preconditions {
    /// Reads the conditional headers.
    pub fn from_headers(h: &HeaderMap) -> Result<Self, ApiError> {
        Ok(Self(Conditions {
            if_match: tags_of(h, header::IF_MATCH)?,
            if_none_match: tags_of(h, header::IF_NONE_MATCH)?,
            if_modified_since: typed::<IfModifiedSince>(h)?.map(SystemTime::from),
            if_unmodified_since: typed::<IfUnmodifiedSince>(h)?.map(SystemTime::from),
        }))
    }

    /// Whether no conditional header was sent.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Evaluates (RFC 9110 §13.2.2, in the object service) against the current version
    /// (`None` when the key has none). `read` is true for GET and HEAD, where a matching
    /// `If-None-Match` means 304 rather than 412.
    pub fn evaluate(
        &self,
        current: Option<&StoredVersion>,
        read: bool,
    ) -> Result<Outcome, StoreError> {
        // Most reads carry no condition: no entity tag to spell out for them.
        if self.is_empty() {
            return Ok(Outcome::Proceed);
        }
        let mut hex = [0u8; 64];
        let validators = current.map(|v| Validators {
            etag: hex_digits(&v.sha256(), &mut hex),
            modified: v.created(),
        });
        self.0.evaluate(validators, read)
    }
}

/// Resolves the request's `Range` for a version (GET only). Follows RFC 9110: a malformed
/// or non-`bytes` range is ignored; a stale `If-Range` means the whole object; a suffix
/// longer than the object means all of it. Several ranges are answered with the whole
/// object (allowed by §14.2; multipart bodies help no client of ours).
pub fn resolve_range(h: &HeaderMap, v: &StoredVersion) -> RangeOutcome {
    let Some(raw) = h.get(header::RANGE).and_then(|r| r.to_str().ok()) else {
        return RangeOutcome::Full;
    };
    if let Ok(Some(if_range)) = h.typed_try_get::<IfRange>() {
        let lm = LastModified::from(last_modified(v));
        let etag: headers::ETag = v
            .etag()
            .parse()
            .expect("a quoted hex digest is a valid entity tag");
        if if_range.is_modified(Some(&etag), Some(&lm)) {
            return RangeOutcome::Full;
        }
    }
    crate::range::resolve(raw, v.len())
}

pub(super) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("generated header values are visible ASCII")
}

/// `bytes` in lowercase hex, written into the start of `out` (twice as long, or more).
fn hex_digits<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let out = &mut out[..2 * bytes.len()];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    std::str::from_utf8(out).expect("hex digits are ASCII")
}

/// `bytes` in lowercase hex as a header value (quoted: an entity tag), built on the stack:
/// no string on the way (these go out with every read).
fn hex_hv(bytes: &[u8], quoted: bool) -> HeaderValue {
    let mut buf = [b'"'; 2 + 2 * 32];
    let q = usize::from(quoted);
    let n = hex_digits(bytes, &mut buf[q..]).len();
    HeaderValue::from_bytes(&buf[..n + 2 * q]).expect("hex digits and quotes are visible ASCII")
}

/// An HTTP date as a header value, spelled on the stack (it goes out with every read).
fn http_date(t: SystemTime) -> HeaderValue {
    /// An IMF-fixdate is 29 bytes: `Sun, 06 Nov 1994 08:49:37 GMT`.
    struct Spelled([u8; 29], usize);
    impl std::fmt::Write for Spelled {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let end = self.1 + s.len();
            self.0
                .get_mut(self.1..end)
                .ok_or(std::fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.1 = end;
            Ok(())
        }
    }
    let mut spelled = Spelled([0; 29], 0);
    std::fmt::write(
        &mut spelled,
        format_args!("{}", httpdate::HttpDate::from(t)),
    )
    .expect("an HTTP date is 29 bytes");
    HeaderValue::from_bytes(&spelled.0[..spelled.1]).expect("an HTTP date is visible ASCII")
}

/// Headers shared by 200, 206 and 304 answers.
pub(super) fn validators(h: &mut HeaderMap, v: &StoredVersion, pinned: bool) {
    /// The frame format's number as a header value, spelled once.
    static FORMAT: LazyLock<HeaderValue> = LazyLock::new(|| HeaderValue::from(FRAME_FORMAT));
    h.insert(header::ETAG, hex_hv(&v.sha256(), true));
    h.insert(header::LAST_MODIFIED, http_date(last_modified(v)));
    h.insert(VERSION, hex_hv(&v.version().0.to_be_bytes(), false));
    // What an HTTP reader checks the body against, at XXH3 speed.
    h.insert(FRAME_CHECKSUM, hex_hv(&v.checksum().to_be_bytes(), false));
    h.insert(FORMAT_NAME, FORMAT.clone());
    // A version id names bytes that never change; the bare key may move at any time.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if pinned {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_header_values_match_the_formatted_ones() {
        let digest: Vec<u8> = (0..32).map(|i| i * 7 + 3).collect();
        assert_eq!(
            hex_hv(&digest, true).to_str().unwrap(),
            format!("\"{}\"", hex::encode(&digest))
        );
        let n = 0x00ab_cdef_0123_4567_u64;
        assert_eq!(
            hex_hv(&n.to_be_bytes(), false).to_str().unwrap(),
            format!("{n:016x}")
        );
    }

    /// Entity-tag lists: mostly well-formed ones (quoted tags with commas, backslashes and
    /// quotes' neighbours inside, weak or not, odd spacing), plus raw noise.
    fn etag_lists() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let tag = ("(W/)?", "[!#-~,]{0,6}").prop_map(|(w, t)| format!("{w}\"{t}\""));
        let list = (
            "[ \t]{0,2}",
            proptest::collection::vec((tag, "[ \t]{0,2},[ \t]{0,2}"), 1..4),
            "[ \t]{0,2}",
        )
            .prop_map(|(head, tags, tail)| {
                let n = tags.len();
                let mut s = head;
                for (i, (t, sep)) in tags.into_iter().enumerate() {
                    s.push_str(&t);
                    if i + 1 < n {
                        s.push_str(&sep);
                    }
                }
                s + &tail
            });
        prop_oneof![list, r#"[ \t,"W/*a!#~\\\x7f]{0,12}"#]
    }

    proptest::proptest! {
        /// The pattern in the OpenAPI document accepts exactly what the server accepts.
        #[test]
        fn the_documented_entity_tag_pattern_is_the_servers_rule(s in etag_lists()) {
            let pattern = regex::Regex::new(ENTITY_TAGS_PATTERN).unwrap();
            let mut h = HeaderMap::new();
            let Ok(v) = axum::http::HeaderValue::from_str(&s) else { return Ok(()) };
            h.insert(header::IF_MATCH, v.clone());
            h.insert(header::IF_NONE_MATCH, v);
            let accepted = Preconditions::from_headers(&h).is_ok();
            proptest::prop_assert_eq!(pattern.is_match(&s), accepted, "{:?}", s);
        }
    }

    #[test]
    fn a_comma_inside_quotes_is_part_of_the_tag() {
        assert!(is_entity_tag_list(r#""a,b""#));
        assert!(is_entity_tag_list(r#"W/"a,b" ,"c""#));
        assert!(!is_entity_tag_list(r#""a",,"b""#));
        assert!(!is_entity_tag_list(r#""a" "b""#));
        assert!(!is_entity_tag_list("a"));
        assert!(!is_entity_tag_list(""));
    }
}
