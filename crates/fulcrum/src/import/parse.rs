//! nginx's configuration syntax (the grammar of `ngx_conf_file.c`): directives of words ended
//! by `;`, or by a `{ ... }` block; words unquoted, or in single or double quotes with `\`
//! escapes; `#` comments to the end of the line where a word could start; `include` with a
//! glob, relative to the main file's directory, expanded where it stands. Each directive keeps
//! the file and line it came from.

use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One directive: its name, its arguments (unquoted, `$variables` kept as text), where it is,
/// and its block if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub file: Rc<PathBuf>,
    pub line: usize,
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    /// `file:line`, for messages and the comments of the translation.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// Why a configuration cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub at: String,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Semicolon,
    Open,
    Close,
}

/// Reads `path` and every file it includes; `root` is the directory relative includes are
/// taken from (nginx takes them from its prefix's conf directory: here the main file's).
pub fn parse_file(path: &Path) -> Result<Vec<Directive>, ParseError> {
    let root = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_included(path, &root, 0)
}

fn parse_included(path: &Path, root: &Path, depth: usize) -> Result<Vec<Directive>, ParseError> {
    if depth > 16 {
        return Err(ParseError {
            at: path.display().to_string(),
            message: "includes nested more than 16 deep (does a file include itself?)".into(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| ParseError {
        at: path.display().to_string(),
        message: format!("cannot read it: {e}"),
    })?;
    let file = Rc::new(path.to_path_buf());
    let tokens = tokenize(&text, &file)?;
    let mut at = 0;
    let directives = block(&tokens, &mut at, &file, false)?;
    expand_includes(directives, root, depth)
}

/// Replaces each `include` by the directives of the files it names.
fn expand_includes(
    directives: Vec<Directive>,
    root: &Path,
    depth: usize,
) -> Result<Vec<Directive>, ParseError> {
    let mut out = Vec::new();
    for mut d in directives {
        if d.name == "include" {
            let [pattern] = d.args.as_slice() else {
                return Err(ParseError {
                    at: d.at(),
                    message: "include takes one file name or glob".into(),
                });
            };
            let full = if Path::new(pattern).is_absolute() {
                PathBuf::from(pattern)
            } else {
                root.join(pattern)
            };
            let mut files: Vec<PathBuf> = glob_files(&full).map_err(|message| ParseError {
                at: d.at(),
                message,
            })?;
            files.sort();
            let has_glob = pattern.contains(['*', '?', '[']);
            if files.is_empty() && !has_glob {
                return Err(ParseError {
                    at: d.at(),
                    message: format!("include {pattern}: no such file ({})", full.display()),
                });
            }
            for f in files {
                out.extend(parse_included(&f, root, depth + 1)?);
            }
            continue;
        }
        if let Some(inner) = d.block.take() {
            d.block = Some(expand_includes(inner, root, depth)?);
        }
        out.push(d);
    }
    Ok(out)
}

/// The files `pattern` names: the file itself, or the matches of a glob in its last part
/// (`sites-enabled/*`, `conf.d/*.conf`), as nginx's `include` takes them.
fn glob_files(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let name = pattern
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !name.contains(['*', '?', '[']) {
        return Ok(if pattern.is_file() {
            vec![pattern.to_path_buf()]
        } else {
            Vec::new()
        });
    }
    let dir = pattern.parent().unwrap_or(Path::new("."));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // A glob in a directory that does not exist matches nothing, as in nginx.
        Err(_) => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let file_name = entry.file_name();
        let Some(candidate) = file_name.to_str() else {
            continue;
        };
        if path.is_file() && glob_match(name.as_bytes(), candidate.as_bytes()) {
            out.push(path);
        }
    }
    Ok(out)
}

/// `*` (any run), `?` (one byte), `[abc]` / `[a-z]` (one of them), else the byte itself.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob_match(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob_match(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return name.first() == Some(&b'[') && glob_match(rest, &name[1..]);
            };
            let (set, after) = (&rest[..end], &rest[end + 1..]);
            let Some((&c, tail)) = name.split_first() else {
                return false;
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= (set[i]..=set[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit && glob_match(after, tail)
        }
        Some((&p, rest)) => name.first() == Some(&p) && glob_match(rest, &name[1..]),
    }
}

/// The directives up to the end of the block (`inner`: a `}` ends it) or of the file.
fn block(
    tokens: &[(Token, usize)],
    at: &mut usize,
    file: &Rc<PathBuf>,
    inner: bool,
) -> Result<Vec<Directive>, ParseError> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut first_line = 0;
    let err = |line: usize, message: String| ParseError {
        at: format!("{}:{line}", file.display()),
        message,
    };
    while let Some((token, line)) = tokens.get(*at) {
        *at += 1;
        match token {
            Token::Word(w) => {
                if words.is_empty() {
                    first_line = *line;
                }
                words.push(w.clone());
            }
            Token::Semicolon | Token::Open => {
                let Some((name, args)) = words.split_first() else {
                    return Err(err(
                        *line,
                        format!(
                            "unexpected \"{}\"",
                            if *token == Token::Open { "{" } else { ";" }
                        ),
                    ));
                };
                let block = if *token == Token::Open {
                    Some(block(tokens, at, file, true)?)
                } else {
                    None
                };
                out.push(Directive {
                    name: name.clone(),
                    args: args.to_vec(),
                    file: Rc::clone(file),
                    line: first_line,
                    block,
                });
                words.clear();
            }
            Token::Close => {
                if !words.is_empty() {
                    return Err(err(
                        first_line,
                        format!(
                            "\"{}\" is not ended by \";\" (a \"}}\" follows on line {line})",
                            words[0]
                        ),
                    ));
                }
                if !inner {
                    return Err(err(*line, "unexpected \"}\"".into()));
                }
                return Ok(out);
            }
        }
    }
    if !words.is_empty() {
        return Err(err(
            first_line,
            format!(
                "\"{}\" is not ended by \";\" (unexpected end of file)",
                words[0]
            ),
        ));
    }
    if inner {
        return Err(err(
            tokens.last().map_or(1, |t| t.1),
            "unexpected end of file, expecting \"}\"".into(),
        ));
    }
    Ok(out)
}

