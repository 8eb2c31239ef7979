//! The text a configuration is read from: the main file and the files it includes, parsed
//! into one TOML document.
//!
//! * `include = ["conf.d/*.toml"]`, a top-level key, names more files, as nginx's `include`:
//!   relative to the main file's directory, whichever file names them (nginx's prefix);
//!   `*`, `?` and `[...]` (glob(3)'s, in directories too) match names in sorted order, and a
//!   pattern that matches nothing is no problem, while a plain path that does not exist is
//!   (nginx's rule). Includes nest, at
//!   most [`MAX_DEPTH`] deep; a file that includes itself, directly or not, is refused.
//! * Merging: the including file first, then each included file in turn. An array of tables
//!   (`[[upstream]]`, `[[listener]]`) takes the entries of every file; a table (`[admin]`)
//!   takes the keys of every file; any other key set in two files is refused, naming both
//!   places (no file silently overrides another).
//! * Every file keeps its own offsets in one space (as a compiler's source map does): file
//!   `i`'s text starts at `base`, so a problem's span says which file it is in, and sorting
//!   problems by span lists them in the merged order.
//! * An unquoted value (`listen = 127.0.0.1:8080`) is a TOML syntax error; it is reported in
//!   our words and the file is parsed again with the value quoted, so its other problems are
//!   found in the same run. Any other syntax error ends the reading of that file.
//! * `${NAME}` in a string value is replaced by the environment variable `NAME`, after
//!   parsing, so a variable cannot add TOML of its own; `$${` is a literal `${`. Not in the
//!   keys that take nginx's variables (`access_log_format`, `request_headers`,
//!   `response_headers`), where `${name}` is nginx's.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::report::Report;

/// How deep includes nest: a file that includes a file that includes a file... nginx sets no
/// bound, but a bound turns a mistake into a message rather than a long walk.
pub(super) const MAX_DEPTH: usize = 8;

/// The most files one configuration may be made of.
const MAX_FILES: usize = 1000;

/// The largest file included: a configuration of 10,000 backends is about 1 MiB.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// How many unquoted values one file may have before reading stops.
const MAX_REPAIRS: usize = 100;

/// One file of the configuration.
#[derive(Debug)]
pub(super) struct Source {
    pub path: PathBuf,
    /// The text as written, which problems show.
    pub text: String,
    /// Where the file starts in the offsets of the whole configuration.
    pub base: usize,
    /// The text parsed: `text` with unquoted values quoted.
    parsed: String,
    /// Offsets in `parsed` of the quotes added.
    quotes: Vec<usize>,
    /// Whether `parsed` is valid TOML.
    readable: bool,
}

impl Source {
    /// The offset in `text` of offset `at` of `parsed`.
    fn written(&self, at: usize) -> usize {
        at - self.quotes.iter().filter(|&&q| q < at).count()
    }
}

/// A problem found while gathering the files, before there is a report.
#[derive(Debug)]
struct Pending {
    span: Range<usize>,
    key: String,
    message: String,
}

/// The files of one configuration, the main file first.
#[derive(Debug)]
pub(super) struct Sources {
    pub files: Vec<Source>,
    pending: Vec<Pending>,
}

