//! TLS termination: a listener's certificates read from PEM files, the one chosen for each
//! handshake by SNI, and the handshake itself, bounded in time.
//!
//! * **Certificates.** Each `[[listener.tls]]` entry is a PEM chain and a PEM private key
//!   (PKCS#8, PKCS#1 RSA or SEC1 EC), read by [`Certificate::load`], which refuses a key that
//!   does not belong to the certificate. The files are read when the proxy starts and again at
//!   every reload, so a renewed certificate is served by the next connection after a SIGHUP;
//!   connections already open keep the session they have.
//! * **SNI.** As nginx chooses a `server` block: the entry whose certificate names the host
//!   the client asked for (its DNS subject alternative names, the common name only when there
//!   is none; `*.example.com` matches one label), exact names before wildcards, earlier
//!   entries before later ones; no SNI or no match gets the first entry (nginx's default
//!   server). [`Certificates`] builds the lookup once, so a handshake costs one or two hash
//!   lookups.
//! * **Protocol.** rustls with the ring provider, TLS 1.3 and 1.2, rustls's default cipher
//!   suites; ALPN offers `http/1.1` only ([`alpn`]; `h2` waits for HTTP/2).
//! * **Resumption.** A session cache (TLS 1.2 session IDs) and a ticketer (TLS 1.3 tickets and
//!   TLS 1.2 session tickets, keys rotated by rustls every six hours) per listener, kept
//!   across reloads ([`Resumption`]), as nginx keeps `ssl_session_cache` across a reload.
//! * **Handshake.** Within the listener's `client_header_timeout` (the time a client has to
//!   start its request: the handshake is part of it); a client that sends garbage, stalls or
//!   fails the handshake is logged at debug and counted, and only its connection ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject as _};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// One `[[listener.tls]]` entry: where its certificate chain and private key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The certificate chain, PEM, the server's own certificate first.
    pub cert: PathBuf,
    /// The private key, PEM.
    pub key: PathBuf,
}

/// Which of an entry's two files a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Cert,
    Key,
}

/// Why a certificate entry cannot be used, in words that say what to do.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error(
        "cannot read {}: {source} (check the path, and that fulcrum's user may read it)",
        path.display()
    )]
    Unreadable {
        which: Which,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} holds no PEM certificate: expected a \"-----BEGIN CERTIFICATE-----\" block, the server's certificate first",
        path.display()
    )]
    NoCertificate { path: PathBuf },
    #[error("{} is not valid PEM: {why}", path.display())]
    BadPem {
        which: Which,
        path: PathBuf,
        why: String,
    },
    #[error("{}: the first certificate cannot be read: {why}", path.display())]
    BadCertificate { path: PathBuf, why: String },
    #[error(
        "{} holds no PEM private key: expected \"BEGIN PRIVATE KEY\" (PKCS#8), \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\"",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error("{}: the private key cannot be used: {why}", path.display())]
    UnusableKey { path: PathBuf, why: String },
    #[error(
        "the private key in {} does not belong to the certificate in {}: pair each certificate with its own key",
        key.display(),
        cert.display()
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
}

impl CertificateError {
    /// The file the problem is in (a mismatch is reported at the key).
    pub fn which(&self) -> Which {
        match self {
            CertificateError::Unreadable { which, .. } | CertificateError::BadPem { which, .. } => {
                *which
            }
            CertificateError::NoCertificate { .. } | CertificateError::BadCertificate { .. } => {
                Which::Cert
            }
            CertificateError::NoKey { .. }
            | CertificateError::UnusableKey { .. }
            | CertificateError::KeyMismatch { .. } => Which::Key,
        }
    }
}

/// A certificate entry read and checked: the chain with its signing key, and what `fulcrum
/// check` and the SNI lookup need to know of the server's certificate.
#[derive(Debug, Clone)]
pub struct Certificate {
    certified: Arc<CertifiedKey>,
    /// The DNS names the certificate is for, lowercase, wildcards as written (`*.example.com`).
    pub names: Vec<String>,
    /// Validity, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
}

/// The ring provider, which every TLS configuration of fulcrum uses.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(which: Which, path: &Path) -> Result<Vec<u8>, CertificateError> {
    std::fs::read(path).map_err(|source| CertificateError::Unreadable {
        which,
        path: path.to_owned(),
        source,
    })
}

