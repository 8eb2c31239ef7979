//! The compiled routes of one listener, and the choice of one for a request.
//!
//! # Routes and nginx's servers
//!
//! nginx picks a `server` by the request's host, then a `location` within it. Here each route
//! lists its own host names; a request's host picks the *names* that match it best, by
//! nginx's order (`ngx_http_find_virtual_server`): an exact name; else the longest leading
//! wildcard (`*.example.com`, or `.example.com`, which also takes `example.com`); else the
//! longest trailing wildcard (`www.example.*`); else the first regex name (`~...`, without
//! case) in file order; else the routes without `host`. The candidates are then every route
//! that lists the name that matched (an nginx server is a set of routes with the same names;
//! a route may also share one name with another set), and among them the location is chosen
//! as `ngx_http_core_find_location` does:
//!
//! 1. a route whose `path_exact` is the path;
//! 2. the longest matching prefix (`path`; no path at all is the empty prefix), which ends the
//!    search when that route has `prefix_wins` (nginx `^~`) — unless nginx's auto-redirect
//!    applies first: a route passing to an upstream whose path is this path with `/` added
//!    answers with a 301 to it, when no prefix as long as the path matched;
//! 3. the first route, in file order, whose `path_regex` (`path_regex_nocase`: without case)
//!    matches;
//! 4. the longest prefix of step 2.
//!
//! A route whose `methods`, `headers` or `query` do not hold is no candidate at any step;
//! among candidates otherwise equal (the same exact path, the same prefix), file order wins.
//! Prefixes are matched byte for byte (case-sensitive, as nginx on Linux).

use regex::bytes::{Regex, RegexBuilder};

/// The tables' maps (foldhash: see Cargo.toml).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use crate::host::{self, MAX_HOST, Name};

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
    pub host: Host<'a>,
    /// The normalised path ([`crate::normalize`]).
    pub path: &'a [u8],
    pub method: &'a [u8],
    /// The target's query (after `?`, without it), raw; empty when there is none.
    pub query: &'a [u8],
    pub headers: &'a H,
}

