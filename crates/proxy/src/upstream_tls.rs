//! TLS to backends (`tls = true` on an `[[upstream]]`): whom to trust, which name to ask for,
//! and a backend connection that is plain TCP or TLS over it.
//!
//! * **Trust.** `tls_ca` (a PEM file of CA certificates) when given; otherwise the system's
//!   roots as the OS keeps them (`/etc/ssl/certs` on Debian, through rustls-native-certs), as
//!   nginx's `proxy_ssl_trusted_certificate` does with a file. Unlike nginx (whose
//!   `proxy_ssl_verify` is off by default), the backend's certificate is always verified: a
//!   proxy that accepts any certificate gives the confidentiality of plain HTTP.
//! * **Name.** `tls_server_name` for every backend of the upstream, else each backend's host as
//!   written in `addr` (an IP address is verified against the certificate's IP addresses and
//!   sends no SNI, as RFC 6066 §3 forbids literal addresses there).
//! * **Connections.** [`BackendStream`] is an `Either`, not a trait object: one branch per read
//!   or write, and the plain path keeps `TcpStream`'s own borrowed halves. Kept-alive TLS
//!   connections are pooled like plain ones; an idle one is reused only under the same TLS
//!   settings it was made with (a reload that changes them makes new connections).
//! * **Handshake.** Within what is left of `connect_timeout`; a failure (an unknown issuer, a
//!   name mismatch, an expired certificate) fails the attempt as a connection failure, logged
//!   with rustls's reason, and the next backend is tried.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

/// The protocol requests are forwarded in (`backend_protocol`): what ALPN offers a TLS backend,
/// and what it must choose. Here rather than with the settings that name it, because a
/// backend's TLS is made for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackendProtocol {
    /// HTTP/1.1 on pooled keep-alive connections.
    #[default]
    Http1,
    /// HTTP/2: with prior knowledge over plain TCP (h2c), chosen by ALPN over TLS. Each worker
    /// multiplexes its requests to a backend over one connection.
    H2,
}

impl BackendProtocol {
    /// As written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            BackendProtocol::Http1 => "http1",
            BackendProtocol::H2 => "h2",
        }
    }
}

/// An upstream's TLS to its backends, ready to connect.
#[derive(Debug)]
pub struct BackendTls {
    config: Arc<rustls::ClientConfig>,
    /// `tls_server_name`, checked; `None`: each backend's host.
    server_name: Option<ServerName<'static>>,
    /// What ALPN offers, and what the backend must choose.
    protocol: BackendProtocol,
}

/// The same TLS only when it is the very same one: each load of the configuration reads the
/// CA files again and builds a new one, so a reload of an upstream with TLS counts as a change
/// (its files may have been renewed) — what a reload reports as reconfigured.
impl PartialEq for BackendTls {
    fn eq(&self, other: &BackendTls) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
            && self.server_name == other.server_name
            && self.protocol == other.protocol
    }
}

/// Why an upstream's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BackendTlsError {
    #[error("cannot read {}: {source} (check the path, and that fulcrum's user may read it)", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no PEM certificate: expected \"-----BEGIN CERTIFICATE-----\" blocks of the CAs to trust", path.display())]
    NoCertificate { path: std::path::PathBuf },
    #[error("{}: {why}", path.display())]
    BadCa {
        path: std::path::PathBuf,
        why: String,
    },
    #[error(
        "no trusted root certificate found in the system's store ({why}): install ca-certificates, or name the CAs with tls_ca"
    )]
    NoSystemRoots { why: String },
    #[error("\"{0}\" is not a DNS name or an IP address")]
    BadServerName(String),
    #[error("TLS cannot be set up: {0}")]
    Rustls(#[from] rustls::Error),
}

/// What a backend that does not choose HTTP/2 by ALPN is told (`backend_protocol = "h2"`).
const NO_H2: &str = "the backend did not choose h2 by ALPN (backend_protocol = \"h2\" needs a backend that offers HTTP/2 over TLS)";

