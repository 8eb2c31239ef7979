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

/// One problem, with where it starts in the file (for ordering).
#[derive(Debug)]
struct Problem {
    at: Option<usize>,
    text: String,
}

/// The problems and warnings found in one file, rendered against its text.
#[derive(Debug)]
pub(super) struct Report<'a> {
    path: &'a Path,
    text: &'a str,
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

impl<'a> Report<'a> {
    pub(super) fn new(path: &'a Path, text: &'a str) -> Report<'a> {
        Report {
            path,
            text,
            problems: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// How many problems have been reported so far (to tell whether a part added any).
    pub(super) fn error_count(&self) -> usize {
        self.problems.len()
    }

    /// A problem at `span` (a byte range of the file) with `key`, the key path as the user
    /// would write it (`upstream[0].backend[1].weight`; empty for a TOML syntax error).
    pub(super) fn error(&mut self, span: Range<usize>, key: &str, message: impl fmt::Display) {
        let start = floor_char_boundary(self.text, span.start);
        let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |i| start + i);
        let end = floor_char_boundary(self.text, span.end.clamp(start, line_end));
        let line_no = self.line_of(&span);
        let col = self.text[line_start..start].chars().count() + 1;
        let width = self.text[start..end].chars().count().max(1);
        let line = self.text[line_start..line_end].trim_end_matches('\r');
        let gutter = " ".repeat(line_no.to_string().len());
        let mut out = format!("{}:{line_no}:{col}: ", self.path.display());
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
            at: Some(start),
            text: out,
        });
    }

    /// A problem with the file as a whole, which no line shows.
    pub(super) fn error_in_file(&mut self, key: &str, message: impl fmt::Display) {
        let text = if key.is_empty() {
            format!("{}: {message}", self.path.display())
        } else {
            format!("{}: {key}: {message}", self.path.display())
        };
        self.problems.push(Problem { at: None, text });
    }

    /// Something allowed but probably not meant: `file:line: message`.
    pub(super) fn warn(&mut self, span: &Range<usize>, message: impl fmt::Display) {
        let line = self.line_of(span);
        self.warnings
            .push(format!("{}:{line}: {message}", self.path.display()));
    }

    /// The directory of the configuration file, against which relative paths in it are read
    /// (as nginx reads them against its configuration prefix).
    pub(super) fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }

    /// The 1-based line `span` starts on.
    pub(super) fn line_of(&self, span: &Range<usize>) -> usize {
        let start = floor_char_boundary(self.text, span.start);
        self.text[..start].matches('\n').count() + 1
    }

    /// The warnings if there is no problem; every problem, in the order of the file, if
    /// there is.
    pub(super) fn finish(self) -> Result<Vec<String>, ConfigError> {
        if self.problems.is_empty() {
            Ok(self.warnings)
        } else {
            Err(self.into_error())
        }
    }

    /// Every problem, in the order of the file.
    pub(super) fn into_error(self) -> ConfigError {
        let mut problems = self.problems;
        // Stable: problems at one place keep the order they were found in.
        problems.sort_by_key(|p| p.at.unwrap_or(usize::MAX));
        ConfigError {
            path: self.path.to_owned(),
            problems: problems.into_iter().map(|p| p.text).collect(),
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
        let mut r = Report::new(Path::new("t.toml"), text);
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
        let text = "é";
        let mut r = Report::new(Path::new("t.toml"), text);
        r.error(1..100, "k", "inside");
        r.error(100..200, "k", "after");
        assert_eq!(r.finish().unwrap_err().problems.len(), 2);
    }
}