/// A request's host, as `select` is given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    /// The `Host` field (or `:authority`, or the absolute target's authority) as received:
    /// port, case and a trailing dot as sent; empty when there is none. `select` checks it as
    /// nginx does ([`crate::host_name`]).
    Sent(&'a [u8]),
    /// A host its caller has already checked as nginx does, in a pass over its bytes of its
    /// own (so that they are looked at once), with the result [`crate::host_name`] gives: the
    /// name (no port, no trailing dot) and whether it has upper-case letters.
    Name { name: &'a [u8], upper: bool },
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

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "route {}: ", self.route)?;
        match &self.kind {
            BuildErrorKind::Regex {
                message, position, ..
            } => match position {
                Some(at) => write!(f, "the regex does not compile (at byte {at}): {message}"),
                None => write!(f, "the regex does not compile: {message}"),
            },
            BuildErrorKind::Host { why, .. } => f.write_str(why),
            BuildErrorKind::Shadowed { by } => write!(
                f,
                "no request can reach it: route {by} comes first with the same conditions"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// A listener's routes, compiled.
#[derive(Debug)]
pub struct Table {
    specs: Vec<Spec>,
    /// By route: whether it has conditions (`methods`, `headers`, `query`) to check.
    conditional: Vec<bool>,
    /// Exact names, leading wildcards (by their suffix, `.example.com`), trailing wildcards
    /// (by their prefix, `www.example.`): the set of routes each picks.
    exact: HashMap<Box<[u8]>, usize>,
    head: HashMap<Box<[u8]>, usize>,
    /// `.example.com`'s own name, `example.com`, after the exact names.
    head_self: HashMap<Box<[u8]>, usize>,
    tail: HashMap<Box<[u8]>, usize>,
    /// Regex names in file order (of their first appearance), each with its set.
    regexes: Vec<(Regex, usize)>,
    /// The routes without `host`.
    any: Option<usize>,
    sets: Vec<Locations>,
}

/// The routes one host picks, ready for the path.
#[derive(Debug)]
struct Locations {
    /// Prefixes and exact paths.
    tree: Tree,
    /// `path_regex*` in file order.
    regexes: Vec<(Regex, u32)>,
}

/// A byte trie of prefixes and exact paths, as they are gathered: node 0 is the root (the
/// empty name). Made into a [`Tree`] for requests.
#[derive(Debug)]
struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    /// By byte, sorted.
    children: Vec<(u8, u32)>,
    /// Routes whose prefix ends here, in file order.
    routes: Vec<u32>,
    /// Routes whose `path_exact` is this node's name, in file order.
    exact: Vec<u32>,
}

impl Default for Trie {
    fn default() -> Trie {
        Trie {
            nodes: vec![TrieNode::default()],
        }
    }
}

impl Trie {
    /// The node for `key`, made if need be.
    fn node(&mut self, key: &[u8]) -> usize {
        let mut at = 0;
        for &b in key {
            let children = &self.nodes[at].children;
            at = match children.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(i) => children[i].1 as usize,
                Err(i) => {
                    let new = self.nodes.len();
                    self.nodes.push(TrieNode::default());
                    self.nodes[at].children.insert(i, (b, new as u32));
                    new
                }
            };
        }
        at
    }
}

/// The trie with every node that names no route and has one child merged into that child (a
/// radix tree): a request's path is walked a label at a time, not a byte at a time. Node 0 is
/// the root; a node's name is its parent's followed by its label (its first byte, in the
/// parent's `first`, then its `tail`). With `routes` and `exact`,
/// a node is nginx's exact and inclusive locations of one name (its static location tree's
/// node), which the auto-redirect looks at together.
#[derive(Debug)]
struct Tree {
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    /// The label but its first byte (the root: empty).
    tail: Box<[u8]>,
    /// The first byte of each child's label, and the child, in the same order.
    first: Box<[u8]>,
    children: Box<[u32]>,
    /// Routes whose prefix is this node's name, in file order.
    routes: Box<[u32]>,
    /// Routes whose `path_exact` is this node's name, in file order.
    exact: Box<[u32]>,
}

/// Where a path's walk down a [`Tree`] ended.
#[derive(Debug, Clone, Copy)]
enum End<'t> {
    /// The path is this node's name.
    Node(&'t Node),
    /// The path is this node's name but its last `missing` bytes.
    Inside { node: &'t Node, missing: usize },
    /// The path leaves the tree.
    Out,
}

impl Tree {
    fn from_trie(trie: &Trie) -> Tree {
        let mut tree = Tree { nodes: Vec::new() };
        tree.add(trie, 0, Vec::new());
        tree
    }

    /// Adds trie node `at`, reached by `label`, and the nodes below it; its index.
    fn add(&mut self, trie: &Trie, mut at: usize, mut label: Vec<u8>) -> u32 {
        while at != 0 {
            let node = &trie.nodes[at];
            match node.children.as_slice() {
                [(b, child)] if node.routes.is_empty() && node.exact.is_empty() => {
                    label.push(*b);
                    at = *child as usize;
                }
                _ => break,
            }
        }
        let index = self.nodes.len();
        self.nodes.push(Node::default());
        let node = &trie.nodes[at];
        let children: Vec<u32> = node
            .children
            .iter()
            .map(|&(b, child)| self.add(trie, child as usize, vec![b]))
            .collect();
        self.nodes[index] = Node {
            tail: label.get(1..).unwrap_or_default().into(),
            first: node.children.iter().map(|&(b, _)| b).collect(),
            children: children.into(),
            routes: node.routes.clone().into(),
            exact: node.exact.clone().into(),
        };
        index as u32
    }

    /// The child of `node` whose label starts with `b`.
    #[inline]
    fn child(&self, node: &Node, b: u8) -> Option<&Node> {
        let k = node.first.iter().position(|&f| f == b)?;
        let child = *node.children.get(k)?;
        self.nodes.get(child as usize)
    }
}

/// `a == b` for the few bytes of a label, without a call to `memcmp`.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl Table {
    /// Compiles `specs` (in file order); every problem found, not only the first.
    pub fn build(specs: &[Spec]) -> Result<Table, Vec<BuildError>> {
        let mut errors = Vec::new();
        let mut table = Table {
            specs: specs.to_vec(),
            conditional: specs
                .iter()
                .map(|s| !s.methods.is_empty() || !s.headers.is_empty() || !s.query.is_empty())
                .collect(),
            exact: HashMap::default(),
            head: HashMap::default(),
            head_self: HashMap::default(),
            tail: HashMap::default(),
            regexes: Vec::new(),
            any: None,
            sets: Vec::new(),
        };
        // The set of routes each name (in its form) picks, in order of first appearance.
        let mut names: Vec<(Name, Vec<u32>)> = Vec::new();
        let mut hostless = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            if spec.hosts.is_empty() {
                hostless.push(i as u32);
            }
            for (h, text) in spec.hosts.iter().enumerate() {
                match host::parse(text) {
                    Ok(name) => match names.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, routes)) => routes.push(i as u32),
                        None => names.push((name, vec![i as u32])),
                    },
                    Err(why) => errors.push(BuildError {
                        route: i,
                        kind: BuildErrorKind::Host { host: h, why },
                    }),
                }
            }
        }
        let mut regex_of = HashMap::default();
        for (i, spec) in specs.iter().enumerate() {
            if let PathMatch::Regex { pattern, nocase } = &spec.path {
                match compile(pattern, *nocase) {
                    Ok(re) => {
                        regex_of.insert(i, re);
                    }
                    Err((message, position)) => errors.push(BuildError {
                        route: i,
                        kind: BuildErrorKind::Regex {
                            host: None,
                            message,
                            position,
                        },
                    }),
                }
            }
        }
        for (name, routes) in names {
            let set = table.sets.len();
            table.sets.push(locations(specs, &routes, &regex_of));
            match name {
                Name::Exact(n) => {
                    table.exact.insert(n.into_bytes().into(), set);
                }
                Name::Head { suffix, strict } => {
                    if !strict {
                        let own = suffix.trim_start_matches('.').as_bytes();
                        table.head_self.insert(own.into(), set);
                    }
                    table.head.insert(suffix.into_bytes().into(), set);
                }
                Name::Tail(prefix) => {
                    table.tail.insert(prefix.into_bytes().into(), set);
                }
                Name::Regex(pattern) => match compile(&pattern, true) {
                    Ok(re) => table.regexes.push((re, set)),
                    Err((message, position)) => {
                        for &r in &routes {
                            let spec = &specs[r as usize];
                            let h = spec
                                .hosts
                                .iter()
                                .position(|t| t.strip_prefix('~') == Some(&pattern));
                            errors.push(BuildError {
                                route: r as usize,
                                kind: BuildErrorKind::Regex {
                                    host: h,
                                    message: message.clone(),
                                    position,
                                },
                            });
                        }
                    }
                },
            }
        }
        if !hostless.is_empty() {
            table.any = Some(table.sets.len());
            table.sets.push(locations(specs, &hostless, &regex_of));
        }
        shadowed(specs, &mut errors);
        if errors.is_empty() {
            Ok(table)
        } else {
            errors.sort_by_key(|e| e.route);
            Err(errors)
        }
    }

    /// The route that takes `request`, by nginx's precedence.
    pub fn select<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Selected {
        let (name, upper) = match request.host {
            Host::Sent([]) => (&[][..], false),
            Host::Sent(raw) => match host::host_name(raw) {
                Some((len, upper)) => (&raw[..len], upper),
                None => return Selected::BadHost,
            },
            Host::Name { name, upper } => (name, upper),
        };
        let set = if name.is_empty() {
            self.any
        } else if name.len() > MAX_HOST {
            return Selected::BadHost;
        } else if upper {
            // Lower case is what the names are kept in (a copy only for a host that has
            // upper-case letters; a browser sends it in lower case).
            let mut buf = [0u8; MAX_HOST];
            let lower = &mut buf[..name.len()];
            lower.copy_from_slice(name);
            lower.make_ascii_lowercase();
            self.server(lower).or(self.any)
        } else {
            self.server(name).or(self.any)
        };
        match set.and_then(|s| self.sets.get(s)) {
            Some(locations) => self.location(locations, request),
            None => Selected::None,
        }
    }

    /// The set of routes `name` (valid, lower case) picks, by nginx's order of server names.
    fn server(&self, name: &[u8]) -> Option<usize> {
        if let Some(&set) = self.exact.get(name) {
            return Some(set);
        }
        // Leading wildcards, the longest first: `.b.example.com`, then `.example.com`, ...
        let mut at = 0;
        while let Some(dot) = name[at..].iter().position(|&b| b == b'.') {
            let suffix = &name[at + dot..];
            if let Some(&set) = self.head.get(suffix) {
                return Some(set);
            }
            at += dot + 1;
        }
        if let Some(&set) = self.head_self.get(name) {
            return Some(set);
        }
        // Trailing wildcards, the longest first: `www.example.`, then `www.`.
        let mut end = name.len();
        while let Some(dot) = name[..end].iter().rposition(|&b| b == b'.') {
            // The wildcard stands for at least one more label.
            if dot + 1 < name.len()
                && let Some(&set) = self.tail.get(&name[..=dot])
            {
                return Some(set);
            }
            end = dot;
        }
        self.regexes
            .iter()
            .find(|(re, _)| re.is_match(name))
            .map(|&(_, set)| set)
    }

    /// The route of `locations` that takes the request.
    fn location<H: Headers + ?Sized>(
        &self,
        locations: &Locations,
        request: &Request<'_, H>,
    ) -> Selected {
        let path = request.path;
        let fits = |r: u32| {
            let r = r as usize;
            match self.conditional.get(r) {
                Some(false) => true,
                Some(true) => self
                    .specs
                    .get(r)
                    .is_some_and(|s| conditions_hold(s, request)),
                None => false,
            }
        };
        // Down the tree as far as the path goes, keeping the longest prefix with a route whose
        // conditions hold.
        let tree = &locations.tree;
        let Some(mut node) = tree.nodes.first() else {
            return Selected::None;
        };
        let mut depth = 0;
        let mut best: Option<(usize, u32)> = None;
        let end = loop {
            if let Some(&r) = node.routes.iter().find(|&&r| fits(r)) {
                best = Some((depth, r));
            }
            let Some(&b) = path.get(depth) else {
                break End::Node(node);
            };
            let Some(child) = tree.child(node, b) else {
                break End::Out;
            };
            // The label's first byte is `b`: what follows it is compared.
            let tail = &*child.tail;
            let rest = path.get(depth + 1..).unwrap_or_default();
            match rest.get(..tail.len()) {
                Some(head) if same(head, tail) => {
                    depth += 1 + tail.len();
                    node = child;
                }
                Some(_) => break End::Out,
                None if tail.starts_with(rest) => {
                    break End::Inside {
                        node: child,
                        missing: tail.len() - rest.len(),
                    };
                }
                None => break End::Out,
            }
        };
        if let End::Node(n) = end
            && let Some(&r) = n.exact.iter().find(|&&r| fits(r))
        {
            return Selected::Route(r as usize);
        }
        // nginx's auto-redirect: the path with `/` added names a route that proxies, and no
        // prefix as long as the path matched.
        let full_prefix = best.is_some_and(|(d, _)| d == path.len());
        let slash = match end {
            _ if full_prefix => None,
            End::Node(n) => tree.child(n, b'/').filter(|c| c.tail.is_empty()),
            End::Inside { node, missing: 1 } if node.tail.last() == Some(&b'/') => Some(node),
            End::Inside { .. } | End::Out => None,
        };
        if let Some(node) = slash {
            // nginx's node for the name: its exact location's configuration if it has one,
            // and a redirect if either its exact or its inclusive location asks for one
            // (here: the first route of each kind whose conditions hold).
            let exact = node.exact.iter().copied().find(|&r| fits(r));
            let inclusive = node.routes.iter().copied().find(|&r| fits(r));
            let redirects = |r: Option<u32>| {
                r.and_then(|r| self.specs.get(r as usize))
                    .is_some_and(|s| s.auto_redirect)
            };
            if (redirects(exact) || redirects(inclusive))
                && let Some(r) = exact.or(inclusive)
            {
                return Selected::AddSlash(r as usize);
            }
        }
        if let Some((_, r)) = best {
            let wins = matches!(
                self.specs.get(r as usize).map(|s| &s.path),
                Some(PathMatch::Prefix { wins: true, .. })
            );
            if wins {
                return Selected::Route(r as usize);
            }
        }
        if let Some(&(_, r)) = locations
            .regexes
            .iter()
            .find(|(re, r)| fits(*r) && re.is_match(path))
        {
            return Selected::Route(r as usize);
        }
        match best {
            Some((_, r)) => Selected::Route(r as usize),
            None => Selected::None,
        }
    }

    /// How many routes there are.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

