//! `[cluster]`: the etcd that a fleet of fulcrum instances shares its admin-API changes
//! through (see [`crate::cluster`]).
//!
//! `etcd` lists the cluster's client URLs, as `etcdctl --endpoints` takes them; `prefix` is
//! the key prefix of this fleet's records, so that several fleets (or other programs) may
//! share one etcd. Plain `http://` only: the etcd client is built without TLS, so an
//! `https://` URL is refused here rather than failing at every connection attempt.

use toml::Spanned;

use super::report::Report;
use super::table::{Section, Table};
use crate::cluster::{ClusterSettings, DEFAULT_PREFIX};

pub(super) const SECTION: Section = Section {
    title: "[cluster]",
    keys: &["etcd", "prefix"],
    not_yet: &[],
};

/// An example endpoint, for messages.
const EXAMPLE: &str = "http://127.0.0.1:2379";

/// Reads `[cluster]`; `None` when a problem was reported.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<ClusterSettings> {
    let mut endpoints = Vec::new();
    let mut refused = false;
    for (key, url) in t.strings(r, "etcd", ("a URL", "URLs"), EXAMPLE) {
        match endpoint(url.get_ref()) {
            Ok(url) => endpoints.push(url),
            Err(why) => {
                r.error(url.span(), &key, why);
                refused = true;
            }
        }
    }
    if t.value("etcd").is_none() {
        r.error(
            t.span(),
            &t.key("etcd"),
            format!("missing: [cluster] needs etcd's client URLs, like etcd = [\"{EXAMPLE}\"]"),
        );
        return None;
    }
    if endpoints.is_empty() && !refused {
        r.error(
            t.span_of("etcd").unwrap_or_else(|| t.span()),
            &t.key("etcd"),
            format!("no URL: list at least one of etcd's client URLs, like [\"{EXAMPLE}\"]"),
        );
        return None;
    }
    let prefix = match t.text(r, "prefix", "a key prefix", DEFAULT_PREFIX) {
        Some(p) => prefix(r, t, &p)?,
        None if t.value("prefix").is_some() => return None,
        None => DEFAULT_PREFIX.to_owned(),
    };
    (!refused).then_some(ClusterSettings { endpoints, prefix })
}

