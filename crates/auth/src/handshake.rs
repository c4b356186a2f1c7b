//! The connection handshake: a mutual HMAC challenge–response before the first frame
//! (docs/design.md, "Handshake (version 1)").

use crate::keys::{fill_random, EntityName, Key, KEY_BYTES, MAX_ENTITY_BYTES};
use crate::{AuthError, Caps, Credentials};
use async_trait::async_trait;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest a whole handshake may take before the connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handshake version.
pub const VERSION: u8 = 1;

const HELLO: &[u8; 4] = b"BSAU";
const CHALLENGE: &[u8; 4] = b"BSAC";
const PROOF: &[u8; 4] = b"BSAP";
const RESULT: &[u8; 4] = b"BSAR";
/// Sent instead of a Challenge, padded to its size, by an OSD that requires TLS to a
/// client that spoke plaintext: the client reports it rather than a broken handshake.
const TLS_REQUIRED: &[u8; 4] = b"BSAT";

/// Bytes of a Hello before its entity name.
pub const HELLO_HEAD_BYTES: usize = 4 + 1 + 1 + KEY_BYTES;
/// Bytes of a Challenge.
pub const CHALLENGE_BYTES: usize = 4 + 1 + KEY_BYTES;
/// Bytes of a Proof.
pub const PROOF_BYTES: usize = 4 + KEY_BYTES;
/// Bytes of a Result.
pub const RESULT_BYTES: usize = 4 + 1 + 1 + KEY_BYTES;

const STATUS_OK: u8 = 0;
const STATUS_DENIED: u8 = 1;
const STATUS_UNAVAILABLE: u8 = 2;

/// A nonce: fresh random bytes per connection and side.
pub type Nonce = [u8; KEY_BYTES];

/// The client's first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub entity: EntityName,
    pub nonce: Nonce,
}

impl Hello {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let name = self.entity.as_str().as_bytes();
        let mut b = Vec::with_capacity(HELLO_HEAD_BYTES + name.len());
        b.extend_from_slice(HELLO);
        b.push(VERSION);
        b.push(name.len() as u8);
        b.extend_from_slice(&self.nonce);
        b.extend_from_slice(name);
        b
    }

    /// The entity name's length announced by a Hello's fixed head.
    pub fn entity_len(head: &[u8]) -> Result<usize, String> {
        if head.len() < HELLO_HEAD_BYTES {
            return Err(format!("hello of {} bytes", head.len()));
        }
        if &head[..4] != HELLO {
            return Err(format!("expected a hello, found magic {:02x?}", &head[..4]));
        }
        if head[4] != VERSION {
            return Err(format!(
                "handshake version {} (this server speaks 1)",
                head[4]
            ));
        }
        let len = head[5] as usize;
        if len == 0 || len > MAX_ENTITY_BYTES {
            return Err(format!("entity name of {len} bytes"));
        }
        Ok(len)
    }

    /// Decode a whole Hello.
    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        let len = Hello::entity_len(b)?;
        if b.len() != HELLO_HEAD_BYTES + len {
            return Err(format!(
                "hello of {} bytes, expected {}",
                b.len(),
                HELLO_HEAD_BYTES + len
            ));
        }
        let name = std::str::from_utf8(&b[HELLO_HEAD_BYTES..])
            .map_err(|_| "entity name is not UTF-8".to_string())?;
        let entity = EntityName::parse(name).map_err(|e| e.to_string())?;
        let mut nonce = [0u8; KEY_BYTES];
        nonce.copy_from_slice(&b[6..HELLO_HEAD_BYTES]);
        Ok(Hello { entity, nonce })
    }
}

/// Encode a Challenge.
pub fn encode_challenge(nonce: &Nonce) -> [u8; CHALLENGE_BYTES] {
    let mut b = [0u8; CHALLENGE_BYTES];
    b[..4].copy_from_slice(CHALLENGE);
    b[4] = VERSION;
    b[5..].copy_from_slice(nonce);
    b
}

/// What a TLS-only OSD answers a plaintext Hello with (then it closes the connection).
pub fn encode_tls_required() -> [u8; CHALLENGE_BYTES] {
    let mut b = [0u8; CHALLENGE_BYTES];
    b[..4].copy_from_slice(TLS_REQUIRED);
    b[4] = VERSION;
    b
}

/// Decode a Challenge: the server's nonce.
pub fn decode_challenge(b: &[u8]) -> Result<Nonce, String> {
    if b.len() != CHALLENGE_BYTES || &b[..4] != CHALLENGE {
        return Err("expected a challenge".into());
    }
    if b[4] != VERSION {
        return Err(format!("handshake version {} (this client speaks 1)", b[4]));
    }
    let mut n = [0u8; KEY_BYTES];
    n.copy_from_slice(&b[5..]);
    Ok(n)
}

