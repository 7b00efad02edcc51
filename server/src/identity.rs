//! The server's Ed25519 identity key: made once, kept private, bound to `server_id`.
//!
//! The key signs execution attestations (`approval_core::attestation`): the
//! server's word that it claimed a proposal while it was APPROVED and in time.
//! Approvers' keys prove the quorum; this key proves "not revoked when it ran".
//!
//! Where it lives: `<data>/server.key`, mode 0600, written with `create_new` at the
//! store's first start and never overwritten. Its public half is bound to the
//! store's `server_id` at that first start (`Store::bind_server_key`) and checked
//! on every start: a key file that does not match the store, or a store bound to a
//! key whose file is gone, stops the server with a message saying what to restore.
//! The secret is never logged (`Debug` prints only the public key).
//!
//! A backend shared by several server processes would keep the key in a shared
//! place; this module is the one place that knows where the key comes from.

use crate::store::{Store, StoreError};
use approval_core::attestation::Attestation;
use approval_core::{ProposalId, PublicKey, ServerId, Sha256Hex, Timestamp};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::SigningKey;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The key file's name in the data folder.
pub const KEY_FILE: &str = "server.key";
const HEADER: &str = "approval-server-identity-v1";

/// Why the identity could not be loaded.
#[derive(Debug, Error)]
pub enum IdentityError {
    /// Reading or writing the key file failed.
    #[error("server identity key {path}: {why}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// The key file is not one this build wrote.
    #[error("server identity key {path} is not a key file ({why}): restore it from your backup")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// The key file may be read by others.
    #[error("server identity key {path} is accessible by others (mode {mode:04o}): run `chmod 600 {path}`")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The store is bound to another key than the file's.
    #[error("server identity key {path} holds key {file}, but server {server_id} is bound to key {bound}: restore the server.key this data folder was made with (receipts it attested verify only under that key)")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The store's server.
        server_id: ServerId,
        /// The key the store is bound to (base64).
        bound: String,
        /// The key in the file (base64).
        file: String,
    },
    /// The store is bound to a key whose file is gone.
    #[error("server {server_id} is bound to identity key {bound}, but {path} is missing: restore it from your backup (a new key would make every receipt it attested unverifiable, so none is made)")]
    Missing {
        /// Where the file should be.
        path: PathBuf,
        /// The store's server.
        server_id: ServerId,
        /// The key the store is bound to (base64).
        bound: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The server's id and identity key.
pub struct ServerIdentity {
    server_id: ServerId,
    key: SigningKey,
    public: PublicKey,
}

impl std::fmt::Debug for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerIdentity")
            .field("server_id", &self.server_id)
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl ServerIdentity {
    /// Loads `<data>/server.key` (making it on the store's first start) and checks
    /// that it is the key bound to the store's `server_id`, binding it if the store
    /// has none yet.
    pub fn open(data: &Path, store: &dyn Store) -> Result<Self, IdentityError> {
        let path = data.join(KEY_FILE);
        let bound = store.server_key()?;
        let key = match read_key(&path)? {
            Some(k) => k,
            None => match bound {
                Some(bound) => {
                    return Err(IdentityError::Missing {
                        path,
                        server_id: store.server_id().clone(),
                        bound: bound.to_base64(),
                    })
                }
                None => create_key(&path)?,
            },
        };
        let public = PublicKey::from_signing_key(&key);
        let bound = match bound {
            Some(b) => b,
            None => store.bind_server_key(&public)?,
        };
        if bound != public {
            return Err(IdentityError::Mismatch {
                path,
                server_id: store.server_id().clone(),
                bound: bound.to_base64(),
                file: public.to_base64(),
            });
        }
        Ok(Self {
            server_id: store.server_id().clone(),
            key,
            public,
        })
    }

    /// For a store shared by several instances: the key kept in the store itself
    /// (the first instance stores a fresh one; every instance reads back the same),
    /// bound to the deployment's one `server_id` like a key file is. Whoever can
    /// read the database can read this key: see THREAT_MODEL.md.
    pub fn open_shared(store: &dyn Store) -> Result<Option<Self>, IdentityError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| {
            IdentityError::Store(StoreError::Backend(format!("no randomness: {e}")))
        })?;
        let Some(kept) = store.shared_server_secret(&STANDARD.encode(seed))? else {
            return Ok(None);
        };
        let seed = STANDARD
            .decode(kept.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                IdentityError::Store(StoreError::Corrupt {
                    key: "meta/server_secret".into(),
                    why: "not standard base64 of 32 bytes".into(),
                })
            })?;
        let key = SigningKey::from_bytes(&seed);
        let public = PublicKey::from_signing_key(&key);
        let bound = store.bind_server_key(&public)?;
        if bound != public {
            return Err(IdentityError::Mismatch {
                path: PathBuf::from("(the store's meta table)"),
                server_id: store.server_id().clone(),
                bound: bound.to_base64(),
                file: public.to_base64(),
            });
        }
        Ok(Some(Self {
            server_id: store.server_id().clone(),
            key,
            public,
        }))
    }

    /// The server's id.
    pub fn server_id(&self) -> &ServerId {
        &self.server_id
    }

    /// The public key, as `/healthz` publishes it (standard base64 of 32 bytes).
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Answers a client's `/healthz` challenge: proof that this process holds the key.
    pub fn prove(&self, challenge: &str) -> approval_core::message::Signature {
        approval_core::attestation::prove_identity(&self.key, &self.server_id, challenge)
    }

    /// The view token of a proposal's approver page link (`/approve/<id>#v=<token>`):
    /// HMAC-SHA256 under a key derived from the identity secret, so every instance
    /// of a deployment makes and accepts the same token and nobody else can make
    /// one. It lets its holder read the proposal on the page, nothing more: every
    /// decision still needs a signature or a passkey assertion.
    pub fn view_token(&self, id: &ProposalId) -> String {
        approval_core::passkey::b64url(&self.view_mac(id))
    }

    /// Whether `token` is [`ServerIdentity::view_token`] of `id` (in constant time).
    pub fn check_view_token(&self, id: &ProposalId, token: &str) -> bool {
        use subtle::ConstantTimeEq;
        let Ok(given) = approval_core::passkey::from_b64url(token) else {
            return false;
        };
        given.len() == 32 && bool::from(given.ct_eq(&self.view_mac(id)))
    }

    fn view_mac(&self, id: &ProposalId) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        use sha2::{Digest, Sha256};
        let mut k = Sha256::new();
        k.update(b"approval-v1-view-key\n");
        k.update(self.key.to_bytes());
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&k.finalize()).expect("HMAC takes any key length");
        mac.update(b"approval-v1-view\n");
        mac.update(id.as_str().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Signs an enrolment link's claim (see `approval_core::enrolment`).
    pub fn sign_enrolment(&self, claim: &approval_core::enrolment::EnrolmentClaim) -> String {
        claim.sign(&self.key, &self.server_id)
    }

    /// Signs the execution attestation for a claim.
    pub fn attest(
        &self,
        proposal_id: &ProposalId,
        preview_sha256: &Sha256Hex,
        approved_at: Timestamp,
        claimed_at: Timestamp,
    ) -> Attestation {
        Attestation::sign(
            &self.key,
            &self.server_id,
            proposal_id,
            preview_sha256,
            approved_at,
            claimed_at,
        )
    }
}

