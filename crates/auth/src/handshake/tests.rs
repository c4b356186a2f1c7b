//! The handshake against itself, a wrong key, a replay, an impostor server and garbage.

use super::*;
use crate::ClusterSecret;
use std::collections::HashMap;
use tokio::io::{duplex, split, DuplexStream};

struct Table(HashMap<String, (Key, Caps)>);

#[async_trait]
impl KeyLookup for Table {
    async fn lookup(&self, e: &EntityName) -> Result<Option<(Key, Caps, String)>, AuthError> {
        Ok(self
            .0
            .get(e.as_str())
            .map(|(k, c)| (k.clone(), *c, "g".into())))
    }
}

fn creds(name: &str, key: &Key) -> Credentials {
    Credentials {
        entity: EntityName::parse(name).unwrap(),
        key: key.clone(),
        tls: None,
    }
}

fn table(name: &str, key: &Key, caps: Caps) -> Table {
    Table(HashMap::from([(name.to_string(), (key.clone(), caps))]))
}

/// Run a server on one end of a pipe and a client on the other.
async fn run(
    server_keys: Table,
    client: Credentials,
) -> (Result<Session, Refusal>, Result<Caps, AuthError>) {
    let (a, b) = duplex(4096);
    let server = tokio::spawn(async move {
        let (mut rd, mut wr) = split(a);
        accept(&mut rd, &mut wr, &server_keys).await
    });
    let (mut rd, mut wr) = split(b);
    let c = connect(&mut rd, &mut wr, &client, "osd.0").await;
    (server.await.unwrap(), c)
}

#[tokio::test]
async fn the_right_key_is_accepted_with_its_caps() {
    let k = Key::random().unwrap();
    let (s, c) = run(table("client.hv1", &k, Caps::DATA), creds("client.hv1", &k)).await;
    assert_eq!(c.unwrap(), Caps::DATA);
    let s = s.unwrap();
    assert_eq!(s.entity.as_str(), "client.hv1");
    assert_eq!(s.caps, Caps::DATA);
}

#[tokio::test]
async fn a_wrong_key_or_an_unknown_entity_is_denied() {
    let k = Key::random().unwrap();
    let other = Key::random().unwrap();
    let (s, c) = run(
        table("client.hv1", &k, Caps::DATA),
        creds("client.hv1", &other),
    )
    .await;
    assert!(matches!(s, Err(Refusal::BadProof(_))), "{s:?}");
    assert!(matches!(c, Err(AuthError::Denied { .. })), "{c:?}");
    let (s, c) = run(table("client.hv1", &k, Caps::DATA), creds("client.hv2", &k)).await;
    assert!(matches!(s, Err(Refusal::UnknownEntity(_))), "{s:?}");
    assert!(matches!(c, Err(AuthError::Denied { .. })), "{c:?}");
}

/// Read everything the client sends while answering as a real server would.
#[tokio::test]
async fn a_captured_handshake_replayed_is_refused() {
    let k = Key::random().unwrap();
    // Capture: a relay that records the client's bytes on their way to a real server.
    let (client_end, relay_client) = duplex(4096);
    let (relay_server, server_end) = duplex(4096);
    let keys = table("client.hv1", &k, Caps::DATA);
    let server = tokio::spawn(async move {
        let (mut rd, mut wr) = split(server_end);
        accept(&mut rd, &mut wr, &keys).await
    });
    let relay = tokio::spawn(async move {
        let (mut crd, mut cwr) = split(relay_client);
        let (mut srd, mut swr) = split(relay_server);
        let name_len = "client.hv1".len();
        let mut hello = vec![0u8; HELLO_HEAD_BYTES + name_len];
        crd.read_exact(&mut hello).await.unwrap();
        swr.write_all(&hello).await.unwrap();
        let mut ch = [0u8; CHALLENGE_BYTES];
        srd.read_exact(&mut ch).await.unwrap();
        cwr.write_all(&ch).await.unwrap();
        let mut proof = [0u8; PROOF_BYTES];
        crd.read_exact(&mut proof).await.unwrap();
        swr.write_all(&proof).await.unwrap();
        let mut res = [0u8; RESULT_BYTES];
        srd.read_exact(&mut res).await.unwrap();
        cwr.write_all(&res).await.unwrap();
        (hello, proof)
    });
    let (mut rd, mut wr) = split(client_end);
    connect(&mut rd, &mut wr, &creds("client.hv1", &k), "osd.0")
        .await
        .unwrap();
    server.await.unwrap().unwrap();
    let (hello, proof) = relay.await.unwrap();

    // Replay the captured bytes to a fresh server: its new nonce makes the proof stale.
    let (attacker, server_end) = duplex(4096);
    let keys = table("client.hv1", &k, Caps::DATA);
    let server = tokio::spawn(async move {
        let (mut rd, mut wr) = split(server_end);
        accept(&mut rd, &mut wr, &keys).await
    });
    let (mut rd, mut wr) = split(attacker);
    wr.write_all(&hello).await.unwrap();
    let mut ch = [0u8; CHALLENGE_BYTES];
    rd.read_exact(&mut ch).await.unwrap();
    wr.write_all(&proof).await.unwrap();
    let mut res = [0u8; RESULT_BYTES];
    rd.read_exact(&mut res).await.unwrap();
    assert_eq!(decode_result(&res).unwrap().0, STATUS_DENIED);
    let refused = server.await.unwrap();
    assert!(matches!(refused, Err(Refusal::BadProof(_))), "{refused:?}");
}

