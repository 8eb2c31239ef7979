//! One section of the file read key by key from the spanned TOML document, in the docs' words.
//!
//! The file is not handed to serde as a whole: serde stops at the first value of the wrong
//! type and names it in Rust's terms (`expected i64`, `$__serde_spanned_private_value`). Each
//! section module instead asks its [`Table`] for each key in the form the documentation
//! gives it ("an integer such as 3", "a duration such as \"2s\"", "true or false"); a value of
//! another form is reported, with the key path as the user wrote it, and reading goes on, so
//! one run reports every problem in the file.
//!
//! A key the section does not know is reported with the closest known key (`did you mean`, as
//! `git` and `cargo` answer a mistyped command; here by optimal string alignment distance, in
//! which a swap of two neighbouring letters is one edit), and with the full list only when
//! nothing is close. A top-level key written after a `[table]` header (where TOML puts it in
//! that table) is said to be one. Keys of the design that arrive later (health checks,
//! admin, TLS, …) are reported as not supported yet rather than unknown.

use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::duration::{self, Zero};
use super::report::Report;

/// What a section may hold.
#[derive(Debug)]
pub(super) struct Section {
    /// The section as the docs name it: `[[upstream.backend]]`, or `the top level`.
    pub title: &'static str,
    /// Its keys, in the order of the docs.
    pub keys: &'static [&'static str],
    /// Keys of the design (`docs/configuration.md`, "Not yet") that later work adds.
    pub not_yet: &'static [&'static str],
}

/// One TOML table of the file: where it is, and its entries.
#[derive(Debug)]
pub(super) struct Table<'a> {
    /// The key path of the table as the user would write it: empty for the top level,
    /// `listener[0]`, `upstream[1].backend[2]`.
    path: String,
    /// The table's header (`[[listener]]`), where a missing key is reported.
    span: Range<usize>,
    entries: &'a DeTable<'a>,
}

