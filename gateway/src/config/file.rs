//! The configuration file (`--config rasa.toml`): the gateway's flags as TOML keys.
//!
//! The flags — clap's definition of [`Args`] — are the one description of every option:
//! a key is a flag's long name with `_` for `-`, in the section its help heading names
//! (`--disk-size` is `disk_size` in `[disk]`, `--fabric-provider` is `fabric_provider` in
//! `[fast_path]`). A file value goes through the flag's own parser and checks, so
//! `memory = "4GiB"` means exactly what `--memory 4GiB` does; what a flag or a `RASA_*`
//! variable sets wins over the file. The example, `config show` and the reference table
//! ([`super::describe`]) are drawn from the same definition.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches};

use super::Args;

/// Largest configuration file read (a complete one is about 12 KiB).
const MAX_FILE: u64 = 1 << 20;

/// One option of the file: a flag, its section and key.
#[derive(Debug, Clone)]
pub struct Opt {
    /// The section (`memory`, `fast_path`, …): the flag's help heading in snake case.
    pub section: String,
    /// The key in that section: the flag's long name in snake case.
    pub key: String,
    /// The flag itself (its parser, default, variable and help).
    pub arg: clap::Arg,
}

impl Opt {
    /// Whether the option is a switch (`true`/`false` in the file, `--flag` on the line).
    pub fn is_switch(&self) -> bool {
        matches!(self.arg.get_action(), ArgAction::SetTrue)
    }

    /// Whether the option may be given several times (a TOML array in the file).
    pub fn is_list(&self) -> bool {
        matches!(self.arg.get_action(), ArgAction::Append)
    }

    /// `--long-name`.
    pub fn flag(&self) -> String {
        format!("--{}", self.arg.get_long().unwrap_or_default())
    }
}

/// Every option the file can hold, by section, in the order `--help` lists them: the
/// visible flags with a help heading (the hidden test hooks and `--config` have none).
pub fn sections() -> Vec<(String, Vec<Opt>)> {
    let cmd = Args::command();
    let mut out: Vec<(String, Vec<Opt>)> = Vec::new();
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let (Some(heading), Some(long)) = (a.get_help_heading(), a.get_long()) else {
            continue;
        };
        let opt = Opt {
            section: heading.to_lowercase().replace(' ', "_"),
            key: long.replace('-', "_"),
            arg: a.clone(),
        };
        match out.iter_mut().find(|(s, _)| *s == opt.section) {
            Some((_, opts)) => opts.push(opt),
            None => out.push((opt.section.clone(), vec![opt])),
        }
    }
    out
}

/// Every option of [`sections`], one after the other.
pub fn options() -> Vec<Opt> {
    sections().into_iter().flat_map(|(_, opts)| opts).collect()
}

/// The command line parsed with the file it names folded in.
#[derive(Debug)]
pub struct Loaded {
    /// The effective arguments.
    pub args: Args,
    /// clap's matches, for where each value came from.
    pub matches: ArgMatches,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// Ids of the arguments whose value is the file's.
    pub from_file: BTreeSet<String>,
}

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The command line is wrong (clap prints it, with usage, and exits 2).
    Line(clap::Error),
    /// The file is wrong: one line per problem, each naming the file and line.
    File(Problems),
}

/// Every problem of a configuration file, one line each naming the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems(pub Vec<String>);

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for Problems {}

/// Why a value in the configuration file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A table where a value belongs.
    #[error("a value is expected, not a table")]
    Table,
    /// A switch given something other than a boolean.
    #[error("give true or false")]
    Bool,
    /// A list for a flag that takes one value.
    #[error("takes one value, not a list")]
    List,
    /// Neither a string nor a whole number.
    #[error("give a string or a whole number (as {0} takes)")]
    Scalar(String),
    /// The flag's own parser refused it (clap's reason, on one line).
    #[error("{0}")]
    Parser(String),
}

