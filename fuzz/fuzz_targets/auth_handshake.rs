//! The data-plane handshake's decoders on arbitrary bytes: never a panic, and a Hello that
//! decodes re-encodes to the same bytes.
#![no_main]

use basalt_auth::handshake::{decode_challenge, decode_proof, decode_result, Hello};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Hello::decode(data) {
        assert_eq!(h.encode(), data);
    }
    let _ = Hello::entity_len(data);
    let _ = decode_challenge(data);
    let _ = decode_proof(data);
    let _ = decode_result(data);
});
