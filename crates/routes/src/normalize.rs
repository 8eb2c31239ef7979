//! A request's path as nginx matches locations against it (`$uri`).
//!
//! nginx 1.22's `ngx_http_parse_complex_uri` (src/http/ngx_http_parse.c), with its defaults
//! (`merge_slashes on`), as a state machine over the bytes of the path:
//!
//! * `%XX` is decoded and the byte goes through the machine as if it had been sent as it is
//!   (so `%2e%2e` is a `..` segment and `%2F` a slash), except `%25` (`%`) and `%23` (`#`),
//!   which are kept as the characters they are, and `%3F` (`?`), which is kept and does not
//!   start the query. `%00`, a `%` without two hex digits after it, and a path that ends inside
//!   an escape are refused (nginx: 400).
//! * runs of `/` are merged into one;
//! * a `.` segment is dropped, and a `..` segment takes the one before it away; one that would
//!   climb above the root is refused (400);
//! * `?` (the query) or `#` (a fragment; clients do not send one) ends the path: a caller may
//!   pass the whole target.
//!
//! The caller passes the path alone (the target up to its `?`), which starts with `/`.

/// A path nginx refuses (400): it climbs above the root, or holds a bad or NUL escape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Usual,
    Slash,
    Dot,
    DotDot,
}

/// Whether `path` is already in normal form, so [`normalize`] would return it as it is: no
/// escape, no `?` or `#`, no `//`, no `/.` (a `.` or `..` segment, or a segment that only starts with
/// a dot: looked at by [`normalize`] rather than here). nginx too parses a "complex" URI only
/// when the request line has one of these.
pub fn is_normal(path: &[u8]) -> bool {
    let (own, _, normal) = split_target(path);
    normal && own.len() == path.len()
}

/// What [`split_target`] looks at in each byte.
const OTHER: u8 = 0;
const SLASH: u8 = 1;
const DOT: u8 = 2;
const QUERY: u8 = 3;
/// `%` or `#`: the path is not normal.
const ODD: u8 = 4;

const PATH_CLASS: [u8; 256] = {
    let mut class = [OTHER; 256];
    class[b'/' as usize] = SLASH;
    class[b'.' as usize] = DOT;
    class[b'?' as usize] = QUERY;
    class[b'%' as usize] = ODD;
    class[b'#' as usize] = ODD;
    class
};

/// A request target (origin form) split at its first `?`: the path, the query (empty without
/// one), and whether the path is normal ([`is_normal`]); one pass over the bytes.
pub fn split_target(target: &[u8]) -> (&[u8], &[u8], bool) {
    let mut normal = true;
    for (i, &b) in target.iter().enumerate() {
        let class = PATH_CLASS[usize::from(b)];
        if class == OTHER {
            continue;
        }
        match class {
            SLASH | DOT => normal &= !(i > 0 && target[i - 1] == b'/'),
            QUERY => return (&target[..i], &target[i + 1..], normal),
            _ => normal = false,
        }
    }
    (target, &[], normal)
}

/// Writes into `out` (cleared first) the path `target` (the request-target's path, without
/// the query) as nginx's `ngx_http_parse_complex_uri` makes it with its defaults.
pub fn normalize(target: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    out.clear();
    let mut state = State::Usual;
    let mut bytes = target.iter().copied();
    while let Some(b) = bytes.next() {
        // The query, or a fragment: the path ends (nginx's parser stops at either).
        if b == b'#' || b == b'?' {
            break;
        }
        if b != b'%' {
            state = step(state, b, out)?;
            continue;
        }
        let (Some(high), Some(low)) = (bytes.next().and_then(hex), bytes.next().and_then(hex))
        else {
            return Err(Invalid);
        };
        match (high << 4) | low {
            0 => return Err(Invalid),
            // Kept as the characters they are, and the machine goes on as after any other.
            decoded @ (b'%' | b'#') => {
                out.push(decoded);
                state = State::Usual;
            }
            // Kept, without starting the query; the state is the one before the escape.
            b'?' => out.push(b'?'),
            decoded => state = step(state, decoded, out)?,
        }
    }
    match state {
        // A path ending in `/.`: the dot goes, the slash stays.
        State::Dot => {
            out.pop();
        }
        State::DotDot => climb(out)?,
        State::Usual | State::Slash => {}
    }
    Ok(())
}

/// One byte (sent, or decoded) through the machine.
fn step(state: State, b: u8, out: &mut Vec<u8>) -> Result<State, Invalid> {
    Ok(match (state, b) {
        (State::Usual, b'/') => {
            out.push(b'/');
            State::Slash
        }
        (State::Usual, _) => {
            out.push(b);
            State::Usual
        }
        // Merged: the slash before is kept.
        (State::Slash, b'/') => State::Slash,
        (State::Slash, b'.') => {
            out.push(b'.');
            State::Dot
        }
        // `/./`: the dot goes.
        (State::Dot, b'/') => {
            out.pop();
            State::Slash
        }
        (State::Dot, b'.') => {
            out.push(b'.');
            State::DotDot
        }
        // `/../`: the segment before goes, with the dots.
        (State::DotDot, b'/') => {
            climb(out)?;
            State::Slash
        }
        (State::Slash | State::Dot | State::DotDot, _) => {
            out.push(b);
            State::Usual
        }
    })
}

