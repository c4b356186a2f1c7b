//! NVMe/TCP PDUs (NVMe/TCP transport 1.0): the 8-byte common header, the specific header of
//! each PDU type, the optional header and data digests (crc32c, little endian, after the
//! header and after the data). Pure functions: [`check_header`] and [`decode`] never panic
//! and never allocate from an unchecked length; [`encode`] builds any PDU (the target sends
//! the controller-to-host ones, the test initiator the others).
//!
//! Every PDU: `type u8 · flags u8 · hlen u8 · pdo u8 · plen u32`, then the rest of the
//! header (`hlen` bytes in all), the header digest when negotiated, padding up to `pdo`,
//! the data, the data digest when negotiated and data is present.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::command::{Cqe, Sqe, CQE_LEN, SQE_LEN};

/// Initialize Connection Request.
pub const TYPE_IC_REQ: u8 = 0x00;
/// Initialize Connection Response.
pub const TYPE_IC_RESP: u8 = 0x01;
/// Host to Controller Terminate Connection Request.
pub const TYPE_H2C_TERM_REQ: u8 = 0x02;
/// Controller to Host Terminate Connection Request.
pub const TYPE_C2H_TERM_REQ: u8 = 0x03;
/// Command Capsule.
pub const TYPE_CAPSULE_CMD: u8 = 0x04;
/// Response Capsule.
pub const TYPE_CAPSULE_RESP: u8 = 0x05;
/// Host to Controller Data.
pub const TYPE_H2C_DATA: u8 = 0x06;
/// Controller to Host Data.
pub const TYPE_C2H_DATA: u8 = 0x07;
/// Ready to Transfer.
pub const TYPE_R2T: u8 = 0x09;

/// Flag: a header digest follows the header.
pub const FLAG_HDGST: u8 = 0x01;
/// Flag: a data digest follows the data.
pub const FLAG_DDGST: u8 = 0x02;
/// Flag (H2CData, C2HData): the last data PDU of the command (or of the R2T).
pub const FLAG_LAST_PDU: u8 = 0x04;
/// Flag (C2HData): the command succeeded; no response capsule follows.
pub const FLAG_SUCCESS: u8 = 0x08;

/// Length of the common header.
pub const COMMON_LEN: usize = 8;
/// Header length of ICReq and ICResp (they carry no digest).
pub const IC_LEN: usize = 128;
/// Header length of a command capsule (common header + SQE).
pub const CAPSULE_CMD_HLEN: usize = COMMON_LEN + SQE_LEN;
/// Header length of a response capsule (common header + CQE).
pub const CAPSULE_RESP_HLEN: usize = COMMON_LEN + CQE_LEN;
/// Header length of H2CData, C2HData, R2T and the two TermReqs.
pub const DATA_HLEN: usize = 24;
/// Length of a digest.
pub const DIGEST_LEN: usize = 4;
/// Largest PDU this codec accepts: a data PDU of [`MAX_DATA_LEN`] plus headers, digests and
/// the largest padding a PDO allows.
pub const MAX_PDU_LEN: usize = MAX_DATA_LEN + 256 + 2 * DIGEST_LEN;
/// Largest data part of one received PDU: the larger of the admin queue's in-capsule bound
/// and the H2C data bound the target announces ([`crate::queue::MAX_H2C_DATA_BYTES`]).
pub const MAX_DATA_LEN: usize = 128 << 10;
/// Most header bytes of the offending PDU a TermReq quotes (its plen is at most 152).
pub const TERM_MAX_QUOTE: usize = 128;

/// Fatal error status of a TermReq: a header field is wrong (FEI: its byte offset).
pub const FES_INVALID_HEADER_FIELD: u16 = 0x01;
/// Fatal error status: a PDU came out of sequence.
pub const FES_PDU_SEQUENCE: u16 = 0x02;
/// Fatal error status: header digest mismatch.
pub const FES_HEADER_DIGEST: u16 = 0x03;
/// Fatal error status: data beyond the command's buffer or R2T.
pub const FES_DATA_OUT_OF_RANGE: u16 = 0x04;
/// Fatal error status: more data than allowed in one PDU.
pub const FES_DATA_LIMIT_EXCEEDED: u16 = 0x05;
/// Fatal error status: a parameter the receiver does not support.
pub const FES_UNSUPPORTED_PARAMETER: u16 = 0x06;

