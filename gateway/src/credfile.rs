//! Files that hold credentials (the token file, the S3 credentials file): written only with
//! mode 0600, rewritten through a temporary file and a rename (a gateway reloading
//! meanwhile reads the old or the new file, never half of one), and a warning when one is
//! readable by other users. Their format, one entry a line, is read by [`entries`] (the
//! namespaces file's too).

use std::io::Write;
use std::path::Path;

/// The entries of a file of one entry a line, `N` fields each, separated by white space
/// (blank lines and `#` comments skipped): each with its line number, or an error naming
/// the line and the expected `form` (e.g. `NAME QUOTA`).
pub fn entries<'a, const N: usize>(
    text: &'a str,
    form: &'a str,
) -> impl Iterator<Item = Result<(usize, [&'a str; N]), String>> + 'a {
    lines(text).map(move |(n, fields)| {
        let found = fields.len();
        <[&str; N]>::try_from(fields)
            .map(|f| (n, f))
            .map_err(|_| format!("line {n}: expected '{form}', found {found} fields"))
    })
}

/// The entries of a file of one entry a line, as [`entries`], with however many fields
/// each has.
pub fn lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(n, line)| {
        let line = line.split('#').next().unwrap_or_default().trim();
        (!line.is_empty()).then(|| (n + 1, line.split_whitespace().collect()))
    })
}

fn private_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Appends `line` to `file`, creating it with mode 0600 if missing.
pub fn append_line(file: &Path, line: &str) -> Result<(), String> {
    let mut f = private_options()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| format!("cannot open {}: {e}", file.display()))?;
    writeln!(f, "{line}").map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Replaces `file`'s contents with `text` (mode 0600) through a temporary file and a rename.
pub fn rewrite(file: &Path, text: &str) -> Result<(), String> {
    let tmp = file.with_extension("rasa-tmp");
    private_options()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| format!("cannot rewrite {}: {e}", file.display()))
}

/// `text` without the lines whose first field is `name` (comments and other lines kept);
/// an error naming `what` when there is none.
pub fn without_name(text: &str, name: &str, what: &str) -> Result<String, String> {
    let mut found = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let fields = line.split('#').next().unwrap_or_default();
        if fields.split_whitespace().next() == Some(name) {
            found = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if found {
        Ok(out)
    } else {
        Err(format!("no {what} named '{name}'"))
    }
}

/// A warning when `file` can be read or written by users other than its owner (mode
/// 0644, say): `chmod 600` it.
pub fn loose_permissions(file: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!(
                "{} is readable or writable by other users (mode {mode:04o}); run chmod 600 on it",
                file.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// Logs [`loose_permissions`] for `file`, if any, as a warning; returns whether it did.
pub fn warn_if_loose(file: &Path) -> bool {
    match loose_permissions(file) {
        Some(why) => {
            tracing::warn!("{why}");
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_private_and_loose_ones_are_noticed() {
        let dir = std::env::temp_dir().join(format!("rasa-credfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("creds");
        append_line(&f, "a read x").unwrap();
        append_line(&f, "b write y").unwrap();
        assert!(loose_permissions(&f).is_none());
        rewrite(
            &f,
            &without_name("a read x\nb write y\n", "a", "key").unwrap(),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "b write y\n");
        assert!(loose_permissions(&f).is_none(), "a rewrite stays 0600");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(loose_permissions(&f).unwrap().contains("0644"));
        }
        assert!(without_name("b write y\n", "c", "key").is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