/// `out` ends with `/..`: removes it and the segment before it, keeping that segment's
/// leading slash (`/a/b/..` → `/a/`); `Invalid` when there is no segment before (`/..`).
fn climb(out: &mut Vec<u8>) -> Result<(), Invalid> {
    // Without the "/..": the text up to the slash that ends the segment before.
    let before = out.len().checked_sub(3).ok_or(Invalid)?;
    // nginx looks from the byte before that slash back to the previous slash.
    let end = before.checked_sub(1).ok_or(Invalid)?;
    let slash = out[..=end]
        .iter()
        .rposition(|&c| c == b'/')
        .ok_or(Invalid)?;
    out.truncate(slash + 1);
    Ok(())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(path: &str) -> Result<String, Invalid> {
        let mut out = Vec::new();
        normalize(path.as_bytes(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn dot_segments_and_slashes_as_nginx_resolves_them() {
        let cases = [
            ("/", "/"),
            ("/a/b", "/a/b"),
            ("/a//b", "/a/b"),
            ("//a", "/a"),
            ("/a/./b", "/a/b"),
            ("/a/.", "/a/"),
            ("/a/../b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/../", "/a/"),
            ("/a/../../", "-"),
            ("/..", "-"),
            ("/../a", "-"),
            ("/.hidden", "/.hidden"),
            ("/a/..b", "/a/..b"),
            ("/a/...", "/a/..."),
            ("/a.b/c", "/a.b/c"),
            ("/api/../admin", "/admin"),
            ("/a/b#frag", "/a/b"),
            ("/a/b?x=/../y", "/a/b"),
            ("/a/.?x", "/a/"),
        ];
        for (path, want) in cases {
            let got = n(path).unwrap_or_else(|_| "-".to_owned());
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn escapes_are_decoded_and_take_part_in_the_rules() {
        let cases = [
            ("/%61pi", "/api"),
            ("/api/%2e%2e/admin", "/admin"),
            ("/api/%2E%2E/admin", "/admin"),
            ("/a%2Fb", "/a/b"),
            ("/a%2F%2Fb", "/a/b"),
            ("/a%25b", "/a%b"),
            ("/a%252e%252e", "/a%2e%2e"),
            ("/a%3Fb", "/a?b"),
            ("/a%23b", "/a#b"),
            ("/a%20b", "/a b"),
            ("/%zz", "-"),
            ("/a%2", "-"),
            ("/a%", "-"),
            ("/a%00b", "-"),
            ("/%2e%2e", "-"),
        ];
        for (path, want) in cases {
            let got = n(path).unwrap_or_else(|_| "-".to_owned());
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn a_path_said_normal_is_what_normalize_makes_of_it() {
        for path in ["/", "/a/b", "/a.b/c", "/a/b.", "/x-y_z~!$&'()*+,;=:@"] {
            assert!(is_normal(path.as_bytes()), "{path}");
            assert_eq!(n(path).unwrap(), path);
        }
        for path in ["//a", "/a/./b", "/.x", "/a/..", "/%61", "/a#b", "/a/"] {
            let said = is_normal(path.as_bytes());
            // A path said normal must come out of normalize unchanged.
            assert!(!said || n(path).unwrap() == path, "{path}");
        }
        assert!(!is_normal(b"/a/./b") && !is_normal(b"/%2e") && !is_normal(b"//"));
        assert!(!is_normal(b"/a?b"));
    }

    #[test]
    fn a_target_is_split_at_its_first_question_mark() {
        assert_eq!(
            split_target(b"/a/b?x=1?y"),
            (&b"/a/b"[..], &b"x=1?y"[..], true)
        );
        assert_eq!(split_target(b"/a//b?x"), (&b"/a//b"[..], &b"x"[..], false));
        assert_eq!(split_target(b"/a?//"), (&b"/a"[..], &b"//"[..], true));
        assert_eq!(split_target(b"/a"), (&b"/a"[..], &b""[..], true));
        assert_eq!(split_target(b"/%41?"), (&b"/%41"[..], &b""[..], false));
    }

    #[test]
    fn a_normalised_path_is_its_own_normal_form_when_it_has_no_escapes() {
        for path in ["/a/b/", "/x", "/a/..b/c", "/.well-known/x"] {
            let once = n(path).unwrap();
            assert_eq!(n(&once).unwrap(), once);
        }
    }
}
