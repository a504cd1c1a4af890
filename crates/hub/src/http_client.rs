use std::path::Path;
use std::time::Duration;

use ureq::tls::{PemItem, RootCerts, TlsConfig};

use crate::error::{Error, Result};

/// Environment variable naming a PEM file whose certificates replace the bundled roots, as
/// with OpenSSL and curl: for networks that inspect TLS through a proxy with its own CA.
pub const CERT_FILE_ENV: &str = "SSL_CERT_FILE";

/// How the downloader connects: which certificates it trusts, proxies, retries.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    trust: Trust,
    /// Use the proxy named by `ALL_PROXY` / `HTTPS_PROXY` / `HTTP_PROXY` (honoring `NO_PROXY`).
    pub proxy_from_env: bool,
    /// A download gives up after this many attempts in a row that bring no new bytes.
    pub max_attempts: u32,
    /// Pause before retrying a broken transfer.
    pub retry_delay: Duration,
}

#[derive(Debug, Clone)]
enum Trust {
    /// Mozilla's root certificates, bundled in the binary.
    BundledRoots,
    /// Exactly the certificates of a PEM document.
    Pem { origin: String, pem: Vec<u8> },
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            trust: Trust::BundledRoots,
            proxy_from_env: true,
            max_attempts: 5,
            retry_delay: Duration::from_secs(1),
        }
    }
}

impl HttpConfig {
    /// The default configuration, trusting the certificates of `$SSL_CERT_FILE` instead of
    /// the bundled roots when that variable is set.
    pub fn from_env() -> Result<Self> {
        let config = Self::default();
        match std::env::var_os(CERT_FILE_ENV).filter(|v| !v.is_empty()) {
            Some(path) => config.trust_pem_file(Path::new(&path)),
            None => Ok(config),
        }
    }

    /// Trusts exactly the certificates in the PEM document `pem` (a private CA, a proxy's
    /// CA, a test server's self-signed certificate); `origin` names it in errors.
    pub fn trust_pem(mut self, origin: impl Into<String>, pem: Vec<u8>) -> Self {
        self.trust = Trust::Pem {
            origin: origin.into(),
            pem,
        };
        self
    }

    /// Trusts exactly the certificates in the PEM file at `path`.
    pub fn trust_pem_file(self, path: &Path) -> Result<Self> {
        let pem = std::fs::read(path).map_err(|e| Error::io(path, "reading certificates", e))?;
        Ok(self.trust_pem(path.display().to_string(), pem))
    }
}

/// An HTTPS client for model downloads; see [`HttpClient::download`].
#[derive(Debug, Clone)]
pub struct HttpClient {
    pub(crate) agent: ureq::Agent,
    pub(crate) max_attempts: u32,
    pub(crate) retry_delay: Duration,
}

impl HttpClient {
    pub fn new(config: HttpConfig) -> Result<Self> {
        let root_certs = match &config.trust {
            Trust::BundledRoots => RootCerts::WebPki,
            Trust::Pem { origin, pem } => pem_root_certs(origin, pem)?,
        };
        let proxy = if config.proxy_from_env {
            ureq::Proxy::try_from_env()
        } else {
            None
        };
        let agent = ureq::Agent::config_builder()
            .tls_config(TlsConfig::builder().root_certs(root_certs).build())
            .proxy(proxy)
            .https_only(true)
            // Statuses are handled by the downloader: 206 and 416 matter for resuming.
            .http_status_as_error(false)
            .user_agent(concat!("plumb/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled transfer surfaces as an error and is resumed.
            .timeout_per_read(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        Ok(Self {
            agent,
            max_attempts: config.max_attempts.max(1),
            retry_delay: config.retry_delay,
        })
    }

    /// A client configured from the environment; see [`HttpConfig::from_env`].
    pub fn from_env() -> Result<Self> {
        Self::new(HttpConfig::from_env()?)
    }
}

fn pem_root_certs(origin: &str, pem: &[u8]) -> Result<RootCerts> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Certificates {
                    origin: origin.to_string(),
                    reason: e.to_string(),
                })
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::Certificates {
            origin: origin.to_string(),
            reason: "no PEM certificate found".to_string(),
        });
    }
    Ok(RootCerts::new_with_certs(&certs))
}
