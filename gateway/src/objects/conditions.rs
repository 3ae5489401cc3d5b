//! Conditional requests, evaluated once for both fronts in RFC 9110 §13.2.2's order: each
//! front parses its wire form into [`Conditions`] (HTTP headers, s3s's inputs) and maps
//! the [`Outcome`] or the refusal to its own (`304`/`412` problem documents; S3's
//! `NotModified`, `PreconditionFailed`, `NoSuchKey`).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::store::StoreError;

/// One entity tag of a condition: its opaque value (without quotes) and whether it is
/// weak (`W/"…"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The value between the quotes.
    pub opaque: String,
    /// `W/`: matches only by weak comparison (If-None-Match), never If-Match.
    pub weak: bool,
}

/// `*` or a list of entity tags (`If-Match`, `If-None-Match`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tags {
    /// `*`: any current version.
    Any,
    /// These tags.
    List(Vec<Tag>),
}

impl Tags {
    /// Strong comparison (`If-Match`): a weak tag never matches.
    fn strong_match(&self, etag: &str) -> bool {
        match self {
            Tags::Any => true,
            Tags::List(tags) => tags.iter().any(|t| !t.weak && t.opaque == etag),
        }
    }

    /// Weak comparison (`If-None-Match`): the opaque values alone.
    fn weak_match(&self, etag: &str) -> bool {
        match self {
            Tags::Any => true,
            Tags::List(tags) => tags.iter().any(|t| t.opaque == etag),
        }
    }
}

/// What a request makes conditional on the key's current version.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// `If-Match`.
    pub if_match: Option<Tags>,
    /// `If-None-Match`.
    pub if_none_match: Option<Tags>,
    /// `If-Modified-Since` (reads only).
    pub if_modified_since: Option<SystemTime>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<SystemTime>,
}

/// What a version is compared by: its entity tag as the front shows it (unquoted) and when
/// it was made.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// The entity tag, without quotes.
    pub etag: &'a str,
    /// When the version was made (compared to the second, as HTTP dates are).
    pub modified: SystemTime,
}

/// What evaluating the conditions decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Go on with the request.
    Proceed,
    /// Answer "not modified" (reads only).
    NotModified,
}

impl Conditions {
    /// Whether the request carries no condition.
    pub fn is_empty(&self) -> bool {
        self.if_match.is_none()
            && self.if_none_match.is_none()
            && self.if_modified_since.is_none()
            && self.if_unmodified_since.is_none()
    }

    /// Evaluates against the current version (`None`: the key has none). `read` is true for
    /// GET and HEAD, where a matching `If-None-Match` (or an unmodified
    /// `If-Modified-Since`) means "not modified" rather than a failure. An `If-Match` on a
    /// key without a version is [`StoreError::NoCurrentVersion`]; any other condition not
    /// met, [`StoreError::PreconditionFailed`].
    pub fn evaluate(&self, current: Option<Validators>, read: bool) -> Result<Outcome, StoreError> {
        let failed = |why: String| Err(StoreError::PreconditionFailed(why));
        if let Some(im) = &self.if_match {
            match current {
                None => {
                    return Err(StoreError::NoCurrentVersion(
                        "If-Match: the key does not exist".into(),
                    ))
                }
                Some(v) if !im.strong_match(v.etag) => {
                    return failed(format!("If-Match: the current ETag is {:?}", v.etag))
                }
                Some(_) => {}
            }
        } else if let (Some(t), Some(v)) = (self.if_unmodified_since, current) {
            if secs(v.modified) > secs(t) {
                return failed("the object was modified after If-Unmodified-Since".into());
            }
        }
        if let Some(inm) = &self.if_none_match {
            return match current {
                Some(v) if inm.weak_match(v.etag) && read => Ok(Outcome::NotModified),
                Some(v) if inm.weak_match(v.etag) => match inm {
                    Tags::Any => failed("the key exists (If-None-Match: *)".into()),
                    Tags::List(_) => {
                        failed(format!("If-None-Match: the current ETag is {:?}", v.etag))
                    }
                },
                _ => Ok(Outcome::Proceed),
            };
        }
        match (read, self.if_modified_since, current) {
            (true, Some(t), Some(v)) if secs(v.modified) <= secs(t) => Ok(Outcome::NotModified),
            _ => Ok(Outcome::Proceed),
        }
    }
}

/// Whole seconds since the epoch (HTTP dates have no finer grain).
fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tag(s: &str, weak: bool) -> Tags {
        Tags::List(vec![Tag {
            opaque: s.into(),
            weak,
        }])
    }

    #[test]
    fn rfc_9110_order_and_comparisons() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let v = Some(Validators {
            etag: "abc",
            modified: t0 + Duration::from_millis(700),
        });
        fn c(f: impl FnOnce(&mut Conditions)) -> Conditions {
            let mut c = Conditions::default();
            f(&mut c);
            c
        }
        let ok = Some(Outcome::Proceed);
        let nm = Some(Outcome::NotModified);
        assert_eq!(Conditions::default().evaluate(v, true).ok(), ok);
        assert_eq!(
            c(|c| c.if_match = Some(tag("abc", false)))
                .evaluate(v, false)
                .ok(),
            ok
        );
        // A weak tag never passes If-Match; it does match If-None-Match.
        assert!(c(|c| c.if_match = Some(tag("abc", true)))
            .evaluate(v, false)
            .is_err());
        assert_eq!(
            c(|c| c.if_none_match = Some(tag("abc", true)))
                .evaluate(v, true)
                .ok(),
            nm
        );
        assert!(matches!(
            c(|c| c.if_match = Some(Tags::Any)).evaluate(None, false),
            Err(StoreError::NoCurrentVersion(_))
        ));
        assert!(matches!(
            c(|c| c.if_none_match = Some(Tags::Any)).evaluate(v, false),
            Err(StoreError::PreconditionFailed(_))
        ));
        assert_eq!(
            c(|c| c.if_none_match = Some(Tags::Any))
                .evaluate(None, false)
                .ok(),
            ok
        );
        // Dates compare to the second; If-None-Match overrides If-Modified-Since.
        assert_eq!(
            c(|c| c.if_modified_since = Some(t0)).evaluate(v, true).ok(),
            nm
        );
        assert_eq!(
            c(|c| c.if_modified_since = Some(t0))
                .evaluate(v, false)
                .ok(),
            ok
        );
        let both = c(|c| {
            c.if_modified_since = Some(t0);
            c.if_none_match = Some(tag("other", false));
        });
        assert_eq!(both.evaluate(v, true).ok(), ok);
        assert_eq!(
            c(|c| c.if_unmodified_since = Some(t0))
                .evaluate(v, false)
                .ok(),
            ok
        );
        let before = t0 - Duration::from_secs(1);
        assert!(c(|c| c.if_unmodified_since = Some(before))
            .evaluate(v, true)
            .is_err());
        // If-Match present: If-Unmodified-Since is not consulted.
        let im = c(|c| {
            c.if_match = Some(tag("abc", false));
            c.if_unmodified_since = Some(before);
        });
        assert_eq!(im.evaluate(v, true).ok(), ok);
    }
}