/// Which digests the connection negotiated (ICReq/ICResp `dgst` bits 0 and 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    /// Header digest on every PDU but ICReq/ICResp.
    pub header: bool,
    /// Data digest on every PDU that carries data.
    pub data: bool,
}

impl Digests {
    fn header_len(self) -> usize {
        if self.header {
            DIGEST_LEN
        } else {
            0
        }
    }

    fn data_len(self) -> usize {
        if self.data {
            DIGEST_LEN
        } else {
            0
        }
    }
}

/// The 8-byte header every PDU starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU type (`TYPE_*`).
    pub pdu_type: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Header length (common + specific header, no digest).
    pub hlen: u8,
    /// Offset of the data from the start of the PDU (0: no data).
    pub pdo: u8,
    /// Length of the whole PDU.
    pub plen: u32,
}

impl CommonHeader {
    /// Parse the first 8 bytes of a PDU.
    pub fn parse(b: &[u8; COMMON_LEN]) -> Self {
        Self {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// ICReq: the host's connection parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0 = 1.0).
    pub pfv: u16,
    /// Host PDU data alignment, in dwords minus one.
    pub hpda: u8,
    /// Digests the host asks for.
    pub digests: Digests,
    /// Most R2Ts outstanding per command, minus one.
    pub maxr2t: u32,
}

/// ICResp: the controller's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version (0 = 1.0).
    pub pfv: u16,
    /// Controller PDU data alignment, in dwords minus one.
    pub cpda: u8,
    /// Digests enabled.
    pub digests: Digests,
    /// Most data bytes in one H2CData PDU.
    pub maxh2cdata: u32,
}

/// H2CData or C2HData.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPdu {
    /// Command id the data belongs to.
    pub cccid: u16,
    /// Transfer tag (of the R2T, for H2CData).
    pub ttag: u16,
    /// Offset of this data in the command's buffer.
    pub offset: u32,
    /// LAST_PDU flag.
    pub last: bool,
    /// SUCCESS flag (C2HData only).
    pub success: bool,
    /// The data.
    pub data: Bytes,
}

/// R2T: the controller asks for `len` bytes at `offset` of command `cccid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// Command id.
    pub cccid: u16,
    /// Transfer tag the host echoes in its H2CData.
    pub ttag: u16,
    /// Offset in the command's buffer.
    pub offset: u32,
    /// Bytes asked for.
    pub len: u32,
}

/// H2CTermReq or C2HTermReq: why the sender closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermReq {
    /// Fatal error status (`FES_*`).
    pub fes: u16,
    /// Fatal error information (the offending field's offset for FES 1).
    pub fei: u32,
    /// The start of the offending PDU header.
    pub quote: Bytes,
}

/// A decoded PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq.
    H2cTermReq(TermReq),
    /// C2HTermReq.
    C2hTermReq(TermReq),
    /// Command capsule with its in-capsule data (possibly empty).
    CapsuleCmd {
        /// The submission queue entry.
        sqe: Sqe,
        /// In-capsule data.
        data: Bytes,
    },
    /// Response capsule.
    CapsuleResp(Cqe),
    /// H2CData.
    H2cData(DataPdu),
    /// C2HData.
    C2hData(DataPdu),
    /// R2T.
    R2t(R2t),
}

/// Why a PDU was refused. All but [`PduError::DataDigest`] are fatal to the connection and
/// answered with a TermReq carrying [`PduError::fes`] and [`PduError::fei`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PduError {
    /// A header field has a value the protocol forbids.
    #[error("invalid PDU header field at byte {offset}: {what}")]
    InvalidField {
        /// Byte offset of the field in the PDU.
        offset: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// The header digest does not match.
    #[error("header digest mismatch")]
    HeaderDigest,
    /// The PDU is longer than the receiver accepts.
    #[error("PDU of {plen} bytes is over the limit")]
    TooLong {
        /// The announced length.
        plen: u32,
    },
    /// The data digest does not match: not fatal, the command fails with a transient
    /// transport error.
    #[error("data digest mismatch on command {cccid}")]
    DataDigest {
        /// The command whose data is damaged.
        cccid: u16,
    },
}