/// Why `config check` failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file, or the command line around it, does not load.
    #[error("{}: {reason}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// clap's reason.
        reason: String,
    },
    /// The file's problems.
    #[error(transparent)]
    File(#[from] Problems),
    /// The values, taken together, are refused.
    #[error("{}: {source}", path.display())]
    Setting {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::setting::SettingError,
    },
}

/// Parses `argv` (the program name first) and the configuration file it or `RASA_CONFIG`
/// names: file values apply to the options neither a flag nor a variable set.
pub fn load(argv: Vec<OsString>) -> Result<Loaded, LoadError> {
    // A first pass only to learn which options the line and the environment set (and the
    // file's name): constraints such as "--s3-endpoint requires --origin" may be met by
    // the file, so they are checked in the second pass, with everything in.
    let first = Args::command()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
        .map_err(LoadError::Line)?;
    let Some(file) = first.get_one::<PathBuf>("config").cloned() else {
        return finish(argv, None, BTreeSet::new());
    };
    let settings = read(&file).map_err(LoadError::File)?;
    let mut merged: Vec<OsString> = argv.iter().take(1).cloned().collect();
    let mut from_file = BTreeSet::new();
    for s in settings {
        let id = s.opt.arg.get_id().as_str().to_owned();
        if matches!(
            first.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        for value in &s.values {
            match value {
                None => merged.push(s.opt.flag().into()),
                Some(v) => merged.push(format!("{}={v}", s.opt.flag()).into()),
            }
        }
        from_file.insert(id);
    }
    merged.extend(argv.into_iter().skip(1));
    finish(merged, Some(file), from_file)
}

fn finish(
    argv: Vec<OsString>,
    file: Option<PathBuf>,
    from_file: BTreeSet<String>,
) -> Result<Loaded, LoadError> {
    let matches = Args::command()
        .try_get_matches_from(argv)
        .map_err(LoadError::Line)?;
    let args = Args::from_arg_matches(&matches).map_err(LoadError::Line)?;
    Ok(Loaded {
        args,
        matches,
        file,
        from_file,
    })
}

/// One key of a file: its option and what to put on the line (`None`: the bare switch).
struct Setting {
    opt: Opt,
    values: Vec<Option<String>>,
}

/// Reads and checks a configuration file: every problem in it, one line each.
fn read(path: &Path) -> Result<Vec<Setting>, Problems> {
    let name = path.display();
    let text = read_text(path).map_err(|e| Problems(vec![format!("{name}: {e}")]))?;
    let doc = toml_edit::Document::parse(text.as_str()).map_err(|e| {
        let line = line_of(&text, e.span());
        Problems(vec![format!("{name}:{line}: {}", e.message())])
    })?;
    let opts = options();
    let mut problems = Vec::new();
    let mut settings = Vec::new();
    for (section, item) in doc.as_table().iter() {
        let line = line_of(&text, item.span());
        let Some(table) = item.as_table_like() else {
            problems.push(match opts.iter().find(|o| o.key == section) {
                Some(o) => format!("{name}:{line}: `{section}` belongs in [{}]", o.section),
                None => format!(
                    "{name}:{line}: `{section}` is not a section{}",
                    nearest_section(section, &opts)
                ),
            });
            continue;
        };
        if !opts.iter().any(|o| o.section == section) {
            problems.push(format!(
                "{name}:{line}: [{section}] is not a section{}",
                nearest_section(section, &opts)
            ));
            continue;
        }
        for (key, value) in table.iter() {
            let line = line_of(&text, value.span());
            let Some(opt) = opts.iter().find(|o| o.section == section && o.key == key) else {
                problems.push(format!(
                    "{name}:{line}: {}",
                    unknown_key(section, key, &opts)
                ));
                continue;
            };
            match values_of(opt, value) {
                Ok(values) => settings.push(Setting {
                    opt: opt.clone(),
                    values,
                }),
                Err(why) => problems.push(format!("{name}:{line}: {section}.{key}: {why}")),
            }
        }
    }
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(Problems(problems))
    }
}

fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_FILE + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE} bytes"
        )));
    }
    Ok(text)
}

