//! Sticky sessions by cookie, as HTTP carries them: HAProxy's `cookie NAME insert indirect
//! nocache` (NGINX Plus's `sticky cookie`). Which backend a cookie names, and when the answer
//! sets it, are [`balance::sticky`]'s rules; this file holds what the request path does with
//! the cookie itself:
//!
//! * [`StickySettings`]: the `sticky` table of an upstream, checked, and the `Set-Cookie` it
//!   makes (`Name=id; Max-Age=…; Path=…; Domain=…; Secure; HttpOnly; SameSite=…`, in that
//!   order, each attribute only when configured; `Path` defaults to `/`, as HAProxy's).
//! * The id of a backend: SipHash-2-4 of its address under a key made from the operating
//!   system's randomness when the process starts ([`id_of`]). Ids last as long as the process —
//!   across reloads, not across a restart or an upgrade, and two instances name the same
//!   backend differently.
//! * `indirect`: the cookie is taken out of the request the backend gets ([`put_cookie_without`])
//!   and out of a backend's own `Set-Cookie` of the same name ([`set_cookie_name`]), so the
//!   mechanism is invisible to the application.
//! * `nocache`: an answer that sets the cookie also gets `Cache-Control: no-cache="Set-Cookie"`
//!   (RFC 9111 §5.2.2.4): a shared cache may keep the page, but must not hand this client's
//!   cookie to another. HAProxy writes `Cache-Control: private` instead, for caches that did
//!   not understand the qualified form in 2002; that would keep every first page out of every
//!   shared cache.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use balance::{StickyId, StickyKey};

/// `sticky` on an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickySettings {
    /// The cookie's name (`cookie`), an RFC 6265 token.
    pub cookie: String,
    /// `Max-Age` (`max_age`); `None`: a session cookie, dropped when the browser closes.
    pub max_age: Option<Duration>,
    /// `Path` (`path`), `/` unless given.
    pub path: String,
    /// `Domain` (`domain`); `None`: the host the client asked (the cookie goes to no other).
    pub domain: Option<String>,
    /// `Secure` (`secure`): sent back over HTTPS only.
    pub secure: bool,
    /// `HttpOnly` (`http_only`): not readable by scripts.
    pub http_only: bool,
    /// `SameSite` (`same_site`); `None`: not written (browsers take `Lax`).
    pub same_site: Option<SameSite>,
    /// The key of the operator's `secret`: ids that last across restarts and upgrades and
    /// that every instance of a fleet shares; `None`: the process's own random key.
    pub key: Option<StickyKey>,
}

/// The `SameSite` attribute (RFC 6265bis §5.4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    Strict,
    Lax,
    None,
}

impl SameSite {
    pub fn name(self) -> &'static str {
        match self {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        }
    }
}

impl std::str::FromStr for SameSite {
    type Err = String;

    fn from_str(s: &str) -> Result<SameSite, String> {
        match s {
            "Strict" => Ok(SameSite::Strict),
            "Lax" => Ok(SameSite::Lax),
            "None" => Ok(SameSite::None),
            _ => Err(format!(
                "same_site is \"Strict\", \"Lax\" or \"None\" (got \"{s}\")"
            )),
        }
    }
}

impl Default for StickySettings {
    /// `fulcrum_srv`, a session cookie for the whole site (`Path=/`), no other attribute.
    fn default() -> StickySettings {
        StickySettings {
            cookie: Self::DEFAULT_COOKIE.to_owned(),
            max_age: None,
            path: "/".to_owned(),
            domain: None,
            secure: false,
            http_only: false,
            same_site: None,
            key: None,
        }
    }
}

impl StickySettings {
    pub const DEFAULT_COOKIE: &'static str = "fulcrum_srv";