/// The locations of the routes `routes` (indexes into `specs`, in file order).
fn locations(specs: &[Spec], routes: &[u32], regex_of: &HashMap<usize, Regex>) -> Locations {
    let mut trie = Trie::default();
    let mut regexes = Vec::new();
    for &r in routes {
        let spec = &specs[r as usize];
        match &spec.path {
            PathMatch::Exact(path) => {
                let node = trie.node(path.as_bytes());
                trie.nodes[node].exact.push(r);
            }
            PathMatch::Prefix { prefix, .. } => {
                let node = trie.node(prefix.as_bytes());
                trie.nodes[node].routes.push(r);
            }
            PathMatch::Any => trie.nodes[0].routes.push(r),
            PathMatch::Regex { .. } => {
                if let Some(re) = regex_of.get(&(r as usize)) {
                    regexes.push((re.clone(), r));
                }
            }
        }
    }
    Locations {
        tree: Tree::from_trie(&trie),
        regexes,
    }
}

/// A regex as nginx would run it (unanchored search), case-insensitive with `nocase`; `Err`:
/// the regex crate's message, and the byte offset of the fault when it names one.
fn compile(pattern: &str, nocase: bool) -> Result<Regex, (String, Option<usize>)> {
    RegexBuilder::new(pattern)
        .case_insensitive(nocase)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let mut message = text.lines().last().unwrap_or_default().trim().to_owned();
            if message.contains("look-around") || message.contains("backreferences") {
                message.push_str(
                    " (look-around and backreferences are PCRE features nginx has; the regex crate, which runs in linear time, has not)",
                );
            }
            (message, position_of(pattern))
        })
}

