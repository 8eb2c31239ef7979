//! A listener as the request path sees it: what every connection on it shares
//! ([`ListenerContext`]: its settings, its upstream, its access log, its certificates) and
//! what each worker adds ([`WorkerListener`]: the worker's own connections to the upstream's
//! backends, its counts, whether a reload retired it).
//!
//! HTTP/1.1, HTTP/2 and TCP connections all start from one, so it sits below all three: the
//! server builds it, and the paths read it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::access_log::AccessLog;
use crate::admission::{Checks, Zones};
use crate::http1::Routed;
use crate::metrics::WorkerStats;
use crate::route::Routes;
use crate::settings::ListenerSettings;
use crate::tls::ServerTls;
use crate::upstream::{Upstream, WorkerPools};

/// What every request on one listener shares.
#[derive(Debug)]
pub(crate) struct ListenerContext {
    pub(crate) settings: ListenerSettings,
    /// The upstreams its requests may go to: the listener's own first (`upstream`, when it has
    /// one: `has_default`), then those its routes name, each once, in the order first named.
    pub(crate) upstreams: Vec<Arc<Upstream>>,
    pub(crate) has_default: bool,
    /// Its `[[listener.route]]`, compiled; `None` without any.
    pub(crate) routes: Option<Routes>,
    pub(crate) access_log: Option<AccessLog>,
    /// The listener's TLS as last read (`None`: plain HTTP); a reload that only re-read the
    /// certificates replaces it without retiring open connections.
    pub(crate) tls: Option<ServerTls>,
    /// Its own `limit_req` and `limit_conn`, with their state.
    pub(crate) zones: Zones,
    /// The number the counts of its requests no route took are kept under
    /// ([`crate::metrics::route_id`] with an empty route name).
    pub(crate) counts_id: usize,
}

impl ListenerContext {
    /// The request headers the access log's format writes (none without a log, or for
    /// `combined` and JSON): taken from each request as it comes.
    pub(crate) fn log_headers(&self) -> &[Box<str>] {
        self.access_log
            .as_ref()
            .map_or(&[], |log| log.settings().format.headers())
    }

    /// Whether `self` and `other` differ only in their certificates: connections opened under
    /// one can go on under the other.
    pub(crate) fn same_but_tls(&self, other: &ListenerContext) -> bool {
        let same_log = match (&self.access_log, &other.access_log) {
            (Some(a), Some(b)) => a.settings() == b.settings(),
            (None, None) => true,
            _ => false,
        };
        self.same_upstreams(other) && self.settings == other.settings && same_log
    }

    /// Whether `self` and `other` send requests to the very same upstreams, in the same order.
    pub(crate) fn same_upstreams(&self, other: &ListenerContext) -> bool {
        self.upstreams.len() == other.upstreams.len()
            && self
                .upstreams
                .iter()
                .zip(&other.upstreams)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The listener's header rules and request id, for the parser: `None` when neither it nor
    /// any of its routes has any (nothing to do for them on the request path).
    pub(crate) fn edits(&self) -> Option<crate::http1::Edits<'_>> {
        let s = &self.settings;
        let any = s.request_id
            || !s.request_headers.is_empty()
            || !s.response_headers.is_empty()
            || self.routes.as_ref().is_some_and(|r| r.any_rules());
        any.then_some(crate::http1::Edits {
            request: &s.request_headers,
            response: &s.response_headers,
            request_id: s.request_id,
        })
    }

    /// The limits and rules a request `routed` so meets (its route's over the listener's);
    /// none for a request a route answers itself (nginx's `return` comes first).
    pub(crate) fn checks(&self, routed: &Routed) -> Checks<'_> {
        if matches!(routed, Routed::Answer { route: Some(_), .. }) {
            return Checks::default();
        }
        let route = routed
            .route()
            .and_then(|i| self.routes.as_ref()?.get(i))
            .map(|r| (&r.zones, r.access.as_ref()));
        Checks::of((&self.zones, self.settings.access.as_ref()), route)
    }

    /// The counts id of the route that took a request `routed` so, or the listener's own.
    pub(crate) fn counts_id(&self, routed: &Routed) -> usize {
        routed
            .route()
            .and_then(|i| self.routes.as_ref()?.get(i))
            .map_or(self.counts_id, |r| r.counts_id)
    }

    /// The listener's own upstream, if it has one.
    pub(crate) fn default_upstream(&self) -> Option<&Arc<Upstream>> {
        self.upstreams.first().filter(|_| self.has_default)
    }

    /// The index in `upstreams` of the upstream a request `routed` so goes to; `None` when it
    /// is answered here.
    pub(crate) fn upstream_for(&self, routed: &Routed) -> Option<usize> {
        match routed {
            Routed::Default => self.has_default.then_some(0),
            Routed::Upstream { route } => match self.routes.as_ref()?.get(*route)?.action {
                crate::route::Action::Upstream { upstream, .. } => Some(upstream),
                _ => None,
            },
            Routed::Answer { .. } => None,
        }
    }
}

/// A listener as one worker serves it: the shared context and the worker's own connections to
/// the upstream's backends.
#[derive(Debug)]
pub(crate) struct WorkerListener {
    pub(crate) ctx: Arc<ListenerContext>,
    /// The worker's connections to each of `ctx.upstreams`, in the same order.
    pub(crate) connections: Vec<Arc<WorkerPools>>,
    /// This worker's counts.
    pub(crate) stats: Arc<WorkerStats>,
    /// A reload changed the listener: its connections finish the request they are on, say
    /// `Connection: close`, and their clients reconnect to the new configuration.
    pub(crate) retired: AtomicBool,
    /// What replaced it, once retired: an idle connection that gets a new request serves it
    /// with the configuration in force then (its routes, its upstreams), not the one it was
    /// opened under.
    pub(crate) successor: std::sync::OnceLock<Arc<WorkerListener>>,
}

impl WorkerListener {
    /// Whether a reload retired the listener: its connections say `Connection: close`.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The listener in force now: this one, or (after reloads) the last of its successors.
    pub(crate) fn latest(self: &Arc<Self>) -> Arc<WorkerListener> {
        let mut at = Arc::clone(self);
        while let Some(next) = at.successor.get() {
            at = Arc::clone(next);
        }
        at
    }
}
