//! `[admin]`: the admin listener (JSON API, `/metrics`, dashboard) and who may change things
//! through it.
//!
//! Loopback by default. A `listen` anyone else can reach must have a `token_file`: without
//! one, anybody who reaches the port could drain every backend. With a token, every mutating
//! call needs `Authorization: Bearer <token>`, on any address.

use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned;

use super::address;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[admin]",
    keys: &["listen", "token_file"],
    not_yet: &[],
};

/// Where the admin listener listens when `[admin]` leaves `listen` out.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9900";

/// The longest token file read (a token is a line; this leaves room for any sane one).
const MAX_TOKEN_BYTES: u64 = 4096;

/// The shortest token accepted: a guessable token is no protection.
const MIN_TOKEN_CHARS: usize = 16;

/// A checked `[admin]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    pub token: Option<String>,
}

/// Reads `[admin]`; `None` when a problem was reported.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<Admin> {
    let listen = match t.text(r, "listen", "an address", DEFAULT_LISTEN) {
        Some(l) => match address::listen(l.get_ref()) {
            Ok(addr) => Some(Spanned::new(l.span(), addr)),
            Err(why) => {
                r.error(l.span(), &t.key("listen"), why);
                return None;
            }
        },
        None if t.value("listen").is_some() => return None,
        None => None,
    };
    let token_file = t.text(r, "token_file", "a file's path", "/etc/fulcrum/admin.token");
    if t.value("token_file").is_some() && token_file.is_none() {
        return None;
    }
    let token = match &token_file {
        Some(path) => match read_token(path.get_ref()) {
            Ok(token) => Some(token),
            Err(why) => {
                r.error(path.span(), &t.key("token_file"), why);
                return None;
            }
        },
        None => None,
    };
    let addr = listen
        .as_ref()
        .map_or_else(|| DEFAULT_LISTEN.parse().ok(), |l| Some(*l.get_ref()))?;
    if token.is_none() && !addr.ip().is_loopback() {
        let span = listen.as_ref().map_or_else(|| t.span(), |l| l.span());
        r.error(
            span,
            &t.key("listen"),
            format!(
                "{addr} can be reached from other machines, and the admin API can change everything: add token_file = \"/etc/fulcrum/admin.token\" (a file holding a secret of at least {MIN_TOKEN_CHARS} characters), or listen on 127.0.0.1"
            ),
        );
        return None;
    }
    Some(Admin {
        listen: addr,
        token_file: token_file.map(|p| PathBuf::from(*p.get_ref())),
        token,
    })
}

/// The token in `path`: its first line, trimmed.
fn read_token(path: &str) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the token file {path:?}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_TOKEN_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the token file {path:?}: {e} (it must be UTF-8 text)"))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token in {path:?} is shorter than {MIN_TOKEN_CHARS} characters: write a longer secret on its first line (e.g. `head -c 32 /dev/urandom | base64`)"
        ));
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(format!(
            "the token in {path:?} holds control characters: write it on one line of printable text"
        ));
    }
    Ok(token)
}
