//! A listener's routes as the request path uses them: the [`routes`] crate's table (which
//! route takes a request, by nginx's precedence), and each route's action with its upstream
//! found in the listener's list of upstreams. Built once per (re)load; a reload swaps the
//! listener's whole context, these with it.

use std::sync::Arc;

use crate::header_rules::HeaderRules;
use crate::settings::{HashKey, Redirect, RouteAction, RouteSettings};

/// The compiled routes of one listener.
#[derive(Debug)]
pub(crate) struct Routes {
    table: routes::Table,
    routes: Vec<Route>,
    /// Whether any route has header rules (asked on every request: kept, not counted).
    any_rules: bool,
}

/// One route, ready for requests.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) name: Arc<str>,
    /// The number its counts are kept under ([`crate::metrics::route_id`]: by the listener's
    /// configured address and its name).
    pub(crate) counts_id: usize,
    pub(crate) action: Action,
    pub(crate) request_headers: HeaderRules,
    pub(crate) response_headers: HeaderRules,
    /// Its `allow` / `deny` rules, in place of the listener's.
    pub(crate) access: Option<crate::access::AccessList>,
    /// Its `limit_req` and `limit_conn`, each in place of the listener's, with their state.
    pub(crate) zones: crate::admission::Zones,
}

/// What a route does with the requests it takes.
#[derive(Debug)]
pub(crate) enum Action {
    /// Passed to the listener's upstream number `upstream` (an index into its list), hashed by
    /// `key` (that upstream's `hash_key`, for the algorithms that read one), kept to one
    /// backend by the cookie named `sticky` (that upstream's sticky sessions, if it has them),
    /// with the path rewritten if `rewrite` says so.
    Upstream {
        upstream: usize,
        key: Option<HashKey>,
        sticky: Option<Box<str>>,
        rewrite: Option<Rewrite>,
    },
    Redirect(Redirect),
    Respond {
        status: u16,
        body: Box<str>,
        content_type: Box<str>,
    },
}

/// The matched prefix of the normalised path (its first `prefix` bytes) replaced by `with`.
#[derive(Debug)]
pub(crate) struct Rewrite {
    pub(crate) prefix: usize,
    pub(crate) with: Box<str>,
}

/// Why a listener's routes could not be built (the configuration check refuses all of these
/// first; this is what a caller that skipped it gets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RoutesError {
    /// The routes crate refused them (a regex, a host, a shadowed route).
    Table(Vec<routes::BuildError>),
    /// A route names an upstream the configuration does not have.
    UnknownUpstream { route: String, upstream: String },
}

impl Routes {
    /// Compiles `settings`; `upstream_of` gives a name's index in the listener's upstreams,
    /// its `hash_key` for the algorithms that read one, and its sticky cookie's name.
    pub(crate) fn build(
        listener: std::net::SocketAddr,
        settings: &[RouteSettings],
        upstream_of: impl Fn(&str) -> Option<(usize, Option<HashKey>, Option<Box<str>>)>,
    ) -> Result<Routes, RoutesError> {
        let specs: Vec<routes::Spec> = settings.iter().map(|r| r.spec.clone()).collect();
        let table = routes::Table::build(&specs).map_err(RoutesError::Table)?;
        let mut built = Vec::with_capacity(settings.len());
        for r in settings {
            let action = match &r.action {
                RouteAction::Upstream { upstream, rewrite } => {
                    let Some((index, key, sticky)) = upstream_of(upstream) else {
                        return Err(RoutesError::UnknownUpstream {
                            route: r.name.clone(),
                            upstream: upstream.clone(),
                        });
                    };
                    let rewrite = rewrite.as_ref().map(|with| Rewrite {
                        prefix: match &r.spec.path {
                            routes::PathMatch::Prefix { prefix, .. } => prefix.len(),
                            routes::PathMatch::Exact(path) => path.len(),
                            routes::PathMatch::Any | routes::PathMatch::Regex { .. } => 0,
                        },
                        with: with.as_str().into(),
                    });
                    Action::Upstream {
                        upstream: index,
                        key,
                        sticky,
                        rewrite,
                    }
                }
                RouteAction::Redirect(redirect) => Action::Redirect(redirect.clone()),
                RouteAction::Respond {
                    status,
                    body,
                    content_type,
                } => Action::Respond {
                    status: *status,
                    body: body.as_str().into(),
                    content_type: content_type.as_str().into(),
                },
            };
            built.push(Route {
                name: r.name.as_str().into(),
                counts_id: crate::metrics::route_id(&listener.to_string(), &r.name),
                action,
                request_headers: r.request_headers.clone(),
                response_headers: r.response_headers.clone(),
                access: r.access.clone(),
                zones: crate::admission::Zones::new(r.limit_req.as_ref(), r.limit_conn.as_ref()),
            });
        }
        let any_rules = built
            .iter()
            .any(|r| !r.request_headers.is_empty() || !r.response_headers.is_empty());
        Ok(Routes {
            table,
            routes: built,
            any_rules,
        })
    }

    /// Takes the state of `old`'s limits (a reload) for each route of the same name whose
    /// limits did not change.
    pub(crate) fn adopt_zones(&mut self, old: &Routes) {
        for route in &mut self.routes {
            if let Some(was) = old.routes.iter().find(|o| o.name == route.name) {
                route.zones.adopt(&was.zones);
            }
        }
    }

    /// The route that takes `request`.
    pub(crate) fn select<H: routes::Headers + ?Sized>(
        &self,
        request: &routes::Request<'_, H>,
    ) -> routes::Selected {
        self.table.select(request)
    }

    /// Whether any route has header rules.
    pub(crate) fn any_rules(&self) -> bool {
        self.any_rules
    }

    /// Route number `i` (as [`Routes::select`] gave it).
    pub(crate) fn get(&self, i: usize) -> Option<&Route> {
        self.routes.get(i)
    }
}
