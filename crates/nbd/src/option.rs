//! Handshake options: pure decoding of what the client sends and encoding of what the server
//! answers. No I/O here, so the decoders can be fuzzed over arbitrary bytes.

use bytes::{BufMut, BytesMut};
use thiserror::Error;

use crate::wire::{self, MAX_META_QUERIES, MAX_STRING_BYTES};

/// Bytes of an option header: magic (8), option (4), length (4).
pub const OPTION_HEADER_LEN: usize = 16;

/// The fixed part of a client option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option code (`OPT_*`).
    pub code: u32,
    /// Length of the data that follows.
    pub length: u32,
}

impl OptionHeader {
    /// Decode a header; a wrong magic means the stream is not (or no longer) NBD.
    pub fn decode(buf: &[u8; OPTION_HEADER_LEN]) -> Result<Self, OptionError> {
        let magic = u64::from_be_bytes(buf[0..8].try_into().unwrap_or_default());
        if magic != wire::IHAVEOPT {
            return Err(OptionError::BadMagic(magic));
        }
        Ok(Self {
            code: be32(&buf[8..12]),
            length: be32(&buf[12..16]),
        })
    }
}

/// Why an option could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OptionError {
    /// The header did not start with `IHAVEOPT` (fatal: the session ends).
    #[error("bad option magic {0:#x}")]
    BadMagic(u64),
    /// The data does not match the option's layout (answered with `ERR_INVALID`).
    #[error("invalid option: {0}")]
    Invalid(&'static str),
    /// More queries than the server accepts (answered with `ERR_TOO_BIG`).
    #[error("too many metadata queries")]
    TooBig,
}

/// Which optional information items an `OPT_INFO`/`OPT_GO` asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InfoRequests {
    /// `INFO_NAME` was requested.
    pub name: bool,
    /// `INFO_DESCRIPTION` was requested.
    pub description: bool,
    /// `INFO_BLOCK_SIZE` was requested.
    pub block_size: bool,
}

/// An `OPT_INFO` or `OPT_GO` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRequest<'a> {
    /// Export name ("" = default export).
    pub name: &'a str,
    /// Information items asked for (unknown ones are ignored, as the protocol requires).
    pub info: InfoRequests,
}

/// An `OPT_LIST_META_CONTEXT` or `OPT_SET_META_CONTEXT` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest<'a> {
    /// Export the contexts are for.
    pub export: &'a str,
    /// Queries, each `namespace:leaf` (at most [`MAX_META_QUERIES`]).
    pub queries: Vec<&'a str>,
}

/// A decoded client option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption<'a> {
    /// `OPT_EXPORT_NAME`: choose an export, enter transmission.
    ExportName(&'a str),
    /// `OPT_ABORT`: end the session.
    Abort,
    /// `OPT_LIST`: list exports.
    List,
    /// `OPT_STARTTLS` (decided by [`tls_gate`] before the option is decoded).
    StartTls,
    /// `OPT_INFO`: describe an export.
    Info(ExportRequest<'a>),
    /// `OPT_GO`: describe an export and enter transmission.
    Go(ExportRequest<'a>),
    /// `OPT_STRUCTURED_REPLY`.
    StructuredReply,
    /// `OPT_LIST_META_CONTEXT`.
    ListMetaContext(MetaRequest<'a>),
    /// `OPT_SET_META_CONTEXT`.
    SetMetaContext(MetaRequest<'a>),
    /// Anything else (answered with `ERR_UNSUP`).
    Unknown(u32),
}

/// Decode the data of option `code`. Never panics, whatever `data` holds.
pub fn parse_option(code: u32, data: &[u8]) -> Result<ClientOption<'_>, OptionError> {
    let no_data = |opt| {
        if data.is_empty() {
            Ok(opt)
        } else {
            Err(OptionError::Invalid("option takes no data"))
        }
    };
    match code {
        wire::OPT_EXPORT_NAME => Ok(ClientOption::ExportName(string(data)?)),
        // The protocol asks servers to ignore data sent with ABORT.
        wire::OPT_ABORT => Ok(ClientOption::Abort),
        wire::OPT_LIST => no_data(ClientOption::List),
        wire::OPT_STARTTLS => Ok(ClientOption::StartTls),
        wire::OPT_INFO => Ok(ClientOption::Info(export_request(data)?)),
        wire::OPT_GO => Ok(ClientOption::Go(export_request(data)?)),
        wire::OPT_STRUCTURED_REPLY => no_data(ClientOption::StructuredReply),
        wire::OPT_LIST_META_CONTEXT => Ok(ClientOption::ListMetaContext(meta_request(data)?)),
        wire::OPT_SET_META_CONTEXT => Ok(ClientOption::SetMetaContext(meta_request(data)?)),
        other => Ok(ClientOption::Unknown(other)),
    }
}

/// Cursor over option data; every read is bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], OptionError> {
        if n > self.data.len() {
            return Err(OptionError::Invalid(
                "length field runs past the option data",
            ));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, OptionError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, OptionError> {
        Ok(be32(self.take(4)?))
    }

    fn string(&mut self) -> Result<&'a str, OptionError> {
        let len = self.u32()? as usize;
        string(self.take(len)?)
    }

    fn finish(&self) -> Result<(), OptionError> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(OptionError::Invalid("trailing bytes after option data"))
        }
    }
}

