//! The proxy's files form layers: no file imports, directly or through others, a file that
//! imports it back. A request path with a direction is one a reader can follow downwards —
//! the accept loop, the protocol each connection speaks, the request, the attempts, the
//! backend connections, the pool — and each piece can be changed knowing what it rests on.
//! Files that import each other in a circle (issue 25) are one piece that reads as several.
//!
//! The test reads every `.rs` file under `src`, finds what each refers to inside the crate
//! (`use` declarations and paths: `crate::a::b`, `super::…`, `self::…`, a child module by its
//! name, or a name a `use` brought in) and resolves each to the file that defines it: `a/b.rs`,
//! `a.rs` or `a/mod.rs`, following re-exports (`pub use`) to where the item is defined. A
//! folder's `mod.rs` (or `lib.rs`) declaring its children, or re-exporting their items, is not
//! an import: it is the folder's face, and a reference through it counts as one to the file
//! that defines the item. Comments, doc links and string literals are not references.
//!
//! A folder is one layer (the house style: "a file holds one idea; a folder one layer"): the
//! crate's top-level files and folders must form layers, file references between them counted
//! as the folder's; and inside each folder its own files must form layers too (`upstream/`
//! splits one type's work by job across files, over the data in its `state.rs`).
//!
//! On success it prints the layers, the bottom first (each imports only from layers below it),
//! a folder with its files' own order: `cargo test -p proxy --test layers -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;

/// A module's path from the crate root: `[]` for `lib.rs`, `["http2", "stream"]`.
type ModPath = Vec<String>;

#[test]
fn the_proxy_s_files_and_folders_import_nothing_above_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&src, &src, &mut files);
    files.sort();
    let graph = Graph::of(&files);
    match graph.by_unit().layers() {
        Ok(layers) => {
            println!(
                "the proxy's files and folders, layer by layer, the bottom first (each imports \
                 only from layers below; a folder's own files in parentheses, in their order):"
            );
            let mut knotted = Vec::new();
            for (i, layer) in layers.iter().enumerate() {
                let named: Vec<String> = layer.iter().map(|u| graph.describe(u)).collect();
                println!("  {i:2}: {}", named.join(" "));
                knotted.extend(
                    named
                        .into_iter()
                        .filter(|d| d.contains("import each other")),
                );
            }
            // Inside a folder too: its files form layers of their own.
            assert!(
                knotted.is_empty(),
                "a folder's files import each other; move what they share into a file below \
                 them: {knotted:?}"
            );
        }
        Err(cycles) => panic!(
            "files of the proxy import each other in a circle; move what they share below \
             them:\n{}",
            cycles.join("\n")
        ),
    }
}

/// The parser and the rules on a made-up crate: a circle is found and named; a folder's face
/// (its `mod.rs` declaring and re-exporting its children) is not an import; files of one
/// folder leaning on each other are the folder's own affair.
#[test]
fn circles_are_found_and_a_folder_s_face_is_not_one() {
    let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
    let crate_files = vec![
        file("lib.rs", "mod a; mod b; mod c; mod f; pub use c::Thing;"),
        file(
            "a.rs",
            "use crate::b::{self, B};\n// crate::c::x in a comment\nfn f() { b::g(); }",
        ),
        file(
            "b.rs",
            "pub fn g() { let s = \"crate::a::A\"; crate::a::f(); }",
        ),
        file(
            "c/mod.rs",
            "mod d;\npub use d::Thing;\npub(crate) use self::d::other;",
        ),
        file(
            "c/d.rs",
            "pub struct Thing;\nuse super::super::b::g;\n#[cfg(test)] mod tests { use super::*; }",
        ),
        file("f/mod.rs", "mod x;\npub struct F { x: x::X }"),
        file("f/x.rs", "pub struct X;\nimpl super::F {}"),
    ];
    let graph = Graph::of(&crate_files);
    let cycles = graph.by_unit().layers().unwrap_err();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("a.rs → b.rs") && cycles[0].contains("b.rs → a.rs"));
    // c/mod.rs imports nothing; c/d.rs imports b.rs (through `super::super`), nothing else.
    let deps = |g: &Graph, f: &str| {
        g.edges
            .get(f)
            .map(|e| e.keys().cloned().collect::<Vec<_>>())
    };
    assert_eq!(deps(&graph, "c/mod.rs"), None);
    assert_eq!(deps(&graph, "c/d.rs"), Some(vec!["b.rs".to_owned()]));
    assert_eq!(deps(&graph, "a.rs"), Some(vec!["b.rs".to_owned()]));
    assert_eq!(deps(&graph.by_unit(), "c/"), Some(vec!["b.rs".to_owned()]));
    // f/'s files import each other: shown, not a circle of the crate's.
    assert_eq!(deps(&graph.by_unit(), "f/"), None);
    assert!(
        graph.describe("f/").contains("import each other"),
        "{}",
        graph.describe("f/")
    );
    assert_eq!(graph.describe("c/"), "c/ (d.rs mod.rs)");
}

