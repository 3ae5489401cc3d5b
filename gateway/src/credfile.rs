//! Files that hold credentials (the token file, the S3 credentials file): written only with
//! mode 0600, rewritten through a temporary file and a rename (a gateway reloading
//! meanwhile reads the old or the new file, never half of one), and a warning when one is
//! readable by other users. Their format, one entry a line, is read by [`entries`] (the
//! namespaces file's too).

use std::io::Write;
use std::path::{Path, PathBuf};

/// What is wrong with a file of one entry a line, or with reading or writing it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be read, written or replaced.
    #[error("cannot {doing} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`, `rewrite`).
        doing: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An error in the file `path`, a `what` (e.g. `token file`; may be empty).
    #[error("{what}{}{}: {source}", if what.is_empty() { "" } else { " " }, path.display())]
    In {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error in it.
        #[source]
        source: Box<FileError>,
    },
    /// A line without the fields its form has.
    #[error("line {line}: expected '{form}', found {found} fields")]
    Fields {
        /// The line number.
        line: usize,
        /// The form, e.g. `NAME QUOTA`.
        form: &'static str,
        /// How many fields it has.
        found: usize,
    },
    /// A line whose fields are wrong (the problem is the file's own type of error).
    #[error("line {line}: {problem}")]
    Line {
        /// The line number.
        line: usize,
        /// What is wrong.
        problem: Box<dyn std::error::Error + Send + Sync>,
    },
    /// What the file holds as a whole is wrong (no entries where one is needed, say).
    #[error("{0}")]
    Whole(Box<dyn std::error::Error + Send + Sync>),
    /// No entry has that name.
    #[error("no {what} named '{name}'")]
    NoSuchName {
        /// What the entries are.
        what: &'static str,
        /// The name asked for.
        name: String,
    },
    /// An entry with that name is there already.
    #[error("{} already has a {what} named '{name}'", path.display())]
    NameTaken {
        /// The file.
        path: PathBuf,
        /// What the entries are.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// Other users may read or write it, and it holds secrets in the clear.
    #[error("{what}: {} is readable or writable by other users (mode {mode:04o}); run chmod 600 on it; it holds secret keys in the clear, so it is not used", path.display())]
    Loose {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

impl FileError {
    /// `self`, as an error in `path`, a `what`.
    pub fn in_file(self, what: &'static str, path: &Path) -> Self {
        Self::In {
            what,
            path: path.to_owned(),
            source: Box::new(self),
        }
    }

    /// A problem with line `line`.
    pub fn line(line: usize, problem: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Line {
            line,
            problem: Box::new(problem),
        }
    }

    /// Doing `doing` to `path` failed with `source`.
    pub fn io(doing: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            doing,
            path: path.to_owned(),
            source,
        }
    }
}

/// The text of `path` (the error names it).
pub fn read(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|e| FileError::io("read", path, e))
}

/// The entries of a file of one entry a line, `N` fields each, separated by white space
/// (blank lines and `#` comments skipped): each with its line number, or an error naming
/// the line and the expected `form` (e.g. `NAME QUOTA`).
pub fn entries<'a, const N: usize>(
    text: &'a str,
    form: &'static str,
) -> impl Iterator<Item = Result<(usize, [&'a str; N]), FileError>> + 'a {
    lines(text).map(move |(n, fields)| {
        let found = fields.len();
        <[&str; N]>::try_from(fields)
            .map(|f| (n, f))
            .map_err(|_| FileError::Fields {
                line: n,
                form,
                found,
            })
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
pub fn append_line(file: &Path, line: &str) -> Result<(), FileError> {
    let mut f = private_options()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| FileError::io("open", file, e))?;
    writeln!(f, "{line}").map_err(|e| FileError::io("write", file, e))
}

/// Replaces `file`'s contents with `text` (mode 0600) through a temporary file and a rename.
pub fn rewrite(file: &Path, text: &str) -> Result<(), FileError> {
    let tmp = file.with_extension("rasa-tmp");
    private_options()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| FileError::io("rewrite", file, e))
}

/// `text` without the lines whose first field is `name` (comments and other lines kept);
/// an error naming `what` when there is none.
pub fn without_name(text: &str, name: &str, what: &'static str) -> Result<String, FileError> {
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
        Err(FileError::NoSuchName {
            what,
            name: name.to_owned(),
        })
    }
}

/// The permission bits of `file` when users other than its owner can read or write it
/// (mode 0644, say).
pub fn loose_mode(file: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// A warning when `file` can be read or written by users other than its owner (mode
/// 0644, say): `chmod 600` it.
pub fn loose_permissions(file: &Path) -> Option<String> {
    loose_mode(file).map(|mode| {
        format!(
            "{} is readable or writable by other users (mode {mode:04o}); run chmod 600 on it",
            file.display()
        )
    })
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
