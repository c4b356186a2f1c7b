//! Keys: the cluster secret, entity keys derived from it, and entity names.

use crate::AuthError;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;

/// Bytes of every key and MAC (HMAC-SHA256).
pub const KEY_BYTES: usize = 32;

/// Longest entity name (the handshake carries its length in one byte).
pub const MAX_ENTITY_BYTES: usize = 64;

/// Generation of the daemons' keys (`osd.N`): they have no record.
pub const DAEMON_GENERATION: &str = "daemon";

/// The built-in administrator, whose key every holder of the cluster secret can derive.
pub const ADMIN_ENTITY: &str = "client.admin";

/// Generation of `client.admin`'s key.
pub const ADMIN_GENERATION: &str = "admin";

/// A 32-byte secret key. Its `Debug` never prints the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl Key {
    /// A key from the system's random source.
    pub fn random() -> Result<Key, AuthError> {
        let mut k = [0u8; KEY_BYTES];
        fill_random(&mut k)?;
        Ok(Key(k))
    }

    /// Parse 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Key, String> {
        let bytes = hex::decode(s.trim()).map_err(|e| format!("not hex: {e}"))?;
        let k: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes, expected {KEY_BYTES}", b.len()))?;
        Ok(Key(k))
    }

    /// The key as 64 hex digits (for keyring files).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// HMAC-SHA256 under this key of the concatenated `parts`.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; KEY_BYTES] {
        self.hmac(parts).finalize().into_bytes().into()
    }

    /// Does `tag` equal the MAC of `parts`? (Constant time.)
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.hmac(parts).verify_slice(tag).is_ok()
    }

    fn hmac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            m.update(p);
        }
        m
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

/// Fill `buf` from the system's random source.
pub fn fill_random(buf: &mut [u8]) -> Result<(), AuthError> {
    getrandom::fill(buf).map_err(|e| AuthError::Random(e.to_string()))
}

/// The cluster secret: every entity key derives from it; it never enters the metadata store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSecret(pub Key);

impl ClusterSecret {
    /// A new random secret (`basalt cluster init`, a first `basalt up`).
    pub fn generate() -> Result<ClusterSecret, AuthError> {
        Key::random().map(ClusterSecret)
    }

    /// The key of `entity` at `generation`.
    pub fn entity_key(&self, entity: &EntityName, generation: &str) -> Key {
        Key(self.0.mac(&[
            b"basalt key v1\0",
            entity.as_str().as_bytes(),
            b"\0",
            generation.as_bytes(),
        ]))
    }

    /// What the metadata store keeps to recognise this secret (hex of a MAC: reveals nothing).
    pub fn verifier(&self) -> String {
        hex::encode(self.0.mac(&[b"basalt verifier v1"]))
    }
}

/// A valid entity name: `osd.N`, `client.admin` or `client.NAME` (NAME: letters, digits,
/// `-`, `_`, `.`; the whole at most 64 bytes).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityName(String);

impl EntityName {
    /// Check and wrap a name.
    pub fn parse(name: &str) -> Result<EntityName, AuthError> {
        let bad = |reason: &str| AuthError::BadEntity {
            name: name.into(),
            reason: reason.into(),
        };
        if name.len() > MAX_ENTITY_BYTES {
            return Err(bad("longer than 64 bytes"));
        }
        if let Some(id) = name.strip_prefix("osd.") {
            if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("an OSD is osd.N with N a number"));
            }
            id.parse::<u32>().map_err(|_| bad("OSD id out of range"))?;
        } else if let Some(rest) = name.strip_prefix("client.") {
            let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
            if rest.is_empty() || !rest.bytes().all(ok) {
                return Err(bad(
                    "a client is client.NAME, NAME of letters, digits, '-', '_' and '.'",
                ));
            }
        } else {
            return Err(bad("names start with client. or osd."));
        }
        Ok(EntityName(name.into()))
    }

    /// The daemon entity of OSD `id`.
    pub fn osd(id: u32) -> EntityName {
        EntityName(format!("osd.{id}"))
    }

    /// `client.admin`.
    pub fn admin() -> EntityName {
        EntityName(ADMIN_ENTITY.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Is this a daemon (`osd.N`)?
    pub fn is_daemon(&self) -> bool {
        self.0.starts_with("osd.")
    }

    /// Is this a built-in entity (daemons, `client.admin`), which has no record?
    pub fn is_builtin(&self) -> bool {
        self.is_daemon() || self.0 == ADMIN_ENTITY
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_names_are_checked() {
        for ok in ["osd.0", "osd.4294967295", "client.admin", "client.hv-1_a.b"] {
            EntityName::parse(ok).unwrap();
        }
        for bad in [
            "osd.",
            "osd.x",
            "osd.4294967296",
            "client.",
            "client.a b",
            "mon.a",
            "",
            "client.é",
        ] {
            assert!(EntityName::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("client.{}", "a".repeat(58));
        assert!(EntityName::parse(&long).is_err());
        EntityName::parse(&long[..64]).unwrap();
    }

    #[test]
    fn keys_differ_by_entity_generation_and_secret() {
        let s = ClusterSecret::generate().unwrap();
        let hv1 = EntityName::parse("client.hv1").unwrap();
        let hv2 = EntityName::parse("client.hv2").unwrap();
        assert_eq!(s.entity_key(&hv1, "g1"), s.entity_key(&hv1, "g1"));
        assert_ne!(s.entity_key(&hv1, "g1"), s.entity_key(&hv1, "g2"));
        assert_ne!(s.entity_key(&hv1, "g1"), s.entity_key(&hv2, "g1"));
        let other = ClusterSecret::generate().unwrap();
        assert_ne!(s.entity_key(&hv1, "g1"), other.entity_key(&hv1, "g1"));
        assert_ne!(s.verifier(), other.verifier());
        assert!(!format!("{:?}", s).contains(&s.0.to_hex()));
    }

    #[test]
    fn macs_verify_only_their_message() {
        let k = Key::random().unwrap();
        let tag = k.mac(&[b"a", b"bc"]);
        assert!(
            k.verify(&[b"ab", b"c"], &tag),
            "concatenation is what counts"
        );
        assert!(!k.verify(&[b"abd"], &tag));
        assert!(!Key::random().unwrap().verify(&[b"abc"], &tag));
        assert!(!k.verify(&[b"abc"], &tag[..31]));
    }
}