impl Sources {
    /// The main file `path` with `text`, and every file it includes, read from disk.
    pub(super) fn gather(
        path: &Path,
        text: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Sources {
        let mut sources = Sources {
            files: Vec::new(),
            pending: Vec::new(),
        };
        let mut chain = vec![canonical(path)];
        sources.visit(path, text, &mut chain, env);
        sources
    }

    /// The file holding offset `at`, and `at` within it.
    pub(super) fn locate(&self, at: usize) -> Option<(&Source, usize)> {
        let i = self
            .files
            .partition_point(|f| f.base <= at)
            .saturating_sub(1);
        self.files.get(i).map(|f| (f, at - f.base))
    }

    /// The main file's path.
    pub(super) fn main_path(&self) -> &Path {
        self.files.first().map_or(Path::new(""), |f| &f.path)
    }

    /// One file and no includes (for tests of a part).
    #[cfg(test)]
    pub(super) fn one(path: &Path, text: &str) -> Sources {
        let mut sources = Sources {
            files: Vec::new(),
            pending: Vec::new(),
        };
        sources.add(path, text.to_owned());
        sources
    }

    fn add(&mut self, path: &Path, text: String) -> usize {
        let base = self.files.last().map_or(0, |f| f.base + f.text.len() + 1);
        let Repaired {
            parsed,
            quotes,
            repairs,
            fatal,
        } = repair(&text);
        for (span, key, message) in repairs {
            self.pending.push(Pending {
                span: base + span.start..base + span.end,
                key,
                message,
            });
        }
        let readable = fatal.is_none();
        if let Some((span, message)) = fatal {
            self.pending.push(Pending {
                span: base + span.start..base + span.end,
                key: String::new(),
                message,
            });
        }
        self.files.push(Source {
            path: path.to_owned(),
            text,
            base,
            parsed,
            quotes,
            readable,
        });
        self.files.len() - 1
    }

    /// Adds the file and, depth first, the files it includes; `chain`: the files including
    /// it, itself last.
    fn visit(
        &mut self,
        path: &Path,
        text: String,
        chain: &mut Vec<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) {
        let index = self.add(path, text);
        let source = &self.files[index];
        // Parsing again is what costs: only a file that may include others is.
        if !source.readable || !source.parsed.contains("include") {
            return;
        }
        let patterns = match DeTable::parse(&source.parsed) {
            Ok(doc) => includes(source, doc.get_ref(), env),
            Err(_) => return,
        };
        // Relative to the main file's directory, whichever file names them: nginx resolves
        // an `include` against its prefix, and fulcrum's other paths (`cert`, `state_file`)
        // are read from there too.
        let main = self.files.first().map_or(path, |f| f.path.as_path());
        let dir = match main.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        for pattern in patterns {
            let (pattern, span) = match pattern {
                Ok(p) => p,
                Err((span, key, message)) => {
                    self.pending.push(Pending { span, key, message });
                    continue;
                }
            };
            let files = match expand(&dir, &pattern) {
                Ok(files) => files,
                Err(message) => {
                    self.pending.push(Pending {
                        span,
                        key: "include".to_owned(),
                        message,
                    });
                    continue;
                }
            };
            for file in files {
                let problem = self.include(&file, chain, env);
                if let Some(message) = problem {
                    self.pending.push(Pending {
                        span: span.clone(),
                        key: "include".to_owned(),
                        message,
                    });
                }
            }
        }
    }

    /// Reads the included `file`; a problem with it, if any.
    fn include(
        &mut self,
        file: &Path,
        chain: &mut Vec<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<String> {
        let id = canonical(file);
        if chain.contains(&id) {
            return Some(format!(
                "{} is already being read (it includes itself, through {}): remove one of these includes",
                file.display(),
                chain
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" → ")
            ));
        }
        if chain.len() > MAX_DEPTH {
            return Some(format!(
                "{}: includes are nested more than {MAX_DEPTH} deep: include the files from a higher level",
                file.display()
            ));
        }
        if self.files.len() >= MAX_FILES {
            return Some(format!(
                "{}: a configuration is made of at most {MAX_FILES} files",
                file.display()
            ));
        }
        let text = match read_bounded(file) {
            Ok(t) => t,
            Err(e) => return Some(e),
        };
        chain.push(id);
        self.visit(file, text, chain, env);
        chain.pop();
        None
    }

    /// The problems found while gathering: span, key and message of each.
    pub(super) fn take_pending(&mut self) -> Vec<(Range<usize>, String, String)> {
        self.pending
            .drain(..)
            .map(|p| (p.span, p.key, p.message))
            .collect()
    }

    /// Whether every file could be parsed (if not, the others are not checked: parts of the
    /// configuration would be missing, and their absence reported as problems).
    pub(super) fn readable(&self) -> bool {
        self.files.iter().all(|f| f.readable)
    }

    /// Every file parsed, its spans in the whole configuration's offsets, merged into one
    /// document, with `${NAME}` replaced through `env`.
    pub(super) fn document<'a>(
        &'a self,
        r: &mut Report<'_>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Spanned<DeTable<'a>> {
        let mut merged: Option<Spanned<DeTable<'a>>> = None;
        for source in &self.files {
            let Ok(doc) = DeTable::parse(&source.parsed) else {
                continue;
            };
            let map = |at: usize| source.base + source.written(at);
            let span = doc.span();
            // The main file without repairs is where it was parsed: nothing to move.
            let mut table = if source.base == 0 && source.quotes.is_empty() {
                doc.into_inner()
            } else {
                rebase_table(doc.into_inner(), &map)
            };
            table.remove("include");
            match &mut merged {
                None => merged = Some(Spanned::new(map(span.start)..map(span.end), table)),
                Some(into) => merge(r, "", into.get_mut(), table),
            }
        }
        let mut doc = merged.unwrap_or_else(|| Spanned::new(0..0, DeTable::new()));
        substitute_table(r, "", doc.get_mut(), env);
        doc
    }
}

/// A path as the same file is named however it is reached (as written if it cannot be).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// An include pattern (with its span in the whole configuration), or a problem with one
/// (its span, key and message).
type Pattern = Result<(String, Range<usize>), (Range<usize>, String, String)>;

/// The patterns of `source`'s `include`, `${NAME}` replaced through `env`.
fn includes(
    source: &Source,
    doc: &DeTable<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Pattern> {
    let span = |s: Range<usize>| {
        source.base + source.written(s.start)..source.base + source.written(s.end)
    };
    let Some(value) = doc.get("include") else {
        return Vec::new();
    };
    let DeValue::Array(items) = value.get_ref() else {
        return vec![Err((
            span(value.span()),
            "include".to_owned(),
            format!(
                "expected a list of files such as [\"conf.d/*.toml\"], not {}",
                super::table::found(value.get_ref())
            ),
        ))];
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let key = format!("include[{i}]");
            match item.get_ref() {
                DeValue::String(s) if !s.trim().is_empty() => match expand_env(s, env) {
                    Ok(expanded) => {
                        Ok((expanded.unwrap_or_else(|| s.to_string()), span(item.span())))
                    }
                    Err(why) => Err((span(item.span()), key, why)),
                },
                other => Err((
                    span(item.span()),
                    key,
                    format!(
                        "expected a file or a pattern such as \"conf.d/*.toml\", not {}",
                        super::table::found(other)
                    ),
                )),
            }
        })
        .collect()
}

/// The main configuration file's text, at most [`MAX_FILE_BYTES`] of it (a pipe, as
/// `fulcrum check <(generate)` gives, is read too); `Err`: what went wrong.
pub(super) fn read_main(file: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let opened = std::fs::File::open(file)
        .map_err(|e| format!("cannot read the configuration file: {e}"))?;
    let mut text = String::new();
    opened
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the configuration file: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "larger than {} MiB: not a configuration file",
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(text)
}

/// A configuration file's text: a regular file (not a device or a pipe, which could be read
/// forever) of at most [`MAX_FILE_BYTES`], checked on the file opened (not its path again) and
/// read no further than that.
pub(super) fn read_bounded(file: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", file.display());
    let opened = std::fs::File::open(file).map_err(cannot)?;
    let meta = opened.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", file.display()));
    }
    let mut text = String::new();
    opened
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{} is larger than {} MiB: not a configuration file",
            file.display(),
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(text)
}

