//! Fuzz the NBD request path: no input may panic the header decoder or the validator, a
//! decoded header survives a re-encode unchanged, and whatever validates addresses only
//! bytes inside the export.
#![no_main]
use basalt_nbd::request::{Command, Request, Session, REQUEST_HEADER_LEN};
use basalt_nbd::transmission_flags;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < REQUEST_HEADER_LEN + 10 {
        return;
    }
    let hdr: [u8; REQUEST_HEADER_LEN] = data[..REQUEST_HEADER_LEN].try_into().unwrap();
    let Ok(req) = Request::decode(&hdr) else {
        return;
    };
    assert_eq!(req.encode(), hdr);
    // The trailing bytes pick the negotiated session the request is checked against.
    let knobs = &data[REQUEST_HEADER_LEN..];
    let size = u64::from_le_bytes(knobs[0..8].try_into().unwrap());
    let structured = knobs[8] & 1 != 0;
    let session = Session {
        size,
        flags: transmission_flags(knobs[8] & 2 != 0, structured),
        structured,
        block_status: structured && knobs[8] & 4 != 0,
        fast_zero: knobs[8] & 8 != 0,
    };
    if let Ok(cmd) = req.check(&session) {
        let range = match cmd {
            Command::Read { offset, len } | Command::Cache { offset, len } => Some((offset, len)),
            Command::Write { offset, len, .. } | Command::Trim { offset, len, .. } => {
                Some((offset, len))
            }
            Command::WriteZeroes { offset, len, .. } => Some((offset, len)),
            Command::BlockStatus { offset, len, .. } => Some((offset, len)),
            Command::Flush | Command::Disconnect => None,
        };
        if let Some((offset, len)) = range {
            assert!(offset.checked_add(len as u64).is_some_and(|end| end <= size));
        }
    }
});
