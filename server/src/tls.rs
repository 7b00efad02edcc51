//! HTTPS on `serve`'s listeners (`--tls-cert FILE --tls-key FILE`), for approvers on
//! other machines (a phone, a laptop elsewhere), whose reads and decisions otherwise
//! cross the network in clear.
//!
//! TLS protects the channel only: an approver's client still pins the server's
//! identity key (PROTOCOL §6), and every decision is signed over the preview hash, so a
//! wrong certificate can hide nothing from a pinning client. What TLS adds is privacy
//! of the previews and of the agents' bearer tokens on the way.
//!
//! The certificate in force is one [`CertifiedKey`] behind a lock that the handshake
//! reads ([`CurrentCert`]). A reload (SIGHUP, with the rest of the configuration)
//! reads both files again and swaps the pair only when both parse and belong together;
//! otherwise the old pair keeps serving and the caller logs why, so a bad renewal never
//! takes the server down. New handshakes get the new pair; open connections keep theirs.
//!
//! The handshake itself runs inside the accept loop's connection task
//! ([`crate::listener`]), under the same deadline as a request head and holding the
//! same slot, so a client that opens a connection and never finishes its handshake is
//! cut like any other slow-loris.
//!
//! Imports nothing above the leaf utilities.

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain and its private key are read from (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`: the certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// `--tls-key`: its private key (PKCS#8, RSA or SEC1).
    pub key: PathBuf,
}

/// Why a certificate and key pair was refused; each names the file and what to do.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read.
    #[error("cannot read the TLS certificate {path}: {err}: --tls-cert takes a readable PEM file of the certificate chain")]
    ReadCert {
        /// Which file.
        path: String,
        /// The error.
        err: io::Error,
    },
    /// The certificate file holds no usable certificate.
    #[error("{path}: {why}: --tls-cert takes PEM `-----BEGIN CERTIFICATE-----` blocks, the server's own certificate first, then its intermediates")]
    BadCert {
        /// Which file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key file could not be read.
    #[error("cannot read the TLS private key {path}: {err}: --tls-key takes a readable PEM file of the certificate's private key")]
    ReadKey {
        /// Which file.
        path: String,
        /// The error.
        err: io::Error,
    },
    /// The key file holds no private key rustls can use.
    #[error("{path}: {why}: --tls-key takes one PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`), RSA (`BEGIN RSA PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`), unencrypted")]
    BadKey {
        /// Which file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key is not the certificate's.
    #[error("{key} is not the private key of the certificate in {cert}: pass the key that was made with that certificate")]
    Mismatch {
        /// The key file.
        key: String,
        /// The certificate file.
        cert: String,
    },
}

/// The crypto provider of every TLS use in the tree (reqwest, lettre, PostgreSQL).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl TlsFiles {
    /// Reads and checks the pair: both parse, and the key is the certificate's.
    pub fn load(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let cert_path = self.cert.display().to_string();
        let key_path = self.key.display().to_string();
        let bad_cert = |why: String| TlsError::BadCert {
            path: cert_path.clone(),
            why,
        };
        let bad_key = |why: String| TlsError::BadKey {
            path: key_path.clone(),
            why,
        };
        let pem = std::fs::read(&self.cert).map_err(|err| TlsError::ReadCert {
            path: cert_path.clone(),
            err,
        })?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad_cert(format!("not valid PEM ({e})")))?;
        if chain.is_empty() {
            return Err(bad_cert("no certificate found".into()));
        }
        let pem = std::fs::read(&self.key).map_err(|err| TlsError::ReadKey {
            path: key_path.clone(),
            err,
        })?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
            rustls_pki_types::pem::Error::NoItemsFound => bad_key("no private key found".into()),
            e => bad_key(format!("not valid PEM ({e})")),
        })?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| bad_key(format!("this key cannot be used ({e})")))?;
        let pair = CertifiedKey::new(chain, signing);
        match pair.keys_match() {
            Ok(()) => Ok(pair),
            // A key type that cannot say its public half: the handshake will tell.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(pair),
            Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::Mismatch {
                key: key_path,
                cert: cert_path,
            }),
            Err(e) => Err(bad_cert(format!(
                "the first certificate cannot be parsed ({e})"
            ))),
        }
    }
}

/// The certificate every new handshake is given; swapped whole on a good reload.
#[derive(Debug)]
struct CurrentCert(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// HTTPS for the listeners: the acceptor they share and the pair it serves.
pub struct Tls {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Arc<CurrentCert>,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads the pair (refusing a bad one: the server does not start) and builds the
    /// acceptor: TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, no client certificates
    /// (approvers authenticate by signing, agents by bearer token).
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = provider();
        let pair = files.load(&provider)?;
        let current = Arc::new(CurrentCert(RwLock::new(Arc::new(pair))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::BadKey {
                path: files.key.display().to_string(),
                why: format!("no TLS version is available with this key ({e})"),
            })?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            files,
            provider,
            current,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads the files again; a good pair serves every new handshake from now on, a
    /// bad one is refused and the pair in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let pair = self.files.load(&self.provider)?;
        *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// The files this pair is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The acceptor the listeners hand each new connection to.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

/// A connection as the HTTP server sees it: plain TCP, or TLS over it.
pub enum Stream {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS, the handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod refusals_name_the_file {
    use super::*;
    use std::path::Path;

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        TlsFiles { cert: c, key: k }
    }

    #[test]
    fn missing_garbage_and_keyless_files_are_refused_with_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let p = provider();
        let missing = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope.key"),
        };
        let e = missing.load(&p).unwrap_err().to_string();
        assert!(e.contains("nope.pem") && e.contains("--tls-cert"), "{e}");

        let e = files(dir.path(), "not a certificate\n", "")
            .load(&p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cert.pem: no certificate found") && e.contains("BEGIN CERTIFICATE"),
            "{e}"
        );

        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = files(dir.path(), cert, "nothing here\n")
            .load(&p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key.pem: no private key found") && e.contains("--tls-key"),
            "{e}"
        );
    }
}
