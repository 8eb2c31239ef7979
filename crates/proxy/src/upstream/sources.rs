//! What an upstream keeps of its DNS discovery sources, as data: each source's record (its
//! last good answer, its failures) and what a reload carries over of the backends they found.
//! Imports none of the files beside it (discovery.rs, beside it, gives the upstream its jobs
//! over this data).

use tokio::time::Instant;

use crate::settings::{DiscoveryQuery, RecordKind, UpstreamSettings};

/// A source's record, kept while the source is configured.
#[derive(Debug, Clone)]
pub(super) struct SourceRecord {
    pub(super) query: DiscoveryQuery,
    /// Its last good answer, or when it was configured.
    pub(super) since: Instant,
    pub(super) resolved: bool,
    pub(super) backends: usize,
    pub(super) failures: u64,
}

/// The records of `settings`' sources: those of `old` that are still configured (by query),
/// a fresh one for each new source.
pub(super) fn source_records(
    settings: &UpstreamSettings,
    old: &[SourceRecord],
) -> Vec<SourceRecord> {
    settings
        .discovery
        .iter()
        .map(|d| {
            old.iter()
                .find(|r| r.query == d.query)
                .cloned()
                .unwrap_or_else(|| SourceRecord {
                    query: d.query.clone(),
                    since: Instant::now(),
                    resolved: false,
                    backends: settings
                        .backends
                        .iter()
                        .filter(|b| b.discovered.as_ref() == Some(&d.query))
                        .count(),
                    failures: 0,
                })
        })
        .collect()
}

/// A reload's settings (`new`, from the file) given the backends that the sources still
/// configured found under `old`: a reload does not wait for DNS to find them again. A kept
/// backend gets the source's options as the file now writes them (for SRV, the weight and tier
/// its record gave); those of sources that went are forgotten.
pub(super) fn carry_discovered(old: &UpstreamSettings, new: &mut UpstreamSettings) {
    for b in &old.backends {
        let Some(query) = &b.discovered else {
            continue;
        };
        let Some(source) = new.discovery.iter().find(|d| &d.query == query) else {
            continue;
        };
        if new.backends.iter().any(|n| n.addr == b.addr) {
            continue;
        }
        let mut carried = source.backend(b.addr);
        if query.kind == RecordKind::Srv {
            carried.weight = b.weight;
            carried.backup = b.backup;
        }
        new.backends.push(carried);
    }
}
