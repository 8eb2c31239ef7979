//! `sticky` on an `[[upstream]]`: sticky sessions by cookie (HAProxy's `cookie NAME insert
//! indirect nocache`, NGINX Plus's `sticky cookie`), its schema and its checks side by side.
//!
//! ```toml
//! sticky = { cookie = "fulcrum_srv", max_age = "1h", path = "/", domain = "example.com",
//!            secure = true, http_only = true, same_site = "Lax", secret = "…" }
//! ```
//!
//! Every key may be left out: `sticky = {}` is a session cookie named `fulcrum_srv` for the
//! whole site (`Path=/`).

use proxy::{SameSite, StickySettings};

use super::duration::Zero;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "sticky",
    keys: &[
        "cookie",
        "max_age",
        "path",
        "domain",
        "secure",
        "http_only",
        "same_site",
        "secret",
    ],
    not_yet: &[],
};

/// The shortest `secret`: 16 bytes (128 bits as hexadecimal is 32).
const MIN_SECRET: usize = 16;

/// Reads `sticky` of the upstream `t`; `None` when absent (or not a table: reported).
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<StickySettings> {
    let s = t.section(r, "sticky", &SECTION)?;
    let mut settings = StickySettings::default();
    if let Some(cookie) = s.text(r, "cookie", "a cookie name", "fulcrum_srv") {
        match StickySettings::check_cookie(cookie.get_ref()) {
            Ok(()) => settings.cookie = cookie.get_ref().to_string(),
            Err(why) => s.error(r, "cookie", why),
        }
    }
    settings.max_age = s.duration(
        r,
        "max_age",
        Zero::Refused("a cookie that expires at once would never bring a client back"),
    );
    if let Some(max_age) = settings.max_age
        && max_age.subsec_nanos() != 0
    {
        s.error(
            r,
            "max_age",
            "Max-Age counts whole seconds: give \"1s\" or more, in seconds",
        );
    }
    for (key, example) in [("path", "/"), ("domain", "example.com")] {
        let Some(value) = s.text(r, key, "a cookie attribute", example) else {
            continue;
        };
        match StickySettings::check_attribute(value.get_ref()) {
            Ok(()) if key == "path" && !value.get_ref().starts_with('/') => {
                s.error(r, key, "a cookie's path starts with / (RFC 6265 §5.2.4)");
            }
            Ok(()) if key == "path" => settings.path = value.get_ref().to_string(),
            Ok(()) => settings.domain = Some(value.get_ref().to_string()),
            Err(why) => s.error(r, key, format!("a cookie's {key} {why}")),
        }
    }
    settings.secure = s.flag(r, "secure").unwrap_or(false);
    settings.http_only = s.flag(r, "http_only").unwrap_or(false);
    if let Some(same_site) = s.text(r, "same_site", "a SameSite value", "Lax") {
        match same_site.get_ref().parse::<SameSite>() {
            Ok(v) => settings.same_site = Some(v),
            Err(why) => s.error(r, "same_site", why),
        }
    }
    if let Err(why) = settings.check_same_site() {
        s.error(r, "same_site", why);
    }
    if let Some(secret) = s.text(r, "secret", "a secret", "4f1c0e7d9a2b5c8e3d6f0a1b2c3d4e5f") {
        let secret = secret.get_ref();
        if secret.len() < MIN_SECRET {
            s.error(
                r,
                "secret",
                format!("a secret of {} bytes is too short to keep backends' ids unguessable: give {MIN_SECRET} or more (`openssl rand -hex 16` makes one)", secret.len()),
            );
        } else {
            settings.key = Some(proxy::StickyKey::from_secret(secret.as_bytes()));
        }
    }
    Some(settings)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::testing::{ok, refused, with_algorithm};

    fn upstream_with(lines: &str) -> crate::config::Config {
        ok(&with_algorithm("least_conn", lines))
    }

    #[test]
    fn every_attribute_is_read_and_the_defaults_are_haproxy_s() {
        let c = upstream_with("sticky = {}");
        let s = c.proxy.upstreams[0].sticky.clone().unwrap();
        assert_eq!(s, proxy::StickySettings::default());
        assert_eq!((s.cookie.as_str(), s.path.as_str()), ("fulcrum_srv", "/"));
        let c = upstream_with(
            "sticky = { cookie = \"SRV\", max_age = \"1h\", path = \"/app\", domain = \"example.com\", \
             secure = true, http_only = true, same_site = \"None\" }",
        );
        let s = c.proxy.upstreams[0].sticky.clone().unwrap();
        assert_eq!(s.cookie, "SRV");
        assert_eq!(s.max_age, Some(Duration::from_secs(3600)));
        assert_eq!(s.path, "/app");
        assert_eq!(s.domain.as_deref(), Some("example.com"));
        assert!(s.secure && s.http_only);
        assert_eq!(s.same_site, Some(proxy::SameSite::None));
        assert!(upstream_with("").proxy.upstreams[0].sticky.is_none());
        assert!(s.key.is_none());
        let c = upstream_with("sticky = { secret = \"0123456789abcdef\" }");
        let s = c.proxy.upstreams[0].sticky.clone().unwrap();
        assert_eq!(
            s.key,
            Some(proxy::StickyKey::from_secret(b"0123456789abcdef"))
        );
        // The line of the design (../shared/DESIGN.md, "Traffic control").
        let c = upstream_with(
            "sticky = { cookie = \"fulcrum_srv\", max_age = \"1h\", http_only = true, same_site = \"Lax\" }",
        );
        let s = c.proxy.upstreams[0].sticky.clone().unwrap();
        assert_eq!(s.max_age, Some(Duration::from_secs(3600)));
        assert_eq!(s.same_site, Some(proxy::SameSite::Lax));
        assert!(s.http_only && !s.secure);
    }

    #[test]
    fn bad_values_are_refused_with_what_to_do() {
        for (sticky, message) in [
            ("sticky = \"on\"", "expected a sticky section"),
            ("sticky = { cookie = \"a b\" }", "upstream[0].sticky.cookie"),
            ("sticky = { cookie = \"\" }", "a cookie name is letters"),
            (
                "sticky = { max_age = \"0s\" }",
                "would never bring a client back",
            ),
            ("sticky = { max_age = \"1500ms\" }", "whole seconds"),
            ("sticky = { path = \"app\" }", "starts with /"),
            ("sticky = { path = \"/a;b\" }", "without ';'"),
            ("sticky = { domain = \"\" }", "upstream[0].sticky.domain"),
            (
                "sticky = { same_site = \"lax\" }",
                "\"Strict\", \"Lax\" or \"None\"",
            ),
            ("sticky = { same_site = \"None\" }", "needs secure = true"),
            ("sticky = { secure = \"true\" }", "without quotes"),
            ("sticky = { cokie = \"a\" }", "cokie"),
            (
                "sticky = { secret = \"short\" }",
                "5 bytes is too short to keep backends' ids unguessable",
            ),
        ] {
            let errors = refused(&with_algorithm("least_conn", sticky));
            assert!(
                errors.contains(message),
                "{sticky}: expected {message:?} in\n{errors}"
            );
        }
    }

    #[test]
    fn a_tcp_listener_s_upstream_cannot_stick_by_cookie() {
        let text = crate::config::testing::with_listener("protocol = \"tcp\"")
            .replace("connect_timeout = \"250ms\"", "sticky = {}");
        let errors = refused(&text);
        assert!(errors.contains("has sticky sessions"), "{errors}");
    }
}
