//! `[admin]`: the admin listener (JSON API, `/metrics`, dashboard) and who may change things
//! through it.
//!
//! Loopback by default. A `listen` anyone else can reach must have a token, from a
//! `token_file` or as `token` (meant for `${NAME}`, a secret passed by the environment):
//! without one, anybody who reaches the port could drain every backend. With a token, every
//! mutating call needs `Authorization: Bearer <token>`, on any address.
//!
//! `allowed_hosts`: the names (or addresses) a request may be addressed to besides the
//! listener's own address and `localhost` (the admin listener refuses any other `Host`,
//! against DNS rebinding; see `admin::guard`). Names alone, without a port, as Django's
//! `ALLOWED_HOSTS`.

use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned;

use super::address;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[admin]",
    keys: &["listen", "token_file", "token", "allowed_hosts"],
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
    /// Host names and addresses besides the listener's own, in lower case.
    pub allowed_hosts: Vec<String>,
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
    let written = t.text(r, "token", "a secret", "${FULCRUM_ADMIN_TOKEN}");
    if t.value("token").is_some() && written.is_none() {
        return None;
    }
    let token = match (&token_file, &written) {
        (Some(_), Some(written)) => {
            r.error(
                written.span(),
                &t.key("token"),
                "the token is given twice, here and by token_file: keep one",
            );
            return None;
        }
        (Some(path), None) => match read_token(path.get_ref()) {
            Ok(token) => {
                if let Some(why) = readable_by_others(path.get_ref()) {
                    r.warn(&path.span(), why);
                }
                Some(token)
            }
            Err(why) => {
                r.error(path.span(), &t.key("token_file"), why);
                return None;
            }
        },
        (None, Some(written)) => match checked_token(written.get_ref(), "the token") {
            Ok(token) => {
                // A secret in the file is read by whoever reads the file (and its backups,
                // and its repository).
                if !r.written(&written.span()).contains("${") {
                    r.warn(
                        &written.span(),
                        "admin.token: the secret is written in the configuration file itself: take it from the environment, token = \"${FULCRUM_ADMIN_TOKEN}\", or from a file only fulcrum reads, token_file",
                    );
                }
                Some(token)
            }
            Err(why) => {
                r.error(written.span(), &t.key("token"), why);
                return None;
            }
        },
        (None, None) => None,
    };
    let allowed_hosts = allowed_hosts(r, t)?;
    let addr = listen
        .as_ref()
        .map_or_else(|| DEFAULT_LISTEN.parse().ok(), |l| Some(*l.get_ref()))?;
    if token.is_none() && !addr.ip().is_loopback() {
        let span = listen.as_ref().map_or_else(|| t.span(), |l| l.span());
        r.error(
            span,
            &t.key("listen"),
            format!(
                "{addr} can be reached from other machines, and the admin API can change everything: add token_file = \"/etc/fulcrum/admin.token\" (a file holding a secret of at least {MIN_TOKEN_CHARS} characters) or token = \"${{FULCRUM_ADMIN_TOKEN}}\" (the secret from the environment), or listen on 127.0.0.1"
            ),
        );
        return None;
    }
    Some(Admin {
        listen: addr,
        token_file: token_file.map(|p| PathBuf::from(*p.get_ref())),
        token,
        allowed_hosts,
    })
}

/// `allowed_hosts`, each checked; `None` when one was refused (reported).
fn allowed_hosts(r: &mut Report<'_>, t: &Table<'_>) -> Option<Vec<String>> {
    let mut hosts = Vec::new();
    let mut refused = false;
    let items = t.strings(
        r,
        "allowed_hosts",
        ("a host name", "host names"),
        "admin.example",
    );
    for (key, text) in items {
        match allowed_host(text.get_ref()) {
            Ok(host) => hosts.push(host),
            Err(why) => {
                r.error(text.span(), &key, why);
                refused = true;
            }
        }
    }
    (!refused).then_some(hosts)
}

/// One name of `allowed_hosts`: a DNS name or an IP address, without scheme, port or
/// wildcard; lower-cased, a trailing dot dropped.
fn allowed_host(text: &str) -> Result<String, String> {
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(ip.to_string());
    }
    let fix = if text.contains("://") || text.contains('/') {
        "write the name alone, without a scheme or path, such as \"admin.example\""
    } else if text.contains('*') {
        "wildcards are not taken: list each name"
    } else if text.contains(':') {
        "write the name without a port: a name of allowed_hosts is taken on any port"
    } else {
        "a host name is letters, digits, hyphens and dots, such as \"admin.example\""
    };
    let name = text.strip_suffix('.').unwrap_or(text);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("{text:?} is not a host name: {fix}"));
    }
    Ok(name.to_ascii_lowercase())
}

/// The token in `path`: its first line, trimmed.
/// Why the token file may leak its secret: readable by its group or by everyone (as ssh
/// refuses a private key others can read); `None` when only its owner can.
fn readable_by_others(path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "the token file {path:?} can be read by {} (mode {:o}): anyone who reads it can change everything through the admin API; chmod 600 it",
            if mode & 0o004 != 0 { "every user" } else { "its group" },
            mode & 0o777
        )
    })
}