#[tokio::test]
async fn an_impostor_server_is_caught_by_its_proof() {
    let k = Key::random().unwrap();
    let (a, b) = duplex(4096);
    // Accepts anything and claims success, but cannot compute the server MAC.
    tokio::spawn(async move {
        let (mut rd, mut wr) = split(a);
        let mut head = [0u8; HELLO_HEAD_BYTES];
        rd.read_exact(&mut head).await.unwrap();
        let mut name = vec![0u8; Hello::entity_len(&head).unwrap()];
        rd.read_exact(&mut name).await.unwrap();
        wr.write_all(&encode_challenge(&[7; KEY_BYTES]))
            .await
            .unwrap();
        let mut proof = [0u8; PROOF_BYTES];
        rd.read_exact(&mut proof).await.unwrap();
        let guess = Key::random().unwrap().mac(&[b"x"]);
        wr.write_all(&encode_result(STATUS_OK, Caps::ADMIN, &guess))
            .await
            .unwrap();
    });
    let (mut rd, mut wr) = split(b);
    let c = connect(&mut rd, &mut wr, &creds("client.hv1", &k), "osd.9").await;
    assert!(matches!(c, Err(AuthError::ServerProof { .. })), "{c:?}");
}

async fn refuse_raw(bytes: &[u8], limit: Duration) -> Refusal {
    let (a, b): (DuplexStream, DuplexStream) = duplex(4096);
    let k = Key::random().unwrap();
    let keys = table("client.hv1", &k, Caps::DATA);
    let server = tokio::spawn(async move {
        let (mut rd, mut wr) = split(a);
        accept_within(&mut rd, &mut wr, &keys, limit).await
    });
    let (_rd, mut wr) = split(b);
    wr.write_all(bytes).await.unwrap();
    let r = server.await.unwrap().unwrap_err();
    drop(wr);
    r
}

#[tokio::test]
async fn a_frame_before_the_handshake_or_garbage_is_refused() {
    // The start of a data-plane frame: magic "BSLT", version 2, opcode WRITE...
    let mut frame = b"BSLT\x02\x03".to_vec();
    frame.resize(96, 0);
    let r = refuse_raw(&frame, HANDSHAKE_TIMEOUT).await;
    assert!(matches!(r, Refusal::Malformed(_)), "{r:?}");
    let mut bad_version = Hello {
        entity: EntityName::parse("client.hv1").unwrap(),
        nonce: [1; KEY_BYTES],
    }
    .encode();
    bad_version[4] = 9;
    let r = refuse_raw(&bad_version, HANDSHAKE_TIMEOUT).await;
    assert!(format!("{r}").contains("version 9"), "{r}");
    let mut long_name = bad_version.clone();
    long_name[4] = VERSION;
    long_name[5] = 200;
    assert!(matches!(
        refuse_raw(&long_name, HANDSHAKE_TIMEOUT).await,
        Refusal::Malformed(_)
    ));
}

#[tokio::test]
async fn a_silent_client_is_cut_off() {
    let r = refuse_raw(b"BSAU", Duration::from_millis(200)).await;
    assert_eq!(r, Refusal::Timeout);
}

#[test]
fn daemon_and_admin_credentials_derive_from_the_secret() {
    let s = ClusterSecret::generate().unwrap();
    let d = s.daemon_credentials(3);
    assert_eq!(d.entity.as_str(), "osd.3");
    assert_eq!(
        d.key,
        s.entity_key(&d.entity, crate::keys::DAEMON_GENERATION)
    );
    let a = crate::Keyring::Cluster(s.clone()).client_credentials();
    assert_eq!(a.entity.as_str(), "client.admin");
}

proptest::proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
        let _ = Hello::decode(&bytes);
        let _ = decode_challenge(&bytes);
        let _ = decode_proof(&bytes);
        let _ = decode_result(&bytes);
    }

    #[test]
    fn hellos_round_trip(name in "client\\.[a-z0-9_-]{1,50}", nonce in proptest::array::uniform32(proptest::num::u8::ANY)) {
        let h = Hello { entity: EntityName::parse(&name).unwrap(), nonce };
        proptest::prop_assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    }
}