/// The files `pattern` names, relative to `dir` (the main file's directory): one for a plain
/// path (which must exist), those matching for a pattern (`*`, `?`, `[...]`, in any part of
/// the path, as glob(3) that nginx uses), in sorted order; none is no problem.
fn expand(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    if !pattern.contains(['*', '?', '[']) {
        let path = dir.join(pattern);
        return match std::fs::metadata(&path) {
            Ok(_) => Ok(vec![path]),
            Err(e) => Err(format!(
                "cannot read {}: {e} (a pattern such as \"conf.d/*.toml\" may match nothing; a file named must exist)",
                path.display()
            )),
        };
    }
    // The directory is a path, not a pattern: its own `*` or `[` are taken literally.
    let full = if Path::new(pattern).is_absolute() {
        pattern.to_owned()
    } else {
        format!(
            "{}/{pattern}",
            glob::Pattern::escape(&dir.to_string_lossy())
        )
    };
    if pattern.contains("**") {
        return Err(format!(
            "\"{pattern}\": ** is not a pattern here (glob(3), which nginx uses, has no recursive match): name each directory level, as conf.d/*/*.toml"
        ));
    }
    // The leading-dot rule is ours (below): the crate's own drops every name starting with
    // `.`, even for a pattern that starts with one.
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let paths = glob::glob_with(&full, options)
        .map_err(|e| format!("\"{pattern}\" is not a valid pattern: {}", e.msg))?;
    let wanted: Vec<&str> = pattern.split('/').collect();
    let mut files = Vec::new();
    // A directory that cannot be read holds no match, as for glob(3) without GLOB_ERR.
    for path in paths.flatten() {
        // As the shell: a name starting with `.` only by a pattern (part) starting with one.
        let names: Vec<_> = path.components().rev().take(wanted.len()).collect();
        let hidden = names.iter().rev().zip(&wanted).any(|(name, part)| {
            name.as_os_str().as_encoded_bytes().starts_with(b".") && !part.starts_with('.')
        });
        if !hidden {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A problem found while repairing: its span in the text as written, key, message.
type Repair = (Range<usize>, String, String);

/// A file's text with its unquoted values quoted.
#[derive(Debug)]
struct Repaired {
    /// The text to parse.
    parsed: String,
    /// Offsets in `parsed` of the quotes added.
    quotes: Vec<usize>,
    /// A problem for each value quoted.
    repairs: Vec<Repair>,
    /// The syntax error that ended reading, if one did: its span as written, and message.
    fatal: Option<(Range<usize>, String)>,
}

/// `text` with its unquoted values quoted, each reported.
fn repair(text: &str) -> Repaired {
    let mut parsed = text.to_owned();
    let mut quotes: Vec<usize> = Vec::new();
    let mut repairs = Vec::new();
    let written = |quotes: &[usize], at: usize| at - quotes.iter().filter(|&&q| q < at).count();
    for _ in 0..MAX_REPAIRS {
        let e = match DeTable::parse(&parsed) {
            Ok(_) => {
                return Repaired {
                    parsed,
                    quotes,
                    repairs,
                    fatal: None,
                };
            }
            Err(e) => e,
        };
        let span = e.span().unwrap_or(0..0);
        if let Some((value, key)) = unquoted_value(&parsed, span.start) {
            let shown = parsed[value.clone()].to_owned();
            let at = written(&quotes, value.start)..written(&quotes, value.end);
            repairs.push((
                at,
                key.clone(),
                format!(
                    "a value that is not a number, true or false is written in quotes: write {key} = \"{shown}\""
                ),
            ));
            parsed.insert(value.end, '"');
            parsed.insert(value.start, '"');
            for q in &mut quotes {
                if *q >= value.end {
                    *q += 2;
                } else if *q >= value.start {
                    *q += 1;
                }
            }
            quotes.push(value.start);
            quotes.push(value.end + 1);
            quotes.sort_unstable();
            continue;
        }
        let message = e.message().replace('\n', " ").trim().to_owned();
        let at = written(&quotes, span.start)..written(&quotes, span.end);
        return Repaired {
            parsed,
            quotes,
            repairs,
            fatal: Some((at, message)),
        };
    }
    let message = format!("more than {MAX_REPAIRS} values without quotes: quote them");
    Repaired {
        parsed,
        quotes,
        repairs,
        fatal: Some((0..0, message)),
    }
}

/// The value of the `key = value` line that offset `at` falls in, when it is a bare word a
/// pair of quotes would make a string (no quote, bracket or brace of its own): its span and
/// the key.
fn unquoted_value(text: &str, at: usize) -> Option<(Range<usize>, String)> {
    let at = at.min(text.len());
    let start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[start..end];
    let eq = line.find('=')?;
    let key = line[..eq].trim();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    let rest = &line[eq + 1..];
    let body = rest.split('#').next().unwrap_or(rest);
    let value = body.trim();
    if value.is_empty()
        || value.contains(['"', '\'', '[', ']', '{', '}', '\\'])
        || value.chars().any(char::is_control)
    {
        return None;
    }
    let value_start = start + eq + 1 + (body.len() - body.trim_start().len());
    let value_end = value_start + value.len();
    (value_start..=value_end)
        .contains(&at)
        .then(|| (value_start..value_end, key.to_owned()))
}

/// `table` with every span moved by `map`.
fn rebase_table<'a>(table: DeTable<'a>, map: &dyn Fn(usize) -> usize) -> DeTable<'a> {
    let mut out = DeTable::new();
    for (key, value) in table {
        let span = key.span();
        out.insert(
            Spanned::new(map(span.start)..map(span.end), key.into_inner()),
            rebase(value, map),
        );
    }
    out
}

fn rebase<'a>(value: Spanned<DeValue<'a>>, map: &dyn Fn(usize) -> usize) -> Spanned<DeValue<'a>> {
    let span = value.span();
    let inner = match value.into_inner() {
        DeValue::Table(t) => DeValue::Table(rebase_table(t, map)),
        DeValue::Array(items) => DeValue::Array(
            items
                .into_iter()
                .map(|v| rebase(v, map))
                .collect::<DeArray<'a>>(),
        ),
        other => other,
    };
    Spanned::new(map(span.start)..map(span.end), inner)
}

