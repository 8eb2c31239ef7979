//! `Table::build` and `Table::select` against nginx's rules, case by case (the differential
//! test in `nginx.rs` checks the same against the real nginx where nginx can express it).

use proptest::prelude::*;
use routes::{BuildErrorKind, Headers, Host, PathMatch, Request, Selected, Spec, Table};

/// Header fields as (lower-case name, value) pairs.
struct Fields(Vec<(&'static str, &'static str)>);

impl Headers for Fields {
    fn has(&self, name: &str, value: &[u8]) -> bool {
        self.0
            .iter()
            .any(|(n, v)| *n == name && v.as_bytes() == value)
    }
}

fn prefix(p: &str) -> PathMatch {
    PathMatch::Prefix {
        prefix: p.into(),
        wins: false,
    }
}

fn spec(hosts: &[&str], path: PathMatch) -> Spec {
    Spec {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        path,
        ..Spec::default()
    }
}

fn pick(table: &Table, host: &str, path: &str) -> Selected {
    pick_full(table, host, path, "GET", "", &Fields(vec![]))
}

fn pick_full(t: &Table, host: &str, path: &str, method: &str, query: &str, h: &Fields) -> Selected {
    t.select(&Request {
        host: Host::Sent(host.as_bytes()),
        path: path.as_bytes(),
        method: method.as_bytes(),
        query: query.as_bytes(),
        headers: h,
    })
}

#[test]
fn host_precedence() {
    let table = Table::build(&[
        spec(&[], PathMatch::Any),                        // 0 default
        spec(&["www.example.com"], PathMatch::Any),       // 1 exact
        spec(&["*.example.com"], PathMatch::Any),         // 2 head
        spec(&["*.b.example.com"], PathMatch::Any),       // 3 longer head
        spec(&["www.example.*"], PathMatch::Any),         // 4 tail
        spec(&["~^w+\\.example\\.org$"], PathMatch::Any), // 5 regex
        spec(&["~example"], PathMatch::Any),              // 6 later regex
        spec(&[".dot.net"], PathMatch::Any),              // 7 name and subdomains
    ])
    .expect("builds");
    let cases = [
        ("WWW.Example.COM:8080", 1),
        ("www.example.com.", 1),
        ("a.example.com", 2),
        ("a.b.example.com", 3),
        ("b.example.com", 2),
        ("www.example.net", 4),
        ("www.example.co.uk", 4),
        ("WWW.example.org", 4),
        ("ww.example.org", 5),
        ("example.de", 6),
        ("dot.net", 7),
        ("x.y.dot.net", 7),
        ("other", 0),
        ("", 0),
    ];
    for (host, want) in cases {
        assert_eq!(
            pick(&table, host, "/"),
            Selected::Route(want),
            "host {host:?}"
        );
    }
    for bad in ["a..b", "a/b", ":80", "a b"] {
        assert_eq!(pick(&table, bad, "/"), Selected::BadHost, "host {bad:?}");
    }
}

#[test]
fn a_name_listed_by_several_routes_selects_all_of_them() {
    let table = Table::build(&[
        spec(&["a.com", "b.com"], prefix("/x")),
        spec(&["a.com"], prefix("/y")),
        spec(&[], PathMatch::Any),
    ])
    .expect("builds");
    assert_eq!(pick(&table, "a.com", "/y"), Selected::Route(1));
    assert_eq!(pick(&table, "b.com", "/x"), Selected::Route(0));
    // b.com chose its server; its routes do not match /y, and nginx does not fall back.
    assert_eq!(pick(&table, "b.com", "/y"), Selected::None);
    assert_eq!(pick(&table, "c.com", "/y"), Selected::Route(2));
}

#[test]
fn path_precedence() {
    let table = Table::build(&[
        spec(&[], prefix("/")),                       // 0
        spec(&[], PathMatch::Exact("/exact".into())), // 1
        spec(&[], prefix("/img/")),                   // 2
        spec(
            &[],
            PathMatch::Prefix {
                prefix: "/static/".into(),
                wins: true,
            },
        ), // 3
        spec(
            &[],
            PathMatch::Regex {
                pattern: "\\.png$".into(),
                nocase: false,
            },
        ), // 4
        spec(
            &[],
            PathMatch::Regex {
                pattern: "\\.(png|jpe?g)$".into(),
                nocase: true,
            },
        ), // 5
        spec(&[], prefix("/img/deep/")),              // 6
    ])
    .expect("builds");
    let cases = [
        ("/exact", 1),
        ("/exact/", 0),
        ("/img/a.png", 4),
        ("/img/a.PNG", 5),
        ("/img/a.gif", 2),
        ("/img/deep/a.gif", 6),
        ("/static/a.png", 3),
        ("/a.jpg", 5),
        ("/IMG/a.gif", 0),
    ];
    for (path, want) in cases {
        assert_eq!(
            pick(&table, "", path),
            Selected::Route(want),
            "path {path:?}"
        );
    }
}

