//! Store URLs: whether a text names PostgreSQL, how it is shown with its password
//! hidden, and how its `sslmode` chooses plain TCP or verified TLS.

use super::StoreError;

/// Whether `spec` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// `url` with any password replaced by `***`, for messages and logs: the one in the
/// user part (wherever its `@` is: a password may hold `/`) and any `password=`
/// parameter. A text that is not a URL at all is shown only by its scheme.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".to_owned();
    };
    let (auth, tail) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let q: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}?{}", q.join("&"))
        }
        None => tail.to_owned(),
    };
    match auth {
        Some(a) => match a.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
            None => format!("{scheme}://{a}@{tail}"),
        },
        None => format!("{scheme}://{tail}"),
    }
}

/// How this store's connections reach PostgreSQL, chosen by the URL's `sslmode`.
#[derive(Clone)]
pub enum Tls {
    /// Plain TCP (`sslmode` absent or `disable`): only for a database on the same host
    /// or on a network that only the gate's hosts reach.
    Plain,
    /// TLS, the server's certificate verified (chain and host name) against the URL's
    /// `sslrootcert=FILE`, or else the system's roots.
    Verified(tokio_postgres_rustls::MakeRustlsConnect),
}

/// Reads a store URL: the driver's configuration and how to connect.
///
/// `sslmode=require`, `verify-ca` and `verify-full` all mean TLS with the certificate
/// and host name verified (stricter than libpq's `require`, which checks nothing: the
/// server's signing key crosses this connection). `prefer` is refused: a connection
/// that silently falls back to plain TCP is not one a security product should offer.
/// `sslrootcert` is taken out before the driver reads the URL (it does not know it).
pub fn parse_url(url: &str) -> Result<(tokio_postgres::Config, Tls), StoreError> {
    let bad = |why: String| {
        StoreError::Layout(format!(
            "the store URL {} {why}: write postgres://USER[:PASSWORD]@HOST:PORT/DATABASE\
             [?sslmode=verify-full&sslrootcert=CA.pem]",
            redact(url)
        ))
    };
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for kv in query.into_iter().flat_map(|q| q.split('&')) {
        match kv.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.to_owned()),
            Some(("sslrootcert", v)) => root = Some(v.to_owned()),
            _ => kept.push(kv),
        }
    }
    let verified = match mode.as_deref() {
        None | Some("disable") => false,
        Some("require" | "verify-ca" | "verify-full") => true,
        Some("prefer" | "allow") => {
            return Err(bad(format!(
                "asks for sslmode={}, which falls back to plain TCP without saying so; \
                 use sslmode=verify-full (TLS, certificate checked) or sslmode=disable",
                mode.as_deref().unwrap_or("")
            )))
        }
        Some(other) => return Err(bad(format!("has an unknown sslmode {other:?}"))),
    };
    if verified {
        kept.push("sslmode=require");
    } else if root.is_some() {
        return Err(bad("names an sslrootcert but no sslmode=verify-full".into()));
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let cfg: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| bad(format!("is not a PostgreSQL URL ({e})")))?;
    if !verified {
        return Ok((cfg, Tls::Plain));
    }
    let mut roots = rustls::RootCertStore::empty();
    match &root {
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| {
                    bad(format!(
                        "names sslrootcert {path:?}, which cannot be read ({e})"
                    ))
                })?
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    bad(format!(
                        "names sslrootcert {path:?}, which is not PEM ({e})"
                    ))
                })?;
            if certs.is_empty() {
                return Err(bad(format!(
                    "names sslrootcert {path:?}, which holds no certificate"
                )));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| bad(format!("names sslrootcert {path:?}: {e}")))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(bad(
                    "asks for TLS but this system has no root certificates: give sslrootcert=CA.pem"
                        .into(),
                ));
            }
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Backend(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((
        cfg,
        Tls::Verified(tokio_postgres_rustls::MakeRustlsConnect::new(config)),
    ))
}
