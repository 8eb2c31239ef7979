//! Who the upstream's backends are, and what the control plane sets on them: a reload or a
//! change through the admin API builds a new pool that takes over the live state of the
//! backends that stay ([`Upstream::reconfigure`]); weights and health check verdicts apply to
//! the generation they were computed for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use balance::{BackendId, Nanos, Pool};

use super::state::{AdminState, Member, ProbeCounts, State, WorkerPools, lock};
use super::view::{ChangeError, reports_set_weights};
use super::{Upstream, build_pool, pool_order};
use crate::settings::UpstreamSettings;

/// What [`Upstream::reconfigure`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconfigured {
    pub added: Vec<SocketAddr>,
    pub removed: Vec<SocketAddr>,
    pub kept: usize,
    /// The settings were those in force already (a reload of an unchanged upstream, what DNS
    /// found carried): the upstream was rebuilt the same.
    pub unchanged: bool,
}

/// Where a reconfiguration's backend states and weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// From the new settings (a reload applies the file: `down` and `weight`).
    Settings,
    /// From the running upstream, for backends that stay (a change through the admin API
    /// keeps what the operator set on the others).
    Runtime,
}

impl Upstream {
    /// Runs `change` on the pool and the member at `addr`, under the lock picks take.
    pub(super) fn change_member<T>(
        &self,
        addr: SocketAddr,
        change: impl FnOnce(&mut Pool, BackendId, &mut Member, Nanos) -> T,
    ) -> Result<T, ChangeError> {
        let now = self.now();
        let mut st = lock(&self.state);
        let id = st
            .position(addr)
            .ok_or_else(|| self.no_such_backend(addr))?;
        let State { pool, members, .. } = &mut *st;
        Ok(change(pool, id, &mut members[id.index()], now))
    }

    pub(super) fn no_such_backend(&self, addr: SocketAddr) -> ChangeError {
        ChangeError::NoSuchBackend {
            upstream: self.name().to_owned(),
            addr,
        }
    }

    /// Replaces the backends, the algorithm and the rest of the settings, without dropping a
    /// request: a new pool is built and takes over, from the old one, the live state of the
    /// backends that stay (same address: requests in flight, health, averages, counts, a weight
    /// model's weights — see [`Pool::carry_over`]); requests in flight on a backend that goes
    /// finish there. `keep` says where the states and weights of staying backends come from.
    /// The name must stay the same (an upstream of another name is another upstream).
    pub fn reconfigure(&self, mut settings: UpstreamSettings, keep: Keep) -> Reconfigured {
        debug_assert_eq!(settings.name, self.name());
        // A reload waits for a change DNS discovery is making (and carries what it found).
        let _reload = (keep == Keep::Settings).then(|| lock(&self.membership));
        if keep == Keep::Settings {
            // A reload: what DNS found for the sources still configured stays.
            super::sources::carry_discovered(&self.settings(), &mut settings);
        }
        // Rebuilt all the same (a reload of an unchanged file): not said as a change.
        let unchanged = *self.settings() == settings;
        {
            let mut sources = lock(&self.sources);
            *sources = super::sources::source_records(&settings, &sources);
        }
        let now = self.now();
        let mut pool = build_pool(&settings);
        let order: Vec<crate::BackendSettings> =
            pool_order(&settings).into_iter().cloned().collect();
        // Every worker gets connections for the new backends before any pick can choose them.
        let workers = self.connect_workers_to(&order, &settings);
        let weights_from_reports = reports_set_weights(&settings);
        let done = {
            let mut st = lock(&self.state);
            let generation = st.generation + 1;
            let same: Vec<Option<BackendId>> = order.iter().map(|b| st.position(b.addr)).collect();
            pool.carry_over(&st.pool, &same, now);
            let mut done = Reconfigured {
                unchanged,
                ..Reconfigured::default()
            };
            let members = carried_members(
                &st,
                (&settings, &order),
                &same,
                keep,
                generation,
                &mut pool,
                now,
            );
            done.added = members
                .iter()
                .filter(|m| m.since == generation)
                .map(|m| m.addr)
                .collect();
            ring_past_its_bound(&settings, &members);
            // The weight in force: a weight model's carries over; otherwise the static one
            // (the file's on a reload, the operator's on a change through the API).
            if !weights_from_reports {
                let statics: Vec<u32> = members.iter().map(|m| m.static_weight).collect();
                pool.set_weights(&statics, now);
            }
            done.removed = st
                .members
                .iter()
                .filter(|m| !order.iter().any(|b| b.addr == m.addr))
                .map(|m| m.addr)
                .collect();
            done.kept = order.len() - done.added.len();
            // The budget goes on as it was unless its settings changed.
            let budget = match (st.budget.take(), settings.retry_budget) {
                (Some((old, budget)), Some(new)) if old == new => Some((old, budget)),
                (_, new) => new.map(|b| (b, balance::RetryBudget::new(b))),
            };
            let sticky = super::state::sticky_table(&settings, &members);
            // The settings and the pool change together, under the lock picks take.
            self.probing
                .store(settings.probes_backends(), Ordering::Relaxed);
            self.settings.store(Arc::new(settings));
            let waiting = std::mem::take(&mut st.waiting);
            *st = State {
                generation,
                pool,
                members,
                waiting,
                budget,
                sticky,
            };
            done
        };
        // The workers' connections to backends that left: the idle ones close with the map;
        // those in use finish their request first (the attempt holds its own reference).
        WorkerPools::forget(&workers, &done.removed);
        self.changes.send_modify(|c| c.0 = self.generation());
        self.serve_waiting();
        if unchanged {
            tracing::debug!(upstream = %self.name(), kept = done.kept, "upstream rebuilt unchanged");
        } else {
            tracing::info!(
                upstream = %self.name(),
                added = ?done.added,
                removed = ?done.removed,
                kept = done.kept,
                "upstream reconfigured"
            );
        }
        done
    }