/// The key path `path.key` as the user would write it.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Merges `from` (a later file's table at `path`) into `into`.
fn merge<'a>(r: &mut Report<'_>, path: &str, into: &mut DeTable<'a>, from: DeTable<'a>) {
    for (key, value) in from {
        let name = join(path, key.get_ref());
        let Some(first) = into.get_mut(key.get_ref().as_ref()) else {
            into.insert(key, value);
            continue;
        };
        let first_span = first.span();
        match (first.get_mut(), value.into_inner()) {
            (DeValue::Table(a), DeValue::Table(b)) => merge(r, &name, a, b),
            (DeValue::Array(a), DeValue::Array(b)) if tables(a) && tables(&b) => {
                for item in b {
                    a.push(item);
                }
            }
            // `[[upstream.backend]]` in a file without its `[[upstream]]`: TOML makes
            // `upstream` a table there.
            (DeValue::Array(a), DeValue::Table(_)) if tables(a) => {
                let place = r.place(&first_span, &key.span());
                r.error(
                    key.span(),
                    &name,
                    format!(
                        "a table here, while [[{name}]] (at {place}) is an array of tables: a file holds whole sections, so a [[{name}.…]] goes in the file of its [[{name}]]"
                    ),
                );
            }
            _ => {
                let place = r.place(&first_span, &key.span());
                r.error(
                    key.span(),
                    &name,
                    format!(
                        "already set at {place}: a key is set in one file only (only arrays of tables, such as [[upstream]], gather entries from several files)"
                    ),
                );
            }
        }
    }
}

