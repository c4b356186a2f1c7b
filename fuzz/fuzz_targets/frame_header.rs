//! Fuzz the data-plane header decoder: no input may panic it, and whatever decodes must
//! survive a re-encode unchanged.
#![no_main]
use basalt_proto::{Header, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN {
        return;
    }
    let bytes: [u8; HEADER_LEN] = data[..HEADER_LEN].try_into().unwrap();
    if let Ok(h) = Header::decode(&bytes) {
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }
});
