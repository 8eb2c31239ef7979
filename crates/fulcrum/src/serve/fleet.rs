//! `[cluster]` in `fulcrum run`: the admin API's overrides ([`StateStore`]) shared with the
//! fleet through etcd ([`Cluster`]).
//!
//! Two one-way streams, each a task on the main runtime until the control plane stops:
//!
//! * out: every local change (an override set or cleared through this instance's API, or
//!   dropped by a reload) goes to etcd as a put or a delete of its record — queued while etcd
//!   is away, written when it is back;
//! * in: what etcd holds comes back as events — a snapshot at first contact (and after a
//!   compaction) replaces every override; each change after it is applied as the admin API
//!   would apply it. This instance's own writes come back too, in etcd's order with the
//!   others' (see [`fulcrum::cluster`]), and change nothing here.
//!
//! When etcd is away nothing is applied: the instance serves on the last state it had.

use std::sync::Arc;
use std::time::Instant;

use fulcrum::cluster::{Cluster, ClusterSettings, Event, Written};
use fulcrum::state::StateStore;
use tokio::sync::{mpsc, watch};

use crate::LOG;

/// Starts sharing `store` through the etcd of `settings` until `stop`; what `/metrics` shows
/// of it.
pub(super) fn share(
    settings: ClusterSettings,
    store: &StateStore,
    stop: &watch::Receiver<bool>,
) -> admin::ClusterView {
    let started = Instant::now();
    tracing::info!(
        target: LOG,
        etcd = ?settings.endpoints,
        prefix = %settings.prefix,
        "sharing the admin API's changes with the fleet through etcd"
    );
    // What a former run changed and etcd never acknowledged (etcd was away, then this
    // instance restarted) is written first, before the first read replaces anything.
    let unsynced = store.share_with_fleet();
    if !unsynced.is_empty() {
        tracing::info!(target: LOG, keys = ?unsynced.keys().collect::<Vec<_>>(), "changes etcd has not acknowledged yet (from the state file): written to it first");
    }
    let (written, acknowledged) = mpsc::unbounded_channel();
    let (cluster, events) = Cluster::start_with(settings, stop.clone(), unsynced, Some(written));
    tokio::spawn(publish(store.local_changes(), cluster.clone()));
    tokio::spawn(synced(acknowledged, store.clone()));
    tokio::spawn(apply(events, store.clone()));
    admin::ClusterView(Arc::new(move || {
        let s = cluster.status();
        admin::ClusterHealth {
            connected: s.connected,
            since_contact: s.last_contact.unwrap_or(started).elapsed(),
            pending: s.pending,
            revision: s.revision,
        }
    }))
}

/// Out: each local change to etcd, in order. Ends when the store is gone.
async fn publish(
    mut changes: mpsc::UnboundedReceiver<(String, Option<Vec<u8>>)>,
    cluster: Cluster,
) {
    while let Some((key, value)) = changes.recv().await {
        match value {
            Some(value) => cluster.put(&key, value),
            None => cluster.delete(&key),
        }
    }
}

/// etcd's acknowledgements: the state file no longer lists those keys as unsynced, and the
/// fleet's changes to them newer than this instance's write apply again.
async fn synced(mut acknowledged: mpsc::UnboundedReceiver<Written>, store: StateStore) {
    while let Some(w) = acknowledged.recv().await {
        store.synced(&w.key, w.value.as_deref(), w.revision);
    }
}

/// In: etcd's records applied to this instance, in etcd's order. Ends with the sync task.
async fn apply(mut events: mpsc::Receiver<Event>, store: StateStore) {
    while let Some(event) = events.recv().await {
        match event {
            Event::Snapshot { records, revision } => {
                tracing::info!(
                    target: LOG,
                    revision,
                    overrides = records.len(),
                    "the fleet's state read from etcd: applied"
                );
                store.replace_all(records, revision);
            }
            Event::Put {
                key,
                value,
                revision,
            } => {
                tracing::debug!(target: LOG, key, revision, "a change from the fleet");
                store.apply_remote(&key, Some(&value), revision);
            }
            Event::Delete { key, revision } => {
                tracing::debug!(target: LOG, key, revision, "an override cleared by the fleet");
                store.apply_remote(&key, None, revision);
            }
        }
    }
}
