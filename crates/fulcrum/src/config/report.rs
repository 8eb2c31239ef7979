//! What is wrong with a configuration file, and how it is shown.
//!
//! Every problem reads `file:line:column: key.path: message`, followed by the offending line
//! with the value or key underlined, as compilers show errors (rustc's and clang's layout):
//!
//! ```text
//! fulcrum.toml:15:12: upstream[0].backend[0].weight: expected an integer such as 3, not the string "3"
//!    |
//! 15 |   weight = "3"
//!    |            ^^^
//! ```
//!
//! Problems are collected, not returned one at a time: the whole file is checked, and the
//! problems are listed in the order of the file, so one run of `fulcrum check` shows all of
//! them. Problems about the file as a whole (no `[[listener]]`) have no line and come last.

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::source::Sources;

/// Everything wrong with a configuration file, ready to print.
#[derive(Debug)]
pub struct ConfigError {
    pub path: PathBuf,
    /// Each problem as printed: the location line and, where the problem has one, the
    /// offending line underlined.
    pub problems: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(p)?;
        }
        if self.problems.len() > 1 {
            write!(
                f,
                "\n{} problems in {}",
                self.problems.len(),
                self.path.display()
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// One problem or warning, with where it starts in the configuration (for ordering).
#[derive(Debug)]
struct Problem {
    at: Option<usize>,
    text: String,
}

/// Problems and warnings in the order of the configuration: by place, those without one
/// last; stable, so problems at one place keep the order they were found in.
fn in_order(mut problems: Vec<Problem>) -> Vec<String> {
    problems.sort_by_key(|p| p.at.unwrap_or(usize::MAX));
    problems.into_iter().map(|p| p.text).collect()
}

/// The problems and warnings found in a configuration, rendered against its files' text.
#[derive(Debug)]
pub(super) struct Report<'a> {
    sources: &'a Sources,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    /// Where values are that could not be read at all (a `${NAME}` not set): a further
    /// problem there would be about a value the user did not write.
    unread: std::collections::HashSet<usize>,
}

impl<'a> Report<'a> {
    pub(super) fn new(sources: &'a Sources) -> Report<'a> {
        Report {
            sources,
            problems: Vec::new(),
            warnings: Vec::new(),
            unread: std::collections::HashSet::new(),
        }
    }

    /// How many problems have been reported so far (to tell whether a part added any).
    pub(super) fn error_count(&self) -> usize {
        self.problems.len()
    }

    /// The file `span` starts in, its text, and where `span` starts in it.
    fn locate(&self, span: &Range<usize>) -> (&'a Path, &'a str, usize) {
        match self.sources.locate(span.start) {
            Some((f, at)) => (&f.path, &f.text, floor_char_boundary(&f.text, at)),
            None => (self.sources.main_path(), "", 0),
        }
    }

    /// A problem at `span` (a byte range of the configuration) with `key`, the key path as
    /// the user would write it (`upstream[0].backend[1].weight`; empty for a TOML syntax
    /// error).
    pub(super) fn error(&mut self, span: Range<usize>, key: &str, message: impl fmt::Display) {
        if self.unread.contains(&span.start) {
            return;
        }
        let (path, text, start) = self.locate(&span);
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let local_end = span.end.saturating_sub(span.start) + start;
        let end = floor_char_boundary(text, local_end.clamp(start, line_end));
        let line_no = text[..start].matches('\n').count() + 1;
        let col = text[line_start..start].chars().count() + 1;
        let width = text[start..end].chars().count().max(1);
        let line = text[line_start..line_end].trim_end_matches('\r');
        let gutter = " ".repeat(line_no.to_string().len());
        let mut out = format!("{}:{line_no}:{col}: ", path.display());
        if !key.is_empty() {
            let _ = write!(out, "{key}: ");
        }
        let _ = write!(
            out,
            "{message}\n{gutter} |\n{line_no} | {line}\n{gutter} | {}{}",
            " ".repeat(col - 1),
            "^".repeat(width),
        );
        self.problems.push(Problem {
            at: Some(span.start),
            text: out,
        });
    }

    /// A problem with the value at `span`, which makes it unreadable: no other problem is
    /// reported there.
    pub(super) fn unreadable(&mut self, span: Range<usize>, key: &str, message: impl fmt::Display) {
        self.error(span.clone(), key, message);
        self.unread.insert(span.start);
    }

    /// A problem with the configuration as a whole, which no line shows.
    pub(super) fn error_in_file(&mut self, key: &str, message: impl fmt::Display) {
        let path = self.sources.main_path().display();
        let text = if key.is_empty() {
            format!("{path}: {message}")
        } else {
            format!("{path}: {key}: {message}")
        };
        self.problems.push(Problem { at: None, text });
    }

    /// Something allowed but probably not meant: `file:line: message`.
    pub(super) fn warn(&mut self, span: &Range<usize>, message: impl fmt::Display) {
        let (path, _, _) = self.locate(span);
        let line = self.line_of(span);
        self.warnings.push(Problem {
            at: Some(span.start),
            text: format!("{}:{line}: {message}", path.display()),
        });
    }

    /// The directory of the main configuration file, against which relative paths in it
    /// (and in the files it includes) are read, as nginx reads them against its prefix.
    pub(super) fn dir(&self) -> &'a Path {
        match self.sources.main_path().parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }

    /// The text of `span` as written in its file (with its quotes; before `${NAME}` is
    /// replaced).
    pub(super) fn written(&self, span: &Range<usize>) -> &'a str {
        let (_, text, start) = self.locate(span);
        let end = floor_char_boundary(text, start + span.end.saturating_sub(span.start));
        &text[start..end.max(start)]
    }

    /// The 1-based line `span` starts on, in its file.
    pub(super) fn line_of(&self, span: &Range<usize>) -> usize {
        let (_, text, start) = self.locate(span);
        text[..start].matches('\n').count() + 1
    }

    /// Where `span` is, for a message about a problem at `from`: `line 12` in the same file,
    /// `conf.d/web.toml:12` in another.
    pub(super) fn place(&self, span: &Range<usize>, from: &Range<usize>) -> String {
        let line = self.line_of(span);
        let (file, _, _) = self.locate(span);
        if file == self.locate(from).0 {
            format!("line {line}")
        } else {
            format!("{}:{line}", file.display())
        }
    }

    /// The warnings if there is no problem; every problem, in the order of the file, if
    /// there is.
    pub(super) fn finish(self) -> Result<Vec<String>, ConfigError> {
        if self.problems.is_empty() {
            Ok(in_order(self.warnings))
        } else {
            Err(self.into_error())
        }
    }

    /// Every problem, in the order of the file.
    pub(super) fn into_error(self) -> ConfigError {
        ConfigError {
            path: self.sources.main_path().to_owned(),
            problems: in_order(self.problems),
        }
    }
}

/// `at`, moved back to the start of the character it falls in (and into the text).
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_come_in_file_order_with_the_line_underlined() {
        let text = "a = 1\nb = \"é\"\n";
        let sources = Sources::one(Path::new("t.toml"), text);
        let mut r = Report::new(&sources);
        r.error(10..14, "b", "second");
        r.error_in_file("c", "whole file");
        r.error(0..1, "a", "first");
        let e = r.finish().unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.toml:1:1: a: first\n  |\n1 | a = 1\n  | ^\n\
             t.toml:2:5: b: second\n  |\n2 | b = \"é\"\n  |     ^^^\n\
             t.toml: c: whole file\n\
             3 problems in t.toml"
        );
    }

    #[test]
    fn spans_off_the_text_or_inside_a_character_do_not_panic() {
        let sources = Sources::one(Path::new("t.toml"), "é");
        let mut r = Report::new(&sources);
        r.error(1..100, "k", "inside");
        r.error(100..200, "k", "after");
        assert_eq!(r.finish().unwrap_err().problems.len(), 2);
    }
}