/// Nine regexes in one server: `select` tries a `RegexSet` first; the order must not change.
#[test]
fn many_regexes_keep_file_order() {
    let mut specs: Vec<Spec> = (0..8)
        .map(|k| {
            spec(
                &[],
                PathMatch::Regex {
                    pattern: format!("^/r{k}/"),
                    nocase: false,
                },
            )
        })
        .collect();
    specs[3] = spec(
        &[],
        PathMatch::Regex {
            pattern: "x$".into(),
            nocase: false,
        },
    );
    specs.push(spec(
        &[],
        PathMatch::Regex {
            pattern: "^/NOCASE".into(),
            nocase: true,
        },
    )); // 8
    specs.push(spec(&[], prefix("/"))); // 9
    let table = Table::build(&specs).expect("builds");
    assert_eq!(
        pick(&table, "", "/r7/x"),
        Selected::Route(3),
        "file order, not the set's"
    );
    assert_eq!(pick(&table, "", "/r7/y"), Selected::Route(7));
    assert_eq!(pick(&table, "", "/nocase/y"), Selected::Route(8));
    assert_eq!(
        pick(&table, "", "/R7/y"),
        Selected::Route(9),
        "case-sensitive `~`"
    );
    assert_eq!(pick(&table, "", "/none"), Selected::Route(9));
}

#[test]
fn auto_redirect() {
    let mut api = spec(&[], prefix("/api/"));
    api.auto_redirect = true;
    let mut exact = spec(&[], PathMatch::Exact("/e/".into()));
    exact.auto_redirect = true;
    let table = Table::build(&[
        spec(
            &[],
            PathMatch::Regex {
                pattern: "^/api".into(),
                nocase: false,
            },
        ), // 0
        api,                                      // 1
        exact,                                    // 2
        spec(&[], PathMatch::Exact("/e".into())), // 3
        spec(&[], prefix("/")),                   // 4
    ])
    .expect("builds");
    // NGX_DONE returns before the regexes are tried.
    assert_eq!(pick(&table, "", "/api"), Selected::AddSlash(1));
    assert_eq!(pick(&table, "", "/api/x"), Selected::Route(0));
    assert_eq!(
        pick(&table, "", "/e"),
        Selected::Route(3),
        "an exact location wins"
    );
    assert_eq!(pick(&table, "", "/ap"), Selected::Route(4));
    let mut plain = spec(&[], prefix("/api/"));
    plain.auto_redirect = true;
    let table = Table::build(&[plain, spec(&[], prefix("/api"))]).expect("builds");
    assert_eq!(
        pick(&table, "", "/api"),
        Selected::Route(1),
        "a prefix equal to the path wins"
    );
}

#[test]
fn conditions_narrow_candidates() {
    let mut post = spec(&[], prefix("/api/"));
    post.methods = vec!["POST".into()];
    let mut canary = spec(&[], prefix("/api/"));
    canary.headers = vec![("x-canary".into(), "1".into())];
    let mut v2 = spec(&[], prefix("/api/"));
    v2.query = vec![("v".into(), "2".into())];
    let table = Table::build(&[post, canary, v2, spec(&[], prefix("/"))]).expect("builds");
    let none = Fields(vec![]);
    let can = Fields(vec![("x-canary", "1")]);
    assert_eq!(
        pick_full(&table, "", "/api/a", "POST", "", &none),
        Selected::Route(0)
    );
    assert_eq!(
        pick_full(&table, "", "/api/a", "GET", "", &can),
        Selected::Route(1)
    );
    assert_eq!(
        pick_full(&table, "", "/api/a", "GET", "a=1&V=2", &none),
        Selected::Route(2)
    );
    assert_eq!(
        pick_full(&table, "", "/api/a", "GET", "v=3&v=2", &none),
        Selected::Route(3)
    );
    assert_eq!(
        pick_full(&table, "", "/api/a", "GET", "xv=2", &none),
        Selected::Route(3)
    );
}

#[test]
fn build_refuses_with_every_problem() {
    let errors = Table::build(&[
        spec(
            &[],
            PathMatch::Regex {
                pattern: "(?<=a)b".into(),
                nocase: false,
            },
        ),
        spec(&["a..b", "~("], PathMatch::Any),
        spec(&["x.com"], prefix("/p")),
        spec(&["x.com"], prefix("/p")),
        spec(&["w*.x.com"], PathMatch::Any),
    ])
    .expect_err("refused");
    let kinds: Vec<_> = errors.iter().map(|e| (e.route, e.kind.clone())).collect();
    assert_eq!(kinds.len(), 5, "{errors:#?}");
    assert!(
        matches!(&kinds[0], (0, BuildErrorKind::Regex { host: None, message, position: Some(0) })
        if message.contains("look-around") && message.contains("PCRE")),
        "{:?}",
        kinds[0]
    );
    assert!(matches!(
        &kinds[1],
        (1, BuildErrorKind::Host { host: 0, .. })
    ));
    assert!(matches!(
        &kinds[2],
        (1, BuildErrorKind::Regex { host: Some(1), .. })
    ));
    assert_eq!(kinds[3], (3, BuildErrorKind::Shadowed { by: 2 }));
    assert!(matches!(
        &kinds[4],
        (4, BuildErrorKind::Host { host: 0, .. })
    ));
    assert!(errors.iter().all(|e| !e.to_string().is_empty()));
}