/// One client URL: `http://host:port`, nothing after the authority.
fn endpoint(text: &str) -> Result<String, String> {
    if text.starts_with("https://") {
        return Err(format!(
            "\"{text}\": TLS to etcd is not supported: use an http:// URL on a trusted network (or an etcd grpc-proxy on this host, reached over http://127.0.0.1)"
        ));
    }
    let Some(rest) = text.strip_prefix("http://") else {
        return Err(format!(
            "\"{text}\" is not an etcd client URL: write it as http://host:port, like \"{EXAMPLE}\""
        ));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let parsed = authority.parse::<http::uri::Authority>().ok();
    match parsed {
        Some(a) if a.port_u16().is_some() && !a.host().is_empty() && !a.as_str().contains('@') => {
            Ok(format!("http://{authority}"))
        }
        _ => Err(format!(
            "\"{text}\" is not an etcd client URL: write http:// then a host and a port (etcd's is 2379) and nothing else, like \"{EXAMPLE}\""
        )),
    }
}

/// `prefix`: a key path starting and ending with `/`, so that `/fulcrum/` holds no key of
/// `/fulcrum-staging/`.
fn prefix(r: &mut Report<'_>, t: &Table<'_>, p: &Spanned<&str>) -> Option<String> {
    let text = *p.get_ref();
    let why = if !text.starts_with('/') {
        Some(format!(
            "\"{text}\" must start with /: write a key path such as \"/{}/\"",
            text.trim_matches('/')
        ))
    } else if !text.ends_with('/') || text == "/" {
        Some(if text == "/" {
            format!(
                "\"/\" would take etcd's whole key space: write a path such as \"{DEFAULT_PREFIX}\""
            )
        } else {
            format!(
                "\"{text}\" must end with /, or it would also take the keys of \"{text}-other/\": write \"{text}/\""
            )
        })
    } else if text.chars().any(char::is_control) {
        Some(format!(
            "{text:?} holds control characters: write a key path of printable characters"
        ))
    } else {
        None
    };
    match why {
        Some(why) => {
            r.error(p.span(), &t.key("prefix"), why);
            None
        }
        None => Some(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    fn with_cluster(lines: &str) -> String {
        format!("{GOOD}\n[cluster]\n{lines}\n")
    }

    #[test]
    fn endpoints_and_the_default_prefix() {
        let c = ok(&with_cluster(
            r#"etcd = ["http://127.0.0.1:2379", "http://etcd-2.example:2379/"]"#,
        ));
        let cluster = c.cluster.unwrap();
        assert_eq!(
            cluster.endpoints,
            ["http://127.0.0.1:2379", "http://etcd-2.example:2379"]
        );
        assert_eq!(cluster.prefix, "/fulcrum/");
        let c = ok(&with_cluster(
            "etcd = [\"http://[::1]:2379\"]\nprefix = \"/lb/eu-1/\"",
        ));
        assert_eq!(c.cluster.unwrap().prefix, "/lb/eu-1/");
        assert!(ok(GOOD).cluster.is_none());
    }

    #[test]
    fn bad_endpoints_are_refused_with_where_and_how() {
        let e = refused(&with_cluster(
            r#"etcd = ["https://127.0.0.1:2379", "127.0.0.1:2379", "http://127.0.0.1", "http://h:2379/v3", 7]"#,
        ));
        for want in [
            "t.toml:22:9: cluster.etcd[0]: \"https://127.0.0.1:2379\": TLS to etcd is not supported",
            "cluster.etcd[1]: \"127.0.0.1:2379\" is not an etcd client URL: write it as http://host:port",
            "cluster.etcd[2]: \"http://127.0.0.1\" is not an etcd client URL: write http:// then a host and a port",
            "cluster.etcd[3]: \"http://h:2379/v3\" is not an etcd client URL",
            "cluster.etcd[4]: expected a URL such as \"http://127.0.0.1:2379\", not the number 7",
        ] {
            assert!(e.contains(want), "{want}\nnot in\n{e}");
        }
        let e = refused(&with_cluster("etcd = []"));
        assert!(e.contains("cluster.etcd: no URL: list at least one"), "{e}");
        let e = refused(&with_cluster("prefix = \"/fulcrum/\""));
        assert!(
            e.contains("t.toml:21:1: cluster.etcd: missing: [cluster] needs etcd's client URLs"),
            "{e}"
        );
        let e = refused(&with_cluster("etcd = \"http://127.0.0.1:2379\""));
        assert!(e.contains("cluster.etcd: expected a list of URLs"), "{e}");
    }

    #[test]
    fn bad_prefixes_are_refused() {
        for (prefix, want) in [
            (
                "fulcrum/",
                "must start with /: write a key path such as \"/fulcrum/\"",
            ),
            (
                "/fulcrum",
                "must end with /, or it would also take the keys of \"/fulcrum-other/\": write \"/fulcrum/\"",
            ),
            ("/", "would take etcd's whole key space"),
            ("", "must start with /"),
        ] {
            let e = refused(&with_cluster(&format!(
                "etcd = [\"http://127.0.0.1:2379\"]\nprefix = \"{prefix}\""
            )));
            assert!(e.contains("cluster.prefix: "), "{e}");
            assert!(e.contains(want), "{prefix:?}: {want}\nnot in\n{e}");
        }
        let e = refused(&with_cluster(
            "etcd = [\"http://127.0.0.1:2379\"]\nprefix = 3",
        ));
        assert!(
            e.contains("cluster.prefix: expected a key prefix such as \"/fulcrum/\""),
            "{e}"
        );
        let e = refused(&with_cluster(
            "etcd = [\"http://127.0.0.1:2379\"]\nperfix = \"/a/\"",
        ));
        assert!(
            e.contains("unknown key `perfix`; did you mean `prefix`?"),
            "{e}"
        );
    }
}
