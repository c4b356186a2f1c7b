//! S3 access keys: records in cluster metadata, their secrets sealed with the gateway's
//! master key, and the lookup SigV4 verification needs.
//!
//! SigV4 signs with a key derived from the *plain* secret (and the date), so the gateway must
//! be able to recover the secret: it cannot be stored as a one-way hash. It is stored sealed
//! instead: encrypted and authenticated with a 32-byte master key that lives in a file on
//! the gateway hosts (never in cluster metadata), so a copy of the metadata store alone does
//! not reveal any secret. The cipher is HMAC-SHA256 in counter mode with an HMAC-SHA256 tag
//! over nonce and ciphertext (encrypt-then-MAC), built from primitives the S3 protocol layer
//! already links.

use basalt_meta::MetaStore;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Metadata key prefix of access key records.
pub const KEYS_PREFIX: &str = "/basalt/s3/keys/";
/// Bytes of the master key.
pub const MASTER_KEY_BYTES: usize = 32;
/// How long a gateway trusts a looked-up key before reading its record again (a removed key
/// stops working within this time).
const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// Access key failures.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error("master key file {path}: {reason}")]
    MasterKey { path: String, reason: String },
    #[error("access key {0} does not exist")]
    NoSuchKey(String),
    #[error("access key {0} exists")]
    KeyExists(String),
    #[error(
        "the secret of access key {0} cannot be unsealed with this gateway's master key \
         (a different --master-key file than the one it was created with?)"
    )]
    Unseal(String),
    #[error("invalid user name {0:?}: use 1-64 letters, digits, '-', '_' or '.'")]
    BadUser(String),
    #[error("{0}")]
    Meta(#[from] basalt_meta::MetaError),
    #[error("system random source: {0}")]
    Random(std::io::Error),
}

/// An access key as stored in metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub access_key: String,
    /// The user the key acts as: buckets belong to users.
    pub user: String,
    /// Hex of nonce (16) || ciphertext || tag (32).
    pub sealed_secret: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
}

/// The master key that seals secrets.
#[derive(Clone)]
pub struct MasterKey([u8; MASTER_KEY_BYTES]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], KeyError> {
    use std::io::Read;
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .map_err(KeyError::Random)?;
    Ok(out)
}

type HmacSha256 = Hmac<Sha256>;

pub(crate) fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key size");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

