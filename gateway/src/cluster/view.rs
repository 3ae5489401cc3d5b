//! The view of the members this node publishes, from the records the watch holds: each
//! record checked ([`super::secret::record::check`]), those not honoured logged once and
//! counted, those whose time passes dropped then, etcd event or not.

use crate::catalog;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rasa_openapi::ClusterMember;

use super::secret::record::{self, Honoured};
use super::{Cluster, View};

/// The records the watch holds, by node id: each member, and when its record stops being
/// honoured (under a secret).
pub(super) type Records = BTreeMap<String, Honoured>;

/// The member a record describes, or `None` (logged once per key, counted) when it is not
/// honoured ([`record::check`]): such a record owns no key and is sent nothing.
pub(super) fn parse(cluster: &Cluster, key: &[u8], value: &[u8], lease: i64) -> Option<Honoured> {
    let key = String::from_utf8_lossy(key);
    let why = match record::check(cluster.config.secret.as_deref(), &key, value, lease) {
        Ok(r) => return Some(r),
        Err(why) => why,
    };
    rejected(cluster, &key, &why.to_string());
    None
}

/// Counts a record not honoured, and logs it the first time for its key.
fn rejected(cluster: &Cluster, key: &str, why: &str) {
    catalog::CLUSTER_RECORDS_REJECTED.counter().increment(1);
    let first = cluster
        .rejected
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_owned());
    if first {
        tracing::warn!(%key, "cluster: ignoring a member record: {why}; it owns no key and is sent nothing");
    }
}

/// Publishes the view of `records` (those whose time has passed dropped first, counted
/// and logged), unless it is the view already published at an earlier revision: a record
/// written again only to renew its time changes no view.
pub(super) fn publish(cluster: &Cluster, revision: i64, records: &mut Records) {
    let now = super::secret::now_ms();
    records.retain(|node, r| {
        let live = r.expires_ms.is_none_or(|t| t > now);
        if !live {
            let key = super::member_key(&cluster.config.name, node);
            rejected(
                cluster,
                &key,
                "its time passed without its member writing it again",
            );
        }
        live
    });
    let members: Vec<ClusterMember> = records.values().map(|r| r.member.clone()).collect();
    {
        let view = cluster.view.borrow();
        if view.revision != 0 && *view.members == members {
            // The current view, again: the last recorded, whatever the watch passed
            // through in between.
            let current = Arc::clone(&view.members);
            drop(view);
            let mut history = cluster.history.write().unwrap_or_else(|e| e.into_inner());
            history.push_if_new(&current);
            drop(history);
            cluster.view.send_if_modified(|v| {
                v.revision = v.revision.max(revision);
                false
            });
            return;
        }
    }
    let serving = members
        .iter()
        .filter(|m| m.state == rasa_openapi::MemberState::Serving)
        .count();
    catalog::CLUSTER_MEMBERS
        .gauge_by(&[("state", "serving")])
        .set(serving as f64);
    catalog::CLUSTER_MEMBERS
        .gauge_by(&[("state", "draining")])
        .set((members.len() - serving) as f64);
    catalog::CLUSTER_REVISION.gauge().set(revision as f64);
    tracing::info!(
        revision,
        members = ?members.iter().map(|m| format!("{}:{:?}", m.node_id, m.state)).collect::<Vec<_>>(),
        "cluster: view"
    );
    let members = Arc::new(members);
    let mut history = cluster.history.write().unwrap_or_else(|e| e.into_inner());
    cluster.view.send_replace(View {
        revision,
        members: Arc::clone(&members),
    });
    history.push_if_new(&members);
}

/// Records the view of `records` in the history without publishing it: a state a batch
/// of etcd events passes through ([`super::history`]).
pub(super) fn passed(cluster: &Cluster, records: &Records) {
    let members: Vec<ClusterMember> = records.values().map(|r| r.member.clone()).collect();
    let mut history = cluster.history.write().unwrap_or_else(|e| e.into_inner());
    history.push_if_new(&Arc::new(members));
}

/// How long until the first of `records` expires (an hour when none does).
pub(super) fn next_expiry(records: &Records) -> Duration {
    let now = super::secret::now_ms();
    records
        .values()
        .filter_map(|r| r.expires_ms)
        .min()
        .map_or(Duration::from_secs(3600), |t| {
            Duration::from_millis(t.saturating_sub(now) + 1)
        })
}

/// A serving member `id` of incarnation `incarnation`, without a fast path (unit tests).
#[cfg(test)]
pub(crate) fn test_member(id: &str, incarnation: &str) -> ClusterMember {
    ClusterMember {
        node_id: id.into(),
        incarnation: incarnation.into(),
        url: format!("http://{id}.invalid"),
        state: rasa_openapi::MemberState::Serving,
        weight: 1,
        s3_url: None,
        hot: Vec::new(),
        fabric: rasa_openapi::FabricInfo {
            enabled: false,
            provider: None,
            address: None,
            address_format: None,
            virtual_addressing: None,
            incarnation: incarnation.into(),
            endpoints: Vec::new(),
            host: None,
        },
    }
}
