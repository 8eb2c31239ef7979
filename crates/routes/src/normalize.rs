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

/// `0x01` and `0x80` in every byte of a word.
const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The bytes of `x` equal to `b`: the high bit of each such byte, no other bit.
#[inline]
fn bytes_equal(x: u64, b: u8) -> u64 {
    let v = x ^ (LO * u64::from(b));
    // The high bit of `(v & 0x7f) + 0x7f`, or of `v`, is set unless the byte is 0; no carry
    // crosses a byte.
    !(((v & !HI) + !HI) | v) & HI
}

/// A request target (origin form) split at its first `?`: the path, the query (empty without
/// one), and whether the path is normal ([`is_normal`]). One pass over the target, eight
/// bytes at a time: this runs on every routed request.
pub fn split_target(target: &[u8]) -> (&[u8], &[u8], bool) {
    let mut normal = true;
    // The high bit of the lowest byte: the byte before the word is a `/`.
    let mut slash_before = 0;
    let mut words = target.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(word);
        let scan = scan_word(u64::from_le_bytes(bytes), slash_before);
        if let Some(q) = scan.query {
            return split_at_query(target, at + q, normal && scan.normal_before_query);
        }
        normal &= scan.normal_before_query;
        slash_before = scan.slash_last;
        at += 8;
    }
    let rest = words.remainder();
    if rest.is_empty() {
        return (target, &[], normal);
    }
    // The last bytes, in the low bytes of a word whose others are zero (none of the bytes
    // looked for): the target's last eight bytes shifted down past those already seen, or,
    // in a target shorter than a word, its bytes one by one.
    let word = match target.len().checked_sub(8).and_then(|s| target.get(s..)) {
        Some(last) => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(last);
            u64::from_le_bytes(bytes) >> (8 * (8 - rest.len()))
        }
        None => rest
            .iter()
            .enumerate()
            .fold(0, |word, (k, &b)| word | u64::from(b) << (8 * k)),
    };
    let scan = scan_word(word, slash_before);
    match scan.query {
        Some(q) => split_at_query(target, at + q, normal && scan.normal_before_query),
        None => (target, &[], normal && scan.normal_before_query),
    }
}

fn split_at_query(target: &[u8], q: usize, normal: bool) -> (&[u8], &[u8], bool) {
    let (path, query) = target.split_at(q);
    (path, query.get(1..).unwrap_or_default(), normal)
}

/// What one word of a target holds.
struct Word {
    /// Where its first `?` is, if it has one.
    query: Option<usize>,
    /// No `%`, `#`, `//` or `/.` before the first `?` (or in all of it, without one).
    normal_before_query: bool,
    /// The high bit of the lowest byte set if its last byte is a `/`.
    slash_last: u64,
}

/// Scans the eight bytes of `x` (the first in the lowest byte); `slash_before`: the high bit
/// of the lowest byte set if the byte before them is a `/`.
#[inline]
fn scan_word(x: u64, slash_before: u64) -> Word {
    let slash = bytes_equal(x, b'/');
    let odd = bytes_equal(x, b'%') | bytes_equal(x, b'#');
    let after_slash = (slash << 8) | slash_before;
    let not_normal = odd | (after_slash & (slash | bytes_equal(x, b'.')));
    let query = bytes_equal(x, b'?');
    let (query, before) = if query == 0 {
        (None, u64::MAX)
    } else {
        let q = query.trailing_zeros() as usize / 8;
        (Some(q), (1u64 << (q * 8)) - 1)
    };
    Word {
        query,
        normal_before_query: not_normal & before == 0,
        slash_last: (slash >> 56) & 0x80,
    }
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

    /// The byte-at-a-time definition [`split_target`] must agree with.
    fn split_by_bytes(target: &[u8]) -> (&[u8], &[u8], bool) {
        let end = target.iter().position(|&b| b == b'?');
        let path = &target[..end.unwrap_or(target.len())];
        let query = end.map_or(&b""[..], |q| &target[q + 1..]);
        let normal = !path.iter().any(|&b| b == b'%' || b == b'#')
            && !path
                .windows(2)
                .any(|w| w[0] == b'/' && (w[1] == b'/' || w[1] == b'.'));
        (path, query, normal)
    }

    #[test]
    fn a_target_is_split_as_byte_by_byte() {
        // Every placement of the bytes looked for around the words' boundaries.
        let alphabet = [b'/', b'.', b'?', b'%', b'#', b'a', 0, 0xff];
        let mut target = Vec::new();
        for len in 0..=19 {
            for seed in 0..600u32 {
                target.clear();
                let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(len as u32);
                for _ in 0..len {
                    target.push(alphabet[(x % 8) as usize]);
                    x = x.rotate_left(5) ^ x.wrapping_mul(31).wrapping_add(7);
                }
                assert_eq!(
                    split_target(&target),
                    split_by_bytes(&target),
                    "{:?}",
                    String::from_utf8_lossy(&target)
                );
            }
        }
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
