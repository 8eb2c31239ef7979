//! `request_headers` and `response_headers` (on a listener and on a route): `{ set = { NAME =
//! VALUE }, add = { NAME = VALUE }, remove = [NAME] }`, values with nginx's variables
//! ([`proxy::header_rules`]). A field that frames a message or describes a connection cannot be
//! touched: the proxy writes those itself.

use proxy::header_rules::{HeaderRules, Template, UNTOUCHABLE};
use toml::de::DeValue;

use super::report::Report;
use super::table::{Section, Table, found};

const SECTION: Section = Section {
    title: "request_headers / response_headers",
    keys: &["set", "add", "remove"],
    not_yet: &[],
};

/// `t`'s `key` (`request_headers` or `response_headers`), checked; empty when absent.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>, key: &str) -> HeaderRules {
    let Some(rules) = t.section(r, key, &SECTION) else {
        return HeaderRules::default();
    };
    let mut out = HeaderRules {
        set: fields(r, &rules, "set"),
        add: fields(r, &rules, "add"),
        remove: Vec::new(),
    };
    for (k, name) in rules.strings(r, "remove", ("a header name", "header names"), "Server") {
        if let Some(why) = refused(name.get_ref()) {
            r.error(name.span(), &k, why);
        } else {
            out.remove.push(name.get_ref().to_string());
        }
    }
    out
}

/// `set` or `add`: a table of field names to values.
fn fields(r: &mut Report<'_>, rules: &Table<'_>, key: &str) -> Vec<(String, Template)> {
    let Some(value) = rules.value(key) else {
        return Vec::new();
    };
    let DeValue::Table(entries) = value.get_ref() else {
        r.error(
            value.span(),
            &rules.key(key),
            format!(
                "expected a table such as {{ \"Strict-Transport-Security\" = \"max-age=63072000\" }}, not {}",
                found(value.get_ref())
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, v) in entries {
        let at = format!("{}.{}", rules.key(key), name.get_ref());
        if let Some(why) = refused(name.get_ref()) {
            r.error(name.span(), &at, why);
            continue;
        }
        let DeValue::String(text) = v.get_ref() else {
            r.error(
                v.span(),
                &at,
                format!(
                    "expected a string such as \"1\", not {}",
                    found(v.get_ref())
                ),
            );
            continue;
        };
        match Template::parse(text) {
            Ok(t) => out.push((name.get_ref().to_string(), t)),
            Err(e) => r.error(v.span(), &at, e),
        }
    }
    out
}

/// Why `name` cannot be set, added or removed, if it cannot.
fn refused(name: &str) -> Option<String> {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
    if !token {
        return Some(format!("\"{name}\" is not a header name"));
    }
    UNTOUCHABLE
        .iter()
        .any(|u| u.eq_ignore_ascii_case(name))
        .then(|| {
            format!(
                "{name} frames the message or describes the connection: fulcrum writes it itself, and a rule cannot set or remove it"
            )
        })
}