impl<'a> Table<'a> {
    /// The table at `path`, its unknown keys reported.
    pub(super) fn new(
        r: &mut Report<'_>,
        path: String,
        span: Range<usize>,
        entries: &'a DeTable<'a>,
        section: &Section,
    ) -> Table<'a> {
        let table = Table {
            path,
            span,
            entries,
        };
        for key in entries.keys() {
            let name: &str = key.get_ref();
            if section.keys.contains(&name) {
                continue;
            }
            let message = if !table.path.is_empty() && top_level_key(name) {
                // TOML puts every key after a [table] header into that table.
                format!("`{name}` is a top-level key: move it above the first [table] header")
            } else if section.not_yet.contains(&name) {
                format!("`{name}` is not supported yet (see \"Not yet\" in docs/configuration.md)")
            } else if let Some(likely) = likely(name, section.keys) {
                format!("unknown key `{name}`; did you mean `{likely}`?")
            } else {
                format!(
                    "unknown key `{name}`; the keys of {} are: {}",
                    section.title,
                    section.keys.join(", ")
                )
            };
            r.error(key.span(), &table.key(name), message);
        }
        table
    }

    /// The key path of one of the table's keys: `upstream[0].backend[1].weight`.
    pub(super) fn key(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The table's header, where a problem with the section as a whole is shown.
    pub(super) fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    fn get(&self, name: &str) -> Option<&'a Spanned<DeValue<'a>>> {
        self.entries.get(name)
    }

    /// Where `name`'s value is, if the key is present.
    pub(super) fn span_of(&self, name: &str) -> Option<Range<usize>> {
        self.get(name).map(Spanned::span)
    }

    /// The raw value of `name`, for the few keys that take more than one form.
    pub(super) fn value(&self, name: &str) -> Option<&'a Spanned<DeValue<'a>>> {
        self.get(name)
    }

    /// Reports `message` about `name`'s value (`name` must be present).
    pub(super) fn error(&self, r: &mut Report<'_>, name: &str, message: impl std::fmt::Display) {
        let span = self.span_of(name).unwrap_or_else(|| self.span());
        r.error(span, &self.key(name), message);
    }

    /// Reports a value of the wrong form: `expected <form>, not <what was written>`;
    /// `unquote` when the string written would be right without its quotes.
    fn mismatch(
        &self,
        r: &mut Report<'_>,
        name: &str,
        value: &Spanned<DeValue<'_>>,
        form: &str,
        unquote: bool,
    ) {
        let mut message = format!("expected {form}, not {}", found(value.get_ref()));
        if unquote {
            message.push_str(" (write it without quotes)");
        }
        r.error(value.span(), &self.key(name), message);
    }

    /// A string: `what` and `example` describe it (`a name such as "web"`).
    pub(super) fn text(
        &self,
        r: &mut Report<'_>,
        name: &str,
        what: &str,
        example: &str,
    ) -> Option<Spanned<&'a str>> {
        let value = self.get(name)?;
        match value.get_ref() {
            DeValue::String(s) => Some(Spanned::new(value.span(), s.as_ref())),
            _ => {
                let form = format!("{what} such as \"{example}\"");
                self.mismatch(r, name, value, &form, false);
                None
            }
        }
    }

    /// A string the section cannot do without; its absence is reported at the header.
    pub(super) fn required_text(
        &self,
        r: &mut Report<'_>,
        name: &str,
        what: &str,
        example: &str,
    ) -> Option<Spanned<&'a str>> {
        if self.get(name).is_none() {
            r.error(
                self.span(),
                &self.key(name),
                format!(
                    "missing: every {} needs one, like {name} = \"{example}\"",
                    self.title()
                ),
            );
            return None;
        }
        self.text(r, name, what, example)
    }

    /// `true` or `false`.
    pub(super) fn flag(&self, r: &mut Report<'_>, name: &str) -> Option<bool> {
        let value = self.get(name)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                let unquote = matches!(other, DeValue::String(s) if s == "true" || s == "false");
                self.mismatch(r, name, value, "true or false", unquote);
                None
            }
        }
    }

    /// An integer within `range`, as `T` (which must hold the whole range); out of range is
    /// reported as `must be between LOW and HIGH` followed by `hint`.
    pub(super) fn integer<T: TryFrom<i64>>(
        &self,
        r: &mut Report<'_>,
        name: &str,
        range: RangeInclusive<i64>,
        hint: &str,
    ) -> Option<T> {
        let value = self.get(name)?;
        let n = match value.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix()).unwrap_or(
                // More digits than an i128 holds: far out of any range.
                if i.as_str().starts_with('-') {
                    i128::MIN
                } else {
                    i128::MAX
                },
            ),
            DeValue::String(s) => {
                // The user's own number makes the best example.
                let number = s.trim().parse::<i64>().ok();
                let example = number.unwrap_or(*range.start());
                let form = format!("an integer such as {example}");
                self.mismatch(r, name, value, &form, number.is_some());
                return None;
            }
            _ => {
                let form = format!("an integer such as {}", range.start());
                self.mismatch(r, name, value, &form, false);
                return None;
            }
        };
        let within = (i128::from(*range.start())..=i128::from(*range.end())).contains(&n);
        match i64::try_from(n).ok().filter(|_| within).map(T::try_from) {
            Some(Ok(n)) => Some(n),
            _ => {
                r.error(
                    value.span(),
                    &self.key(name),
                    format!(
                        "must be between {} and {}{hint}",
                        range.start(),
                        range.end()
                    ),
                );
                None
            }
        }
    }

    /// A number, integer or not (`1.25`, `2`); the caller checks its range.
    pub(super) fn number(
        &self,
        r: &mut Report<'_>,
        name: &str,
        example: &str,
    ) -> Option<Spanned<f64>> {
        let value = self.get(name)?;
        let n = match value.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            _ => None,
        };
        match n {
            Some(n) => Some(Spanned::new(value.span(), n)),
            None => {
                let unquote = matches!(value.get_ref(), DeValue::String(s) if s.trim().parse::<f64>().is_ok());
                let form = format!("a number such as {example}");
                self.mismatch(r, name, value, &form, unquote);
                None
            }
        }
    }

    /// A duration (`"250ms"`, `"10s"`), at most a year; `zero` says whether 0 is allowed.
    pub(super) fn duration(&self, r: &mut Report<'_>, name: &str, zero: Zero) -> Option<Duration> {
        let value = self.get(name)?;
        match value.get_ref() {
            DeValue::String(s) => match duration::parse(s, zero) {
                Ok(d) => Some(d),
                Err(why) => {
                    r.error(value.span(), &self.key(name), why);
                    None
                }
            },
            other => {
                // `read_timeout = 2`: show the user's number with a unit.
                let example = match other {
                    DeValue::Integer(i) if i.radix() == 10 && !i.as_str().starts_with('-') => {
                        format!("{}s", i.as_str().trim_start_matches('+'))
                    }
                    _ => "2s".to_owned(),
                };
                let form =
                    format!("a duration such as \"{example}\" (a number and a unit, in quotes)");
                self.mismatch(r, name, value, &form, false);
                None
            }
        }
    }

    /// A list of strings, each with its key path (`trusted_proxies[1]`); an element that is
    /// not a string is reported by its index. `one` and `many` name the elements ("an
    /// address", "addresses").
    pub(super) fn strings(
        &self,
        r: &mut Report<'_>,
        name: &str,
        (one, many): (&str, &str),
        example: &str,
    ) -> Vec<(String, Spanned<&'a str>)> {
        let Some(value) = self.get(name) else {
            return Vec::new();
        };
        let DeValue::Array(items) = value.get_ref() else {
            let form = format!("a list of {many} such as [\"{example}\"]");
            self.mismatch(r, name, value, &form, false);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let key = format!("{}[{i}]", self.key(name));
            match item.get_ref() {
                DeValue::String(s) => out.push((key, Spanned::new(item.span(), s.as_ref()))),
                other => r.error(
                    item.span(),
                    &key,
                    format!("expected {one} such as \"{example}\", not {}", found(other)),
                ),
            }
        }
        out
    }

    /// A single sub-table (`[upstream.health_check]` in an `[[upstream]]`), with its unknown
    /// keys reported; `None` when absent or not a table (reported).
    pub(super) fn section(
        &self,
        r: &mut Report<'_>,
        name: &str,
        section: &Section,
    ) -> Option<Table<'a>> {
        let value = self.get(name)?;
        let key = self.key(name);
        match value.get_ref() {
            DeValue::Table(entries) => Some(Table::new(r, key, value.span(), entries, section)),
            other => {
                r.error(
                    value.span(),
                    &key,
                    format!("expected a {} section, not {}", section.title, found(other)),
                );
                None
            }
        }
    }

    /// The tables of an array of tables (`[[upstream.backend]]` in an `[[upstream]]`), each
    /// with its unknown keys reported.
    pub(super) fn sections(
        &self,
        r: &mut Report<'_>,
        name: &str,
        section: &Section,
    ) -> Vec<Table<'a>> {
        let Some(value) = self.get(name) else {
            return Vec::new();
        };
        let key = self.key(name);
        let items = match value.get_ref() {
            DeValue::Array(items) => items,
            DeValue::Table(_) => {
                r.error(
                    value.span(),
                    &key,
                    format!(
                        "write {} with two brackets: there may be several",
                        section.title
                    ),
                );
                return Vec::new();
            }
            other => {
                r.error(
                    value.span(),
                    &key,
                    format!("expected {} sections, not {}", section.title, found(other)),
                );
                return Vec::new();
            }
        };
        let mut tables = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::Table(entries) => {
                    tables.push(Table::new(r, path, item.span(), entries, section));
                }
                other => r.error(
                    item.span(),
                    &path,
                    format!("expected a {} section, not {}", section.title, found(other)),
                ),
            }
        }
        tables
    }

    /// How many elements the list `name` has (0 if it is absent or not a list).
    pub(super) fn count(&self, name: &str) -> usize {
        match self.get(name).map(Spanned::get_ref) {
            Some(DeValue::Array(items)) => items.len(),
            _ => 0,
        }
    }

    /// Whether `name` is absent or an empty list (a value of another form is reported by
    /// [`Table::sections`]).
    pub(super) fn no_items(&self, name: &str) -> bool {
        match self.get(name).map(Spanned::get_ref) {
            None => true,
            Some(DeValue::Array(items)) => items.is_empty(),
            Some(_) => false,
        }
    }

    /// `[[upstream.backend]]` for `upstream[0].backend[1]`, for messages.
    fn title(&self) -> String {
        let mut title = String::new();
        for part in self.path.split('.') {
            if !title.is_empty() {
                title.push('.');
            }
            title.push_str(part.split('[').next().unwrap_or(part));
        }
        format!("[[{title}]]")
    }
}