/// Whether every element of `items` is a table (an array of tables).
fn tables(items: &DeArray<'_>) -> bool {
    items
        .iter()
        .all(|v| matches!(v.get_ref(), DeValue::Table(_)))
}

/// The keys whose values are templates of nginx's variables, where `${name}` is nginx's
/// (`${remote_addr}`), not the environment's: their strings are left as written.
const NGINX_TEMPLATES: [&str; 3] = ["access_log_format", "request_headers", "response_headers"];

fn substitute_table(
    r: &mut Report<'_>,
    path: &str,
    table: &mut DeTable<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) {
    for (key, value) in table.iter_mut() {
        if NGINX_TEMPLATES.contains(&key.get_ref().as_ref()) {
            continue;
        }
        substitute(r, &join(path, key.get_ref()), value, env);
    }
}

fn substitute(
    r: &mut Report<'_>,
    path: &str,
    value: &mut Spanned<DeValue<'_>>,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let span = value.span();
    match value.get_mut() {
        DeValue::String(s) if s.contains('$') => match expand_env(s, env) {
            Ok(Some(new)) => *s = new.into(),
            Ok(None) => {}
            Err(why) => r.unreadable(span, path, why),
        },
        DeValue::Table(t) => substitute_table(r, path, t, env),
        DeValue::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(r, &format!("{path}[{i}]"), item, env);
            }
        }
        _ => {}
    }
}

