//! Fuzz the WAL record decoder: no input may panic it, whatever decodes must lie within the
//! input, and re-encoding a decoded record must reproduce its bytes exactly.
#![no_main]
use basalt_store::wal::{decode_wal_record, encode_wal_record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((record, len)) = decode_wal_record(data) {
        assert!(len <= data.len());
        let mut again = Vec::with_capacity(len);
        encode_wal_record(&mut again, &record);
        assert_eq!(&again[..], &data[..len]);
    }
});