/// Encode a Proof.
pub fn encode_proof(tag: &[u8; KEY_BYTES]) -> [u8; PROOF_BYTES] {
    let mut b = [0u8; PROOF_BYTES];
    b[..4].copy_from_slice(PROOF);
    b[4..].copy_from_slice(tag);
    b
}

/// Decode a Proof: the client's MAC.
pub fn decode_proof(b: &[u8]) -> Result<[u8; KEY_BYTES], String> {
    if b.len() != PROOF_BYTES || &b[..4] != PROOF {
        return Err("expected a proof".into());
    }
    let mut t = [0u8; KEY_BYTES];
    t.copy_from_slice(&b[4..]);
    Ok(t)
}

/// Encode a Result.
pub fn encode_result(status: u8, caps: Caps, tag: &[u8; KEY_BYTES]) -> [u8; RESULT_BYTES] {
    let mut b = [0u8; RESULT_BYTES];
    b[..4].copy_from_slice(RESULT);
    b[4] = status;
    b[5] = caps.bits();
    b[6..].copy_from_slice(tag);
    b
}

/// Decode a Result: status, capabilities and the server's MAC.
pub fn decode_result(b: &[u8]) -> Result<(u8, Caps, [u8; KEY_BYTES]), String> {
    if b.len() != RESULT_BYTES || &b[..4] != RESULT {
        return Err("expected a result".into());
    }
    let mut t = [0u8; KEY_BYTES];
    t.copy_from_slice(&b[6..]);
    Ok((b[4], Caps::from_bits(b[5]), t))
}

/// What the client's MAC covers: the server's fresh nonce first, so a captured proof never
/// verifies again.
fn client_parts<'a>(server: &'a Nonce, client: &'a Nonce, entity: &'a EntityName) -> [&'a [u8]; 4] {
    [
        b"basalt client v1",
        server,
        client,
        entity.as_str().as_bytes(),
    ]
}

fn server_parts<'a>(server: &'a Nonce, client: &'a Nonce, entity: &'a EntityName) -> [&'a [u8]; 4] {
    [
        b"basalt server v1",
        client,
        server,
        entity.as_str().as_bytes(),
    ]
}

/// Where a server finds an entity's key.
#[async_trait]
pub trait KeyLookup: Send + Sync {
    /// The key, capabilities and generation of `entity`; None when it has none (unknown or
    /// revoked).
    async fn lookup(&self, entity: &EntityName) -> Result<Option<(Key, Caps, String)>, AuthError>;
}

/// An authenticated connection's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub entity: EntityName,
    pub caps: Caps,
    /// The key's generation (a revocation ends sessions of older generations).
    pub generation: String,
}

/// Why a server refused a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a handshake, or a broken one (a frame sent first lands here).
    Malformed(String),
    /// No such entity (never added, or revoked).
    UnknownEntity(String),
    /// The proof did not verify: a wrong key or a replayed handshake.
    BadProof(String),
    /// The key could not be looked up (metadata unavailable).
    Lookup(String),
    /// The handshake took longer than [`HANDSHAKE_TIMEOUT`].
    Timeout,
    /// The connection failed mid-handshake.
    Io(String),
}

impl Refusal {
    /// The metrics label of this refusal.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::UnknownEntity(_) => "unknown_entity",
            Refusal::BadProof(_) => "bad_proof",
            Refusal::Lookup(_) => "lookup_failed",
            Refusal::Timeout => "timeout",
            Refusal::Io(_) => "io",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Malformed(r) => write!(f, "malformed handshake: {r}"),
            Refusal::UnknownEntity(e) => write!(f, "unknown or revoked entity {e}"),
            Refusal::BadProof(e) => write!(f, "wrong key or replayed handshake for {e}"),
            Refusal::Lookup(r) => write!(f, "could not look the key up: {r}"),
            Refusal::Timeout => write!(f, "no handshake within {HANDSHAKE_TIMEOUT:?}"),
            Refusal::Io(r) => write!(f, "connection failed in the handshake: {r}"),
        }
    }
}

/// Server side: run the handshake on a new connection before reading any frame.
pub async fn accept<R, W>(rd: &mut R, wr: &mut W, keys: &dyn KeyLookup) -> Result<Session, Refusal>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    accept_within(rd, wr, keys, HANDSHAKE_TIMEOUT).await
}

/// [`accept`] with another time limit.
pub async fn accept_within<R, W>(
    rd: &mut R,
    wr: &mut W,
    keys: &dyn KeyLookup,
    limit: Duration,
) -> Result<Session, Refusal>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    match tokio::time::timeout(limit, accept_inner(rd, wr, keys)).await {
        Ok(r) => r,
        Err(_) => Err(Refusal::Timeout),
    }
}

