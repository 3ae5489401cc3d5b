//! The configuration written out: `config example` (a complete file), `config show` (the
//! effective one, with where each value came from) and the reference table of
//! `docs/configuration.md` — all drawn from the flags' definition ([`super::file::options`]).

use clap::parser::ValueSource;

use super::file::{sections, Loaded, Opt};

/// Example values for the options without a default (an example file shows them
/// commented out); a test keeps this list complete.
const EXAMPLES: &[(&str, &str)] = &[
    ("fabric_provider", "\"tcp;ofi_rxm\""),
    ("fabric_addr", "\"10.0.0.7\""),
    ("fabric_domain", "\"rdmap16s27-rdm\""),
    ("origin", "\"s3://bucket/prefix\""),
    ("s3_endpoint", "\"http://127.0.0.1:9000\""),
    ("write_policy", "\"write-through\""),
    ("namespaces", "\"/etc/rasa/namespaces\""),
    ("token_file", "\"/etc/rasa/tokens\""),
    ("tls_cert", "\"/etc/rasa/cert.pem\""),
    ("tls_key", "\"/etc/rasa/key.pem\""),
    ("max_connections", "4096"),
    ("allowed_host", "[\"cache.example.com\"]"),
    ("disk", "\"/var/lib/rasa\""),
    ("warm_memory", "\"512MiB\""),
    ("cluster", "\"etcd://10.0.0.2:2379,10.0.0.3:2379\""),
    ("node_id", "\"cache-a\""),
    ("advertise_url", "\"http://10.0.0.7:8080\""),
    ("cluster_ca_file", "\"/etc/rasa/cluster-ca.pem\""),
    ("s3_advertise_url", "\"http://10.0.0.7:9000\""),
    ("etcd_ca_file", "\"/etc/rasa/etcd-ca.pem\""),
    ("etcd_cert_file", "\"/etc/rasa/etcd-client.pem\""),
    ("etcd_key_file", "\"/etc/rasa/etcd-client-key.pem\""),
    ("etcd_user", "\"rasa\""),
    ("etcd_password_file", "\"/etc/rasa/etcd-password\""),
    ("cluster_secret_file", "\"/etc/rasa/cluster.secret\""),
    ("cluster_replicas", "[\"checkpoints/=3\"]"),
    ("cluster_replica_memory", "\"8GiB\""),
    ("s3_listen", "\"127.0.0.1:9000\""),
    ("s3_bucket", "[\"models=weights/\"]"),
    ("s3_domain", "[\"s3.example.com\"]"),
    ("s3_credentials_file", "\"/etc/rasa/s3-keys\""),
];

/// The example value of an option without a default.
pub(super) fn example_of(key: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// A complete configuration file: every option in its section with one line of meaning,
/// its flag and variable, and its default (options without one commented out, with an
/// example value). `config check` accepts it and the gateway starts with it.
pub fn example() -> String {
    let mut out = String::from(
        "# rasa-gateway configuration (rasa-gateway --config FILE).\n\
         # Each key is a flag's long name with '_' for '-'; flags and RASA_* variables\n\
         # override the file. Sizes: 64MiB, 1GB; durations: 250ms, 10s, 1h.\n",
    );
    for (section, opts) in sections() {
        out.push_str(&format!("\n[{section}]\n"));
        for opt in opts {
            out.push('\n');
            out.push_str(&comment(&one_line(&opt)));
            let mut origin = opt.flag();
            if let Some(env) = opt.arg.get_env() {
                origin.push_str(&format!(", {}", env.to_string_lossy()));
            }
            let values: Vec<String> = opt
                .arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_owned())
                .collect();
            if !values.is_empty() && !opt.is_switch() {
                origin.push_str(&format!("; one of {}", values.join(", ")));
            }
            out.push_str(&format!("# ({origin})\n"));
            match default_of(&opt) {
                Some(value) => out.push_str(&format!("{} = {value}\n", opt.key)),
                None => out.push_str(&format!(
                    "# {} = {}\n",
                    opt.key,
                    example_of(&opt.key).unwrap_or("\"\"")
                )),
            }
        }
    }
    out
}

