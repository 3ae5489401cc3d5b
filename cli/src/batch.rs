//! `rasa put-many` and `rasa rm` of several keys: one request per batch.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rasa_client::{with_causes, Client};

/// Where each value of `rasa put-many` comes from: `KEY=FILE`, or a FILE stored under
/// `prefix` followed by its file name.
fn sources(prefix: &str, args: &[String]) -> Result<Vec<(String, PathBuf)>, String> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((key, file)) if !key.is_empty() => Ok((key.to_owned(), PathBuf::from(file))),
            _ => {
                let path = PathBuf::from(a);
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| format!("{a}: not a file name (or write KEY=FILE)"))?;
                Ok((format!("{prefix}{name}"), path))
            }
        })
        .collect()
}

fn read(path: &Path) -> Result<Bytes, String> {
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

/// `rasa put-many`: every file read, then stored in batches; one line (or JSON object)
/// per value. Fails when any value was not stored.
pub(crate) async fn put_many(
    client: &Client,
    prefix: &str,
    args: &[String],
    json: bool,
) -> Result<(), String> {
    let sources = sources(prefix, args)?;
    let values = sources
        .iter()
        .map(|(k, p)| Ok((k.as_str(), read(p)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let results = client
        .many()
        .put(&values)
        .await
        .map_err(|e| with_causes(&e))?;
    let mut lines = Vec::new();
    let mut failed = 0;
    for ((key, _), r) in values.iter().zip(results) {
        lines.push(match r {
            Ok(d) => serde_json::json!({"key": key, "version": d.version, "length": d.length}),
            Err(p) => {
                failed += 1;
                serde_json::json!({"key": key, "error": p})
            }
        });
    }
    report(&lines, json, |l| match l.get("error") {
        Some(e) => format!(
            "failed  {}: {}",
            l["key"].as_str().unwrap_or_default(),
            e["detail"].as_str().unwrap_or_default()
        ),
        None => format!(
            "stored  {}  {}  {}",
            l["key"].as_str().unwrap_or_default(),
            l["version"].as_str().unwrap_or_default(),
            l["length"]
        ),
    });
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} of {} values were not stored", values.len())),
    }
}

/// `rasa rm` of one or more keys, in batches. Fails when any key was not deleted.
pub(crate) async fn rm(client: &Client, keys: &[String], json: bool) -> Result<(), String> {
    if let [key] = keys {
        client.delete(key).await.map_err(|e| with_causes(&e))?;
        if json {
            println!("{}", serde_json::json!({"key": key, "deleted": true}));
        }
        return Ok(());
    }
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let results = client
        .many()
        .delete(&refs)
        .await
        .map_err(|e| with_causes(&e))?;
    let mut lines = Vec::new();
    for (key, r) in keys.iter().zip(&results) {
        lines.push(match r {
            Ok(()) => serde_json::json!({"key": key, "deleted": true}),
            Err(p) => serde_json::json!({"key": key, "deleted": false, "error": p}),
        });
    }
    let failed = results.iter().filter(|r| r.is_err()).count();
    if json || failed > 0 {
        report(&lines, json, |l| match l.get("error") {
            Some(e) => format!(
                "failed  {}: {}",
                l["key"].as_str().unwrap_or_default(),
                e["detail"].as_str().unwrap_or_default()
            ),
            None => format!("deleted {}", l["key"].as_str().unwrap_or_default()),
        });
    }
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} of {} keys were not deleted", keys.len())),
    }
}

fn report(lines: &[serde_json::Value], json: bool, text: impl Fn(&serde_json::Value) -> String) {
    if json {
        println!("{}", serde_json::Value::Array(lines.to_vec()));
    } else {
        lines.iter().for_each(|l| println!("{}", text(l)));
    }
}