impl Certificate {
    /// Reads an entry's files and checks that they go together.
    pub fn load(files: &CertificateFiles) -> Result<Certificate, CertificateError> {
        let cert_pem = read(Which::Cert, &files.cert)?;
        let key_pem = read(Which::Key, &files.key)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CertificateError::BadPem {
                which: Which::Cert,
                path: files.cert.clone(),
                why: e.to_string(),
            })?;
        let Some(leaf) = chain.first() else {
            return Err(CertificateError::NoCertificate {
                path: files.cert.clone(),
            });
        };
        let (names, not_before, not_after) =
            describe(leaf).map_err(|why| CertificateError::BadCertificate {
                path: files.cert.clone(),
                why,
            })?;
        let key = match PrivateKeyDer::from_pem_slice(&key_pem) {
            Ok(key) => key,
            Err(pem::Error::NoItemsFound) => {
                return Err(CertificateError::NoKey {
                    path: files.key.clone(),
                });
            }
            Err(e) => {
                return Err(CertificateError::BadPem {
                    which: Which::Key,
                    path: files.key.clone(),
                    why: e.to_string(),
                });
            }
        };
        let certified = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => CertificateError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            },
            other => CertificateError::UnusableKey {
                path: files.key.clone(),
                why: other.to_string(),
            },
        })?;
        Ok(Certificate {
            certified: Arc::new(certified),
            names,
            not_before,
            not_after,
        })
    }
}

/// A certificate's DNS names and validity (seconds since the epoch).
fn describe(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64, i64), String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        // No DNS names: the common name, as clients did before subject alternative names.
        for cn in cert.subject().iter_common_name() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.to_ascii_lowercase());
            }
        }
    }
    let validity = cert.validity();
    Ok((
        names,
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    ))
}

/// A listener's certificates, chosen by SNI (see the module documentation).
#[derive(Debug)]
pub(crate) struct Certificates {
    /// In configuration order; the first is the default.
    entries: Vec<Arc<CertifiedKey>>,
    /// Exact name → entry.
    exact: HashMap<String, usize>,
    /// `example.com` for `*.example.com` → entry.
    wildcard: HashMap<String, usize>,
}

impl Certificates {
    pub(crate) fn new(certificates: &[Certificate]) -> Certificates {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, c) in certificates.iter().enumerate() {
            for name in &c.names {
                // The first entry naming a host keeps it, as nginx's first server_name does.
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_owned()).or_insert(i),
                    None => exact.entry(name.clone()).or_insert(i),
                };
            }
        }
        Certificates {
            entries: certificates
                .iter()
                .map(|c| Arc::clone(&c.certified))
                .collect(),
            exact,
            wildcard,
        }
    }

    /// The entry for `server_name` (the client's SNI), or the first.
    fn choose(&self, server_name: Option<&str>) -> Option<&Arc<CertifiedKey>> {
        let found = server_name.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(&name).or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent)
            })
        });
        self.entries.get(found.copied().unwrap_or(0))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.server_name()).cloned()
    }
}

/// The application protocols offered in ALPN, in order of preference: `h2` first on a
/// listener with `http2 = true` (as nginx and HAProxy prefer it), then `http/1.1`. A client
/// that offers neither still gets HTTP/1.1 (no ALPN is not an error: RFC 7301 §3.2 lets the
/// server go on without it).
pub(crate) fn alpn(http2: bool) -> Vec<Vec<u8>> {
    let mut protocols = Vec::with_capacity(2);
    if http2 {
        protocols.push(H2.to_vec());
    }
    protocols.push(b"http/1.1".to_vec());
    protocols
}

/// HTTP/2's ALPN identifier (RFC 9113 §3.2).
pub(crate) const H2: &[u8] = b"h2";

/// TLS 1.2 sessions remembered per listener for resumption by session ID (clients that do not
/// take tickets). An entry is a few hundred bytes, so the cache stays around a megabyte; nginx's
/// `ssl_session_cache shared:SSL:1m` holds about 4000 sessions too.
const SESSION_CACHE: usize = 4096;

/// What lets a client resume a session instead of a full handshake; kept by a listener across
/// reloads, so a reload does not cost every client a full handshake.
#[derive(Debug, Clone)]
pub(crate) struct Resumption {
    cache: Arc<dyn StoresServerSessions>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
}

impl Resumption {
    pub(crate) fn new() -> Result<Resumption, rustls::Error> {
        Ok(Resumption {
            cache: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE),
            ticketer: rustls::crypto::ring::Ticketer::new()?,
        })
    }
}

/// A listener's TLS, ready to accept handshakes.
#[derive(Debug, Clone)]
pub(crate) struct ServerTls {
    config: Arc<rustls::ServerConfig>,
}

/// Why a listener's TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("tls[{index}]: {source}")]
    Certificate {
        index: usize,
        source: CertificateError,
    },
    #[error("TLS cannot be set up: {0}")]
    Rustls(#[from] rustls::Error),
}

