//! Fuzz the NBD option decoders: no option header or option data may panic them, and
//! every string they hand out obeys the protocol's string rules.
#![no_main]
use basalt_nbd::option::{match_meta_query, parse_option, ClientOption, OptionHeader};
use libfuzzer_sys::fuzz_target;

fn check_string(s: &str) {
    assert!(s.len() <= 4096 && !s.contains('\0'));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let hdr: [u8; 16] = data[..16].try_into().unwrap();
    let _ = OptionHeader::decode(&hdr);
    // The option code comes from the input so every decoder is reached.
    let code = u32::from_be_bytes(data[8..12].try_into().unwrap()) % 16;
    match parse_option(code, &data[16..]) {
        Ok(ClientOption::ExportName(name)) => check_string(name),
        Ok(ClientOption::Info(r) | ClientOption::Go(r)) => check_string(r.name),
        Ok(ClientOption::ListMetaContext(m) | ClientOption::SetMetaContext(m)) => {
            check_string(m.export);
            for q in m.queries {
                check_string(q);
                let _ = match_meta_query(q);
            }
        }
        _ => {}
    }
});
