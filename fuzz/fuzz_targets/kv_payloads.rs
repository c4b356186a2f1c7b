//! Fuzz the KV table decoders (CALL arguments and results, the stored table body): no input
//! may panic them, and whatever decodes re-encodes to something that decodes to the same
//! value (for the call payloads, to the same bytes).
#![no_main]
use basalt_proto::kv::{KvGet, KvList, KvPage, KvPrevious, KvStat, KvTable, KvUpdate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = KvUpdate::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(v) = KvPrevious::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(v) = KvGet::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(v) = KvList::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(v) = KvPage::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(v) = KvStat::decode(data) {
        assert_eq!(&v.encode()[..], data);
    }
    if let Ok(t) = KvTable::decode(data) {
        // Bytes after the body are ignored, so the body is a prefix of the input.
        let body = t.encode();
        assert_eq!(&body[..], &data[..body.len()]);
        let _ = KvTable::body_len(data, data.len());
    }
});
