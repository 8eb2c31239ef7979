//! Every worker's own connections to the upstream's backends: each worker reads its map
//! without a lock of the upstream's, and the upstream replaces the maps when its backends
//! change, so a new backend has connections before any pick can choose it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Upstream, lock};
use crate::connections::Connections;

/// One worker's connections to one upstream's backends, by address: replaced as a whole when
/// the backends change, so the worker reads them without a lock of the upstream's.
#[derive(Debug)]
pub(crate) struct WorkerPools {
    pub(super) by_addr: ArcSwap<HashMap<SocketAddr, Arc<Connections>>>,
}

impl WorkerPools {
    /// This worker's connections to `addr`, if it is a backend of the upstream.
    pub(crate) fn get(&self, addr: SocketAddr) -> Option<Arc<Connections>> {
        self.by_addr.load().get(&addr).cloned()
    }

    /// Every backend's connections, for the reaper.
    pub(crate) fn all(&self) -> Vec<Arc<Connections>> {
        self.by_addr.load().values().cloned().collect()
    }
}

impl Upstream {
    /// A new worker's own connections to the backends.
    pub(crate) fn worker_connections(&self) -> Arc<WorkerPools> {
        let settings = self.settings();
        let mut workers = lock(&self.worker_pools);
        let st = lock(&self.state);
        let map = st
            .members
            .iter()
            .map(|m| {
                let c = Connections::new(m.addr, settings.keepalive, settings.keepalive_timeout);
                (m.addr, Arc::new(c))
            })
            .collect();
        let pools = Arc::new(WorkerPools {
            by_addr: ArcSwap::from_pointee(map),
        });
        workers.push(Arc::clone(&pools));
        pools
    }

    /// Connections open to `addr` (busy or idle) and idle, summed over the workers.
    pub(super) fn connection_counts(&self, addr: SocketAddr) -> (usize, usize) {
        let mut count = (0, 0);
        for pools in lock(&self.worker_pools).iter() {
            if let Some(c) = pools.get(addr) {
                let (open, idle) = c.counts();
                count.0 += open;
                count.1 += idle;
            }
        }
        count
    }
}
