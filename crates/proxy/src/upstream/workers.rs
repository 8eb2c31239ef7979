//! Every worker's own connections to the upstream's backends: each worker reads its map
//! without a lock of the upstream's, and the upstream replaces the maps when its backends
//! change, so a new backend has connections before any pick can choose it.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Upstream;
use super::state::{WorkerPools, lock};
use crate::connections::Connections;

impl Upstream {
    /// Gives every worker connections for each of `backends` it has none for yet (before any
    /// pick can choose them); the workers, for [`WorkerPools::forget`] afterwards.
    pub(super) fn connect_workers_to(
        &self,
        backends: &[crate::BackendSettings],
        settings: &crate::settings::UpstreamSettings,
    ) -> Vec<Arc<WorkerPools>> {
        let workers: Vec<Arc<WorkerPools>> = lock(&self.worker_pools).clone();
        for w in &workers {
            let mut map = (**w.by_addr.load()).clone();
            for b in backends {
                map.entry(b.addr).or_insert_with(|| {
                    Arc::new(Connections::new(
                        b.addr,
                        settings.keepalive,
                        settings.keepalive_timeout,
                    ))
                });
            }
            w.by_addr.store(Arc::new(map));
        }
        workers
    }

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
