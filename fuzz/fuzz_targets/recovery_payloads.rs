//! Fuzz the recovery payload decoders (object images of PULL/PUSH, LIST entries): no input
//! may panic them, and a decoded image re-encodes to the same bytes.
#![no_main]
use basalt_proto::image::decode_list;
use basalt_proto::ObjectImage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    if let Ok(img) = ObjectImage::decode(&bytes) {
        assert_eq!(img.encode(), bytes);
        let covered: usize = img.runs().iter().map(|r| r.1 as usize).sum();
        assert_eq!(covered * 4096, img.data.len());
    }
    let _ = decode_list(data);
});
