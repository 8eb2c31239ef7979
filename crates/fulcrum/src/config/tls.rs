//! `[[listener.tls]]`: the certificates a listener terminates TLS with, each a `cert` (PEM
//! chain) and a `key` (PEM private key), the first the default for clients without SNI.
//!
//! `fulcrum check` reads the files exactly as `run` will ([`proxy::tls::Certificate::load`]),
//! so a missing file, a file without a PEM certificate or key, or a key that belongs to
//! another certificate is an error at the `cert` or `key` line. Two things are warnings, not
//! errors:
//!
//! * a certificate outside its validity dates (expired, or not yet valid). Refusing it would
//!   also refuse to start or reload: a certificate whose renewal failed overnight would take
//!   every site of the listener down at the next restart instead of showing clients an
//!   expiry warning. nginx loads such certificates as well.
//! * a host name in the certificates of two entries: the first entry gets it (nginx's rule for
//!   a `server_name` in two servers), the later one never serves it.
//!
//! An upstream's `tls`, `tls_ca` and `tls_server_name` (TLS to its backends) are read here
//! too: the CA file is read as `run` reads it, and a problem is an error at its key.
//!
//! Relative paths are read against the configuration file's directory.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxy::tls::{Certificate, CertificateFiles, Which};

use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[[listener.tls]]",
    keys: &["cert", "key"],
    not_yet: &[],
};

/// A listener's TLS entries; those with a problem are reported and left out.
pub(super) fn read(r: &mut Report<'_>, listener: &Table<'_>) -> Vec<CertificateFiles> {
    let tables = listener.sections(r, "tls", &SECTION);
    let mut entries = Vec::new();
    // Each DNS name, with the entry that has it first and the line of that entry.
    let mut names: HashMap<String, (String, usize)> = HashMap::new();
    for t in &tables {
        let cert = t.required_text(r, "cert", "a file", "/etc/fulcrum/site.pem");
        let key = t.required_text(r, "key", "a file", "/etc/fulcrum/site.key");
        let (Some(cert), Some(key)) = (cert, key) else {
            continue;
        };
        let files = CertificateFiles {
            cert: r.dir().join(cert.get_ref()),
            key: r.dir().join(key.get_ref()),
        };
        let certificate = match Certificate::load(&files) {
            Ok(c) => c,
            Err(e) => {
                let (name, span) = match e.which() {
                    Which::Cert => ("cert", cert.span()),
                    Which::Key => ("key", key.span()),
                };
                r.error(span, &t.key(name), e);
                continue;
            }
        };
        let here = t.key("cert");
        validity(r, &here, &cert.span(), &certificate, SystemTime::now());
        let line = r.line_of(&t.span());
        for name in &certificate.names {
            match names.get(name) {
                Some((first, first_line)) => r.warn(
                    &cert.span(),
                    format!(
                        "{here}: {name} is also in the certificate of {first} (line {first_line}), \
                         which serves it; this entry never will"
                    ),
                ),
                None => {
                    names.insert(name.clone(), (t.key("cert"), line));
                }
            }
        }
        entries.push(files);
    }
    if !tables.is_empty() && entries.len() != tables.len() {
        // Problems were reported; what is returned is not used.
        return Vec::new();
    }
    entries
}

/// An upstream's TLS to its backends: `tls = true`, `tls_ca` (a PEM file of CAs; the
/// system's roots without it) and `tls_server_name` (the name verified and sent as SNI; each
/// backend's host without it). `tls_ca` or `tls_server_name` without `tls = true` is an error:
/// it would look like TLS was on.
pub(super) fn upstream(
    r: &mut Report<'_>,
    t: &Table<'_>,
    protocol: proxy::BackendProtocol,
) -> Option<std::sync::Arc<proxy::upstream_tls::BackendTls>> {
    let on = t.flag(r, "tls");
    let ca = t.text(r, "tls_ca", "a file", "/etc/fulcrum/backend-ca.pem");
    let name = t.text(r, "tls_server_name", "a host name", "app.internal");
    if on != Some(true) {
        for (key, given) in [
            ("tls_ca", ca.is_some()),
            ("tls_server_name", name.is_some()),
        ] {
            if given {
                t.error(
                    r,
                    key,
                    format!(
                        "{key} has no effect without tls = true: add tls = true, or remove {key}"
                    ),
                );
            }
        }
        return None;
    }
    let ca_path = ca.as_ref().map(|c| r.dir().join(c.get_ref()));
    match proxy::upstream_tls::BackendTls::new(
        ca_path.as_deref(),
        name.as_ref().map(|n| *n.get_ref()),
        protocol,
    ) {
        Ok(tls) => Some(std::sync::Arc::new(tls)),
        Err(e) => {
            let key = match e {
                proxy::upstream_tls::BackendTlsError::BadServerName(_) => "tls_server_name",
                _ if ca.is_some() => "tls_ca",
                _ => "tls",
            };
            t.error(r, key, e);
            None
        }
    }
}