/// The values `item` gives `opt`, each checked by the flag's own parser.
fn values_of(opt: &Opt, item: &toml_edit::Item) -> Result<Vec<Option<String>>, ValueError> {
    let Some(value) = item.as_value() else {
        return Err(ValueError::Table);
    };
    if opt.is_switch() {
        return match value.as_bool() {
            Some(true) => Ok(vec![None]),
            Some(false) => Ok(vec![]),
            None => Err(ValueError::Bool),
        };
    }
    let scalars: Vec<&toml_edit::Value> = match value.as_array() {
        Some(list) if opt.is_list() => list.iter().collect(),
        Some(_) => return Err(ValueError::List),
        None => vec![value],
    };
    let mut out = Vec::with_capacity(scalars.len());
    for v in scalars {
        let text = match v {
            toml_edit::Value::String(s) => s.value().clone(),
            toml_edit::Value::Integer(i) => i.value().to_string(),
            _ => return Err(ValueError::Scalar(opt.flag())),
        };
        check_value(opt, &text)?;
        out.push(Some(text));
    }
    Ok(out)
}

/// Runs the flag's own parser (with its checks and possible values) on `text`, alone: the
/// constraints between flags are checked once the whole configuration is in.
fn check_value(opt: &Opt, text: &str) -> Result<(), ValueError> {
    let alone = clap::Arg::new("value")
        .value_parser(opt.arg.get_value_parser().clone())
        .allow_hyphen_values(true)
        .action(ArgAction::Set);
    clap::Command::new("rasa-gateway")
        .arg(alone)
        .try_get_matches_from(["rasa-gateway", text])
        .map(drop)
        .map_err(|e| ValueError::Parser(clap_reason(&e)))
}

/// clap's message in one line: without its `error: ` prefix, the placeholder name of the
/// lone value and the usage lines, with the possible values.
fn clap_reason(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or_default();
    let mut why = first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .replace(" for '[value]'", "");
    if let Some(values) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("[possible values: "))
    {
        why.push_str(&format!(" (possible values: {}", values.replace(']', ")")));
    }
    why
}

fn unknown_key(section: &str, key: &str, opts: &[Opt]) -> String {
    if let Some(o) = opts.iter().find(|o| o.key == key) {
        return format!("`{key}` belongs in [{}], not [{section}]", o.section);
    }
    let near = opts
        .iter()
        .map(|o| (distance(key, &o.key), o))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, o)| *d <= o.key.len().max(3) / 3 + 1);
    match near {
        Some((_, o)) => format!(
            "unknown key `{key}` in [{section}]: did you mean `{}` in [{}]?",
            o.key, o.section
        ),
        None => format!("unknown key `{key}` in [{section}]"),
    }
}

fn nearest_section(section: &str, opts: &[Opt]) -> String {
    let names: BTreeSet<&str> = opts.iter().map(|o| o.section.as_str()).collect();
    let near = names
        .iter()
        .min_by_key(|n| distance(section, n))
        .filter(|n| distance(section, n) <= 2);
    match near {
        Some(n) => format!(": did you mean [{n}]?"),
        None => format!(
            " (sections: {})",
            names.into_iter().collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Edit distance (insertions, deletions, substitutions) between two short names.
pub(super) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The line (from 1) where `span` starts; 0 when the parser kept no span.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    let Some(span) = span else { return 0 };
    1 + text.as_bytes()[..span.start.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

/// `config check FILE`: the file read as the gateway would start with it (in this
/// environment), and the values checked together as at start.
pub fn check(path: &Path) -> Result<(), CheckError> {
    let argv = vec![
        OsString::from("rasa-gateway"),
        OsString::from("--config"),
        path.as_os_str().to_owned(),
    ];
    let loaded = load(argv).map_err(|e| match e {
        LoadError::Line(e) => CheckError::Line {
            path: path.to_owned(),
            reason: clap_reason(&e),
        },
        LoadError::File(why) => CheckError::File(why),
    })?;
    loaded
        .args
        .validate()
        .map_err(|source| CheckError::Setting {
            path: path.to_owned(),
            source,
        })
}
