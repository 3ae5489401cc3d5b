//! The namespaces file's format (see the module above) and the sizing it implies: what
//! `--memory` leaves the default namespace, each namespace's arena size.

use std::path::Path;

use super::error::{NamespacesError, SpecError};
use super::{check_name, DEFAULT};
use crate::credfile::FileError;

/// At most this many namespaces in a file (they are metric labels: the count stays bounded).
pub const MAX_NAMESPACES: usize = 1000;

/// The smallest quota a namespace may have.
pub const MIN_QUOTA: u64 = 1 << 20;

/// One line of the namespaces file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Its name.
    pub name: String,
    /// Bytes of arena memory it may hold.
    pub quota: u64,
    /// Bytes of the disk tier it may hold (with `--disk`; none: its evicted values are
    /// dropped).
    pub disk_quota: Option<u64>,
    /// In a cluster, how many members hold its keys (`replicas=N`, or `replicas=PREFIX=N`
    /// for the keys under PREFIX; the longest matching prefix wins): the key's owner and
    /// N−1 replicas, as `--cluster-replicas` for the default namespace.
    pub replicas: Vec<rasa_openapi::ReplicaRule>,
}

/// The smallest disk quota a namespace may have.
pub const MIN_DISK_QUOTA: u64 = 2 << 20;

/// Parses the namespaces file format (see the module documentation).
pub fn parse(text: &str) -> Result<Vec<Spec>, FileError> {
    let mut specs: Vec<Spec> = Vec::new();
    for (n, fields) in crate::credfile::lines(text) {
        let at = |why: SpecError| FileError::line(n, why);
        let (rules, sizes): (Vec<&str>, Vec<&str>) =
            fields.iter().partition(|f| f.starts_with(REPLICAS));
        let (name, quota, disk) = match sizes[..] {
            [name, quota] => (name, quota, None),
            [name, quota, disk] => (name, quota, Some(disk)),
            _ => {
                return Err(FileError::Fields {
                    line: n,
                    form: "NAME QUOTA [DISK_QUOTA] [replicas=[PREFIX=]N ...]",
                    found: fields.len(),
                })
            }
        };
        check_name(name).map_err(|e| at(e.into()))?;
        if name == DEFAULT {
            return Err(at(SpecError::Default));
        }
        let quota = crate::units::parse_size(quota).map_err(|e| at(SpecError::Quota(e)))?;
        if quota < MIN_QUOTA {
            let name = name.to_owned();
            return Err(at(SpecError::QuotaTooSmall { name, quota }));
        }
        let disk_quota = disk
            .map(|d| crate::units::parse_size(d).map_err(|e| at(SpecError::DiskQuota(e))))
            .transpose()?;
        if disk_quota.is_some_and(|d| d < MIN_DISK_QUOTA) {
            return Err(at(SpecError::DiskQuotaTooSmall(name.to_owned())));
        }
        if specs.iter().any(|s| s.name == name) {
            return Err(at(SpecError::Twice(name.to_owned())));
        }
        let replicas = rules
            .iter()
            .map(|r| replica_rule(name, &r[REPLICAS.len()..]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(at)?;
        specs.push(Spec {
            name: name.to_owned(),
            quota,
            disk_quota,
            replicas,
        });
    }
    if specs.len() > MAX_NAMESPACES {
        return Err(FileError::Whole(Box::new(SpecError::TooMany(specs.len()))));
    }
    Ok(specs)
}

/// How a field of replicas begins.
const REPLICAS: &str = "replicas=";

/// The rule `N` or `PREFIX=N` (after `replicas=`) says for namespace `ns`.
fn replica_rule(ns: &str, text: &str) -> Result<rasa_openapi::ReplicaRule, SpecError> {
    let (prefix, n) = text.rsplit_once('=').unwrap_or(("", text));
    let bad = |why: String| SpecError::Replicas(format!("replicas={text}: {why}"));
    let count = n
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=16).contains(n))
        .ok_or_else(|| bad("N is how many members hold a key, 1 to 16".into()))?;
    if !prefix.is_empty() {
        crate::key::validate(prefix).map_err(|e| bad(format!("the prefix is not a key: {e}")))?;
    }
    Ok(rasa_openapi::ReplicaRule {
        namespace: Some(ns.to_owned()),
        prefix: prefix.to_owned(),
        count,
    })
}

/// Every namespace's replica rules in `specs`.
pub fn replica_rules(specs: &[Spec]) -> Vec<rasa_openapi::ReplicaRule> {
    specs
        .iter()
        .flat_map(|s| s.replicas.iter().cloned())
        .collect()
}

/// Reads and parses the namespaces file at `path`; the error names the file and line.
pub fn read(path: &Path) -> Result<Vec<Spec>, FileError> {
    let text = crate::credfile::read(path)?;
    parse(&text).map_err(|e| e.in_file("namespaces file", path))
}

/// What `memory` (`--memory`) leaves the default namespace after the quotas of `specs`
/// (from `path`), or why they do not fit.
pub(super) fn left_for_default(
    specs: &[Spec],
    memory: u64,
    path: &Path,
) -> Result<u64, NamespacesError> {
    let total: u64 = specs.iter().map(|s| s.quota).sum();
    memory
        .checked_sub(total)
        .ok_or_else(|| NamespacesError::OverMemory {
            path: path.to_owned(),
            total,
            memory,
        })
}

/// The default namespace's arena size beside the namespaces `specs` (of `path`): sized for
/// what `--memory` leaves it, as any namespace's ([`arena_size_for`]).
pub fn default_arena_size(
    (path, specs): (&Path, &[Spec]),
    memory: u64,
    arena_size: u64,
) -> Result<u64, NamespacesError> {
    Ok(arena_size_for(
        left_for_default(specs, memory, path)?,
        arena_size,
    ))
}

/// The arena size for a namespace of `quota` under `--arena-size` `arena_size`: a quarter of
/// the quota (at least 64 KiB, a multiple of 64 KiB), never more than `arena_size`, so a
/// small namespace does not pin a whole default arena.
pub fn arena_size_for(quota: u64, arena_size: u64) -> u64 {
    const STEP: u64 = 64 << 10;
    ((quota / 4) / STEP * STEP).clamp(STEP, arena_size.max(STEP))
}