    /// Whether the cookie's name is an RFC 6265 §4.1.1 token (RFC 9110 §5.6.2).
    pub fn check_cookie(name: &str) -> Result<(), String> {
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(format!(
                "a cookie name is letters, digits and !#$%&'*+-.^_`|~ (got \"{name}\")"
            ));
        }
        Ok(())
    }

    /// Whether `value` may be a `Path` or `Domain` attribute's value: RFC 6265 §4.1.1's
    /// `av-octet`s (visible ASCII and space, but no `;`), and not empty.
    pub fn check_attribute(value: &str) -> Result<(), String> {
        if value.is_empty()
            || !value
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b';')
        {
            return Err(format!(
                "must be visible ASCII without ';' (got \"{}\")",
                value.escape_debug()
            ));
        }
        Ok(())
    }

    /// Whether a browser would keep the cookie: `SameSite=None` needs `Secure` (RFC 6265bis
    /// §5.6.7 step 18: browsers drop such a cookie otherwise).
    pub fn check_same_site(&self) -> Result<(), String> {
        if self.same_site == Some(SameSite::None) && !self.secure {
            return Err(
                "same_site = \"None\" needs secure = true: browsers drop a SameSite=None cookie that is not Secure"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// Writes the `Set-Cookie` field naming `id`, and the `Cache-Control` that keeps shared
    /// caches from handing it to other clients (see the module documentation).
    pub(crate) fn put_set_cookie(&self, id: StickyId, out: &mut Vec<u8>) {
        out.extend_from_slice(b"Set-Cookie: ");
        out.extend_from_slice(self.cookie.as_bytes());
        out.push(b'=');
        id.put(out);
        if let Some(age) = self.max_age {
            out.extend_from_slice(b"; Max-Age=");
            out.extend_from_slice(age.as_secs().to_string().as_bytes());
        }
        out.extend_from_slice(b"; Path=");
        out.extend_from_slice(self.path.as_bytes());
        if let Some(domain) = &self.domain {
            out.extend_from_slice(b"; Domain=");
            out.extend_from_slice(domain.as_bytes());
        }
        if self.secure {
            out.extend_from_slice(b"; Secure");
        }
        if self.http_only {
            out.extend_from_slice(b"; HttpOnly");
        }
        if let Some(same_site) = self.same_site {
            out.extend_from_slice(b"; SameSite=");
            out.extend_from_slice(same_site.name().as_bytes());
        }
        out.extend_from_slice(b"\r\nCache-Control: no-cache=\"Set-Cookie\"\r\n");
    }
}

/// A request to an upstream with sticky sessions: its settings, and the backend its cookie
/// named (`None`: it had none, or one that names no backend: [`StickyId::parse`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StickyRequest<'a> {
    pub(crate) settings: &'a StickySettings,
    pub(crate) asked: Option<StickyId>,
}

impl<'a> StickyRequest<'a> {
    /// What the answer of the backend at `addr` gets: the cookie set, unless the request's
    /// already named that backend ([`balance::sticky::must_set`]).
    pub(crate) fn answer(&self, addr: SocketAddr) -> StickyAnswer<'a> {
        let id = id_of(self.settings, addr);
        StickyAnswer {
            settings: self.settings,
            set: balance::sticky::must_set(self.asked, id).then_some(id),
        }
    }
}

/// A sticky session's part in a backend's answer: its settings (a backend's own `Set-Cookie`
/// of the cookie's name is dropped, as HAProxy's `indirect` drops it), and the id to set, if
/// the answer sets the cookie.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StickyAnswer<'a> {
    pub(crate) settings: &'a StickySettings,
    pub(crate) set: Option<StickyId>,
}

impl StickyAnswer<'_> {
    /// Whether the backend's field `name: value` is dropped: a `Set-Cookie` of the sticky
    /// cookie.
    pub(crate) fn hides(&self, name: &str, value: &[u8]) -> bool {
        name.eq_ignore_ascii_case("set-cookie")
            && set_cookie_name(value) == self.settings.cookie.as_bytes()
    }

    /// Appends the answer's `Set-Cookie` (and `Cache-Control`), if it sets the cookie.
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        if let Some(id) = self.set {
            self.settings.put_set_cookie(id, out);
        }
    }
}

/// The key every backend id of this process is made with (made once, from the operating
/// system's randomness through std's `RandomState`, which seeds SipHash keys from it).
fn key() -> &'static StickyKey {
    static KEY: OnceLock<StickyKey> = OnceLock::new();
    KEY.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new();
        let word = |n: u64| {
            let mut h = random.build_hasher();
            h.write_u64(n);
            h.finish()
        };
        StickyKey::new(word(0), word(1))
    })
}