/// Where the regex syntax parser places the first fault in `pattern`.
fn position_of(pattern: &str) -> Option<usize> {
    regex_syntax::ast::parse::Parser::new()
        .parse(pattern)
        .err()
        .map(|e| e.span().start.offset)
}

/// Whether `spec`'s methods, headers and query hold for `request`.
fn conditions_hold<H: Headers + ?Sized>(spec: &Spec, request: &Request<'_, H>) -> bool {
    (spec.methods.is_empty() || spec.methods.iter().any(|m| m.as_bytes() == request.method))
        && spec
            .headers
            .iter()
            .all(|(name, value)| request.headers.has(name, value.as_bytes()))
        && spec
            .query
            .iter()
            .all(|(key, value)| first_arg(request.query, key.as_bytes()) == Some(value.as_bytes()))
}

/// The value of the query's first parameter named `key` (nginx's `$arg_key`: the name compared
/// without case, the value as sent).
fn first_arg<'q>(query: &'q [u8], key: &[u8]) -> Option<&'q [u8]> {
    query.split(|&b| b == b'&').find_map(|pair| {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &b""[..]),
        };
        k.eq_ignore_ascii_case(key).then_some(v)
    })
}

/// Reports each route earlier ones make unreachable: for every host name it lists (or, without
/// any, among the routes without `host`), an earlier route with that name, the same path and
/// conditions no narrower than its own takes every request it would (the first of those is
/// named).
fn shadowed(specs: &[Spec], errors: &mut Vec<BuildError>) {
    let names =
        |s: &Spec| -> Vec<String> { s.hosts.iter().map(|h| h.to_ascii_lowercase()).collect() };
    let covers = |earlier: &Spec, later: &Spec| {
        same_path(&earlier.path, &later.path)
            && (earlier.methods.is_empty()
                || (!later.methods.is_empty()
                    && later.methods.iter().all(|m| earlier.methods.contains(m))))
            && earlier.headers.iter().all(|h| later.headers.contains(h))
            && earlier.query.iter().all(|q| later.query.contains(q))
    };
    for (j, later) in specs.iter().enumerate() {
        let later_names = names(later);
        let cover_of = |name: Option<&String>| {
            specs[..j].iter().position(|earlier| {
                let listed = match name {
                    Some(n) => names(earlier).contains(n),
                    None => earlier.hosts.is_empty(),
                };
                listed && covers(earlier, later)
            })
        };
        let by = if later_names.is_empty() {
            cover_of(None)
        } else {
            later_names
                .iter()
                .map(|n| cover_of(Some(n)))
                .collect::<Option<Vec<usize>>>()
                .and_then(|bys| bys.first().copied())
        };
        if let Some(by) = by {
            errors.push(BuildError {
                route: j,
                kind: BuildErrorKind::Shadowed { by },
            });
        }
    }
}

