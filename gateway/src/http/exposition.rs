//! Reads back the Prometheus text exposition the gateway renders for `/metrics`, so
//! `/v1/stats` reports exactly the figures Prometheus scrapes (and costs the request path
//! nothing: no second recorder).
//!
//! Only what the gateway's own exporter writes is read: `name{label="value",...} number`
//! lines, comments skipped, label values with `\\`, `\"` and `\n` escapes.

/// One sample line: a series and its value.
#[derive(Debug, PartialEq)]
pub(crate) struct Line<'a> {
    /// The metric's name (for a histogram, with its `_bucket`, `_sum` or `_count`).
    pub name: &'a str,
    labels: &'a str,
    /// The value (`+Inf`, `-Inf` and `NaN` as Rust parses them).
    pub value: f64,
}

impl Line<'_> {
    /// The value of label `name`, unescaped; `""` when the line has no such label.
    pub fn label(&self, name: &str) -> String {
        labels(self.labels)
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    /// The value as a count (negative and not-a-number read as 0).
    pub fn count(&self) -> u64 {
        if self.value.is_finite() && self.value > 0.0 {
            self.value as u64
        } else {
            0
        }
    }
}

/// The sample lines of `text`; lines that do not parse are skipped.
pub(crate) fn parse(text: &str) -> impl Iterator<Item = Line<'_>> {
    text.lines().filter_map(line)
}

fn line(l: &str) -> Option<Line<'_>> {
    let l = l.trim();
    if l.is_empty() || l.starts_with('#') {
        return None;
    }
    let name_end = l.find(['{', ' '])?;
    let name = &l[..name_end];
    let (labels, rest) = if l[name_end..].starts_with('{') {
        let body = &l[name_end + 1..];
        let close = closing_brace(body)?;
        (&body[..close], &body[close + 1..])
    } else {
        ("", &l[name_end..])
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Line {
        name,
        labels,
        value,
    })
}

/// Where the `}` that ends a label set is, skipping braces inside quoted values.
fn closing_brace(body: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// The `key="value"` pairs of a label set, values unescaped.
fn labels(mut s: &str) -> impl Iterator<Item = (&str, String)> {
    std::iter::from_fn(move || {
        s = s.trim_start_matches([',', ' ']);
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        let rest = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        s = &rest[end + 1..];
        Some((key, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_and_values() {
        let text = "# TYPE a counter\na 3\nb{route=\"/v1/objects/{*key}\",method=\"GET\"} 2.5\n\n";
        let lines: Vec<_> = parse(text).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].name, lines[0].count()), ("a", 3));
        assert_eq!(lines[1].name, "b");
        assert_eq!(lines[1].label("route"), "/v1/objects/{*key}");
        assert_eq!(lines[1].label("method"), "GET");
        assert_eq!(lines[1].label("status"), "");
        assert_eq!(lines[1].value, 2.5);
    }

    #[test]
    fn unescapes_label_values_and_skips_broken_lines() {
        let text = "c{x=\"a\\\"}b\\\\\\n\",y=\"z\"} 1\nbroken{x=\"1\" 2\nnovalue\nd{} -4\n";
        let lines: Vec<_> = parse(text).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].label("x"), "a\"}b\\\n");
        assert_eq!(lines[0].label("y"), "z");
        assert_eq!(lines[1].count(), 0, "negative reads as 0");
    }

    #[test]
    fn reads_what_the_gateways_exporter_renders() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("test_t_total", "route" => "/x/{*key}", "status" => "200")
                .increment(7);
            metrics::gauge!("test_t_bytes").set(1024.0);
            metrics::histogram!("test_t_seconds").record(0.25);
        });
        let text = handle.render();
        let by = |n: &str| parse(&text).find(|l| l.name == n).map(|l| l.value);
        assert_eq!(by("test_t_total"), Some(7.0), "{text}");
        assert_eq!(by("test_t_bytes"), Some(1024.0), "{text}");
        assert_eq!(by("test_t_seconds_sum"), Some(0.25), "{text}");
        assert_eq!(by("test_t_seconds_count"), Some(1.0), "{text}");
        let l = parse(&text).find(|l| l.name == "test_t_total").unwrap();
        assert_eq!(l.label("route"), "/x/{*key}");
    }
}