fn read_token(path: &str) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the token file {path:?}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_TOKEN_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the token file {path:?}: {e} (it must be UTF-8 text)"))?;
    let token = text.lines().next().unwrap_or("");
    checked_token(token, &format!("the token in {path:?}"))
}

/// `token`, trimmed, if it is long enough and printable; `what` names it in messages.
fn checked_token(token: &str, what: &str) -> Result<String, String> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "{what} is shorter than {MIN_TOKEN_CHARS} characters: make it a longer secret (e.g. `head -c 32 /dev/urandom | base64`)"
        ));
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{what} holds control characters: make it one line of printable text"
        ));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    fn with_admin(lines: &str) -> String {
        format!("{GOOD}\n[admin]\nlisten = \"127.0.0.1:9900\"\n{lines}\n")
    }

    /// A token file others can read is a warning naming it and the fix; one only its owner
    /// reads is not.
    #[test]
    fn a_token_file_others_can_read_is_a_warning() {
        use std::os::unix::fs::PermissionsExt as _;
        let path = std::env::temp_dir().join(format!("fulcrum-token-{}", std::process::id()));
        std::fs::write(&path, "a-secret-long-enough-for-the-admin-api\n").unwrap();
        let config = with_admin(&format!("token_file = \"{}\"", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let warned = ok(&config).warnings.join("\n");
        assert!(
            warned.contains("can be read by every user (mode 644)") && warned.contains("chmod 600"),
            "{warned}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let warned = ok(&config).warnings.join("\n");
        assert!(!warned.contains("token file"), "{warned}");
        std::fs::remove_file(&path).unwrap();
    }

    /// `token`: the secret itself, from the environment (as containers pass secrets); written
    /// in the file it is a warning; with token_file, or too short, refused.
    #[test]
    fn a_token_from_the_environment() {
        let env = |name: &str| {
            (name == "ADMIN_TOKEN").then(|| "a-secret-long-enough-for-the-admin-api".to_owned())
        };
        let text =
            with_admin("token = \"${ADMIN_TOKEN}\"").replace("127.0.0.1:9900", "0.0.0.0:9900");
        let c = crate::config::parse_with(std::path::Path::new("t.toml"), &text, &env).unwrap();
        assert_eq!(
            c.admin.unwrap().token.as_deref(),
            Some("a-secret-long-enough-for-the-admin-api")
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let e = crate::config::parse_with(std::path::Path::new("t.toml"), &text, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "t.toml:23:9: admin.token: the environment variable ADMIN_TOKEN is not set"
            ),
            "{e}"
        );
        assert!(!e.contains("shorter than"), "{e}");

        let c = ok(&with_admin(
            "token = \"a-secret-long-enough-for-the-admin-api\"",
        ));
        assert!(
            c.warnings.iter().any(|w| w.starts_with(
                "t.toml:23: admin.token: the secret is written in the configuration file itself"
            )),
            "{:?}",
            c.warnings
        );
        let e = refused(&with_admin("token = \"short\""));
        assert!(
            e.contains("admin.token: the token is shorter than 16 characters"),
            "{e}"
        );
        let e = refused(&with_admin(
            "token_file = \"/nonexistent\"\ntoken = \"a-secret-long-enough-for-the-admin-api\"",
        ));
        assert!(
            e.contains("admin.token: the token is given twice, here and by token_file: keep one"),
            "{e}"
        );
    }

    #[test]
    fn allowed_hosts_are_names_or_addresses_lower_cased() {
        let c = ok(&with_admin(
            r#"allowed_hosts = ["Admin.Example.", "fulcrum-1", "10.0.0.5", "[::1]"]"#,
        ));
        let admin = c.admin.unwrap();
        assert_eq!(
            admin.allowed_hosts,
            ["admin.example", "fulcrum-1", "10.0.0.5", "::1"]
        );
        assert!(ok(&with_admin("")).admin.unwrap().allowed_hosts.is_empty());
        assert!(
            ok(&with_admin("allowed_hosts = []"))
                .admin
                .unwrap()
                .allowed_hosts
                .is_empty()
        );
    }

    #[test]
    fn allowed_hosts_refuses_schemes_ports_wildcards_and_other_forms() {
        let e = refused(&with_admin(
            r#"allowed_hosts = ["http://admin.example", "admin.example:9900", "*.example", "a b", 7, "-x.example"]"#,
        ));
        for want in [
            "admin.allowed_hosts[0]: \"http://admin.example\" is not a host name: write the name alone, without a scheme or path",
            "admin.allowed_hosts[1]: \"admin.example:9900\" is not a host name: write the name without a port",
            "admin.allowed_hosts[2]: \"*.example\" is not a host name: wildcards are not taken",
            "admin.allowed_hosts[3]: \"a b\" is not a host name: a host name is letters, digits, hyphens and dots",
            "admin.allowed_hosts[4]: expected a host name such as \"admin.example\", not the number 7",
            "admin.allowed_hosts[5]: \"-x.example\" is not a host name",
        ] {
            assert!(e.contains(want), "{want}\nnot in\n{e}");
        }
        let e = refused(&with_admin(r#"allowed_hosts = "admin.example""#));
        assert!(
            e.contains(
                "admin.allowed_hosts: expected a list of host names such as [\"admin.example\"]"
            ),
            "{e}"
        );
    }
}