/// Every `.rs` file under `dir`, as its path relative to `root` (`/`-separated) and its text.
fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            let rel: Vec<_> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            out.push((rel.join("/"), text));
        }
    }
}

/// The module a file holds: `lib.rs` the root, `a/mod.rs` and `a.rs` module `a`.
fn module_of(rel: &str) -> ModPath {
    let mut parts: Vec<String> = rel.split('/').map(str::to_owned).collect();
    let last = parts.pop().unwrap_or_default();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_owned()),
    }
    parts
}

/// The top-level file or folder a file is part of: `tcp.rs`, `http2/`.
fn unit(rel: &str) -> String {
    match rel.split_once('/') {
        Some((folder, _)) => format!("{folder}/"),
        None => rel.to_owned(),
    }
}

/// Which files import which: file → imported file → where (line and path, for the message).
struct Graph {
    files: Vec<String>,
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    fn of(files: &[(String, String)]) -> Graph {
        let parsed: Vec<Parsed> = files.iter().map(|(rel, text)| parse(rel, text)).collect();
        // Every module, file or inline (`mod tests { … }`), and the file that holds it.
        let mut modules: HashMap<ModPath, usize> = HashMap::new();
        for (i, p) in parsed.iter().enumerate() {
            modules.insert(p.module.clone(), i);
            for inline in &p.inline {
                modules.insert(inline.clone(), i);
            }
        }
        let resolver = Resolver::new(&parsed, &modules);
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (i, p) in parsed.iter().enumerate() {
            let mut add = |to: usize, line: usize, text: &str| {
                if to != i {
                    edges
                        .entry(p.rel.clone())
                        .or_default()
                        .entry(parsed[to].rel.clone())
                        .or_insert_with(|| format!("{}:{line} {text}", p.rel));
                }
            };
            for leaf in &p.uses {
                let Some(abs) = resolver.absolute(i, &leaf.scope, &leaf.path) else {
                    continue;
                };
                if !leaf.glob && modules.contains_key(&abs) {
                    // A module brought in by name: what is used through it counts, not this.
                    continue;
                }
                let Some(to) = resolver.file_of(&abs) else {
                    continue;
                };
                // A module's face: re-exporting an item of its own children.
                let own_child = leaf.reexport
                    && parsed[to].module.len() > p.module.len()
                    && parsed[to].module.starts_with(&p.module);
                if !own_child {
                    add(to, leaf.line, &leaf.path.join("::"));
                }
            }
            for path in &p.paths {
                let Some(abs) = resolver.absolute(i, &path.scope, &path.path) else {
                    continue;
                };
                if let Some(to) = resolver.file_of(&abs) {
                    add(to, path.line, &path.path.join("::"));
                }
            }
        }
        Graph {
            files: parsed.iter().map(|p| p.rel.clone()).collect(),
            edges,
        }
    }