    /// The backends in pool order (primaries, then backups) in `generation`: entry `i` is the
    /// backend of `BackendId(i)`.
    pub fn backends_in_pool_order(&self) -> (u64, Vec<crate::BackendSettings>) {
        let st = lock(&self.state);
        let settings = self.settings();
        let order = pool_order(&settings).into_iter().cloned().collect();
        (st.generation, order)
    }

    /// Applies the weights of every backend at once, in pool order of `generation` (a weight
    /// model's result): one rebuild under the pool lock, so no pick ever sees half of them.
    /// Ignored if the backends changed since.
    pub fn set_weights(&self, generation: u64, weights: &[u32]) {
        let now = self.now();
        let mut st = lock(&self.state);
        if st.generation == generation {
            st.pool.set_weights(weights, now);
        }
    }

    /// Records an active health check's verdict on backend `id` (pool order of `generation`);
    /// returns whether it changed the backend's state (never, if the backends changed since).
    pub fn set_check_result(&self, generation: u64, id: BackendId, healthy: bool) -> bool {
        let now = self.now();
        let changed = {
            let mut st = lock(&self.state);
            st.generation == generation && st.pool.set_check_result(id, healthy, now)
        };
        if changed {
            self.serve_waiting();
        }
        changed
    }
}

/// Warns where the weights of `members` pass what `settings`' ring is built for: the ring
/// places its points for them scaled down ([`balance::ring::fit_weights`]). The admin API
/// refuses a change that would do it, but an operator's weights kept for addresses DNS gives
/// back later, or from the state file or etcd, can add up past it.
fn ring_past_its_bound(settings: &UpstreamSettings, members: &[Member]) {
    let total: u64 = members.iter().map(|m| u64::from(m.static_weight)).sum();
    if let Some(ring) = settings.ring()
        && total > UpstreamSettings::MAX_RING_WEIGHT
    {
        tracing::warn!(
            upstream = %settings.name,
            total,
            "the backends' weights total {total}, more than the ring of {ring} is built for ({}): it places them scaled down in proportion; lower the weights set through the admin API (kept, too, for the addresses DNS does not give now: see the upstream's overrides)",
            UpstreamSettings::MAX_RING_WEIGHT
        );
    }
}