impl BackendTls {
    /// Trusting the CAs in `ca` (PEM), or the system's roots; verifying `server_name`, or
    /// each backend's host; offering `protocol` by ALPN, and only it.
    pub fn new(
        ca: Option<&Path>,
        server_name: Option<&str>,
        protocol: BackendProtocol,
    ) -> Result<BackendTls, BackendTlsError> {
        let server_name = server_name
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|_| BackendTlsError::BadServerName(name.to_owned()))
            })
            .transpose()?;
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| BackendTlsError::Unreadable {
                    path: path.to_owned(),
                    source,
                })?;
                let certs = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| BackendTlsError::BadCa {
                        path: path.to_owned(),
                        why: e.to_string(),
                    })?;
                if certs.is_empty() {
                    return Err(BackendTlsError::NoCertificate {
                        path: path.to_owned(),
                    });
                }
                for cert in certs {
                    roots.add(cert).map_err(|e| BackendTlsError::BadCa {
                        path: path.to_owned(),
                        why: format!("a certificate cannot be used as a root: {e}"),
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = match found.errors.first() {
                        Some(e) => e.to_string(),
                        None => "the store is empty".to_owned(),
                    };
                    return Err(BackendTlsError::NoSystemRoots { why });
                }
            }
        }
        let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Only the protocol fulcrum will speak: offering http/1.1 alone keeps a backend that
        // negotiates HTTP/2 from choosing it; offering h2 alone makes one that cannot speak it
        // fail the handshake's check below instead of answering in a protocol we did not ask.
        config.alpn_protocols = match protocol {
            BackendProtocol::Http1 => vec![b"http/1.1".to_vec()],
            BackendProtocol::H2 => vec![b"h2".to_vec()],
        };
        Ok(BackendTls {
            config: Arc::new(config),
            server_name,
            protocol,
        })
    }

    /// The name to verify a backend by: `tls_server_name`, or the host of `addr` as written
    /// (`"app.internal:443"`, `"10.0.0.5:443"`, `"[::1]:443"`).
    pub(crate) fn name_for(&self, written: &str) -> Option<ServerName<'static>> {
        if let Some(name) = &self.server_name {
            return Some(name.clone());
        }
        let host = match written.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => written,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).ok()
    }

    /// A TLS connection to the backend at `addr` whose address is written `written`, for a
    /// health check: TCP, then the handshake, verified as requests' connections are.
    pub async fn connect(
        &self,
        addr: std::net::SocketAddr,
        written: &str,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = self.name_for(written).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("no name to verify {written} by: set tls_server_name"),
            )
        })?;
        let tcp = TcpStream::connect(addr).await?;
        self.handshake(tcp, name).await
    }

    /// The TLS handshake on a fresh connection to a backend.
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        name: ServerName<'static>,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, tcp)
            .await
            .map_err(|e| {
                // A server that has none of the protocols offered may end the handshake with
                // this alert (RFC 7301 §3.2) instead of finishing it without ALPN.
                let refused_alpn = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .is_some_and(|r| {
                        *r == rustls::Error::AlertReceived(
                            rustls::AlertDescription::NoApplicationProtocol,
                        )
                    });
                if refused_alpn && self.protocol == BackendProtocol::H2 {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, NO_H2)
                } else {
                    e
                }
            })?;
        // A backend that ignores ALPN (or has no h2) answers in HTTP/1.1 or not at all: for
        // an h2 upstream that is a failed handshake, the next backend's turn.
        if self.protocol == BackendProtocol::H2 && tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, NO_H2));
        }
        Ok(tls)
    }
}

/// A connection to a backend: plain TCP (`Left`), or TLS over it (`Right`; boxed: rustls's
/// state is large, and most connections are plain). tokio-util's `Either` passes each read and
/// write (vectored ones too) to whichever it is.
pub(crate) type BackendStream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// The halves of a [`BackendStream`] that read and write at once: a `TcpStream`'s own borrowed
/// halves, or a TLS stream split.
pub(crate) type BackendRead<'a> =
    Either<tokio::net::tcp::ReadHalf<'a>, tokio::io::ReadHalf<&'a mut TlsStream<TcpStream>>>;
pub(crate) type BackendWrite<'a> =
    Either<tokio::net::tcp::WriteHalf<'a>, tokio::io::WriteHalf<&'a mut TlsStream<TcpStream>>>;

/// What a backend connection offers beside reading and writing.
pub(crate) trait BackendIo {
    /// The TCP socket under the stream (peeked to see whether an idle connection was closed).
    fn tcp(&self) -> &TcpStream;

    /// Halves that read and write at once (the request is written while the answer is read).
    fn split(&mut self) -> (BackendRead<'_>, BackendWrite<'_>);
}

impl BackendIo for BackendStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Either::Left(s) => s,
            Either::Right(s) => s.get_ref().0,
        }
    }

    fn split(&mut self) -> (BackendRead<'_>, BackendWrite<'_>) {
        match self {
            Either::Left(s) => {
                let (r, w) = s.split();
                (Either::Left(r), Either::Left(w))
            }
            Either::Right(s) => {
                let (r, w) = tokio::io::split(&mut **s);
                (Either::Right(r), Either::Right(w))
            }
        }
    }
}

/// A directory of its own (named after `tag` and the process) holding a self-signed CA's
/// certificate, and that file (`ca.pem`): what a test's `BackendTls` trusts.
#[cfg(test)]
pub(crate) fn test_ca(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("fulcrum-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertificateParams::new(vec!["ca.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    (dir, ca_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_the_host_as_written_unless_one_is_given() {
        let (dir, ca_file) = test_ca("upstream-tls");
        let tls = BackendTls::new(Some(&ca_file), None, BackendProtocol::Http1).unwrap();
        let name = |w: &str| tls.name_for(w).map(|n| n.to_str().into_owned());
        assert_eq!(name("app.internal:8443").as_deref(), Some("app.internal"));
        assert_eq!(name("10.0.0.5:443").as_deref(), Some("10.0.0.5"));
        assert_eq!(name("[::1]:443").as_deref(), Some("::1"));
        let named =
            BackendTls::new(Some(&ca_file), Some("api.test"), BackendProtocol::Http1).unwrap();
        assert_eq!(
            named
                .name_for("10.0.0.5:443")
                .map(|n| n.to_str().into_owned())
                .as_deref(),
            Some("api.test")
        );
        assert!(matches!(
            BackendTls::new(Some(&ca_file), Some("not a name"), BackendProtocol::Http1),
            Err(BackendTlsError::BadServerName(_))
        ));
        std::fs::write(&ca_file, "nothing\n").unwrap();
        assert!(matches!(
            BackendTls::new(Some(&ca_file), None, BackendProtocol::Http1),
            Err(BackendTlsError::NoCertificate { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
