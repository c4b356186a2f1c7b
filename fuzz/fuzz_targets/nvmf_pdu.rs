//! Fuzz the NVMe/TCP PDU decoder: no input may panic the header check or the decoder,
//! and whatever decodes survives encode → decode unchanged (with the same digests).
#![no_main]
use basalt_nvmf::pdu::{self, CommonHeader, Digests};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    let digests = Digests {
        header: knobs & 1 != 0,
        data: knobs & 2 != 0,
    };
    if rest.len() >= pdu::COMMON_LEN {
        let ch = CommonHeader::parse(rest[..pdu::COMMON_LEN].try_into().unwrap());
        let _ = pdu::check_header(&ch, digests);
    }
    if let Ok(p) = pdu::decode(Bytes::copy_from_slice(rest), digests) {
        let again = pdu::encode(&p, digests, knobs >> 4).freeze();
        assert_eq!(pdu::decode(again, digests), Ok(p));
    }
});