impl MasterKey {
    /// Read the key at `path`, or create it (mode 0600) when missing and `create` is set.
    pub fn load(path: &Path, create: bool) -> Result<Self, KeyError> {
        let err = |reason: String| KeyError::MasterKey {
            path: path.display().to_string(),
            reason,
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let raw = hex::decode(text.trim())
                    .map_err(|_| err("not a hex-encoded 32-byte key".into()))?;
                let key: [u8; MASTER_KEY_BYTES] = raw
                    .try_into()
                    .map_err(|_| err("not a hex-encoded 32-byte key".into()))?;
                Ok(Self(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let key = random_bytes::<MASTER_KEY_BYTES>()?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| err(e.to_string()))?;
                f.write_all(format!("{}\n", hex::encode(key)).as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| err(e.to_string()))?;
                Ok(Self(key))
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// A key from raw bytes (tests).
    pub fn from_bytes(bytes: [u8; MASTER_KEY_BYTES]) -> Self {
        Self(bytes)
    }

    fn keystream_xor(&self, nonce: &[u8], data: &mut [u8]) {
        for (i, block) in data.chunks_mut(32).enumerate() {
            let pad = hmac(&self.0, &[b"enc", nonce, &(i as u64).to_le_bytes()]);
            for (b, p) in block.iter_mut().zip(pad) {
                *b ^= p;
            }
        }
    }

    /// Seal `secret` under a fresh nonce.
    pub fn seal(&self, secret: &str) -> Result<String, KeyError> {
        let nonce = random_bytes::<16>()?;
        let mut body = secret.as_bytes().to_vec();
        self.keystream_xor(&nonce, &mut body);
        let tag = hmac(&self.0, &[b"tag", &nonce, &body]);
        let mut out = nonce.to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag);
        Ok(hex::encode(out))
    }

    /// Open a sealed secret; None when it was not sealed with this key or was altered.
    pub fn unseal(&self, sealed: &str) -> Option<String> {
        let raw = hex::decode(sealed).ok()?;
        if raw.len() < 16 + 32 {
            return None;
        }
        let (nonce, rest) = raw.split_at(16);
        let (body, tag) = rest.split_at(rest.len() - 32);
        let expect = hmac(&self.0, &[b"tag", nonce, body]);
        // Constant-time comparison of the tags.
        if expect
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0
        {
            return None;
        }
        let mut plain = body.to_vec();
        self.keystream_xor(nonce, &mut plain);
        String::from_utf8(plain).ok()
    }
}

fn key_path(access_key: &str) -> String {
    format!("{KEYS_PREFIX}{access_key}")
}

fn check_user(user: &str) -> Result<(), KeyError> {
    let ok = !user.is_empty()
        && user.len() <= 64
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadUser(user.into()))
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A new key pair: the record (stored) and the plain secret (shown once to the operator).
pub async fn create_key(
    meta: &dyn MetaStore,
    master: &MasterKey,
    user: &str,
) -> Result<(KeyRecord, String), KeyError> {
    check_user(user)?;
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let id = random_bytes::<18>()?;
    let access_key: String = "BK"
        .chars()
        .chain(id.iter().map(|b| ALNUM[*b as usize % ALNUM.len()] as char))
        .collect();
    let secret: String = random_bytes::<40>()?
        .iter()
        .map(|b| SECRET[*b as usize % SECRET.len()] as char)
        .collect();
    let record = KeyRecord {
        access_key: access_key.clone(),
        user: user.into(),
        sealed_secret: master.seal(&secret)?,
        created: now_secs(),
    };
    let value = serde_json::to_vec(&record).expect("key record serialises");
    match meta
        .compare_and_swap(&key_path(&access_key), 0, value)
        .await?
    {
        Some(_) => Ok((record, secret)),
        None => Err(KeyError::KeyExists(access_key)),
    }
}

/// Store a key pair chosen by the operator (e.g. `basalt up --s3-access-key`), replacing
/// nothing: an existing key with another secret is an error.
pub async fn import_key(
    meta: &dyn MetaStore,
    master: &MasterKey,
    user: &str,
    access_key: &str,
    secret: &str,
) -> Result<KeyRecord, KeyError> {
    check_user(user)?;
    if let Some(existing) = get_key(meta, access_key).await? {
        if master.unseal(&existing.sealed_secret).as_deref() == Some(secret)
            && existing.user == user
        {
            return Ok(existing);
        }
        return Err(KeyError::KeyExists(access_key.into()));
    }
    let record = KeyRecord {
        access_key: access_key.into(),
        user: user.into(),
        sealed_secret: master.seal(secret)?,
        created: now_secs(),
    };
    let value = serde_json::to_vec(&record).expect("key record serialises");
    match meta
        .compare_and_swap(&key_path(access_key), 0, value)
        .await?
    {
        Some(_) => Ok(record),
        None => Err(KeyError::KeyExists(access_key.into())),
    }
}

/// One key's record.
pub async fn get_key(
    meta: &dyn MetaStore,
    access_key: &str,
) -> Result<Option<KeyRecord>, KeyError> {
    Ok(meta
        .get(&key_path(access_key))
        .await?
        .and_then(|(v, _)| serde_json::from_slice(&v).ok()))
}

/// Every key record.
pub async fn list_keys(meta: &dyn MetaStore) -> Result<Vec<KeyRecord>, KeyError> {
    Ok(meta
        .list(KEYS_PREFIX)
        .await?
        .into_iter()
        .filter_map(|(_, v, _)| serde_json::from_slice(&v).ok())
        .collect())
}

/// Remove a key; it stops working on every gateway within the cache time.
pub async fn remove_key(meta: &dyn MetaStore, access_key: &str) -> Result<(), KeyError> {
    match meta.get(&key_path(access_key)).await? {
        Some((_, rev)) => {
            meta.compare_and_delete(&key_path(access_key), rev).await?;
            Ok(())
        }
        None => Err(KeyError::NoSuchKey(access_key.into())),
    }
}

/// What a gateway knows of one access key.
#[derive(Clone)]
pub struct KnownKey {
    pub user: String,
    pub secret: String,
}

/// Access keys as a gateway sees them: looked up in metadata, unsealed, cached briefly.
pub struct KeyRing {
    meta: Arc<dyn MetaStore>,
    master: MasterKey,
    cache: Mutex<HashMap<String, (Instant, Option<KnownKey>)>>,
}

impl KeyRing {
    pub fn new(meta: Arc<dyn MetaStore>, master: MasterKey) -> Self {
        Self {
            meta,
            master,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The master key (it also seals SSE-S3 data keys).
    pub fn master(&self) -> &MasterKey {
        &self.master
    }

    /// The key's user and secret; None when the key does not exist.
    pub async fn lookup(&self, access_key: &str) -> Result<Option<KnownKey>, KeyError> {
        if let Some((at, known)) = self.cache.lock().expect("key cache").get(access_key) {
            if at.elapsed() < KEY_CACHE_TTL {
                return Ok(known.clone());
            }
        }
        let known = match get_key(self.meta.as_ref(), access_key).await? {
            Some(rec) => Some(KnownKey {
                user: rec.user.clone(),
                secret: self
                    .master
                    .unseal(&rec.sealed_secret)
                    .ok_or_else(|| KeyError::Unseal(access_key.into()))?,
            }),
            None => None,
        };
        let mut cache = self.cache.lock().expect("key cache");
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(access_key.into(), (Instant::now(), known.clone()));
        Ok(known)
    }
}

#[async_trait::async_trait]
impl s3s::auth::S3Auth for KeyRing {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<s3s::auth::SecretKey> {
        match self.lookup(access_key).await {
            Ok(Some(k)) => Ok(s3s::auth::SecretKey::from(k.secret)),
            Ok(None) => Err(s3s::s3_error!(InvalidAccessKeyId)),
            Err(e) => {
                tracing::error!("access key lookup: {e}");
                Err(s3s::s3_error!(InternalError, "access key lookup failed"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::EmbeddedMeta;

    /// Goal: a sealed secret opens with its master key only, and tampering is detected.
    #[test]
    fn seal_round_trip_and_tamper() {
        let k = MasterKey::from_bytes([7; 32]);
        let sealed = k.seal("s3cr3t/with+chars").unwrap();
        assert!(!sealed.contains("s3cr3t"));
        assert_eq!(k.unseal(&sealed).as_deref(), Some("s3cr3t/with+chars"));
        assert!(MasterKey::from_bytes([8; 32]).unseal(&sealed).is_none());
        let mut raw = hex::decode(&sealed).unwrap();
        raw[20] ^= 1;
        assert!(k.unseal(&hex::encode(raw)).is_none());
        assert!(k.unseal("zz").is_none());
        assert_ne!(
            k.seal("x").unwrap(),
            k.seal("x").unwrap(),
            "fresh nonce each time"
        );
    }

    /// Goal: keys are created, found, imported idempotently, and removed.
    #[tokio::test]
    async fn key_life_cycle() {
        let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedMeta::in_memory());
        let master = MasterKey::from_bytes([1; 32]);
        let (rec, secret) = create_key(meta.as_ref(), &master, "alice").await.unwrap();
        assert!(rec.access_key.starts_with("BK") && rec.access_key.len() == 20);
        assert_eq!(secret.len(), 40);
        let ring = KeyRing::new(meta.clone(), master.clone());
        let known = ring.lookup(&rec.access_key).await.unwrap().unwrap();
        assert_eq!(
            (known.user.as_str(), known.secret.as_str()),
            ("alice", secret.as_str())
        );
        assert!(ring.lookup("BKNOPE").await.unwrap().is_none());
        import_key(meta.as_ref(), &master, "bob", "AKID", "pw")
            .await
            .unwrap();
        import_key(meta.as_ref(), &master, "bob", "AKID", "pw")
            .await
            .unwrap();
        assert!(import_key(meta.as_ref(), &master, "bob", "AKID", "other")
            .await
            .is_err());
        assert_eq!(list_keys(meta.as_ref()).await.unwrap().len(), 2);
        remove_key(meta.as_ref(), "AKID").await.unwrap();
        assert!(matches!(
            remove_key(meta.as_ref(), "AKID").await,
            Err(KeyError::NoSuchKey(_))
        ));
        assert!(create_key(meta.as_ref(), &master, "bad user")
            .await
            .is_err());
    }
}
