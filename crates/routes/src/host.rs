//! The request's host as nginx takes it (`ngx_http_validate_host`,
//! src/http/ngx_http_request.c), and server names in nginx's forms.

/// The longest host name kept in the stack buffer; a longer one (DNS allows 253) is refused.
pub(crate) const MAX_HOST: usize = 255;

/// What [`host_name`] does with each byte of a host (nginx's `ngx_http_validate_host` cases).
const PLAIN: u8 = 0;
const UPPER: u8 = 1;
const DOT: u8 = 2;
const COLON: u8 = 3;
const OPEN: u8 = 4;
const CLOSE: u8 = 5;
/// `/`, a control byte, space, DEL: the host is refused.
const BAD: u8 = 6;

const CLASS: [u8; 256] = {
    let mut class = [PLAIN; 256];
    let mut b = 0;
    while b < 256 {
        class[b] = match b as u8 {
            b'A'..=b'Z' => UPPER,
            b'.' => DOT,
            b':' => COLON,
            b'[' => OPEN,
            b']' => CLOSE,
            b'/' | 0..=b' ' | 0x7f => BAD,
            _ => PLAIN,
        };
        b += 1;
    }
    class
};

/// `raw` (a `Host` value, `:authority`, or an absolute target's authority) as nginx matches
/// server names against it: the length of its name (the port left out, one trailing dot
/// dropped), and whether the name has upper-case letters (nginx matches it in lower case).
/// `None` when nginx refuses it (400): `..`, `/`, a control byte or space in the name, an
/// empty name, or (here) one longer than 255 bytes. As nginx, only the name is looked at:
/// it ends at the first `:` (after `]` for an IP literal).
pub fn host_name(raw: &[u8]) -> Option<(usize, bool)> {
    let mut len = raw.len();
    let mut upper = false;
    let mut literal = false;
    for (i, &b) in raw.iter().enumerate() {
        let class = CLASS[usize::from(b)];
        if class == PLAIN {
            continue;
        }
        match class {
            UPPER => upper = true,
            DOT if i > 0 && raw[i - 1] == b'.' => return None,
            DOT => {}
            COLON if !literal => {
                len = i;
                break;
            }
            OPEN if i == 0 => literal = true,
            CLOSE if literal => {
                len = i + 1;
                break;
            }
            COLON | OPEN | CLOSE => {}
            _ => return None,
        }
    }
    if len > 0 && raw[len - 1] == b'.' {
        len -= 1;
    }
    (len > 0 && len <= MAX_HOST).then_some((len, upper))
}

/// A server name in one of nginx's forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Name {
    /// `example.com`.
    Exact(String),
    /// `*.example.com` (`strict`: subdomains only) or `.example.com` (the name too): the
    /// suffix kept with its dot, `.example.com`.
    Head { suffix: String, strict: bool },
    /// `www.example.*`: the prefix kept with its dot, `www.example.`.
    Tail(String),
    /// `~regex`: the pattern.
    Regex(String),
}

/// Parses `name` (lower-cased by the caller, except a regex); `Err` says why nginx would not
/// take it.
pub(crate) fn parse(name: &str) -> Result<Name, String> {
    if let Some(pattern) = name.strip_prefix('~') {
        return Ok(Name::Regex(pattern.to_owned()));
    }
    let name = name.to_ascii_lowercase();
    if name.is_empty() {
        return Err("an empty host name".to_owned());
    }
    if name.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'/') {
        return Err(format!("\"{name}\" is not a host name"));
    }
    let stars = name.matches('*').count();
    if let Some(rest) = name.strip_prefix("*.") {
        if stars == 1 && !rest.is_empty() {
            return Ok(Name::Head {
                suffix: format!(".{rest}"),
                strict: true,
            });
        }
    } else if let Some(rest) = name.strip_suffix(".*") {
        if stars == 1 && !rest.is_empty() {
            return Ok(Name::Tail(format!("{rest}.")));
        }
    } else if stars == 0 {
        // A name no request's host can ever be (nginx refuses such hosts, or takes the port
        // and a trailing dot off before matching).
        let never = name.contains("..")
            || name.contains(':') && !name.starts_with('[')
            || (name.ends_with('.') && name.len() > 1);
        if never {
            return Err(format!(
                "\"{name}\" can never match: a request's host has no `..`, and its port and trailing dot are taken off before matching"
            ));
        }
        return Ok(match name.strip_prefix('.') {
            Some(rest) if !rest.is_empty() => Name::Head {
                suffix: name.clone(),
                strict: false,
            },
            _ => Name::Exact(name),
        });
    }
    Err(format!(
        "\"{name}\": a wildcard is `*.` at the start or `.*` at the end of a name, as nginx's server_name takes it (for anything else, a regex: \"~...\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(raw: &str) -> Option<String> {
        host_name(raw.as_bytes()).map(|(len, _)| raw[..len].to_ascii_lowercase())
    }

    #[test]
    fn hosts_as_nginx_takes_them() {
        assert_eq!(v("Example.COM").as_deref(), Some("example.com"));
        assert_eq!(v("example.com:8080").as_deref(), Some("example.com"));
        assert_eq!(v("example.com.").as_deref(), Some("example.com"));
        assert_eq!(v("example.com.:80").as_deref(), Some("example.com"));
        assert_eq!(v("[::1]:8080").as_deref(), Some("[::1]"));
        assert_eq!(v("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("a..b"), None);
        assert_eq!(v("a/b"), None);
        assert_eq!(v(""), None);
        assert_eq!(v(":80"), None);
        assert_eq!(v("a b"), None);
    }

    #[test]
    fn server_name_forms() {
        assert_eq!(
            parse("A.example.com"),
            Ok(Name::Exact("a.example.com".into()))
        );
        assert_eq!(
            parse("*.example.com"),
            Ok(Name::Head {
                suffix: ".example.com".into(),
                strict: true
            })
        );
        assert_eq!(
            parse(".example.com"),
            Ok(Name::Head {
                suffix: ".example.com".into(),
                strict: false
            })
        );
        assert_eq!(
            parse("www.example.*"),
            Ok(Name::Tail("www.example.".into()))
        );
        assert_eq!(parse("~^v\\d+$"), Ok(Name::Regex("^v\\d+$".into())));
        assert!(parse("www.*.com").is_err());
        assert!(parse("*").is_err());
        assert!(parse("*.").is_err());
        assert!(parse("").is_err());
    }
}
