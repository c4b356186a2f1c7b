//! Server-side encryption of object data: SSE-S3 (a random key per object, sealed with the
//! cluster's master key) and SSE-C (a key the client sends with every request, never
//! stored). Data is encrypted with AES-256 in counter mode, so any byte range reads without
//! the rest and ciphertext is exactly as long as the data; see docs/design.md, "Encryption".

use crate::keys::{hmac, random_bytes, MasterKey};
use aes::Aes256;
use base64::Engine;
use ctr::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use md5::{Digest, Md5};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

type Ctr = ctr::Ctr128BE<Aes256>;

/// The key of an object's data. Each piece (data id) has its own keystream: the counter
/// starts at the data id in its high 64 bits, and data ids are never reused.
#[derive(Clone)]
pub struct PieceKey([u8; 32]);

impl std::fmt::Debug for PieceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PieceKey(..)")
    }
}

impl PieceKey {
    /// Encrypt (or decrypt: the same operation) `buf`, the bytes of piece `data` from byte
    /// `offset` on.
    pub fn apply(&self, data: u64, offset: u64, buf: &mut [u8]) {
        let iv = ((data as u128) << 64).to_be_bytes();
        let mut cipher = Ctr::new(&self.0.into(), &iv.into());
        cipher.seek(offset);
        cipher.apply_keystream(buf);
    }
}

/// How an object is encrypted, as its index entry keeps it: no key in the clear.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sse {
    /// SSE-S3: the object's key, sealed with the master key.
    S3 { sealed_key: String },
    /// SSE-C: the object's key is HMAC(customer key, salt); `check` (another HMAC) tells a
    /// right customer key from a wrong one; `key_md5` is what the client names it by.
    Customer {
        salt: String,
        check: String,
        key_md5: String,
    },
}

/// A customer key sent with a request (SSE-C headers), its MD5 checked.
#[derive(Clone)]
pub struct CustomerKey {
    key: [u8; 32],
    /// Base64 of the key's MD5, as the client sent it.
    pub md5: String,
}

/// The SSE-C headers of a request: none, or all three valid (algorithm AES256, a 256-bit
/// key in base64, and the base64 MD5 of that key).
pub fn customer_key(
    algorithm: Option<&str>,
    key: Option<&str>,
    key_md5: Option<&str>,
) -> S3Result<Option<CustomerKey>> {
    if algorithm.is_none() && key.is_none() && key_md5.is_none() {
        return Ok(None);
    }
    if algorithm != Some("AES256") {
        return Err(s3_error!(
            InvalidArgument,
            "The customer-provided encryption algorithm must be AES256"
        ));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let key: [u8; 32] = key
        .and_then(|k| b64.decode(k.trim()).ok())
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "The secret key was invalid for the specified algorithm (a 256-bit key in base64)"
            )
        })?;
    let md5 = b64.encode(Md5::digest(key));
    if key_md5.map(str::trim) != Some(md5.as_str()) {
        return Err(s3_error!(
            InvalidArgument,
            "The calculated MD5 hash of the key did not match the hash that was provided"
        ));
    }
    Ok(Some(CustomerKey { key, md5 }))
}

fn random_key() -> S3Result<[u8; 32]> {
    random_bytes::<32>().map_err(|e| s3_error!(InternalError, "no random key: {e}"))
}

impl Sse {
    /// SSE-S3 for a new object: a fresh key, sealed with `master`.
    pub fn new_s3(master: &MasterKey) -> S3Result<(Sse, PieceKey)> {
        let key = random_key()?;
        let sealed_key = master
            .seal(&hex::encode(key))
            .map_err(|e| s3_error!(InternalError, "sealing a data key: {e}"))?;
        Ok((Sse::S3 { sealed_key }, PieceKey(key)))
    }

    /// SSE-C for a new object, with the customer's key.
    pub fn new_customer(customer: &CustomerKey) -> S3Result<(Sse, PieceKey)> {
        let salt = random_key()?;
        let sse = Sse::Customer {
            salt: hex::encode(salt),
            check: hex::encode(hmac(&customer.key, &[b"basalt sse-c check", &salt])),
            key_md5: customer.md5.clone(),
        };
        Ok((
            sse,
            PieceKey(hmac(&customer.key, &[b"basalt sse-c key", &salt])),
        ))
    }

    /// SSE with the settings of a request: SSE-C with its key, SSE-S3 when it asks for
    /// AES256, else none.
    pub fn for_request(
        master: &MasterKey,
        customer: Option<&CustomerKey>,
        s3: bool,
    ) -> S3Result<Option<(Sse, PieceKey)>> {
        match (customer, s3) {
            (Some(_), true) => Err(s3_error!(
                InvalidArgument,
                "Server Side Encryption with Customer provided key is incompatible with the \
                 encryption method specified"
            )),
            (Some(c), false) => Ok(Some(Self::new_customer(c)?)),
            (None, true) => Ok(Some(Self::new_s3(master)?)),
            (None, false) => Ok(None),
        }
    }