impl PduError {
    /// Fatal error status for the TermReq.
    pub fn fes(&self) -> u16 {
        match self {
            PduError::InvalidField { .. } => FES_INVALID_HEADER_FIELD,
            PduError::HeaderDigest => FES_HEADER_DIGEST,
            PduError::TooLong { .. } => FES_DATA_LIMIT_EXCEEDED,
            PduError::DataDigest { .. } => FES_INVALID_HEADER_FIELD,
        }
    }

    /// Fatal error information for the TermReq.
    pub fn fei(&self) -> u32 {
        match self {
            PduError::InvalidField { offset, .. } => *offset,
            _ => 0,
        }
    }
}

fn invalid(offset: u32, what: &'static str) -> PduError {
    PduError::InvalidField { offset, what }
}

/// The header length a PDU type must have (None: unknown type).
pub fn header_len_of(pdu_type: u8) -> Option<usize> {
    match pdu_type {
        TYPE_IC_REQ | TYPE_IC_RESP => Some(IC_LEN),
        TYPE_CAPSULE_CMD => Some(CAPSULE_CMD_HLEN),
        TYPE_CAPSULE_RESP => Some(CAPSULE_RESP_HLEN),
        TYPE_H2C_TERM_REQ | TYPE_C2H_TERM_REQ | TYPE_H2C_DATA | TYPE_C2H_DATA | TYPE_R2T => {
            Some(DATA_HLEN)
        }
        _ => None,
    }
}

fn carries_digests(pdu_type: u8) -> bool {
    !matches!(
        pdu_type,
        TYPE_IC_REQ | TYPE_IC_RESP | TYPE_H2C_TERM_REQ | TYPE_C2H_TERM_REQ
    )
}