/// Whether two path conditions take the same paths in the same step (`prefix_wins` changes
/// when a prefix is taken, not which paths it takes: `/a/` with and without it are the same
/// location to nginx, which refuses the pair as duplicates).
fn same_path(a: &PathMatch, b: &PathMatch) -> bool {
    match (a, b) {
        (PathMatch::Prefix { prefix: x, .. }, PathMatch::Prefix { prefix: y, .. }) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHeaders;
    impl Headers for NoHeaders {
        fn has(&self, _: &str, _: &[u8]) -> bool {
            false
        }
    }

    fn spec(hosts: &[&str], path: PathMatch) -> Spec {
        Spec {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            path,
            ..Spec::default()
        }
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix {
            prefix: p.into(),
            wins: false,
        }
    }

    fn regex(p: &str) -> PathMatch {
        PathMatch::Regex {
            pattern: p.into(),
            nocase: false,
        }
    }

    fn pick(t: &Table, host: &str, path: &str) -> Selected {
        t.select(&Request {
            host: Host::Sent(host.as_bytes()),
            path: path.as_bytes(),
            method: b"GET",
            query: b"",
            headers: &NoHeaders,
        })
    }

    #[test]
    fn locations_in_nginx_s_order() {
        let mut wins = prefix("/static/");
        if let PathMatch::Prefix { wins: w, .. } = &mut wins {
            *w = true;
        }
        let t = Table::build(&[
            spec(&[], prefix("/")),                       // 0
            spec(&[], prefix("/api/")),                   // 1
            spec(&[], PathMatch::Exact("/api/x".into())), // 2
            spec(&[], regex("\\.png$")),                  // 3
            spec(&[], wins),                              // 4
            spec(&[], regex("^/api/v[0-9]+/")),           // 5
        ])
        .unwrap();
        assert_eq!(pick(&t, "", "/api/x"), Selected::Route(2), "exact first");
        assert_eq!(pick(&t, "", "/api/y"), Selected::Route(1), "longest prefix");
        assert_eq!(
            pick(&t, "", "/api/y.png"),
            Selected::Route(3),
            "regex beats prefix"
        );
        assert_eq!(
            pick(&t, "", "/api/v2/a.png"),
            Selected::Route(3),
            "first regex in file order"
        );
        assert_eq!(
            pick(&t, "", "/static/a.png"),
            Selected::Route(4),
            "^~ stops regexes"
        );
        assert_eq!(pick(&t, "", "/other"), Selected::Route(0));
    }

    #[test]
    fn hosts_in_nginx_s_order() {
        let any = PathMatch::Any;
        let t = Table::build(&[
            spec(&[], any.clone()),                  // 0
            spec(&["www.example.com"], any.clone()), // 1
            spec(&["*.example.com"], any.clone()),   // 2
            spec(&["*.b.example.com"], any.clone()), // 3
            spec(&["www.example.*"], any.clone()),   // 4
            spec(&["~^api[0-9]+\\."], any.clone()),  // 5
            spec(&[".example.org"], any.clone()),    // 6
        ])
        .unwrap();
        assert_eq!(pick(&t, "WWW.Example.com:80", "/"), Selected::Route(1));
        assert_eq!(pick(&t, "a.example.com", "/"), Selected::Route(2));
        assert_eq!(
            pick(&t, "a.b.example.com", "/"),
            Selected::Route(3),
            "longest head"
        );
        assert_eq!(pick(&t, "www.example.net", "/"), Selected::Route(4));
        assert_eq!(pick(&t, "api7.other.net", "/"), Selected::Route(5));
        assert_eq!(pick(&t, "example.org", "/"), Selected::Route(6));
        assert_eq!(pick(&t, "x.example.org", "/"), Selected::Route(6));
        assert_eq!(
            pick(&t, "example.com", "/"),
            Selected::Route(0),
            "*. is strict"
        );
        assert_eq!(pick(&t, "nowhere", "/"), Selected::Route(0));
        assert_eq!(pick(&t, "a..b", "/"), Selected::BadHost);
    }

    #[test]
    fn auto_redirect_as_nginx_for_a_proxied_prefix() {
        let mut api = spec(&[], prefix("/api/"));
        api.auto_redirect = true;
        let t = Table::build(&[spec(&[], prefix("/")), api, spec(&[], regex("i$"))]).unwrap();
        assert_eq!(
            pick(&t, "", "/api"),
            Selected::AddSlash(1),
            "before the regexes"
        );
        assert_eq!(pick(&t, "", "/api/"), Selected::Route(1));
        assert_eq!(pick(&t, "", "/ap"), Selected::Route(0));
        let with_own = Table::build(&[spec(&[], prefix("/api")), {
            let mut s = spec(&[], prefix("/api/"));
            s.auto_redirect = true;
            s
        }])
        .unwrap();
        assert_eq!(
            pick(&with_own, "", "/api"),
            Selected::Route(0),
            "a prefix equal to the path wins"
        );
    }

    #[test]
    fn conditions_narrow_and_file_order_breaks_ties() {
        let mut post = spec(&[], prefix("/a/"));
        post.methods = vec!["POST".into()];
        let mut v2 = spec(&[], prefix("/a/"));
        v2.query = vec![("v".into(), "2".into())];
        let t = Table::build(&[spec(&[], prefix("/")), post, v2]).unwrap();
        assert_eq!(
            pick(&t, "", "/a/x"),
            Selected::Route(0),
            "neither holds for a GET"
        );
        let q = t.select(&Request {
            host: Host::Sent(b""),
            path: b"/a/x",
            method: b"GET",
            query: b"x=1&v=2&v=3",
            headers: &NoHeaders,
        });
        assert_eq!(q, Selected::Route(2));
    }

    #[test]
    fn what_cannot_work_is_refused() {
        let errors = Table::build(&[
            spec(&[], regex("(?=x)")),
            spec(&["www.*.com"], PathMatch::Any),
            spec(&["~(["], PathMatch::Any),
            spec(&[], prefix("/a/")),
            spec(&[], prefix("/a/")),
        ])
        .unwrap_err();
        let kinds: Vec<(usize, &str)> = errors
            .iter()
            .map(|e| {
                (
                    e.route,
                    match &e.kind {
                        BuildErrorKind::Regex { .. } => "regex",
                        BuildErrorKind::Host { .. } => "host",
                        BuildErrorKind::Shadowed { .. } => "shadowed",
                    },
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [(0, "regex"), (1, "host"), (2, "regex"), (4, "shadowed")]
        );
        match &errors[0].kind {
            BuildErrorKind::Regex { position, .. } => assert_eq!(*position, Some(0)),
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    struct Some_;
    impl Headers for Some_ {
        fn has(&self, name: &str, value: &[u8]) -> bool {
            name.len() == value.len()
        }
    }

    proptest! {
        /// Whatever bytes come as host, path, method and query, `select` answers (it never
        /// panics), and a path it gets is one `normalize` made.
        #[test]
        fn select_takes_any_bytes(
            host in proptest::collection::vec(any::<u8>(), 0..40),
            raw in proptest::collection::vec(any::<u8>(), 0..60),
            query in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let specs = [
                Spec { hosts: vec!["*.a.test".into(), "b.*".into(), "~^c".into()], path: PathMatch::Prefix { prefix: "/x/".into(), wins: true }, auto_redirect: true, ..Spec::default() },
                Spec { path: PathMatch::Regex { pattern: "y$".into(), nocase: true }, methods: vec!["GET".into()], query: vec![("k".into(), "v".into())], ..Spec::default() },
                Spec { path: PathMatch::Exact("/".into()), headers: vec![("ab".into(), "cd".into())], ..Spec::default() },
            ];
            let table = Table::build(&specs).unwrap();
            let mut path = Vec::new();
            if crate::normalize(&raw, &mut path).is_ok() {
                let _ = table.select(&Request { host: Host::Sent(&host), path: &path, method: b"GET", query: &query, headers: &Some_ });
                // A path said normal is what normalize makes of it.
                if crate::is_normal(&raw) {
                    prop_assert_eq!(&path, &raw);
                }
                // No escapes left and no dot segments: normalising again changes nothing.
                if !path.contains(&b'%') && !path.contains(&b'#') && path.first() == Some(&b'/') {
                    let mut again = Vec::new();
                    prop_assert!(crate::normalize(&path, &mut again).is_ok());
                    prop_assert_eq!(again, path);
                }
            }
        }
    }
}
