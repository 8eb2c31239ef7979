//! The compiled routes of one listener, and the choice of one for a request.
//!
//! CONTRACT (the proxy and `fulcrum check` are written against these types; keep them, or
//! change both sides together): `Table::build` from the listener's routes in file order,
//! `Table::select` once per request, no allocation in `select`.

/// How a route matches the (normalised) path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PathMatch {
    /// No path condition: any path, as a prefix `/` would (but the longest-prefix rule sees
    /// it as the empty prefix, shorter than every other).
    #[default]
    Any,
    /// nginx `location /p/`; `wins`: nginx `location ^~ /p/` (`prefix_wins = true`).
    Prefix { prefix: String, wins: bool },
    /// nginx `location = /p` (`path_exact`).
    Exact(String),
    /// nginx `location ~ re` (`path_regex`), or `location ~* re` with `nocase`
    /// (`path_regex_nocase`).
    Regex { pattern: String, nocase: bool },
}

/// One route's conditions, as the configuration gives them (syntax already checked by the
/// caller: methods upper case, header names lower case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// nginx `server_name` forms: `example.com`, `*.example.com`, `www.example.*`,
    /// `.example.com` (the name and all its subdomains), `~regex`. Empty: any host.
    pub hosts: Vec<String>,
    pub path: PathMatch,
    /// Empty: any method.
    pub methods: Vec<String>,
    /// (lower-case name, exact value): the request has a field of that name with that value.
    pub headers: Vec<(String, String)>,
    /// (key, value): the query's first parameter named `key` has exactly `value` (raw, not
    /// percent-decoded, as nginx's `$arg_key`).
    pub query: Vec<(String, String)>,
    /// nginx's auto-redirect: the route passes requests to an upstream and its prefix or
    /// exact path ends in `/`, so a request for that path without the slash is answered with
    /// a 301 to it with the slash ([`Selected::AddSlash`]), where nginx does so.
    pub auto_redirect: bool,
}

/// What `select` is asked about one request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a, H: Headers + ?Sized> {
    /// The `Host` field (or `:authority`, or the absolute target's authority) as received:
    /// port, case and a trailing dot as sent; empty when there is none.
    pub host: &'a [u8],
    /// The normalised path ([`crate::normalize`]).
    pub path: &'a [u8],
    pub method: &'a [u8],
    /// The target's query (after `?`, without it), raw; empty when there is none.
    pub query: &'a [u8],
    pub headers: &'a H,
}

/// The request's header fields, as `select` asks about them.
pub trait Headers {
    /// Whether a field named `name` (lower case) has exactly `value`.
    fn has(&self, name: &str, value: &[u8]) -> bool;
}

/// Which route takes a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    /// The route at this index of the specs given to `build`.
    Route(usize),
    /// nginx's auto-redirect of the route at this index: answer 301 to the path with `/`
    /// appended (and the query kept).
    AddSlash(usize),
    /// A `Host` nginx refuses (400).
    BadHost,
    /// No route matches.
    None,
}

/// Why the routes cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    /// The index of the route at fault.
    pub route: usize,
    pub kind: BuildErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildErrorKind {
    /// A regex (`path_regex*`, or a `~` host at `host` index) does not compile; `position`:
    /// the byte offset in the pattern where the regex crate places the fault, if it says.
    Regex {
        host: Option<usize>,
        message: String,
        position: Option<usize>,
    },
    /// A host name nginx would not take (empty, a wildcard elsewhere than at one end, ...).
    Host { host: usize, why: String },
    /// No request can ever reach this route: route `by` (earlier in file order) has the same
    /// hosts, path and conditions.
    Shadowed { by: usize },
}

/// A listener's routes, compiled.
#[derive(Debug)]
pub struct Table {
    specs: Vec<Spec>,
}

impl Table {
    /// Compiles `specs` (in file order); every problem found, not only the first.
    pub fn build(specs: &[Spec]) -> Result<Table, Vec<BuildError>> {
        Ok(Table {
            specs: specs.to_vec(),
        })
    }

    /// The route that takes `request`, by nginx's precedence.
    pub fn select<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Selected {
        let _ = (request, &self.specs);
        Selected::None
    }

    /// How many routes there are.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}