#[test]
fn shadowed_only_when_every_name_is_covered() {
    let errors = Table::build(&[
        spec(&["a.com", "b.com"], prefix("/p")),
        spec(&["A.com"], prefix("/p")), // every name in route 0: hidden
        spec(&["a.com", "c.com"], prefix("/p")), // c.com is its own: reachable
        spec(&[], prefix("/p")),
        spec(&[], prefix("/p")), // hidden by 3
    ])
    .expect_err("refused");
    let kinds: Vec<_> = errors.iter().map(|e| (e.route, e.kind.clone())).collect();
    assert_eq!(
        kinds,
        vec![
            (1, BuildErrorKind::Shadowed { by: 0 }),
            (4, BuildErrorKind::Shadowed { by: 3 })
        ]
    );
}

proptest! {
    /// `select` never panics, whatever the bytes.
    #[test]
    fn select_never_panics(
        host in proptest::collection::vec(any::<u8>(), 0..30),
        path in proptest::collection::vec(any::<u8>(), 0..30),
        query in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut api = spec(&["*.a.com", "b.*"], prefix("/api/"));
        api.auto_redirect = true;
        api.query = vec![("k".into(), "v".into())];
        let table = Table::build(&[
            api,
            spec(&["~^x"], PathMatch::Regex { pattern: "z".into(), nocase: true }),
            spec(&[], PathMatch::Exact("/".into())),
        ]).expect("builds");
        let _ = table.select(&Request {
            host: Host::Sent(&host), path: &path, method: b"GET", query: &query, headers: &Fields(vec![]),
        });
    }
}

/// nginx's location rules written the slow, obvious way: every route looked at in turn.
fn naive(specs: &[Spec], path: &str, method: &str) -> Selected {
    let ok = |s: &Spec| s.methods.is_empty() || s.methods.iter().any(|m| m == method);
    let found = |want: &str, exact: bool| {
        specs.iter().position(|s| {
            ok(s)
                && match &s.path {
                    PathMatch::Exact(p) => exact && p == want,
                    PathMatch::Prefix { prefix, .. } => !exact && prefix == want,
                    PathMatch::Any => !exact && want.is_empty(),
                    PathMatch::Regex { .. } => false,
                }
        })
    };
    if let Some(r) = found(path, true) {
        return Selected::Route(r);
    }
    let longest = (0..=path.len())
        .rev()
        .find_map(|n| path.get(..n).and_then(|p| found(p, false)));
    if found(path, false).is_none() {
        let slash = format!("{path}/");
        let (e, p) = (found(&slash, true), found(&slash, false));
        if [e, p].iter().flatten().any(|&r| specs[r].auto_redirect) {
            return Selected::AddSlash(e.or(p).unwrap_or_default());
        }
    }
    if let Some(r) = longest
        && matches!(specs[r].path, PathMatch::Prefix { wins: true, .. })
    {
        return Selected::Route(r);
    }
    let regex = specs.iter().position(|s| {
        ok(s)
            && match &s.path {
                PathMatch::Regex { pattern, nocase } => regex::RegexBuilder::new(pattern)
                    .case_insensitive(*nocase)
                    .build()
                    .is_ok_and(|re| re.is_match(path)),
                _ => false,
            }
    });
    regex.or(longest).map_or(Selected::None, Selected::Route)
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    let names = prop::sample::select(vec!["/", "/a", "/a/", "/ab", "/a/b", "/b/", "/A"]);
    let path = prop_oneof![
        Just(PathMatch::Any),
        (names.clone(), any::<bool>()).prop_map(|(p, wins)| PathMatch::Prefix {
            prefix: p.into(),
            wins
        }),
        names.prop_map(|p| PathMatch::Exact(p.into())),
        (
            prop::sample::select(vec!["a$", "^/a/", "b", "^/A"]),
            any::<bool>()
        )
            .prop_map(|(p, nocase)| PathMatch::Regex {
                pattern: p.into(),
                nocase
            }),
    ];
    let methods = prop::sample::select(vec![vec![], vec!["GET".to_string()], vec!["POST".into()]]);
    (path, methods, any::<bool>()).prop_map(|(path, methods, auto_redirect)| Spec {
        path,
        methods,
        auto_redirect,
        ..Spec::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The trie, the early returns and the conditions agree with the obvious model.
    #[test]
    fn select_agrees_with_naive_model(
        specs in prop::collection::vec(arb_spec(), 1..6),
        path in "/[abA/]{0,4}",
        post in any::<bool>(),
    ) {
        let Ok(table) = Table::build(&specs) else {
            return Ok(()); // shadowed routes: refused, nothing to compare
        };
        let method = if post { "POST" } else { "GET" };
        let got = pick_full(&table, "", &path, method, "", &Fields(vec![]));
        prop_assert_eq!(got, naive(&specs, &path, method));
    }
}