/// Whether `name` is a key of the top level that is not a section of its own (`workers`,
/// `shutdown_timeout`): written after a header, it lands in that header's table.
fn top_level_key(name: &str) -> bool {
    const SECTIONS: [&str; 4] = ["listener", "upstream", "admin", "cluster"];
    super::file::SECTION.keys.contains(&name) && !SECTIONS.contains(&name)
}

/// What the user wrote, in words: `the string "3"`, `the number 2`, `a list`.
pub(super) fn found(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => {
            const SHOWN: usize = 40;
            if s.chars().count() > SHOWN {
                let head: String = s.chars().take(SHOWN).collect();
                format!("the string \"{head}…\"")
            } else {
                format!("the string \"{s}\"")
            }
        }
        DeValue::Integer(i) => format!("the number {i}"),
        DeValue::Float(f) => format!("the number {f}"),
        DeValue::Boolean(b) => format!("the value {b}"),
        DeValue::Datetime(_) => "a date".to_owned(),
        DeValue::Array(_) => "a list".to_owned(),
        DeValue::Table(_) => "a table".to_owned(),
    }
}

/// The known key a mistyped one most likely meant: at most two edits away (a transposition
/// counts as one), and at most one edit per three characters written, so that a short,
/// unrelated key is not "corrected". Case and `-` for `_` are forgiven.
pub(super) fn likely(written: &str, keys: &[&'static str]) -> Option<&'static str> {
    let normal = written.to_ascii_lowercase().replace('-', "_");
    let length = normal.chars().count();
    keys.iter()
        .map(|&key| (strsim::osa_distance(&normal, key), key))
        .filter(|&(distance, _)| distance <= 2 && distance * 3 <= length)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, key)| key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    /// Defect 2 of issue 10: a wrong type printed serde's internals ("weight.$__serde_spanned_private_value:
    /// invalid type: string \"3\", expected i64").
    #[test]
    fn a_wrong_type_is_named_in_the_docs_words() {
        let e = refused(&GOOD.replace("weight = 3", "weight = \"3\""));
        assert!(
            e.starts_with(
                "t.toml:15:12: upstream[0].backend[0].weight: expected an integer such as 3, \
                 not the string \"3\" (write it without quotes)\n"
            ),
            "{e}"
        );
        for internal in ["serde", "$__", "i64", "u32", "usize", "invalid type"] {
            assert!(!e.contains(internal), "{internal} in {e}");
        }
        let e = refused(&GOOD.replace("backup = true", "backup = \"yes\""));
        assert!(
            e.contains(
                "upstream[0].backend[1].backup: expected true or false, not the string \"yes\""
            ),
            "{e}"
        );
        let e = refused(&GOOD.replace("\"127.0.0.1:8080\"", "8080"));
        assert!(
            e.contains("listener[0].listen: expected an address such as \"127.0.0.1:8080\", not the number 8080"),
            "{e}"
        );
        let e = refused(&with_algorithm("bounded_load", "balance_factor = \"1.5\""));
        assert!(
            e.contains(
                "upstream[0].balance_factor: expected a number such as 1.25, not the string \"1.5\""
            ),
            "{e}"
        );
        let e = refused(&GOOD.replace("backup = true", "backup = \"3\""));
        assert!(
            e.contains("backup: expected true or false, not the string \"3\"\n"),
            "no advice to drop the quotes: {e}"
        );
        let e = refused(&GOOD.replace("backup = true", "backup = \"true\""));
        assert!(
            e.contains("not the string \"true\" (write it without quotes)"),
            "{e}"
        );
        let e = refused(&GOOD.replace("weight = 3", "weight = 2.5"));
        assert!(
            e.contains("weight: expected an integer such as 1, not the number 2.5"),
            "{e}"
        );
    }

    /// Defect 3 of issue 10: `read_timeout = 2` said "expected a string".
    #[test]
    fn a_number_for_a_duration_asks_for_a_duration() {
        let e = refused(&GOOD.replace("\"250ms\"", "2"));
        assert!(
            e.starts_with(
                "t.toml:11:19: upstream[0].connect_timeout: expected a duration such as \"2s\" \
                 (a number and a unit, in quotes), not the number 2\n"
            ),
            "{e}"
        );
        let e = refused(&GOOD.replace("\"250ms\"", "true"));
        assert!(e.contains("expected a duration such as \"2s\""), "{e}");
    }

    /// Defect 5 of issue 10: an unknown key listed all 21 keys but not the likely one.
    #[test]
    fn an_unknown_key_suggests_the_likely_one() {
        let e = refused(&GOOD.replace("connect_timeout", "conect_timeout"));
        assert!(
            e.starts_with(
                "t.toml:11:1: upstream[0].conect_timeout: unknown key `conect_timeout`; \
                 did you mean `connect_timeout`?\n"
            ),
            "{e}"
        );
        assert!(!e.contains("seed"), "no list after a close match: {e}");
        let e = refused(&GOOD.replace("weight = 3", "wieght = 3"));
        assert!(
            e.starts_with("t.toml:15:3: upstream[0].backend[0].wieght: unknown key `wieght`; did you mean `weight`?"),
            "{e}"
        );
        let e = refused(&GOOD.replace("weight = 3", "colour = 3"));
        assert!(
            e.contains(
                "unknown key `colour`; the keys of [[upstream.backend]] are: addr, weight, \
                 backup, down, max_fails, fail_timeout, slow_start"
            ),
            "{e}"
        );
        let e = refused(&GOOD.replace("workers = 2", "wrokers = 2"));
        assert!(
            e.contains("t.toml:2:1: wrokers: unknown key `wrokers`; did you mean `workers`?"),
            "{e}"
        );
    }

    #[test]
    fn keys_of_later_work_are_not_yet_supported() {
        // No key of the design is waiting now; the mechanism is tested on a section of its own.
        const LATER: Section = Section {
            title: "[later]",
            keys: &["now"],
            not_yet: &["later"],
        };
        let text = "now = 1\nlater = 2\n";
        let doc = DeTable::parse(text).unwrap();
        let sources = super::super::source::Sources::one(std::path::Path::new("t.toml"), text);
        let mut r = Report::new(&sources);
        let _ = Table::new(&mut r, String::new(), 0..0, doc.get_ref(), &LATER);
        let e = r.finish().unwrap_err().to_string();
        assert!(e.contains("`later` is not supported yet"), "{e}");
        assert!(!e.contains("`now`"), "{e}");
    }

    const KEYS: &[&str] = &[
        "connect_timeout",
        "read_timeout",
        "weight",
        "addr",
        "keepalive",
    ];

    #[test]
    fn likely_keys() {
        assert_eq!(likely("conect_timeout", KEYS), Some("connect_timeout"));
        assert_eq!(likely("wieght", KEYS), Some("weight"));
        assert_eq!(likely("Connect-Timeout", KEYS), Some("connect_timeout"));
        assert_eq!(likely("adr", KEYS), Some("addr"));
        assert_eq!(likely("keep_alive", KEYS), Some("keepalive"));
        assert_eq!(likely("timeout", KEYS), None);
        assert_eq!(likely("colour", KEYS), None);
        assert_eq!(likely("ad", KEYS), None);
    }

    #[test]
    fn found_values_in_words() {
        let doc = DeTable::parse(
            "s = \"3\"\ni = 0xff\nf = 1.5\nb = true\nl = [1]\nt = {}\nd = 1979-05-27\n",
        )
        .unwrap();
        let words: Vec<String> = ["s", "i", "f", "b", "l", "t", "d"]
            .iter()
            .map(|k| found(doc.get_ref().get(*k).unwrap().get_ref()))
            .collect();
        assert_eq!(
            words,
            [
                "the string \"3\"",
                "the number 0xff",
                "the number 1.5",
                "the value true",
                "a list",
                "a table",
                "a date"
            ]
        );
    }
}