/// The file's tokens, each with its line.
fn tokenize(text: &str, file: &Rc<PathBuf>) -> Result<Vec<(Token, usize)>, ParseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b';' => {
                out.push((Token::Semicolon, line));
                i += 1;
            }
            b'{' => {
                out.push((Token::Open, line));
                i += 1;
            }
            b'}' => {
                out.push((Token::Close, line));
                i += 1;
            }
            b'"' | b'\'' => {
                let start_line = line;
                let (word, next, lines) = quoted(bytes, i).ok_or_else(|| ParseError {
                    at: format!("{}:{start_line}", file.display()),
                    message: "a quoted string is not closed".into(),
                })?;
                out.push((Token::Word(word), start_line));
                line += lines;
                i = next;
            }
            _ => {
                let start = i;
                let mut word = Vec::new();
                while i < bytes.len() {
                    let c = bytes[i];
                    if matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{' | b'}') {
                        break;
                    }
                    // `${name}` keeps its braces inside the word.
                    if c == b'$' && bytes.get(i + 1) == Some(&b'{') {
                        while i < bytes.len() && bytes[i] != b'}' {
                            word.push(bytes[i]);
                            i += 1;
                        }
                        if i < bytes.len() {
                            word.push(b'}');
                            i += 1;
                        }
                        continue;
                    }
                    if c == b'\\' && i + 1 < bytes.len() {
                        unescape(bytes[i + 1], &mut word);
                        i += 2;
                        continue;
                    }
                    word.push(c);
                    i += 1;
                }
                debug_assert!(i > start);
                out.push((
                    Token::Word(String::from_utf8_lossy(&word).into_owned()),
                    line,
                ));
            }
        }
    }
    Ok(out)
}

/// `\` followed by `next`, in a quoted or an unquoted word alike (the copy loop at the end of
/// `ngx_conf_read_token`): `\"`, `\'`, `\\` are the character, `\n`, `\r`, `\t` the control
/// characters, and before anything else the `\` is kept (`\.` in a regex stays `\.`).
fn unescape(next: u8, word: &mut Vec<u8>) {
    match next {
        b'"' | b'\'' | b'\\' => word.push(next),
        b'n' => word.push(b'\n'),
        b'r' => word.push(b'\r'),
        b't' => word.push(b'\t'),
        _ => {
            word.push(b'\\');
            word.push(next);
        }
    }
}

/// The quoted word starting at `i` (its quote): the text, the index after the closing quote,
/// and the newlines inside.
fn quoted(bytes: &[u8], i: usize) -> Option<(String, usize, usize)> {
    let quote = bytes[i];
    let mut word = Vec::new();
    let mut lines = 0;
    let mut j = i + 1;
    while j < bytes.len() {
        let c = bytes[j];
        if c == quote {
            return Some((String::from_utf8_lossy(&word).into_owned(), j + 1, lines));
        }
        if c == b'\\' && j + 1 < bytes.len() {
            unescape(bytes[j + 1], &mut word);
            j += 2;
            continue;
        }
        if c == b'\n' {
            lines += 1;
        }
        word.push(c);
        j += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Directive>, ParseError> {
        let file = Rc::new(PathBuf::from("t.conf"));
        let tokens = tokenize(text, &file)?;
        let mut at = 0;
        block(&tokens, &mut at, &file, false)
    }

    #[test]
    fn words_quotes_comments_and_blocks() {
        let d = parse(
            "# a comment\nhttp {\n  server { listen 80; server_name \"a b\" 'c;d' e\\;f;  # not: x;\n    return 200 \"ok\\n\";\n    set $x ${y}z;\n  }\n}\n",
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        let http = &d[0];
        assert_eq!((http.name.as_str(), http.line), ("http", 2));
        let server = &http.block.as_ref().unwrap()[0];
        let inner = server.block.as_ref().unwrap();
        assert_eq!(inner[0].args, ["80"]);
        assert_eq!(inner[1].args, ["a b", "c;d", "e\\;f"]);
        assert_eq!(inner[2].args, ["200", "ok\n"]);
        assert_eq!(
            (inner[2].line, inner[3].args.clone()),
            (4, vec!["$x".to_owned(), "${y}z".to_owned()])
        );
    }

    #[test]
    fn errors_say_where() {
        let e = parse("http {\n  listen 80\n}\n").unwrap_err();
        assert_eq!(e.at, "t.conf:2");
        assert!(e.message.contains("not ended by \";\""), "{e}");
        assert!(
            parse("http {\n")
                .unwrap_err()
                .message
                .contains("expecting \"}\"")
        );
        assert_eq!(parse("}\n").unwrap_err().message, "unexpected \"}\"");
        assert!(
            parse("a \"b;\n")
                .unwrap_err()
                .message
                .contains("not closed")
        );
    }

    #[test]
    fn globs_as_include_takes_them() {
        assert!(glob_match(b"*.conf", b"a.conf"));
        assert!(!glob_match(b"*.conf", b"a.conf.bak"));
        assert!(glob_match(b"*", b"default"));
        assert!(glob_match(b"site-[ab]?", b"site-b1"));
        assert!(!glob_match(b"site-[ab]?", b"site-c1"));
    }
}