/// `text` with `${NAME}` replaced through `env` and `$${` made `${`; `None` when it has
/// neither.
pub(super) fn expand_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    if !text.contains("${") {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let Some(close) = tail.find('}') else {
                return Err(
                    "a ${ without its }: write ${NAME} for an environment variable, or $${ for a literal ${".to_owned(),
                );
            };
            let name = &tail[..close];
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "\"${{{name}}}\" is not an environment variable's name (letters, digits and _, not starting with a digit); write $${{ for a literal ${{"
                ));
            }
            match env(name) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(format!(
                        "the environment variable {name} is not set: set it for fulcrum (and for fulcrum check), or write $${{ for a literal ${{"
                    ));
                }
            }
            rest = &tail[close + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glob(3)'s rules, as nginx's `include` has them: `*`, `?` and `[...]` in file names and
    /// directories, sorted, a leading `.` matched only literally; a directory of the
    /// configuration whose name has `[` in it is a path, not a pattern.
    #[test]
    fn patterns_match_as_glob_does() {
        let dir = std::env::temp_dir().join(format!("fulcrum-glob-{}-[x]", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for f in [
            "conf.d/b.toml",
            "conf.d/a.toml",
            "conf.d/.hidden.toml",
            "conf.d/c.toml.bak",
            "sites/one/x.toml",
            "sites/two/x.toml",
        ] {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        let names = |pattern: &str| -> Vec<String> {
            expand(&dir, pattern)
                .unwrap()
                .iter()
                .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(names("conf.d/*.toml"), ["conf.d/a.toml", "conf.d/b.toml"]);
        assert_eq!(
            names("conf.d/[ab].toml"),
            ["conf.d/a.toml", "conf.d/b.toml"]
        );
        assert_eq!(
            names("conf.d/?.toml*"),
            ["conf.d/a.toml", "conf.d/b.toml", "conf.d/c.toml.bak"]
        );
        assert_eq!(names("conf.d/.*.toml"), ["conf.d/.hidden.toml"]);
        assert_eq!(
            names("sites/*/x.toml"),
            ["sites/one/x.toml", "sites/two/x.toml"]
        );
        assert!(names("none.d/*.toml").is_empty());
        assert!(expand(&dir, "none.toml").is_err());
        assert!(expand(&dir, "conf.d/[.toml").is_err());
        assert!(expand(&dir, "**/*.toml").is_err());
        std::fs::create_dir_all(dir.join("sites/.old")).unwrap();
        std::fs::write(dir.join("sites/.old/x.toml"), "").unwrap();
        assert_eq!(
            names("sites/*/x.toml"),
            ["sites/one/x.toml", "sites/two/x.toml"]
        );
        assert_eq!(names("sites/.*/x.toml"), ["sites/.old/x.toml"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn environment_variables_in_strings() {
        let env = |name: &str| (name == "TOKEN").then(|| "s3cr$t".to_owned());
        assert_eq!(expand_env("plain", &env), Ok(None));
        assert_eq!(expand_env("$status", &env), Ok(None));
        assert_eq!(
            expand_env("a ${TOKEN} b", &env),
            Ok(Some("a s3cr$t b".to_owned()))
        );
        assert_eq!(
            expand_env("$${TOKEN} $x", &env),
            Ok(Some("${TOKEN} $x".to_owned()))
        );
        assert!(
            expand_env("${NOPE}", &env)
                .unwrap_err()
                .contains("NOPE is not set")
        );
        assert!(
            expand_env("${TOKEN", &env)
                .unwrap_err()
                .contains("without its }")
        );
        assert!(
            expand_env("${1X}", &env)
                .unwrap_err()
                .contains("not an environment variable's name")
        );
    }

    #[test]
    fn unquoted_values_are_found() {
        let text = "a = 1\nlisten = 127.0.0.1:80 # here\n";
        let (value, key) = unquoted_value(text, 20).unwrap();
        assert_eq!((&text[value], key.as_str()), ("127.0.0.1:80", "listen"));
        assert_eq!(unquoted_value("x = [1,\n", 5), None);
        let r = repair(text);
        assert_eq!(r.parsed, "a = 1\nlisten = \"127.0.0.1:80\" # here\n");
        assert_eq!(r.quotes, [15, 28]);
        assert_eq!(r.repairs.len(), 1);
        assert_eq!(&text[r.repairs[0].0.clone()], "127.0.0.1:80");
        assert!(r.fatal.is_none());
        // Two values on later lines: each quoted, each found where it was written.
        let text = "a = x y\nb = 1\nc = z\n";
        let r = repair(text);
        assert_eq!(r.parsed, "a = \"x y\"\nb = 1\nc = \"z\"\n");
        let found: Vec<&str> = r.repairs.iter().map(|(s, _, _)| &text[s.clone()]).collect();
        assert_eq!(found, ["x y", "z"]);
    }
}