impl ServerTls {
    /// Reads every entry's files (again, at a reload) and builds the configuration.
    pub(crate) fn new(
        entries: &[CertificateFiles],
        resumption: &Resumption,
        http2: bool,
    ) -> Result<ServerTls, TlsSetupError> {
        let certificates = entries
            .iter()
            .enumerate()
            .map(|(index, files)| {
                Certificate::load(files)
                    .map_err(|source| TlsSetupError::Certificate { index, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Certificates::new(&certificates)));
        config.alpn_protocols = alpn(http2);
        config.session_storage = Arc::clone(&resumption.cache);
        config.ticketer = Arc::clone(&resumption.ticketer);
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    /// The handshake on `stream`, within `timeout`; `None` (logged at debug) when it fails,
    /// times out or the proxy stops meanwhile.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        peer: std::net::SocketAddr,
        timeout: Duration,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<TlsStream<TcpStream>, HandshakeFailure> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config));
        let accepted = async move {
            // Not a TLS record (0x16) and not an SSLv2-style hello (high bit set): plain HTTP,
            // or something else, sent to this TLS port. Answered 400 as nginx answers it
            // (`ngx_http_ssl_handshake` makes the same test on the first byte), rather than
            // closed without a word.
            let mut first = [0u8; 1];
            if matches!(stream.peek(&mut first).await, Ok(1)) && !starts_a_handshake(first[0]) {
                answer_plain_http(stream).await;
                return Err(std::io::Error::other(
                    "plain HTTP sent to a TLS port (answered 400)",
                ));
            }
            acceptor.accept(stream).await
        };
        tokio::select! {
            done = tokio::time::timeout(timeout, accepted) => match done {
                Ok(Ok(tls)) => Ok(tls),
                Ok(Err(e)) => {
                    tracing::debug!(client = %peer, error = %e, "TLS handshake failed");
                    Err(HandshakeFailure::Failed)
                }
                Err(_) => {
                    tracing::debug!(client = %peer, ?timeout, "TLS handshake not finished within client_header_timeout");
                    Err(HandshakeFailure::TimedOut)
                }
            },
            _ = stop.changed() => Err(HandshakeFailure::Stopping),
        }
    }
}

/// Whether a connection's first byte can begin a TLS handshake: a TLS record of type
/// handshake (0x16), or the two-byte length of an SSLv2-style ClientHello (high bit set).
fn starts_a_handshake(first: u8) -> bool {
    first == 0x16 || first & 0x80 != 0
}

/// What nginx answers a plain HTTP request on an HTTPS port (`400 The plain HTTP request was
/// sent to HTTPS port`), in our words: the head read (up to 8 KiB, so that closing does not
/// reset the connection before the client reads the answer), the answer written, the
/// connection closed.
async fn answer_plain_http(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    const BODY: &str =
        "400 Bad Request: a plain HTTP request was sent to an HTTPS port; use https://\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// How a handshake ended without a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    /// Not TLS, a protocol error, or nothing in common with the client.
    Failed,
    /// Not finished within `client_header_timeout`.
    TimedOut,
    /// The proxy is shutting down (not counted as a failure).
    Stopping,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(names: &[&str]) -> Certificate {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "fulcrum-tls-unit-{}-{}",
            std::process::id(),
            names.join("_").replace('*', "star")
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertificateFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        let loaded = Certificate::load(&files).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        loaded
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first_entry() {
        let a = certificate(&["a.test"]);
        let wild = certificate(&["*.b.test"]);
        let exact_b = certificate(&["x.b.test", "a.test"]);
        let all = Certificates::new(&[a.clone(), wild.clone(), exact_b.clone()]);
        let chosen = |sni: Option<&str>| all.choose(sni).unwrap().cert[0].clone();
        assert_eq!(
            chosen(Some("a.test")),
            a.certified.cert[0],
            "first entry keeps a.test"
        );
        assert_eq!(
            chosen(Some("A.Test.")),
            a.certified.cert[0],
            "case and root dot"
        );
        assert_eq!(chosen(Some("y.b.test")), wild.certified.cert[0]);
        assert_eq!(
            chosen(Some("x.b.test")),
            exact_b.certified.cert[0],
            "exact before wildcard"
        );
        assert_eq!(
            chosen(Some("b.test")),
            a.certified.cert[0],
            "a wildcard needs a label"
        );
        assert_eq!(
            chosen(Some("z.y.b.test")),
            a.certified.cert[0],
            "one label only"
        );
        assert_eq!(chosen(Some("other.test")), a.certified.cert[0]);
        assert_eq!(chosen(None), a.certified.cert[0]);
        assert_eq!(wild.names, ["*.b.test"]);
    }
}