async fn accept_inner<R, W>(
    rd: &mut R,
    wr: &mut W,
    keys: &dyn KeyLookup,
) -> Result<Session, Refusal>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let io = |e: std::io::Error| Refusal::Io(e.to_string());
    let mut head = [0u8; HELLO_HEAD_BYTES];
    rd.read_exact(&mut head).await.map_err(io)?;
    let len = Hello::entity_len(&head).map_err(Refusal::Malformed)?;
    let mut whole = head.to_vec();
    whole.resize(HELLO_HEAD_BYTES + len, 0);
    rd.read_exact(&mut whole[HELLO_HEAD_BYTES..])
        .await
        .map_err(io)?;
    let hello = Hello::decode(&whole).map_err(Refusal::Malformed)?;

    let mut nonce = [0u8; KEY_BYTES];
    fill_random(&mut nonce).map_err(|e| Refusal::Io(e.to_string()))?;
    wr.write_all(&encode_challenge(&nonce)).await.map_err(io)?;
    wr.flush().await.map_err(io)?;

    let mut proof = [0u8; PROOF_BYTES];
    rd.read_exact(&mut proof).await.map_err(io)?;
    let tag = decode_proof(&proof).map_err(Refusal::Malformed)?;

    let deny = |status: u8| encode_result(status, Caps::default(), &[0u8; KEY_BYTES]);
    let found = match keys.lookup(&hello.entity).await {
        Ok(found) => found,
        Err(e) => {
            let _ = wr.write_all(&deny(STATUS_UNAVAILABLE)).await;
            return Err(Refusal::Lookup(e.to_string()));
        }
    };
    let Some((key, caps, generation)) = found else {
        let _ = wr.write_all(&deny(STATUS_DENIED)).await;
        return Err(Refusal::UnknownEntity(hello.entity.to_string()));
    };
    if !key.verify(&client_parts(&nonce, &hello.nonce, &hello.entity), &tag) {
        let _ = wr.write_all(&deny(STATUS_DENIED)).await;
        return Err(Refusal::BadProof(hello.entity.to_string()));
    }
    let server_tag = key.mac(&server_parts(&nonce, &hello.nonce, &hello.entity));
    wr.write_all(&encode_result(STATUS_OK, caps, &server_tag))
        .await
        .map_err(io)?;
    wr.flush().await.map_err(io)?;
    Ok(Session {
        entity: hello.entity,
        caps,
        generation,
    })
}

/// Client side: prove `creds` to the OSD at `addr` and check its proof in return. Returns
/// the capabilities the server granted.
pub async fn connect<R, W>(
    rd: &mut R,
    wr: &mut W,
    creds: &Credentials,
    addr: &str,
) -> Result<Caps, AuthError>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connect_inner(rd, wr, creds, addr)).await {
        Ok(r) => r,
        Err(_) => Err(AuthError::Handshake {
            addr: addr.into(),
            reason: format!("no answer within {HANDSHAKE_TIMEOUT:?}"),
        }),
    }
}

async fn connect_inner<R, W>(
    rd: &mut R,
    wr: &mut W,
    creds: &Credentials,
    addr: &str,
) -> Result<Caps, AuthError>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let fail = |reason: String| AuthError::Handshake {
        addr: addr.into(),
        reason,
    };
    let io = |e: std::io::Error| AuthError::Handshake {
        addr: addr.into(),
        reason: format!("{e} (does the OSD require authentication of another version?)"),
    };
    let mut nonce = [0u8; KEY_BYTES];
    fill_random(&mut nonce)?;
    let hello = Hello {
        entity: creds.entity.clone(),
        nonce,
    };
    wr.write_all(&hello.encode()).await.map_err(io)?;
    wr.flush().await.map_err(io)?;
    let mut challenge = [0u8; CHALLENGE_BYTES];
    rd.read_exact(&mut challenge).await.map_err(io)?;
    if &challenge[..4] == TLS_REQUIRED {
        return Err(AuthError::TlsRequired { addr: addr.into() });
    }
    let server_nonce = decode_challenge(&challenge).map_err(fail)?;
    let tag = creds
        .key
        .mac(&client_parts(&server_nonce, &nonce, &creds.entity));
    wr.write_all(&encode_proof(&tag)).await.map_err(io)?;
    wr.flush().await.map_err(io)?;
    let mut result = [0u8; RESULT_BYTES];
    rd.read_exact(&mut result).await.map_err(io)?;
    let (status, caps, server_tag) = decode_result(&result).map_err(fail)?;
    match status {
        STATUS_OK => {}
        STATUS_UNAVAILABLE => {
            return Err(fail(
                "the OSD could not look the key up now (metadata unavailable); retry".into(),
            ))
        }
        _ => {
            return Err(AuthError::Denied {
                addr: addr.into(),
                entity: creds.entity.to_string(),
            })
        }
    }
    let parts = server_parts(&server_nonce, &nonce, &creds.entity);
    if !creds.key.verify(&parts, &server_tag) {
        return Err(AuthError::ServerProof {
            addr: addr.into(),
            entity: creds.entity.to_string(),
        });
    }
    Ok(caps)
}

#[cfg(test)]
mod tests;