fn export_request(data: &[u8]) -> Result<ExportRequest<'_>, OptionError> {
    let mut r = Reader { data };
    let name = r.string()?;
    let count = r.u16()?;
    let mut info = InfoRequests::default();
    for _ in 0..count {
        match r.u16()? {
            wire::INFO_NAME => info.name = true,
            wire::INFO_DESCRIPTION => info.description = true,
            wire::INFO_BLOCK_SIZE => info.block_size = true,
            _ => {} // INFO_EXPORT is always sent; unknown items must be ignored.
        }
    }
    r.finish()?;
    Ok(ExportRequest { name, info })
}

fn meta_request(data: &[u8]) -> Result<MetaRequest<'_>, OptionError> {
    let mut r = Reader { data };
    let export = r.string()?;
    let count = r.u32()?;
    if count > MAX_META_QUERIES {
        return Err(OptionError::TooBig);
    }
    let mut queries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        queries.push(r.string()?);
    }
    r.finish()?;
    Ok(MetaRequest { export, queries })
}

/// Validate a protocol string: UTF-8, no NUL, at most 4096 bytes.
fn string(b: &[u8]) -> Result<&str, OptionError> {
    if b.len() > MAX_STRING_BYTES {
        return Err(OptionError::Invalid("string longer than 4096 bytes"));
    }
    let s = std::str::from_utf8(b).map_err(|_| OptionError::Invalid("string is not UTF-8"))?;
    if s.contains('\0') {
        return Err(OptionError::Invalid("string contains NUL"));
    }
    Ok(s)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// How a server treats TLS, for the whole life of a connection (the protocol's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// NOTLS: no credentials; `OPT_STARTTLS` is answered `ERR_UNSUP`.
    Off,
    /// TLS at the client's choice: `OPT_STARTTLS` upgrades, plaintext clients are served.
    Offered,
    /// FORCEDTLS: before TLS, every option but `OPT_STARTTLS` and `OPT_ABORT` is answered
    /// `ERR_TLS_REQD`, and `OPT_EXPORT_NAME` (which cannot be refused) ends the session.
    Required,
}

/// What the server does with one option, as far as TLS is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsGate {
    /// Handle the option as usual.
    Proceed,
    /// Answer `REP_ACK`, then run the TLS handshake and restart option haggling inside it.
    StartTls,
    /// Skip the option's data and answer this error.
    Refuse {
        /// The `REP_ERR_*` reply type.
        reply: u32,
        /// Message for the user.
        message: &'static str,
    },
    /// End the session (an option that cannot be answered with an error).
    Drop,
}