/// Warns of a certificate that clients will refuse today for its dates.
fn validity(
    r: &mut Report<'_>,
    key: &str,
    span: &std::ops::Range<usize>,
    c: &Certificate,
    now: SystemTime,
) {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let when = |secs: i64| {
        let t = UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
        humantime::format_rfc3339_seconds(t).to_string()
    };
    if c.not_after < now {
        r.warn(
            span,
            format!(
                "{key}: the certificate expired on {}: clients will refuse it; renew it",
                when(c.not_after)
            ),
        );
    } else if c.not_before > now {
        r.warn(
            span,
            format!(
                "{key}: the certificate is not valid before {}: clients will refuse it until then (check the clock)",
                when(c.not_before)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use std::path::Path;

    /// A self-signed certificate for `hosts` and its key, written to `dir`: their paths.
    fn write_pair(dir: &Path, name: &str, hosts: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                .unwrap()
                .self_signed(&key)
                .unwrap();
        let c = dir.join(format!("{name}.pem"));
        let k = dir.join(format!("{name}.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    }

    fn with_tls(entries: &[(&str, &str)]) -> String {
        let mut extra = String::new();
        for (cert, key) in entries {
            extra.push_str(&format!(
                "\n[[listener.tls]]\ncert = \"{cert}\"\nkey = \"{key}\"\n"
            ));
        }
        GOOD.replacen(
            "upstream = \"web\"\n",
            &format!("upstream = \"web\"\n{extra}"),
            1,
        )
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fulcrum-config-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn good_entries_reach_the_settings_with_duplicate_names_warned() {
        let dir = temp_dir("good");
        let (c1, k1) = write_pair(&dir, "a", &["a.test", "*.b.test"]);
        let (c2, k2) = write_pair(&dir, "b", &["*.b.test"]);
        let c = ok(&with_tls(&[(&c1, &k1), (&c2, &k2)]));
        let tls = &c.proxy.listeners[0].tls;
        assert_eq!(tls.len(), 2);
        assert_eq!(tls[1].key, Path::new(&k2));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains("listener[0].tls[1].cert: *.b.test is also in the certificate of listener[0].tls[0].cert (line 8), which serves it"),
            "{:?}",
            c.warnings
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_non_pem_and_mismatched_files_are_errors_at_their_key() {
        let dir = temp_dir("bad");
        let (c1, k1) = write_pair(&dir, "a", &["a.test"]);
        let (_, k2) = write_pair(&dir, "b", &["b.test"]);
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let garbage = garbage.display().to_string();
        let missing = dir.join("missing.pem").display().to_string();

        let e = refused(&with_tls(&[(&missing, &k1)]));
        assert!(
            e.contains("t.toml:9:8: listener[0].tls[0].cert: cannot read "),
            "{e}"
        );
        assert!(e.contains("missing.pem: No such file"), "{e}");

        let e = refused(&with_tls(&[(&garbage, &k1)]));
        assert!(
            e.contains("t.toml:9:8: listener[0].tls[0].cert: ")
                && e.contains("holds no PEM certificate"),
            "{e}"
        );

        let e = refused(&with_tls(&[(&c1, &garbage)]));
        assert!(
            e.contains("t.toml:10:7: listener[0].tls[0].key: ")
                && e.contains("holds no PEM private key"),
            "{e}"
        );

        let e = refused(&with_tls(&[(&c1, &k2)]));
        assert!(
            e.contains("t.toml:10:7: listener[0].tls[0].key: the private key in ")
                && e.contains("does not belong to the certificate in"),
            "{e}"
        );

        let e = refused(&GOOD.replacen(
            "upstream = \"web\"\n",
            "upstream = \"web\"\n[[listener.tls]]\ncert = \"x.pem\"\n",
            1,
        ));
        assert!(
            e.contains("listener[0].tls[0].key: missing: every [[listener.tls]] needs one"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_expired_certificate_is_a_warning() {
        let dir = temp_dir("expired");
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["old.test".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2001, 1, 1);
        params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let (c, k) = (dir.join("old.pem"), dir.join("old.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        let config = ok(&with_tls(&[(
            &c.display().to_string(),
            &k.display().to_string(),
        )]));
        assert!(
            config.warnings[0].contains("t.toml:9: listener[0].tls[0].cert: the certificate expired on 2002-01-01T00:00:00Z: clients will refuse it; renew it"),
            "{:?}",
            config.warnings
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn upstream_tls_keys_are_checked() {
        let with = |lines: &str| {
            GOOD.replacen(
                "connect_timeout = \"250ms\"\n",
                &format!("connect_timeout = \"250ms\"\n{lines}\n"),
                1,
            )
        };
        let e = refused(&with("tls_ca = \"/nonexistent/ca.pem\""));
        assert!(
            e.contains("upstream[0].tls_ca: tls_ca has no effect without tls = true"),
            "{e}"
        );
        let e = refused(&with("tls = true\ntls_ca = \"/nonexistent/ca.pem\""));
        assert!(
            e.contains("t.toml:13:10: upstream[0].tls_ca: cannot read /nonexistent/ca.pem"),
            "{e}"
        );
        let dir = temp_dir("upstream");
        let (cert, _) = write_pair(&dir, "ca", &["ca.test"]);
        let e = refused(&with(&format!(
            "tls = true\ntls_ca = \"{cert}\"\ntls_server_name = \"a b\""
        )));
        assert!(
            e.contains("upstream[0].tls_server_name: \"a b\" is not a DNS name or an IP address"),
            "{e}"
        );
        let c = ok(&with(&format!("tls = true\ntls_ca = \"{cert}\"")));
        assert!(c.proxy.upstreams[0].tls.is_some());
        assert!(ok(GOOD).proxy.upstreams[0].tls.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tls_is_refused_in_tcp_mode_on_either_side() {
        let dir = temp_dir("tcp");
        let (cert, key) = write_pair(&dir, "a", &["a.test"]);
        let tcp = GOOD.replacen(
            "upstream = \"web\"\n",
            "upstream = \"web\"\nprotocol = \"tcp\"\n",
            1,
        );
        let e = refused(&tcp.replacen(
            "protocol = \"tcp\"\n",
            &format!("protocol = \"tcp\"\n[[listener.tls]]\ncert = \"{cert}\"\nkey = \"{key}\"\n"),
            1,
        ));
        assert!(
            e.contains("listener[0].tls: TLS termination on a TCP listener is not supported yet"),
            "{e}"
        );
        let e = refused(&tcp.replacen(
            "connect_timeout = \"250ms\"\n",
            &format!("connect_timeout = \"250ms\"\ntls = true\ntls_ca = \"{cert}\"\n"),
            1,
        ));
        assert!(e.contains("listener[0].upstream: upstream \"web\" has tls = true, which TCP listeners do not support yet"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn http2_beside_tls_is_h2_by_alpn_without_a_warning() {
        let dir = temp_dir("h2");
        let (cert, key) = write_pair(&dir, "a", &["a.test"]);
        let c = ok(&GOOD.replacen(
            "upstream = \"web\"\n",
            &format!("upstream = \"web\"\nhttp2 = true\n[[listener.tls]]\ncert = \"{cert}\"\nkey = \"{key}\"\n"),
            1,
        ));
        assert!(c.proxy.listeners[0].http2.is_some());
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