    /// The graph of the crate's top-level files and folders (`http2/`): a file inside a
    /// folder counts as the folder, and references inside one folder are left out.
    fn by_unit(&self) -> Graph {
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to) in &self.edges {
            for (to, at) in to {
                let (a, b) = (unit(from), unit(to));
                if a != b {
                    edges
                        .entry(a)
                        .or_default()
                        .entry(b)
                        .or_insert_with(|| at.clone());
                }
            }
        }
        let units: BTreeSet<String> = self.files.iter().map(|f| unit(f)).collect();
        Graph {
            files: units.into_iter().collect(),
            edges,
        }
    }

    /// A unit as the layers are printed: a file by its path; a folder with its files in
    /// their own layers (`|` between them), or said to lean on each other.
    fn describe(&self, unit: &str) -> String {
        let Some(folder) = unit.strip_suffix('/') else {
            return unit.to_owned();
        };
        let prefix = format!("{folder}/");
        let inside = |f: &String| f.strip_prefix(&prefix).map(str::to_owned);
        let files: Vec<String> = self.files.iter().filter_map(inside).collect();
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to) in &self.edges {
            let Some(from) = inside(from) else { continue };
            for (to, at) in to {
                if let Some(to) = inside(to) {
                    edges
                        .entry(from.clone())
                        .or_default()
                        .insert(to, at.clone());
                }
            }
        }
        let own = Graph { files, edges };
        match own.layers() {
            Ok(layers) => {
                let layers: Vec<String> = layers.iter().map(|l| l.join(" ")).collect();
                format!("{unit} ({})", layers.join(" | "))
            }
            Err(_) => format!(
                "{unit} (its files import each other: {})",
                own.files.join(" ")
            ),
        }
    }

    fn deps(&self, file: &str) -> impl Iterator<Item = &String> {
        self.edges.get(file).into_iter().flat_map(|e| e.keys())
    }

    /// The files in layers, the bottom first; or every circle, named.
    fn layers(&self) -> Result<Vec<Vec<String>>, Vec<String>> {
        let cycles: Vec<String> = self
            .strongly_connected()
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| self.name_cycle(&c))
            .collect();
        if !cycles.is_empty() {
            return Err(cycles);
        }
        // A file's layer: one above the highest layer it imports from.
        let mut layer: BTreeMap<&str, usize> = BTreeMap::new();
        let mut left: Vec<&String> = self.files.iter().collect();
        while !left.is_empty() {
            let before = left.len();
            left.retain(|f| {
                let deps: Option<Vec<usize>> = self
                    .deps(f)
                    .map(|d| layer.get(d.as_str()).copied())
                    .collect();
                match deps {
                    Some(d) => {
                        layer.insert(f, d.iter().map(|l| l + 1).max().unwrap_or(0));
                        false
                    }
                    None => true,
                }
            });
            assert!(
                left.len() < before,
                "no circle, yet no file could be placed"
            );
        }
        let mut layers = vec![Vec::new(); layer.values().max().map_or(0, |m| m + 1)];
        for (f, l) in layer {
            layers[l].push(f.to_owned());
        }
        Ok(layers)
    }

    /// Tarjan's strongly connected components.
    fn strongly_connected(&self) -> Vec<Vec<String>> {
        struct State<'g> {
            graph: &'g Graph,
            index: HashMap<&'g str, usize>,
            low: HashMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            out: Vec<Vec<String>>,
        }
        fn visit<'g>(s: &mut State<'g>, v: &'g str) {
            let n = s.index.len();
            s.index.insert(v, n);
            s.low.insert(v, n);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.deps(v) {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                s.out.push(component);
            }
        }
        let mut s = State {
            graph: self,
            index: HashMap::new(),
            low: HashMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for f in &self.files {
            if !s.index.contains_key(f.as_str()) {
                visit(&mut s, f);
            }
        }
        s.out
    }

    /// A knot of files that import each other, named by its circles: the shortest one
    /// through each of its files, each step with the reference that makes it.
    fn name_cycle(&self, component: &[String]) -> String {
        let inside: BTreeSet<&str> = component.iter().map(String::as_str).collect();
        let mut circles: Vec<Vec<&str>> = Vec::new();
        for &start in &inside {
            let circle = self.shortest_circle(start, &inside);
            // The same circle, found from another of its files, is named once.
            let mut key = circle[..circle.len() - 1].to_vec();
            key.sort_unstable();
            let seen = circles.iter().any(|c| {
                let mut k = c[..c.len() - 1].to_vec();
                k.sort_unstable();
                k == key
            });
            if !seen {
                circles.push(circle);
            }
        }
        let named: Vec<String> = circles
            .iter()
            .map(|path| {
                path.windows(2)
                    .map(|w| format!("      {} → {}   ({})", w[0], w[1], self.edges[w[0]][w[1]]))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        format!(
            "  a knot of {} files ({}), its circles:\n{}",
            component.len(),
            inside.iter().copied().collect::<Vec<_>>().join(", "),
            named.join("\n      --\n")
        )
    }

    /// The shortest circle from `start` back to it within `inside`, `start` first and last.
    fn shortest_circle<'g>(&'g self, start: &'g str, inside: &BTreeSet<&str>) -> Vec<&'g str> {
        let mut came_from: HashMap<&str, &str> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        let mut last = None;
        'search: while let Some(v) = queue.pop_front() {
            for w in self.deps(v).map(String::as_str) {
                if w == start {
                    last = Some(v);
                    break 'search;
                }
                if inside.contains(w) && !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut path = vec![start];
        let mut v = last.unwrap_or(start);
        while v != start {
            path.push(v);
            v = came_from.get(v).copied().unwrap_or(start);
        }
        path[1..].reverse();
        path.push(start);
        path
    }
}

/// What one file says about the crate's other modules.
struct Parsed {
    rel: String,
    module: ModPath,
    /// Modules declared inline (`mod tests { … }`), as full paths.
    inline: Vec<ModPath>,
    uses: Vec<UseLeaf>,
    paths: Vec<PathRef>,
}

/// One name a `use` declaration brings in (`use a::{b, c as d}` has two).
struct UseLeaf {
    /// The module the declaration is in.
    scope: ModPath,
    /// As written, `self` leaves folded into their module (`a::{self}` is `a`).
    path: Vec<String>,
    /// The name it is known by in `scope` (`None`: `as _`, or a glob).
    alias: Option<String>,
    glob: bool,
    /// `pub use`, `pub(crate) use`: a re-export.
    reexport: bool,
    line: usize,
}

/// A path in code outside `use` declarations: `crate::io::after(…)`, `http1::reject(…)`.
struct PathRef {
    scope: ModPath,
    path: Vec<String>,
    line: usize,
}

#[derive(Debug, Clone)]
struct Token {
    text: String,
    line: usize,
}

fn parse(rel: &str, text: &str) -> Parsed {
    let module = module_of(rel);
    let tokens = tokenize(&strip(text));
    let mut parsed = Parsed {
        rel: rel.to_owned(),
        module: module.clone(),
        inline: Vec::new(),
        uses: Vec::new(),
        paths: Vec::new(),
    };
    // Inline modules open at a brace depth and close when it comes back to it.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let at = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let current = |scope: &[(String, usize)]| -> ModPath {
        let mut m = module.clone();
        m.extend(scope.iter().map(|(name, _)| name.clone()));
        m
    };
    while i < tokens.len() {
        match at(i) {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
            }
            "mod" if at(i + 2) == "{" => {
                scope.push((at(i + 1).to_owned(), depth));
                parsed.inline.push(current(&scope));
            }
            "use" => {
                let reexport = at(i.wrapping_sub(1)) == "pub"
                    || (at(i.wrapping_sub(1)) == ")"
                        && (2..=5).any(|back| at(i.wrapping_sub(back)) == "pub"));
                let line = tokens[i].line;
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut j, Vec::new(), &mut leaves);
                for (path, alias, glob) in leaves {
                    parsed.uses.push(UseLeaf {
                        scope: current(&scope),
                        path,
                        alias,
                        glob,
                        reexport,
                        line,
                    });
                }
                // Past the declaration's `;`.
                while j < tokens.len() && at(j) != ";" {
                    j += 1;
                }
                i = j + 1;
                continue;
            }
            t if is_ident(t) && at(i + 1) == "::" && at(i.wrapping_sub(1)) != "::" => {
                let line = tokens[i].line;
                let mut path = vec![t.to_owned()];
                let mut j = i + 1;
                while at(j) == "::" && is_ident(at(j + 1)) {
                    path.push(at(j + 1).to_owned());
                    j += 2;
                }
                parsed.paths.push(PathRef {
                    scope: current(&scope),
                    path,
                    line,
                });
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parsed
}

/// Reads one use tree at `tokens[*i]` under `prefix`: its leaves as (path, alias, glob).
fn use_tree(
    tokens: &[Token],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>, bool)>,
) {
    let at = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let mut path = prefix;
    loop {
        match at(*i) {
            "{" => {
                *i += 1;
                while !matches!(at(*i), "}" | "") {
                    use_tree(tokens, i, path.clone(), out);
                    if at(*i) == "," {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "*" => {
                *i += 1;
                out.push((path, None, true));
                return;
            }
            "::" => *i += 1,
            t if is_ident(t) => {
                path.push(t.to_owned());
                *i += 1;
                if at(*i) == "::" {
                    continue;
                }
                let mut alias = None;
                if at(*i) == "as" {
                    alias = Some(at(*i + 1).to_owned());
                    *i += 2;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                let alias = match alias {
                    Some(a) if a == "_" => None,
                    Some(a) => Some(a),
                    None => path.last().cloned(),
                };
                out.push((path, alias, false));
                return;
            }
            _ => return,
        }
    }
}

/// Finds what paths refer to.
struct Resolver<'a> {
    modules: &'a HashMap<ModPath, usize>,
    /// Per file: a name a `use` brought in → the absolute path it stands for.
    aliases: Vec<HashMap<String, ModPath>>,
    /// Per module: a name it re-exports → the absolute path it stands for.
    reexports: HashMap<ModPath, HashMap<String, ModPath>>,
}

impl<'a> Resolver<'a> {
    fn new(parsed: &'a [Parsed], modules: &'a HashMap<ModPath, usize>) -> Resolver<'a> {
        let mut r = Resolver {
            modules,
            aliases: vec![HashMap::new(); parsed.len()],
            reexports: HashMap::new(),
        };
        // Twice: a `use` may start from a name another `use` brought in.
        for _ in 0..2 {
            for (i, p) in parsed.iter().enumerate() {
                for leaf in &p.uses {
                    let (Some(alias), Some(abs)) =
                        (&leaf.alias, r.absolute(i, &leaf.scope, &leaf.path))
                    else {
                        continue;
                    };
                    r.aliases[i].insert(alias.clone(), abs.clone());
                    if leaf.reexport {
                        r.reexports
                            .entry(leaf.scope.clone())
                            .or_default()
                            .insert(alias.clone(), abs);
                    }
                }
            }
        }
        r
    }

    /// `path`, written in module `scope` of file `file`, from the crate root; `None` for what
    /// is outside the crate (`std::…`, `tokio::…`) or not a path to a module's item.
    fn absolute(&self, file: usize, scope: &ModPath, path: &[String]) -> Option<ModPath> {
        let first = path.first()?;
        let mut abs: ModPath;
        let rest: &[String];
        match first.as_str() {
            "crate" => {
                abs = Vec::new();
                rest = &path[1..];
            }
            "self" => {
                abs = scope.clone();
                rest = &path[1..];
            }
            "super" => {
                abs = scope.clone();
                let supers = path.iter().take_while(|s| *s == "super").count();
                for _ in 0..supers {
                    abs.pop()?;
                }
                rest = &path[supers..];
            }
            name => {
                let mut child = scope.clone();
                child.push(name.to_owned());
                if self.modules.contains_key(&child) {
                    abs = scope.clone();
                    rest = path;
                } else {
                    abs = self.aliases[file].get(name)?.clone();
                    rest = &path[1..];
                }
            }
        }
        abs.extend(rest.iter().cloned());
        Some(abs)
    }

    /// The file that defines what `abs` names: its longest prefix that is a module, through
    /// that module's re-exports.
    fn file_of(&self, abs: &[String]) -> Option<usize> {
        let mut abs = abs.to_vec();
        // Re-exports chain a few times at most; a loop of them is not followed for ever.
        for _ in 0..16 {
            let k = (0..=abs.len())
                .rev()
                .find(|&k| self.modules.contains_key(&abs[..k]))?;
            let module = &abs[..k];
            let reexported = abs
                .get(k)
                .and_then(|name| self.reexports.get(module)?.get(name));
            match reexported {
                Some(target) if target.as_slice() != &abs[..=k] => {
                    let mut next = target.clone();
                    next.extend(abs[k + 1..].iter().cloned());
                    abs = next;
                }
                _ => return self.modules.get(module).copied(),
            }
        }
        None
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// `text` with comments, string literals and character literals blanked out (lines kept).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |i: usize| i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings: r"…", r#"…"#, br"…".
        let raw_start = match (c[i], next) {
            ('r', Some('"' | '#')) if !ident(i) => Some(i + 1),
            ('b', Some('r')) if !ident(i) && matches!(c.get(i + 2), Some('"' | '#')) => Some(i + 2),
            _ => None,
        };
        if let Some(mut j) = raw_start {
            let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
            j += hashes;
            if c.get(j) == Some(&'"') {
                j += 1;
                loop {
                    if j >= c.len() {
                        break;
                    }
                    if c[j] == '"'
                        && c[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                    {
                        j += 1 + hashes;
                        break;
                    }
                    blank(&mut out, c[j]);
                    j += 1;
                }
                out.push(' ');
                i = j;
                continue;
            }
        }
        if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            i += 1;
            out.push(' ');
            continue;
        }
        if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{..}'); otherwise a lifetime.
            let end = if next == Some('\\') {
                c.get(i + 3..)
                    .and_then(|r| r.iter().position(|&ch| ch == '\''))
                    .map(|p| i + 3 + p)
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(end) = end {
                out.push(' ');
                i = end + 1;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

fn tokenize(code: &str) -> Vec<Token> {
    let c: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            tokens.push(Token {
                text: c[start..i].iter().collect(),
                line,
            });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            tokens.push(Token {
                text: "::".to_owned(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}