/// Decide option `code` (with `length` bytes of data) under `mode`, `tls_active` saying
/// whether the connection already runs inside TLS. Pure: the handshake's TLS state machine.
pub fn tls_gate(mode: TlsMode, tls_active: bool, code: u32, length: u32) -> TlsGate {
    if code == wire::OPT_STARTTLS {
        return match mode {
            TlsMode::Off => TlsGate::Refuse {
                reply: wire::REP_ERR_UNSUP,
                message: "TLS is not configured on this server",
            },
            _ if tls_active => TlsGate::Refuse {
                reply: wire::REP_ERR_INVALID,
                message: "TLS is already active on this connection",
            },
            _ if length != 0 => TlsGate::Refuse {
                reply: wire::REP_ERR_INVALID,
                message: "STARTTLS takes no data",
            },
            _ => TlsGate::StartTls,
        };
    }
    if mode != TlsMode::Required || tls_active || code == wire::OPT_ABORT {
        return TlsGate::Proceed;
    }
    if code == wire::OPT_EXPORT_NAME {
        return TlsGate::Drop;
    }
    TlsGate::Refuse {
        reply: wire::REP_ERR_TLS_REQD,
        message: "this server requires TLS: send NBD_OPT_STARTTLS first",
    }
}

/// What a metadata query selects among this server's contexts (only `base:allocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaMatch {
    /// Selects `base:allocation`.
    BaseAllocation,
    /// `base:` alone: a wildcard when listing, ignored when setting.
    BaseWildcard,
    /// Selects nothing here (unknown namespace or leaf; must be ignored, not refused).
    Nothing,
    /// Not `namespace:leaf` (may be refused with `ERR_INVALID`).
    Malformed,
}

/// Classify one metadata query.
pub fn match_meta_query(query: &str) -> MetaMatch {
    match query.split_once(':') {
        None => MetaMatch::Malformed,
        Some(("", _)) => MetaMatch::Malformed,
        Some(("base", "")) => MetaMatch::BaseWildcard,
        Some(("base", "allocation")) => MetaMatch::BaseAllocation,
        Some(_) => MetaMatch::Nothing,
    }
}

/// Append one option reply (header and data) to `out`.
pub fn encode_reply(out: &mut BytesMut, option: u32, reply_type: u32, data: &[u8]) {
    out.reserve(20 + data.len());
    out.put_u64(wire::OPTION_REPLY_MAGIC);
    out.put_u32(option);
    out.put_u32(reply_type);
    out.put_u32(data.len() as u32);
    out.put_slice(data);
}

/// Append an error reply carrying a human-readable message (truncated to the string limit).
pub fn encode_error(out: &mut BytesMut, option: u32, reply_type: u32, message: &str) {
    debug_assert!(reply_type & (1 << 31) != 0, "error replies have bit 31 set");
    encode_reply(out, option, reply_type, truncate(message).as_bytes());
}

/// Append an `REP_SERVER` reply for `OPT_LIST`: name length, name, then the description.
pub fn encode_server(out: &mut BytesMut, name: &str, description: &str) {
    let description = truncate(description);
    let mut data = BytesMut::with_capacity(4 + name.len() + description.len());
    data.put_u32(name.len() as u32);
    data.put_slice(name.as_bytes());
    data.put_slice(description.as_bytes());
    encode_reply(out, wire::OPT_LIST, wire::REP_SERVER, &data);
}

/// Append an `REP_INFO` reply with `INFO_EXPORT`: size and transmission flags.
pub fn encode_info_export(out: &mut BytesMut, option: u32, size: u64, flags: u16) {
    let mut data = [0u8; 12];
    data[0..2].copy_from_slice(&wire::INFO_EXPORT.to_be_bytes());
    data[2..10].copy_from_slice(&size.to_be_bytes());
    data[10..12].copy_from_slice(&flags.to_be_bytes());
    encode_reply(out, option, wire::REP_INFO, &data);
}