/// The id a sticky cookie of `settings` names the backend at `addr` by: under the key of its
/// `secret`, or the process's own.
pub(crate) fn id_of(settings: &StickySettings, addr: SocketAddr) -> StickyId {
    use std::io::Write as _;
    // The longest, "[ffff:…:ffff%4294967295]:65535", is 58 bytes.
    let mut text = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut text[..]);
    let _ = write!(cursor, "{addr}");
    let len = cursor.position() as usize;
    settings
        .key
        .as_ref()
        .unwrap_or_else(|| key())
        .id(text.get(..len).unwrap_or_default())
}

/// The ids of `addrs`, in that order ([`balance::StickyTable`]).
pub(crate) fn table(
    settings: &StickySettings,
    addrs: impl Iterator<Item = SocketAddr>,
) -> balance::StickyTable {
    let ids: Vec<StickyId> = addrs.map(|a| id_of(settings, a)).collect();
    balance::StickyTable::from_ids(ids)
}

/// The cookie pairs of a `Cookie` field's value (`a=1; b=2`, RFC 6265 §4.2.1): name and
/// value, each trimmed; a pair without `=` is a name with an empty value.
fn pairs(value: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    value
        .split(|&b| b == b';')
        .map(<[u8]>::trim_ascii)
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (pair[..eq].trim_ascii(), pair[eq + 1..].trim_ascii()),
            None => (pair, &[][..]),
        })
}

/// The value of the first cookie named exactly `name` (case counts: the proxy wrote the
/// name, and browsers send it back as written) in a `Cookie` field's value.
pub(crate) fn value_in<'v>(value: &'v [u8], name: &[u8]) -> Option<&'v [u8]> {
    pairs(value).find_map(|(n, v)| (n == name).then_some(v))
}

/// Writes the `Cookie` field `field: value` for the backend without the cookies named `name`
/// (HAProxy's `indirect`): as it came when it holds none, not at all when nothing else is
/// left.
pub(crate) fn put_cookie_without(out: &mut Vec<u8>, field: &str, value: &[u8], name: &[u8]) {
    if value_in(value, name).is_none() {
        put_field(out, field, value);
        return;
    }
    let start = out.len();
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b": ");
    let first = out.len();
    for pair in value.split(|&b| b == b';').map(<[u8]>::trim_ascii) {
        let n = pair.split(|&b| b == b'=').next().unwrap_or_default();
        if pair.is_empty() || n.trim_ascii() == name {
            continue;
        }
        if out.len() > first {
            out.extend_from_slice(b"; ");
        }
        out.extend_from_slice(pair);
    }
    if out.len() == first {
        out.truncate(start);
    } else {
        out.extend_from_slice(b"\r\n");
    }
}