/// The members of generation `generation`, backends in pool `order` of `settings`: a backend
/// that stays (`same`: its id in the pool in force) keeps its member, with its state and
/// weight from the settings (an operator's pin first, see [`UpstreamSettings::pinned`]) or
/// from the running upstream as `keep` says; a new one joins, pinned or as configured (and
/// ramps up in `pool` if it has a slow start, Envoy's rule for new hosts). A member not up is
/// down in `pool`.
fn carried_members(
    st: &State,
    (settings, order): (&UpstreamSettings, &[crate::BackendSettings]),
    same: &[Option<BackendId>],
    keep: Keep,
    generation: u64,
    pool: &mut Pool,
    now: Nanos,
) -> Vec<Member> {
    let mut members = Vec::with_capacity(order.len());
    for (i, (b, old)) in order.iter().zip(same).enumerate() {
        let id = BackendId(i as u32);
        let old = old.map(|o| st.members[o.index()].clone());
        let (state, static_weight) = settings.pinned(b);
        let member = match (old, keep) {
            (Some(m), Keep::Runtime) => m,
            (Some(m), Keep::Settings) => Member {
                state,
                static_weight,
                ..m
            },
            (None, _) => {
                pool.begin_slow_start(id, now);
                Member {
                    addr: b.addr,
                    state,
                    static_weight,
                    report: None,
                    since: generation,
                    probes: ProbeCounts::default(),
                    polls: Default::default(),
                }
            }
        };
        if member.state != AdminState::Up {
            pool.set_down(id, true, now);
        }
        members.push(member);
    }
    members
}

#[cfg(test)]
mod pin_tests {
    use std::collections::HashMap;

    use super::*;
    use crate::BackendSettings;
    use crate::settings::Pin;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 80))
    }

    fn settings(backends: &[u8], pins: &[(u8, Pin)]) -> UpstreamSettings {
        let backends = backends
            .iter()
            .map(|&i| BackendSettings::new(addr(i)))
            .collect();
        let mut s = UpstreamSettings::new("p", balance::Algorithm::WeightedRoundRobin, backends);
        s.pins = pins.iter().map(|&(i, p)| (addr(i), p)).collect();
        s
    }

    fn states(u: &Upstream) -> Vec<(SocketAddr, AdminState, u32, bool)> {
        u.snapshot()
            .iter()
            .map(|b| (b.addr, b.state, b.static_weight, b.available))
            .collect()
    }

    const DRAIN_4: Pin = Pin {
        state: Some(AdminState::Drain),
        weight: Some(4),
    };

    /// A pinned address takes its pin when it joins (any `Keep`), at the start, and when a
    /// reload applies the settings; a member that stays through an API change keeps its own.
    #[test]
    fn a_pinned_address_joins_and_reloads_with_its_pin() {
        let u = Upstream::new(settings(&[1, 2], &[(1, DRAIN_4)]));
        assert_eq!(
            states(&u),
            vec![
                (addr(1), AdminState::Drain, 4, false),
                (addr(2), AdminState::Up, 1, true)
            ]
        );
        // Pinned while running: 3 joins drained (as a backend DNS discovery adds would).
        assert!(u.set_state(addr(1), AdminState::Up).is_ok());
        u.set_pins(HashMap::from([(addr(3), DRAIN_4)]));
        let mut grown = u.runtime_settings();
        grown.backends.push(BackendSettings::new(addr(3)));
        u.reconfigure(grown, Keep::Runtime);
        assert_eq!(
            states(&u),
            vec![
                (addr(1), AdminState::Up, 4, true),
                (addr(2), AdminState::Up, 1, true),
                (addr(3), AdminState::Drain, 4, false)
            ]
        );
        // A reload: the file's values, but for the pinned address.
        u.reconfigure(settings(&[1, 2, 3], &[(3, DRAIN_4)]), Keep::Settings);
        assert_eq!(
            states(&u),
            vec![
                (addr(1), AdminState::Up, 1, true),
                (addr(2), AdminState::Up, 1, true),
                (addr(3), AdminState::Drain, 4, false)
            ]
        );
    }
}