    /// The key of an object encrypted like this: SSE-S3 unsealed with `master`; SSE-C from
    /// the request's customer key, which must be the object's.
    pub fn key(&self, master: &MasterKey, customer: Option<&CustomerKey>) -> S3Result<PieceKey> {
        match self {
            Sse::S3 { sealed_key } => {
                let hexkey = master.unseal(sealed_key).ok_or_else(|| {
                    s3_error!(
                        InternalError,
                        "an object's data key does not open with this gateway's master key"
                    )
                })?;
                let key: [u8; 32] = hex::decode(hexkey)
                    .ok()
                    .and_then(|k| k.try_into().ok())
                    .ok_or_else(|| s3_error!(InternalError, "an object's data key is malformed"))?;
                Ok(PieceKey(key))
            }
            Sse::Customer { salt, check, .. } => {
                let customer = customer.ok_or_else(|| {
                    s3_error!(
                        InvalidRequest,
                        "The object was stored using a form of Server Side Encryption. The \
                         correct parameters must be provided to retrieve the object."
                    )
                })?;
                let salt = hex::decode(salt)
                    .map_err(|_| s3_error!(InternalError, "an object's SSE-C salt is malformed"))?;
                let expect = hex::encode(hmac(&customer.key, &[b"basalt sse-c check", &salt]));
                let same = expect.len() == check.len()
                    && expect
                        .bytes()
                        .zip(check.bytes())
                        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                        == 0;
                if !same {
                    return Err(s3_error!(
                        AccessDenied,
                        "The provided SSE-C key does not match the object's"
                    ));
                }
                Ok(PieceKey(hmac(&customer.key, &[b"basalt sse-c key", &salt])))
            }
        }
    }

    /// The base64 MD5 of an SSE-C object's key, to echo in answers.
    pub fn customer_md5(&self) -> Option<String> {
        match self {
            Sse::Customer { key_md5, .. } => Some(key_md5.clone()),
            Sse::S3 { .. } => None,
        }
    }
}

/// The ETag of a single-part object from the MD5 of its bytes: that MD5 (as S3 has it), but
/// for SSE-C an opaque value derived from it with the object's key, so that listings, which
/// need no key, do not reveal a digest of the data.
pub fn etag_of(md5: &[u8; 16], sse: Option<&(Sse, PieceKey)>) -> String {
    match sse {
        Some((Sse::Customer { .. }, key)) => {
            hex::encode(&hmac(&key.0, &[b"basalt sse-c etag", md5])[..16])
        }
        _ => hex::encode(md5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_headers(key: &[u8; 32]) -> (String, String) {
        let b64 = base64::engine::general_purpose::STANDARD;
        (b64.encode(key), b64.encode(Md5::digest(key)))
    }

    /// Goal: counter mode decrypts any range on its own, and pieces under one key get
    /// different keystreams.
    #[test]
    fn ranges_decrypt_alone() {
        let key = PieceKey([7; 32]);
        let plain: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut whole = plain.clone();
        key.apply(42, 0, &mut whole);
        assert_ne!(whole, plain);
        let mut part = whole[333..777].to_vec();
        key.apply(42, 333, &mut part);
        assert_eq!(part, &plain[333..777]);
        let mut other = plain.clone();
        key.apply(43, 0, &mut other);
        assert_ne!(other, whole);
    }

    /// Goal: SSE-C headers are all or nothing, checked; only the right key opens an object,
    /// and a wrong or missing one is refused, never decrypted into garbage.
    #[test]
    fn customer_keys() {
        let (k, md5) = key_headers(&[1; 32]);
        let ck = customer_key(Some("AES256"), Some(&k), Some(&md5))
            .unwrap()
            .unwrap();
        assert!(customer_key(None, None, None).unwrap().is_none());
        assert!(customer_key(Some("AES128"), Some(&k), Some(&md5)).is_err());
        assert!(customer_key(Some("AES256"), Some(&k), Some("AAAA")).is_err());
        assert!(customer_key(Some("AES256"), Some("c2hvcnQ="), None).is_err());
        let (sse, piece) = Sse::new_customer(&ck).unwrap();
        let master = MasterKey::from_bytes([9; 32]);
        let again = sse.key(&master, Some(&ck)).unwrap();
        assert_eq!(again.0, piece.0);
        let (k2, md52) = key_headers(&[2; 32]);
        let wrong = customer_key(Some("AES256"), Some(&k2), Some(&md52))
            .unwrap()
            .unwrap();
        let e = sse.key(&master, Some(&wrong)).unwrap_err();
        assert_eq!(e.code().as_str(), "AccessDenied");
        let e = sse.key(&master, None).unwrap_err();
        assert_eq!(e.code().as_str(), "InvalidRequest");
        let (s3, piece) = Sse::new_s3(&master).unwrap();
        assert_eq!(s3.key(&master, None).unwrap().0, piece.0);
        let other = MasterKey::from_bytes([8; 32]);
        assert!(s3.key(&other, None).is_err());
    }
}
