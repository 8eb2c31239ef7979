//! nginx's value syntaxes, read as nginx reads them: durations and sizes
//! (`ngx_parse_time`, `ngx_parse_size` in src/core/ngx_parse.c), `listen` addresses
//! (src/http/ngx_http_core_module.c, `ngx_http_core_listen`) and URLs of `proxy_pass` and
//! `return`; and the TOML strings the translation writes.

/// An nginx time (`60`, `60s`, `1m30s`, `500ms`, `1h`, `1d`) in milliseconds. A bare number is
/// seconds, as in `ngx_parse_time`; units combine, largest first.
pub fn duration_ms(text: &str) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let (number, after) = rest.split_at(digits);
        let value: u64 = number.parse().ok()?;
        let unit_len = after
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
        let (unit, after) = after.split_at(unit_len);
        let ms = match unit {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "M" => 2_592_000_000,
            "y" => 31_536_000_000,
            _ => return None,
        };
        total = total.checked_add(value.checked_mul(ms)?)?;
        rest = after.trim_start();
    }
    Some(total)
}

/// A duration for fulcrum's configuration: `"90s"`, `"250ms"`.
pub fn duration_toml(ms: u64) -> String {
    if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

/// An nginx size (`1024`, `8k`, `10m`, `1g`) in bytes.
pub fn size_bytes(text: &str) -> Option<u64> {
    let (number, factor) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 1024),
        b'm' | b'M' => (&text[..text.len() - 1], 1024 * 1024),
        b'g' | b'G' => (&text[..text.len() - 1], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    number.parse::<u64>().ok()?.checked_mul(factor)
}

/// The address part of a `listen` directive as fulcrum's `listen` key writes it:
/// `80` and `*:80` → `0.0.0.0:80`, `[::]:80` kept, `127.0.0.1` → `127.0.0.1:80`,
/// `localhost:8080` → `127.0.0.1:8080`. `None` for a Unix socket or a name fulcrum cannot bind.
pub fn listen_addr(text: &str) -> Option<String> {
    if text.starts_with("unix:") {
        return None;
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return Some(format!("0.0.0.0:{}", text.parse::<u16>().ok()?));
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, port) = rest.split_once(']')?;
        ip.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match port.strip_prefix(':') {
            Some(p) => p.parse::<u16>().ok()?,
            None if port.is_empty() => 80,
            None => return None,
        };
        return Some(format!("[{ip}]:{port}"));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok()?),
        None => (text, 80),
    };
    let ip = match host {
        "*" => "0.0.0.0".to_owned(),
        "localhost" => "127.0.0.1".to_owned(),
        other => other.parse::<std::net::Ipv4Addr>().ok()?.to_string(),
    };
    Some(format!("{ip}:{port}"))
}

/// A URL split as nginx's `proxy_pass` and `return` take it: `scheme://authority` and the
/// rest (`None` when the URL has no `/` after the authority).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url<'a> {
    pub scheme: &'a str,
    pub authority: &'a str,
    pub path: Option<&'a str>,
}

/// Splits `scheme://authority[/path]`; `None` for anything else (a relative URL).
pub fn split_url(text: &str) -> Option<Url<'_>> {
    let (scheme, rest) = text.split_once("://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    Some(Url {
        scheme,
        authority,
        path,
    })
}

/// `text` as a TOML basic string, quoted and escaped.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `$name` / `${name}` variables `text` uses, in order.
pub fn variables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = if let Some(braced) = rest.strip_prefix('{') {
            braced.chars().take_while(|&c| c != '}').collect()
        } else {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_nginx_reads_them() {
        assert_eq!(duration_ms("60"), Some(60_000));
        assert_eq!(duration_ms("1m30s"), Some(90_000));
        assert_eq!(duration_ms("500ms"), Some(500));
        assert_eq!(duration_ms("1h"), Some(3_600_000));
        assert_eq!(duration_ms("x"), None);
        assert_eq!(duration_ms("5q"), None);
        assert_eq!(duration_toml(90_000), "90s");
        assert_eq!(duration_toml(250), "250ms");
    }

    #[test]
    fn sizes_and_listens() {
        assert_eq!(size_bytes("10m"), Some(10 * 1024 * 1024));
        assert_eq!(size_bytes("8k"), Some(8192));
        assert_eq!(size_bytes("12"), Some(12));
        assert_eq!(size_bytes(""), None);
        assert_eq!(listen_addr("80").as_deref(), Some("0.0.0.0:80"));
        assert_eq!(listen_addr("*:8080").as_deref(), Some("0.0.0.0:8080"));
        assert_eq!(listen_addr("[::]:443").as_deref(), Some("[::]:443"));
        assert_eq!(listen_addr("127.0.0.1").as_deref(), Some("127.0.0.1:80"));
        assert_eq!(listen_addr("unix:/run/x.sock"), None);
    }

    #[test]
    fn urls_and_variables() {
        let u = split_url("http://app/v1/").unwrap();
        assert_eq!(
            (u.scheme, u.authority, u.path),
            ("http", "app", Some("/v1/"))
        );
        assert_eq!(split_url("http://app").unwrap().path, None);
        assert_eq!(split_url("/login"), None);
        assert_eq!(
            variables("$scheme://${host}$request_uri"),
            ["scheme", "host", "request_uri"]
        );
        assert_eq!(quote("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
    }
}
