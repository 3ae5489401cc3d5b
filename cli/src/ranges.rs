//! `rasa get --range`: byte ranges written as HTTP writes them.

use std::ops::Range;
use std::str::FromStr;

/// A range as `--range` takes it: `START-END` (inclusive, as in HTTP), `START-` (to the
/// end) or `-N` (the last N bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ByteRange {
    /// `START-END` or `START-`.
    From { start: u64, last: Option<u64> },
    /// `-N`.
    Suffix(u64),
}

impl FromStr for ByteRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?} is not a range: write START-END, START- or -N (bytes, END included)");
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let num = |t: &str| t.trim().parse::<u64>().map_err(|_| bad());
        match (a.trim().is_empty(), b.trim().is_empty()) {
            (true, false) => Ok(Self::Suffix(num(b)?)),
            (false, true) => Ok(Self::From {
                start: num(a)?,
                last: None,
            }),
            (false, false) => {
                let (start, last) = (num(a)?, num(b)?);
                if last < start {
                    return Err(format!("{s:?}: the range ends before it starts"));
                }
                Ok(Self::From {
                    start,
                    last: Some(last),
                })
            }
            (true, true) => Err(bad()),
        }
    }
}

impl ByteRange {
    /// Whether the value's length is needed to place the range.
    pub(crate) fn needs_length(self) -> bool {
        matches!(self, Self::Suffix(_))
    }

    /// The half-open range for a value of `len` bytes (`len` is only used by suffixes;
    /// an end past the value is cut by the read, as HTTP does).
    pub(crate) fn bounds(self, len: u64) -> Range<u64> {
        match self {
            Self::From { start, last } => start..last.map_or(u64::MAX, |l| l.saturating_add(1)),
            Self::Suffix(n) => len.saturating_sub(n)..len,
        }
    }
}

/// `rasa get KEY --range R`: the bytes, to the output or standard output.
pub(crate) async fn get(
    client: &rasa_client::Client,
    key: &str,
    range: ByteRange,
    output: Option<&std::path::Path>,
    json: bool,
) -> Result<(), String> {
    let len = if range.needs_length() {
        client
            .head(key)
            .await
            .map_err(|e| crate::with_causes(&e))?
            .length
    } else {
        0
    };
    let r = range.bounds(len);
    let obj = client
        .get_range(key, r.clone())
        .await
        .map_err(|e| crate::with_causes(&e))?;
    match output {
        Some(path) => std::fs::write(path, &obj.bytes)
            .map_err(|e| format!("writing {}: {e}", path.display()))?,
        None if json => {}
        None => std::io::Write::write_all(&mut std::io::stdout(), &obj.bytes)
            .map_err(|e| format!("writing standard output: {e}"))?,
    }
    if json {
        crate::print_json(&serde_json::json!({
            "key": key,
            "version": obj.version,
            "start": r.start,
            "length": obj.bytes.len(),
            "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&obj.bytes)),
            "path": obj.path.as_str(),
            "provider": crate::provider_of(client, obj.path),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ByteRange;

    #[test]
    fn ranges_parse_as_http_writes_them() {
        let r = |s: &str| s.parse::<ByteRange>().map(|r| r.bounds(100));
        assert_eq!(r("0-9"), Ok(0..10));
        assert_eq!(r("90-"), Ok(90..u64::MAX));
        assert_eq!(r("-10"), Ok(90..100));
        assert_eq!(r("-1000"), Ok(0..100));
        assert_eq!(r("5-5"), Ok(5..6));
        for bad in ["", "-", "5", "a-b", "9-3", "1-2-3"] {
            assert!(r(bad).is_err(), "{bad:?}");
        }
    }
}