/// Check a common header before reading the rest of the PDU: known type, the type's header
/// length, a plen that holds the header (and digest) and is at most [`MAX_PDU_LEN`].
pub fn check_header(ch: &CommonHeader, digests: Digests) -> Result<(), PduError> {
    let Some(hlen) = header_len_of(ch.pdu_type) else {
        return Err(invalid(0, "unknown PDU type"));
    };
    if usize::from(ch.hlen) != hlen {
        return Err(invalid(2, "header length does not match the PDU type"));
    }
    let plen = ch.plen as usize;
    if plen > MAX_PDU_LEN {
        return Err(PduError::TooLong { plen: ch.plen });
    }
    let hd = if carries_digests(ch.pdu_type) {
        digests.header_len()
    } else {
        0
    };
    if plen < hlen + hd {
        return Err(invalid(4, "PDU length shorter than its header"));
    }
    if carries_digests(ch.pdu_type) && (ch.flags & FLAG_HDGST != 0) != digests.header {
        return Err(invalid(
            1,
            "header digest flag differs from what was negotiated",
        ));
    }
    Ok(())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The crc32c digest of `pieces` taken together.
pub fn digest(pieces: &[&[u8]]) -> u32 {
    pieces
        .iter()
        .fold(0, |crc, p| crc32c::crc32c_append(crc, p))
}

/// Decode a whole PDU: `pdu` holds all `plen` bytes, common header included, and passed
/// [`check_header`]. Checks the digests, the data offset and the type's own fields.
pub fn decode(pdu: Bytes, digests: Digests) -> Result<Pdu, PduError> {
    if pdu.len() < COMMON_LEN {
        return Err(invalid(4, "PDU shorter than the common header"));
    }
    let mut chb = [0u8; COMMON_LEN];
    chb.copy_from_slice(&pdu[..COMMON_LEN]);
    let ch = CommonHeader::parse(&chb);
    check_header(&ch, digests)?;
    if ch.plen as usize != pdu.len() {
        return Err(invalid(4, "PDU length differs from the bytes given"));
    }
    let hlen = usize::from(ch.hlen);
    if !carries_digests(ch.pdu_type) {
        if pdu.len() != hlen && matches!(ch.pdu_type, TYPE_IC_REQ | TYPE_IC_RESP) {
            return Err(invalid(4, "ICReq/ICResp length must be 128"));
        }
        return decode_plain(&ch, &pdu);
    }
    let hd = digests.header_len();
    if digests.header {
        let want = u32_at(&pdu, hlen);
        if digest(&[&pdu[..hlen]]) != want {
            return Err(PduError::HeaderDigest);
        }
    }
    // The data part, if any: from pdo to plen, minus the data digest.
    let header_end = hlen + hd;
    let data = if pdu.len() > header_end {
        let pdo = usize::from(ch.pdo);
        if pdo < header_end || pdo > pdu.len() {
            return Err(invalid(3, "data offset outside the PDU"));
        }
        if digests.data != (ch.flags & FLAG_DDGST != 0) {
            return Err(invalid(
                1,
                "data digest flag differs from what was negotiated",
            ));
        }
        let dd = digests.data_len();
        if pdu.len() < pdo + dd {
            return Err(invalid(4, "PDU too short for its data digest"));
        }
        let data = pdu.slice(pdo..pdu.len() - dd);
        if digests.data && digest(&[&data]) != u32_at(&pdu, pdu.len() - dd) {
            let cccid = match ch.pdu_type {
                TYPE_CAPSULE_CMD => u16_at(&pdu, COMMON_LEN + 2),
                _ => u16_at(&pdu, COMMON_LEN),
            };
            return Err(PduError::DataDigest { cccid });
        }
        data
    } else {
        if ch.flags & FLAG_DDGST != 0 {
            return Err(invalid(1, "data digest flag on a PDU without data"));
        }
        Bytes::new()
    };
    let h = &pdu[..hlen];
    match ch.pdu_type {
        TYPE_CAPSULE_CMD => {
            let mut sqe = [0u8; SQE_LEN];
            sqe.copy_from_slice(&h[COMMON_LEN..]);
            Ok(Pdu::CapsuleCmd {
                sqe: Sqe(sqe),
                data,
            })
        }
        TYPE_CAPSULE_RESP => {
            if !data.is_empty() {
                return Err(invalid(4, "response capsule with data"));
            }
            let mut cqe = [0u8; CQE_LEN];
            cqe.copy_from_slice(&h[COMMON_LEN..]);
            Ok(Pdu::CapsuleResp(Cqe::decode(&cqe)))
        }
        TYPE_H2C_DATA | TYPE_C2H_DATA => {
            let length = u32_at(h, 16);
            if length as usize != data.len() {
                return Err(invalid(16, "data length differs from the data carried"));
            }
            if data.is_empty() {
                return Err(invalid(16, "data PDU without data"));
            }
            let d = DataPdu {
                cccid: u16_at(h, 8),
                ttag: u16_at(h, 10),
                offset: u32_at(h, 12),
                last: ch.flags & FLAG_LAST_PDU != 0,
                success: ch.flags & FLAG_SUCCESS != 0,
                data,
            };
            if ch.pdu_type == TYPE_H2C_DATA {
                if d.success {
                    return Err(invalid(1, "SUCCESS flag on H2CData"));
                }
                Ok(Pdu::H2cData(d))
            } else {
                if d.success && !d.last {
                    return Err(invalid(1, "SUCCESS flag without LAST_PDU"));
                }
                Ok(Pdu::C2hData(d))
            }
        }
        TYPE_R2T => {
            if !data.is_empty() {
                return Err(invalid(4, "R2T with data"));
            }
            Ok(Pdu::R2t(R2t {
                cccid: u16_at(h, 8),
                ttag: u16_at(h, 10),
                offset: u32_at(h, 12),
                len: u32_at(h, 16),
            }))
        }
        _ => Err(invalid(0, "unknown PDU type")),
    }
}

/// ICReq, ICResp and the TermReqs: no digests.
fn decode_plain(ch: &CommonHeader, pdu: &Bytes) -> Result<Pdu, PduError> {
    let h = &pdu[..usize::from(ch.hlen)];
    match ch.pdu_type {
        TYPE_IC_REQ | TYPE_IC_RESP => {
            let pfv = u16_at(h, 8);
            let dg = h[11];
            let digests = Digests {
                header: dg & 1 != 0,
                data: dg & 2 != 0,
            };
            if ch.pdu_type == TYPE_IC_REQ {
                Ok(Pdu::IcReq(IcReq {
                    pfv,
                    hpda: h[10],
                    digests,
                    maxr2t: u32_at(h, 12),
                }))
            } else {
                Ok(Pdu::IcResp(IcResp {
                    pfv,
                    cpda: h[10],
                    digests,
                    maxh2cdata: u32_at(h, 12),
                }))
            }
        }
        _ => {
            let t = TermReq {
                fes: u16_at(h, 8),
                fei: u32_at(h, 10),
                quote: pdu.slice(usize::from(ch.hlen)..),
            };
            if t.quote.len() > TERM_MAX_QUOTE {
                return Err(invalid(4, "TermReq quotes more than 128 bytes"));
            }
            if ch.pdu_type == TYPE_H2C_TERM_REQ {
                Ok(Pdu::H2cTermReq(t))
            } else {
                Ok(Pdu::C2hTermReq(t))
            }
        }
    }
}

/// The header part of a PDU about to be sent: common header, specific header, header
/// digest and padding up to the data offset. The caller appends `data_len` bytes of data and
/// then, when digests are on and data is present, their digest.
pub fn encode_header(
    pdu_type: u8,
    mut flags: u8,
    specific: &[u8],
    data_len: usize,
    digests: Digests,
    pda: u8,
) -> BytesMut {
    let hlen = COMMON_LEN + specific.len();
    let with_digests = carries_digests(pdu_type);
    let hd = if with_digests {
        digests.header_len()
    } else {
        0
    };
    if with_digests && digests.header {
        flags |= FLAG_HDGST;
    }
    let (pdo, dd) = if data_len > 0 {
        if with_digests && digests.data {
            flags |= FLAG_DDGST;
        }
        // Data starts at a multiple of the receiver's alignment ((pda + 1) dwords).
        let align = (usize::from(pda) + 1) * 4;
        let pdo = (hlen + hd).div_ceil(align) * align;
        (pdo, if with_digests { digests.data_len() } else { 0 })
    } else {
        (0, 0)
    };
    let plen = if data_len > 0 {
        pdo + data_len + dd
    } else {
        hlen + hd
    };
    let mut b = BytesMut::with_capacity(pdo.max(hlen + hd));
    b.put_u8(pdu_type);
    b.put_u8(flags);
    b.put_u8(hlen as u8);
    b.put_u8(pdo as u8);
    b.put_u32_le(plen as u32);
    b.put_slice(specific);
    if hd > 0 {
        let crc = digest(&[&b[..hlen]]);
        b.put_u32_le(crc);
    }
    b.resize(b.len().max(pdo), 0);
    b
}

/// Encode a whole PDU (data and digests included) into one buffer. The hot path sends data
/// without joining it (see the queue's writer); this is for everything else.
pub fn encode(pdu: &Pdu, digests: Digests, pda: u8) -> BytesMut {
    let (pdu_type, flags, specific, data): (u8, u8, Vec<u8>, &[u8]) = match pdu {
        Pdu::IcReq(r) => {
            let mut s = vec![0u8; IC_LEN - COMMON_LEN];
            s[0..2].copy_from_slice(&r.pfv.to_le_bytes());
            s[2] = r.hpda;
            s[3] = u8::from(r.digests.header) | (u8::from(r.digests.data) << 1);
            s[4..8].copy_from_slice(&r.maxr2t.to_le_bytes());
            (TYPE_IC_REQ, 0, s, &[])
        }
        Pdu::IcResp(r) => {
            let mut s = vec![0u8; IC_LEN - COMMON_LEN];
            s[0..2].copy_from_slice(&r.pfv.to_le_bytes());
            s[2] = r.cpda;
            s[3] = u8::from(r.digests.header) | (u8::from(r.digests.data) << 1);
            s[4..8].copy_from_slice(&r.maxh2cdata.to_le_bytes());
            (TYPE_IC_RESP, 0, s, &[])
        }
        Pdu::H2cTermReq(t) | Pdu::C2hTermReq(t) => {
            let mut s = vec![0u8; DATA_HLEN - COMMON_LEN];
            s[0..2].copy_from_slice(&t.fes.to_le_bytes());
            s[2..6].copy_from_slice(&t.fei.to_le_bytes());
            let ty = if matches!(pdu, Pdu::H2cTermReq(_)) {
                TYPE_H2C_TERM_REQ
            } else {
                TYPE_C2H_TERM_REQ
            };
            let quote = &t.quote[..t.quote.len().min(TERM_MAX_QUOTE)];
            (ty, 0, s, quote)
        }
        Pdu::CapsuleCmd { sqe, data } => (TYPE_CAPSULE_CMD, 0, sqe.0.to_vec(), &data[..]),
        Pdu::CapsuleResp(cqe) => (TYPE_CAPSULE_RESP, 0, cqe.encode().to_vec(), &[]),
        Pdu::H2cData(d) | Pdu::C2hData(d) => {
            let ty = if matches!(pdu, Pdu::H2cData(_)) {
                TYPE_H2C_DATA
            } else {
                TYPE_C2H_DATA
            };
            let mut flags = 0;
            if d.last {
                flags |= FLAG_LAST_PDU;
            }
            if d.success {
                flags |= FLAG_SUCCESS;
            }
            (
                ty,
                flags,
                data_specific(d.cccid, d.ttag, d.offset, d.data.len() as u32),
                &d.data[..],
            )
        }
        Pdu::R2t(r) => (
            TYPE_R2T,
            0,
            data_specific(r.cccid, r.ttag, r.offset, r.len),
            &[],
        ),
    };
    let term = matches!(pdu_type, TYPE_H2C_TERM_REQ | TYPE_C2H_TERM_REQ);
    let pda = if term { 0 } else { pda };
    let mut b = encode_header(pdu_type, flags, &specific, data.len(), digests, pda);
    if !data.is_empty() {
        b.put_slice(data);
        if carries_digests(pdu_type) && digests.data {
            b.put_u32_le(digest(&[data]));
        }
    }
    // A TermReq quotes the offending header right after its own, with no data offset.
    if term {
        b[3] = 0;
        let plen = b.len() as u32;
        b[4..8].copy_from_slice(&plen.to_le_bytes());
    }
    b
}

/// The specific header shared by H2CData, C2HData and R2T: cccid, ttag, offset, length.
pub fn data_specific(cccid: u16, ttag: u16, offset: u32, len: u32) -> Vec<u8> {
    let mut s = vec![0u8; DATA_HLEN - COMMON_LEN];
    s[0..2].copy_from_slice(&cccid.to_le_bytes());
    s[2..4].copy_from_slice(&ttag.to_le_bytes());
    s[4..8].copy_from_slice(&offset.to_le_bytes());
    s[8..12].copy_from_slice(&len.to_le_bytes());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_digests() -> [Digests; 4] {
        [
            Digests::default(),
            Digests {
                header: true,
                data: false,
            },
            Digests {
                header: false,
                data: true,
            },
            Digests {
                header: true,
                data: true,
            },
        ]
    }

    /// Goal: every PDU type survives encode → decode unchanged, with and without digests
    /// and with a data alignment.
    #[test]
    fn every_pdu_round_trips() {
        let mut sqe = [0u8; SQE_LEN];
        sqe[0] = 0x01;
        sqe[2] = 7;
        let pdus = vec![
            Pdu::IcReq(IcReq {
                pfv: 0,
                hpda: 0,
                digests: Digests {
                    header: true,
                    data: false,
                },
                maxr2t: 0,
            }),
            Pdu::IcResp(IcResp {
                pfv: 0,
                cpda: 0,
                digests: Digests::default(),
                maxh2cdata: 131072,
            }),
            Pdu::CapsuleCmd {
                sqe: Sqe(sqe),
                data: Bytes::from_static(b"in-capsule data!"),
            },
            Pdu::CapsuleCmd {
                sqe: Sqe(sqe),
                data: Bytes::new(),
            },
            Pdu::CapsuleResp(Cqe {
                result: 0x1234_5678_9abc,
                sqhd: 3,
                sqid: 1,
                cid: 7,
                status: crate::command::Status::LBA_OUT_OF_RANGE,
            }),
            Pdu::H2cData(DataPdu {
                cccid: 7,
                ttag: 2,
                offset: 4096,
                last: true,
                success: false,
                data: Bytes::from(vec![0xa5; 4096]),
            }),
            Pdu::C2hData(DataPdu {
                cccid: 9,
                ttag: 0,
                offset: 0,
                last: true,
                success: true,
                data: Bytes::from(vec![0x5a; 512]),
            }),
            Pdu::R2t(R2t {
                cccid: 7,
                ttag: 2,
                offset: 0,
                len: 8192,
            }),
            Pdu::C2hTermReq(TermReq {
                fes: FES_INVALID_HEADER_FIELD,
                fei: 2,
                quote: Bytes::from_static(&[4, 0, 99, 0, 72, 0, 0, 0]),
            }),
        ];
        for digests in all_digests() {
            for pda in [0u8, 7] {
                for pdu in &pdus {
                    let wire = encode(pdu, digests, pda).freeze();
                    let back = decode(wire.clone(), digests)
                        .unwrap_or_else(|e| panic!("{pdu:?} with {digests:?}: {e}"));
                    assert_eq!(&back, pdu, "{digests:?} pda {pda}");
                    if pda > 0 && matches!(pdu, Pdu::C2hData(_)) {
                        assert_eq!(wire[3] % 32, 0, "data offset aligned to 32 bytes");
                    }
                }
            }
        }
    }

    /// Goal: damaged PDUs are refused with the right fatal status, a damaged data digest
    /// names its command, and no byte string panics the decoder.
    #[test]
    fn bad_pdus_are_refused() {
        let d = Digests {
            header: true,
            data: true,
        };
        let good = encode(
            &Pdu::H2cData(DataPdu {
                cccid: 5,
                ttag: 1,
                offset: 0,
                last: true,
                success: false,
                data: Bytes::from(vec![1u8; 64]),
            }),
            d,
            0,
        );
        let mut bad = good.clone();
        bad[10] ^= 1;
        assert_eq!(decode(bad.freeze(), d), Err(PduError::HeaderDigest));
        let mut bad = good.clone();
        let last = bad.len() - 10;
        bad[last] ^= 1;
        assert_eq!(
            decode(bad.freeze(), d),
            Err(PduError::DataDigest { cccid: 5 })
        );
        let mut bad = good.clone();
        bad[0] = 0x42;
        assert_eq!(
            decode(bad.freeze(), d).map_err(|e| e.fes()),
            Err(FES_INVALID_HEADER_FIELD)
        );
        let mut bad = good.clone();
        bad[2] = 30;
        assert_eq!(decode(bad.freeze(), d).map_err(|e| e.fei()), Err(2));
        let ch = CommonHeader {
            pdu_type: TYPE_H2C_DATA,
            flags: FLAG_HDGST,
            hlen: 24,
            pdo: 28,
            plen: u32::MAX,
        };
        assert!(matches!(
            check_header(&ch, d),
            Err(PduError::TooLong { .. })
        ));
        // Every prefix and every single-byte change of a good PDU decodes or errs.
        for cut in 0..good.len() {
            let _ = decode(good.clone().freeze().slice(..cut), d);
        }
        for at in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut b = good.clone();
                b[at] = v;
                let _ = decode(b.freeze(), d);
                let _ = decode(good.clone().freeze(), Digests::default());
            }
        }
    }
}