/// Append an `REP_INFO` reply carrying a string item (`INFO_NAME` or `INFO_DESCRIPTION`).
pub fn encode_info_string(out: &mut BytesMut, option: u32, item: u16, value: &str) {
    let value = truncate(value);
    let mut data = Vec::with_capacity(2 + value.len());
    data.extend_from_slice(&item.to_be_bytes());
    data.extend_from_slice(value.as_bytes());
    encode_reply(out, option, wire::REP_INFO, &data);
}

/// Append an `REP_INFO` reply with `INFO_BLOCK_SIZE`: minimum, preferred, maximum.
pub fn encode_info_block_size(out: &mut BytesMut, option: u32, min: u32, pref: u32, max: u32) {
    let mut data = [0u8; 14];
    data[0..2].copy_from_slice(&wire::INFO_BLOCK_SIZE.to_be_bytes());
    data[2..6].copy_from_slice(&min.to_be_bytes());
    data[6..10].copy_from_slice(&pref.to_be_bytes());
    data[10..14].copy_from_slice(&max.to_be_bytes());
    encode_reply(out, option, wire::REP_INFO, &data);
}

/// Append an `REP_META_CONTEXT` reply.
pub fn encode_meta_context(out: &mut BytesMut, option: u32, id: u32, name: &str) {
    let mut data = Vec::with_capacity(4 + name.len());
    data.extend_from_slice(&id.to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    encode_reply(out, option, wire::REP_META_CONTEXT, &data);
}

/// Cut a string to at most 4096 bytes on a character boundary.
pub fn truncate(s: &str) -> &str {
    if s.len() <= MAX_STRING_BYTES {
        return s;
    }
    let mut end = MAX_STRING_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go_data(name: &str, items: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(items.len() as u16).to_be_bytes());
        for i in items {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    #[test]
    fn decodes_go_with_info_requests() {
        // Goal: OPT_GO data yields the name and the known info items; unknown ones are ignored.
        let d = go_data("vol1", &[wire::INFO_BLOCK_SIZE, 77, wire::INFO_NAME]);
        let opt = parse_option(wire::OPT_GO, &d).unwrap();
        let want = ExportRequest {
            name: "vol1",
            info: InfoRequests {
                name: true,
                description: false,
                block_size: true,
            },
        };
        assert_eq!(opt, ClientOption::Go(want));
    }

    #[test]
    fn rejects_inconsistent_lengths() {
        // Goal: a name length past the data, or trailing bytes, is ERR_INVALID, not a panic.
        let mut d = go_data("vol1", &[]);
        d[3] = 200;
        assert!(matches!(
            parse_option(wire::OPT_GO, &d),
            Err(OptionError::Invalid(_))
        ));
        let mut d = go_data("vol1", &[]);
        d.push(0);
        assert!(matches!(
            parse_option(wire::OPT_INFO, &d),
            Err(OptionError::Invalid(_))
        ));
        assert!(parse_option(wire::OPT_LIST, b"x").is_err());
        assert!(parse_option(wire::OPT_EXPORT_NAME, b"a\0b").is_err());
        assert!(parse_option(wire::OPT_EXPORT_NAME, &[0xff, 0xfe]).is_err());
    }

    #[test]
    fn decodes_meta_queries_and_bounds_them() {
        // Goal: meta requests decode; a huge query count is TOO_BIG before any allocation.
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"exp");
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(&15u32.to_be_bytes());
        d.extend_from_slice(b"base:allocation");
        let opt = parse_option(wire::OPT_SET_META_CONTEXT, &d).unwrap();
        let want = MetaRequest {
            export: "exp",
            queries: vec!["base:allocation"],
        };
        assert_eq!(opt, ClientOption::SetMetaContext(want));
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            parse_option(wire::OPT_LIST_META_CONTEXT, &d),
            Err(OptionError::TooBig)
        );
    }

    #[test]
    fn classifies_meta_queries() {
        // Goal: only base:allocation selects; base: is a wildcard; unknown names select nothing.
        assert_eq!(
            match_meta_query("base:allocation"),
            MetaMatch::BaseAllocation
        );
        assert_eq!(match_meta_query("base:"), MetaMatch::BaseWildcard);
        assert_eq!(match_meta_query("base:other"), MetaMatch::Nothing);
        assert_eq!(match_meta_query("qemu:dirty-bitmap:x"), MetaMatch::Nothing);
        assert_eq!(match_meta_query("nocolon"), MetaMatch::Malformed);
        assert_eq!(match_meta_query(":leaf"), MetaMatch::Malformed);
    }

    #[test]
    fn header_checks_magic() {
        // Goal: the header decoder refuses anything but IHAVEOPT.
        let mut h = [0u8; OPTION_HEADER_LEN];
        h[0..8].copy_from_slice(&wire::IHAVEOPT.to_be_bytes());
        h[8..12].copy_from_slice(&wire::OPT_GO.to_be_bytes());
        h[12..16].copy_from_slice(&9u32.to_be_bytes());
        let hdr = OptionHeader::decode(&h).unwrap();
        assert_eq!((hdr.code, hdr.length), (wire::OPT_GO, 9));
        h[0] ^= 1;
        assert!(matches!(
            OptionHeader::decode(&h),
            Err(OptionError::BadMagic(_))
        ));
    }

    #[test]
    fn tls_gate_follows_the_protocol_modes() {
        // Goal: STARTTLS once and without data upgrades; twice or with data is ERR_INVALID;
        // forced mode refuses every option but STARTTLS/ABORT before TLS, drops EXPORT_NAME,
        // and refuses nothing once TLS runs; without credentials STARTTLS is ERR_UNSUP.
        use wire::*;
        use TlsMode::*;
        let refused = |g: TlsGate| match g {
            TlsGate::Refuse { reply, .. } => reply,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            refused(tls_gate(Off, false, OPT_STARTTLS, 0)),
            REP_ERR_UNSUP
        );
        assert_eq!(tls_gate(Off, false, OPT_GO, 10), TlsGate::Proceed);
        assert_eq!(tls_gate(Off, false, OPT_EXPORT_NAME, 3), TlsGate::Proceed);
        for mode in [Offered, Required] {
            assert_eq!(tls_gate(mode, false, OPT_STARTTLS, 0), TlsGate::StartTls);
            assert_eq!(
                refused(tls_gate(mode, true, OPT_STARTTLS, 0)),
                REP_ERR_INVALID
            );
            assert_eq!(
                refused(tls_gate(mode, false, OPT_STARTTLS, 4)),
                REP_ERR_INVALID
            );
            assert_eq!(tls_gate(mode, false, OPT_ABORT, 0), TlsGate::Proceed);
            for code in [
                OPT_GO,
                OPT_INFO,
                OPT_LIST,
                OPT_STRUCTURED_REPLY,
                OPT_EXPORT_NAME,
                99,
            ] {
                assert_eq!(tls_gate(mode, true, code, 0), TlsGate::Proceed);
            }
        }
        assert_eq!(tls_gate(Offered, false, OPT_GO, 10), TlsGate::Proceed);
        assert_eq!(
            tls_gate(Offered, false, OPT_EXPORT_NAME, 3),
            TlsGate::Proceed
        );
        let before_tls = [
            OPT_GO,
            OPT_INFO,
            OPT_LIST,
            OPT_STRUCTURED_REPLY,
            OPT_SET_META_CONTEXT,
            99,
        ];
        for code in before_tls {
            assert_eq!(
                refused(tls_gate(Required, false, code, 0)),
                REP_ERR_TLS_REQD
            );
        }
        assert_eq!(tls_gate(Required, false, OPT_EXPORT_NAME, 4), TlsGate::Drop);
    }

    #[test]
    fn truncates_on_char_boundary() {
        // Goal: long strings are cut below 4096 bytes without splitting a UTF-8 character.
        let s = "é".repeat(3000);
        let t = truncate(&s);
        assert!(t.len() <= MAX_STRING_BYTES && t.len() & 1 == 0);
    }
}