fn put_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The name of the cookie a `Set-Cookie` field's value sets (RFC 6265 §4.1.1: up to the
/// first `=`, trimmed).
pub(crate) fn set_cookie_name(value: &[u8]) -> &[u8] {
    let pair = value.split(|&b| b == b';').next().unwrap_or_default();
    pair.split(|&b| b == b'=')
        .next()
        .unwrap_or_default()
        .trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_cookie(s: &StickySettings) -> String {
        let mut out = Vec::new();
        s.put_set_cookie(StickyId(0xab), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn set_cookie_has_every_attribute_configured_and_no_other() {
        assert_eq!(
            set_cookie(&StickySettings::default()),
            "Set-Cookie: fulcrum_srv=00000000000000ab; Path=/\r\n\
             Cache-Control: no-cache=\"Set-Cookie\"\r\n"
        );
        let all = StickySettings {
            cookie: "SRV".to_owned(),
            max_age: Some(Duration::from_secs(3600)),
            path: "/app".to_owned(),
            domain: Some("example.com".to_owned()),
            secure: true,
            http_only: true,
            same_site: Some(SameSite::Strict),
            key: None,
        };
        assert_eq!(
            set_cookie(&all),
            "Set-Cookie: SRV=00000000000000ab; Max-Age=3600; Path=/app; Domain=example.com; \
             Secure; HttpOnly; SameSite=Strict\r\nCache-Control: no-cache=\"Set-Cookie\"\r\n"
        );
    }

    #[test]
    fn settings_are_checked() {
        for good in ["fulcrum_srv", "SRV", "a.b-c~"] {
            assert!(StickySettings::check_cookie(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a=b", "a;b", "a\"b", "é", "a,b"] {
            assert!(StickySettings::check_cookie(bad).is_err(), "{bad}");
        }
        assert!(StickySettings::check_attribute("/a b").is_ok());
        for bad in ["", "/a;b", "/a\r\n", "/é"] {
            assert!(StickySettings::check_attribute(bad).is_err(), "{bad:?}");
        }
        let mut s = StickySettings {
            same_site: Some(SameSite::None),
            ..StickySettings::default()
        };
        assert!(s.check_same_site().is_err());
        s.secure = true;
        assert!(s.check_same_site().is_ok());
        assert_eq!("Lax".parse::<SameSite>(), Ok(SameSite::Lax));
        assert!("lax".parse::<SameSite>().is_err());
    }

    #[test]
    fn the_sticky_cookie_is_found_and_taken_out_of_the_backend_s_cookie_field() {
        let field = b"a=1; fulcrum_srv=00000000000000ab ;b=2; fulcrum_srv=later";
        assert_eq!(
            value_in(field, b"fulcrum_srv"),
            Some(&b"00000000000000ab"[..])
        );
        assert_eq!(value_in(field, b"FULCRUM_SRV"), None, "case counts");
        assert_eq!(value_in(b"flag; x=", b"flag"), Some(&b""[..]));
        let without = |value: &[u8]| {
            let mut out = Vec::new();
            put_cookie_without(&mut out, "Cookie", value, b"fulcrum_srv");
            String::from_utf8(out).unwrap()
        };
        assert_eq!(without(field), "Cookie: a=1; b=2\r\n");
        assert_eq!(without(b"fulcrum_srv=1"), "", "nothing left: no field");
        assert_eq!(without(b"fulcrum_srv=1;  ; fulcrum_srv"), "");
        assert_eq!(without(b"a=1;b=2"), "Cookie: a=1;b=2\r\n", "untouched");
        assert_eq!(without(b"fulcrum_srvx=1"), "Cookie: fulcrum_srvx=1\r\n");
    }

    #[test]
    fn a_set_cookie_s_name_is_up_to_its_first_equals_sign() {
        assert_eq!(set_cookie_name(b"SRV=1; Path=/"), b"SRV");
        assert_eq!(set_cookie_name(b" SRV = 1"), b"SRV");
        assert_eq!(set_cookie_name(b"flag"), b"flag");
        assert_eq!(set_cookie_name(b""), b"");
    }

    #[test]
    fn ids_are_the_process_s_and_differ_by_address() {
        let own = StickySettings::default();
        let id = |addr| id_of(&own, addr);
        let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(id(a), id(a));
        assert_ne!(id(a), id(b));
        let long: SocketAddr = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535"
            .parse()
            .unwrap();
        assert_ne!(id(long), id(a));
        let t = table(&own, [a, b].into_iter());
        assert_eq!(t.backend(id(b)), Some(balance::BackendId(1)));
        assert_eq!(t.id(balance::BackendId(0)), Some(id(a)));
    }

    /// A secret gives ids that do not depend on the process (what another process with the
    /// same secret computes: the key made again from it), and another secret other ids.
    #[test]
    fn a_secret_s_ids_are_every_process_s() {
        let a: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        let with = |secret: &[u8]| StickySettings {
            key: Some(StickyKey::from_secret(secret)),
            ..StickySettings::default()
        };
        let one = with(b"0123456789abcdef");
        assert_eq!(
            id_of(&one, a),
            StickyKey::from_secret(b"0123456789abcdef").id(b"10.0.0.1:8080")
        );
        assert_ne!(id_of(&one, a), id_of(&with(b"0123456789abcdeF"), a));
        assert_ne!(id_of(&one, a), id_of(&StickySettings::default(), a));
    }
}