/// The effective configuration as a file: every option set (by default, the file, a
/// variable or a flag), each with where its value came from; options not set commented
/// out. Values of secret options are masked.
pub fn show(loaded: &Loaded) -> String {
    let mut out = String::from("# The effective configuration of rasa-gateway");
    match &loaded.file {
        Some(file) => out.push_str(&format!(" (file {}).\n", file.display())),
        None => out.push_str(" (no configuration file).\n"),
    }
    for (section, opts) in sections() {
        out.push_str(&format!("\n[{section}]\n"));
        for opt in opts {
            let id = opt.arg.get_id().as_str();
            let from = match loaded.matches.value_source(id) {
                _ if loaded.from_file.contains(id) => "file".to_owned(),
                Some(ValueSource::CommandLine) => format!("flag {}", opt.flag()),
                Some(ValueSource::EnvVariable) => format!(
                    "variable {}",
                    opt.arg.get_env().unwrap_or_default().to_string_lossy()
                ),
                Some(ValueSource::DefaultValue) => "default".to_owned(),
                _ => {
                    out.push_str(&format!("# {} is not set\n", opt.key));
                    continue;
                }
            };
            let raw: Vec<String> = loaded
                .matches
                .get_raw(id)
                .into_iter()
                .flatten()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let value = if is_secret(&opt.key) {
                "\"********\"".to_owned()
            } else {
                let raw: Vec<String> = raw.iter().map(|v| without_url_credentials(v)).collect();
                toml_value(&opt, &raw)
            };
            out.push_str(&format!("{} = {value}  # {from}\n", opt.key));
        }
    }
    out
}

/// The reference table of every option, by section (docs/configuration.md).
pub fn reference() -> String {
    let mut out = String::from(
        "<!-- Generated by `rasa-gateway config reference` (make docs); a test keeps it current. -->\n\
         # Configuration reference\n\n\
         Every option is a flag, a `RASA_*` variable and a key of the configuration file\n\
         (`rasa-gateway --config rasa.toml`): the key is the flag's long name with `_` for `-`,\n\
         in the section below. Flags win over variables, variables over the file.\n\
         `rasa-gateway config example` prints a complete file; `config check FILE` checks one;\n\
         `config show` prints the effective configuration.\n",
    );
    for (section, opts) in sections() {
        out.push_str(&format!(
            "\n## [{section}]\n\n| Key | Flag | Variable | Default | Meaning |\n|---|---|---|---|---|\n"
        ));
        for opt in opts {
            let help = opt
                .arg
                .get_long_help()
                .or(opt.arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|");
            out.push_str(&format!(
                "| `{}` | `{}` | `{}` | {} | {} |\n",
                opt.key,
                opt.flag(),
                opt.arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                default_of(&opt)
                    .map_or("—".to_owned(), |d| format!("`{}`", d.replace('|', "\\|"))),
                help
            ));
        }
    }
    out
}

/// The option's default as a TOML value (`None`: it has none).
pub(super) fn default_of(opt: &Opt) -> Option<String> {
    if opt.is_switch() {
        return Some("false".into());
    }
    let defaults: Vec<String> = opt
        .arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    (!defaults.is_empty()).then(|| toml_value(opt, &defaults))
}

/// Values as TOML: a switch's as a boolean, whole numbers bare, a list as an array.
fn toml_value(opt: &Opt, raw: &[String]) -> String {
    let one = |v: &String| {
        if opt.is_switch() || (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())) {
            v.clone()
        } else {
            // JSON's string escapes are TOML's basic string escapes.
            serde_json::to_string(v).expect("a string serializes")
        }
    };
    if opt.is_list() {
        format!("[{}]", raw.iter().map(one).collect::<Vec<_>>().join(", "))
    } else {
        raw.first().map(one).unwrap_or_default()
    }
}

/// `value` with the credentials of a URL in it (`scheme://user:password@host/…`) masked:
/// `config show`'s output is pasted into tickets and chats.
pub(super) fn without_url_credentials(value: &str) -> String {
    let Some(at) = value.find("://") else {
        return value.to_owned();
    };
    let start = at + 3;
    let rest = &value[start..];
    let authority = rest.find(['/', '?', '#']).map_or(rest, |end| &rest[..end]);
    match authority.rfind('@') {
        Some(user_end) => format!("{}********{}", &value[..start], &rest[user_end..]),
        None => value.to_owned(),
    }
}

/// An option whose value is itself a secret (passwords and keys live in files, whose
/// names are not secret; none is given inline today — this guards the next one).
fn is_secret(key: &str) -> bool {
    !key.ends_with("_file")
        && ["password", "secret", "token"]
            .iter()
            .any(|s| key.contains(s))
}

/// `text` as comment lines of at most 88 columns.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 88 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The first sentence of the option's help.
fn one_line(opt: &Opt) -> String {
    let help = opt
        .arg
        .get_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    // The first ". " before a capital letter ("e.g. the" goes on).
    let end = help
        .match_indices(". ")
        .map(|(i, _)| i)
        .find(|&i| help[i + 2..].chars().next().is_some_and(char::is_uppercase));
    match end {
        Some(end) => help[..=end].to_owned(),
        None => help,
    }
}