/// The identity key in `<data>/server.key`, read without opening the store (which a
/// running server holds): what `approval-server enroll` signs links with.
pub fn read_key_file(data: &Path) -> Result<SigningKey, IdentityError> {
    let path = data.join(KEY_FILE);
    read_key(&path)?.ok_or_else(|| IdentityError::Io {
        path,
        why: "no such file: start the server once with this --data folder first (it makes the key), or give --store for a shared store".into(),
    })
}

/// A [`ServerIdentity`] from a key read elsewhere (`read_key_file`) and the server id
/// it is bound to.
pub fn from_parts(server_id: ServerId, key: SigningKey) -> ServerIdentity {
    let public = PublicKey::from_signing_key(&key);
    ServerIdentity {
        server_id,
        key,
        public,
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> IdentityError {
    IdentityError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

fn read_key(path: &Path) -> Result<Option<SigningKey>, IdentityError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
    let meta = file.metadata().map_err(|e| io(path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(IdentityError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    if !meta.is_file() {
        return Err(IdentityError::Format {
            path: path.to_path_buf(),
            why: "not a regular file",
        });
    }
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(|e| io(path, e))?;
    let bad = |why| IdentityError::Format {
        path: path.to_path_buf(),
        why,
    };
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(bad("first line must be approval-server-identity-v1"));
    }
    let seed = lines
        .next()
        .and_then(|l| STANDARD.decode(l.trim()).ok())
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| bad("second line must be standard base64 of 32 bytes"))?;
    Ok(Some(SigningKey::from_bytes(&seed)))
}

fn create_key(path: &Path) -> Result<SigningKey, IdentityError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| io(path, format!("no randomness: {e}")))?;
    let key = SigningKey::from_bytes(&seed);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    // create_new: an existing file is never overwritten, even by a racing start.
    let mut f = opts.open(path).map_err(|e| io(path, e))?;
    let text = format!("{HEADER}\n{}\n", STANDARD.encode(seed));
    f.write_all(text.as_bytes()).map_err(|e| io(path, e))?;
    f.sync_all().map_err(|e| io(path, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SledStore;

    #[test]
    fn made_once_bound_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let first = {
            let store = SledStore::open(&dir.path().join("store")).unwrap();
            let id = ServerIdentity::open(dir.path(), &store).unwrap();
            assert!(!format!("{id:?}").contains(&STANDARD.encode(id.key.to_bytes())));
            *id.public_key()
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A key file from elsewhere: refused, and the file is left as it is.
        let other = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(&other.path().join("store")).unwrap();
            ServerIdentity::open(other.path(), &store).unwrap();
        }
        std::fs::copy(other.path().join(KEY_FILE), dir.path().join("other.key")).unwrap();
        let kept = std::fs::read(dir.path().join(KEY_FILE)).unwrap();
        std::fs::rename(dir.path().join("other.key"), dir.path().join(KEY_FILE)).unwrap();
        let store = loop {
            match SledStore::open(&dir.path().join("store")) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        assert!(matches!(
            ServerIdentity::open(dir.path(), &store),
            Err(IdentityError::Mismatch { bound, .. }) if bound == first.to_base64()
        ));
        // Missing: refused, no new key made.
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        assert!(matches!(
            ServerIdentity::open(dir.path(), &store),
            Err(IdentityError::Missing { .. })
        ));
        assert!(!dir.path().join(KEY_FILE).exists());
        // Restored: accepted.
        std::fs::write(dir.path().join(KEY_FILE), &kept).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.path().join(KEY_FILE),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            assert!(matches!(
                ServerIdentity::open(dir.path(), &store),
                Err(IdentityError::Exposed { .. })
            ));
            std::fs::set_permissions(
                dir.path().join(KEY_FILE),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        let id = ServerIdentity::open(dir.path(), &store).unwrap();
        assert_eq!(id.public_key(), &first);
    }
}
