//! Byte ranges (RFC 9110 §14): what a `Range` value asks of an object of a given length.
//! Both fronts and the object service resolve ranges here; validators (`If-Range`) are the
//! HTTP front's.

use http_range_header::{parse_range_header, EndPosition, RangeUnsatisfiableError, StartPosition};

/// What a `Range` header asks of an object of a given length.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Serve everything (no range, an ignorable one, or several ranges).
    Full,
    /// Serve `start..=end`.
    Partial(u64, u64),
    /// Answer 416.
    Unsatisfiable,
}

/// Resolves a `Range` value (`bytes=…`) against an object of `len` bytes. A malformed or
/// non-`bytes` range is ignored (the whole object); a suffix longer than the object means
/// all of it; several ranges are answered with the whole object (allowed by §14.2).
pub fn resolve(raw: &str, len: u64) -> RangeOutcome {
    let parsed = match parse_range_header(raw.trim()) {
        Ok(p) => p,
        // `bytes=-0` is well-formed but selects nothing.
        Err(RangeUnsatisfiableError::ZeroSuffix) => return RangeOutcome::Unsatisfiable,
        Err(_) => return RangeOutcome::Full,
    };
    let [range] = parsed.ranges.as_slice() else {
        return RangeOutcome::Full;
    };
    match (range.start, range.end) {
        (StartPosition::Index(start), end) => {
            let last = match end {
                EndPosition::Index(e) if e < start => return RangeOutcome::Full,
                EndPosition::Index(e) => e,
                EndPosition::LastByte => u64::MAX,
            };
            if start >= len {
                return RangeOutcome::Unsatisfiable;
            }
            RangeOutcome::Partial(start, last.min(len - 1))
        }
        (StartPosition::FromLast(n), _) => {
            if len == 0 {
                return RangeOutcome::Unsatisfiable;
            }
            RangeOutcome::Partial(len.saturating_sub(n), len - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::*;
    use super::*;

    #[test]
    fn ranges_follow_rfc_9110() {
        let cases = [
            ("bytes=0-0", 10, Partial(0, 0)),
            ("bytes=-10", 100, Partial(90, 99)),
            ("bytes=-10", 4, Partial(0, 3)),
            ("bytes=5-", 10, Partial(5, 9)),
            ("bytes=5-1000", 10, Partial(5, 9)),
            ("bytes=10-", 10, Unsatisfiable),
            ("bytes=10-20", 10, Unsatisfiable),
            ("bytes=0-0", 0, Unsatisfiable),
            ("bytes=-1", 0, Unsatisfiable),
            ("bytes=-0", 10, Unsatisfiable),
            ("bytes=0-1,4-5", 10, Full),
            ("bytes=5-3", 10, Full),
            ("items=0-1", 10, Full),
            ("bytes=abc", 10, Full),
            ("bytes=", 10, Full),
        ];
        for (raw, len, want) in cases {
            assert_eq!(resolve(raw, len), want, "{raw} of {len}");
        }
    }
}
