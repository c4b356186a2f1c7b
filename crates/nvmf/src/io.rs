//! NVM commands on I/O queues: Read, Write, Flush, Write Zeroes, Dataset Management
//! (deallocate → trim), mapped onto a [`BlockDevice`] with the durability of NBD's FUA and
//! FLUSH (docs/design.md, "Durability contract").

use std::sync::Arc;

use basalt_metrics::frontend::Op;
use basalt_nbd::{BlockDevice, DeviceError};
use bytes::Bytes;

use crate::command::*;
use crate::identify::{self, Namespace};
use crate::queue::Reply;

/// CDW12 bit: Force Unit Access.
const FUA: u32 = 1 << 30;
/// CDW12 bit (Write Zeroes): the range may be deallocated.
const DEAC: u32 = 1 << 25;
/// CDW11 bit (Dataset Management): deallocate the ranges.
const DSM_AD: u32 = 1 << 2;
/// Length of one Dataset Management range.
const DSM_RANGE_LEN: usize = 16;

/// What a device error becomes for a command that read (`read`) or changed the media.
fn status_of(e: &DeviceError, read: bool) -> Status {
    match e {
        DeviceError::Io(_) if read => Status::UNRECOVERED_READ,
        DeviceError::Io(_) => Status::WRITE_FAULT,
        DeviceError::NoSpace => Status::CAPACITY_EXCEEDED,
        DeviceError::Invalid(_) | DeviceError::NotSupported => Status::INVALID_FIELD,
        DeviceError::ReadOnly => Status::WRITE_PROTECTED,
        DeviceError::ShuttingDown => Status::NAMESPACE_NOT_READY,
        DeviceError::Locked(_) => Status::NAMESPACE_NOT_READY,
    }
}

fn done(r: Result<(), DeviceError>) -> Reply {
    match r {
        Ok(()) => Reply::status(Status::SUCCESS),
        Err(e) => Reply::status(status_of(&e, false)),
    }
}

/// The byte range of blocks `[slba, slba + blocks)`, if inside the namespace.
fn range(ns: &Namespace, slba: u64, blocks: u64) -> Result<(u64, u64), Status> {
    let end = slba.checked_add(blocks).ok_or(Status::LBA_OUT_OF_RANGE)?;
    if end > ns.blocks() {
        return Err(Status::LBA_OUT_OF_RANGE);
    }
    Ok((slba << ns.block_shift, blocks << ns.block_shift))
}

/// The metrics class of an NVM command and the bytes it reads or writes.
pub(crate) fn op_class(sqe: &Sqe, data: &Bytes) -> (Op, u64) {
    match sqe.opcode() {
        NVM_READ => (Op::Read, sqe.sgl_len().into()),
        NVM_WRITE => (Op::Write, data.len() as u64),
        NVM_FLUSH => (Op::Flush, 0),
        NVM_WRITE_ZEROES | NVM_DSM => (Op::Trim, 0),
        _ => (Op::Other, 0),
    }
}

/// Run one NVM command. `data` is the host data of a Write or Dataset Management, gathered
/// in full; `ns` the namespace as it is now.
pub(crate) async fn execute(
    device: &Arc<dyn BlockDevice>,
    ns: &Namespace,
    sqe: &Sqe,
    data: Bytes,
) -> Reply {
    let op = sqe.opcode();
    let nsid = sqe.nsid();
    let flush_all = op == NVM_FLUSH && nsid == 0xffff_ffff;
    if nsid != identify::NSID && !flush_all {
        return Reply::status(Status::INVALID_NAMESPACE);
    }
    let slba = u64::from(sqe.cdw(10)) | (u64::from(sqe.cdw(11)) << 32);
    let cdw12 = sqe.cdw(12);
    let blocks = u64::from(cdw12 & 0xffff) + 1;
    let fua = cdw12 & FUA != 0;
    match op {
        NVM_FLUSH => done(device.flush().await),
        NVM_READ => {
            let (offset, len) = match range(ns, slba, blocks) {
                Ok(r) => r,
                Err(s) => return Reply::status(s),
            };
            if len != u64::from(sqe.sgl_len()) {
                return Reply::status(Status::SGL_LENGTH_INVALID);
            }
            match device.read_pieces(offset, len as u32).await {
                Ok(pieces) => Reply::Data(pieces),
                Err(e) => Reply::status(status_of(&e, true)),
            }
        }
        NVM_WRITE => {
            let (offset, len) = match range(ns, slba, blocks) {
                Ok(r) => r,
                Err(s) => return Reply::status(s),
            };
            if len != data.len() as u64 {
                return Reply::status(Status::SGL_LENGTH_INVALID);
            }
            if ns.read_only {
                return Reply::status(Status::WRITE_PROTECTED);
            }
            done(device.write(offset, data, fua).await)
        }
        NVM_WRITE_ZEROES => {
            let (offset, len) = match range(ns, slba, blocks) {
                Ok(r) => r,
                Err(s) => return Reply::status(s),
            };
            if ns.read_only {
                return Reply::status(Status::WRITE_PROTECTED);
            }
            let may_trim = cdw12 & DEAC != 0;
            // At most 65536 blocks of 4 KiB: 256 MiB, inside a u32.
            done(device.write_zeroes(offset, len as u32, may_trim, fua).await)
        }
        NVM_DSM => dataset_management(device, ns, sqe, data).await,
        _ => Reply::status(Status::INVALID_OPCODE),
    }
}

/// Dataset Management: with the Deallocate attribute, trim every range; the other
/// attributes are access hints, which a volume has no use for.
async fn dataset_management(
    device: &Arc<dyn BlockDevice>,
    ns: &Namespace,
    sqe: &Sqe,
    data: Bytes,
) -> Reply {
    let count = (sqe.cdw(10) & 0xff) as usize + 1;
    if data.len() < count * DSM_RANGE_LEN {
        return Reply::status(Status::SGL_LENGTH_INVALID);
    }
    if sqe.cdw(11) & DSM_AD == 0 {
        return Reply::status(Status::SUCCESS);
    }
    if ns.read_only {
        return Reply::status(Status::WRITE_PROTECTED);
    }
    let mut ranges = Vec::with_capacity(count);
    for r in data[..count * DSM_RANGE_LEN].chunks_exact(DSM_RANGE_LEN) {
        let blocks = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
        let mut slba = [0u8; 8];
        slba.copy_from_slice(&r[8..16]);
        let slba = u64::from_le_bytes(slba);
        if blocks == 0 {
            continue;
        }
        match range(ns, slba, blocks) {
            Ok(r) => ranges.push(r),
            Err(s) => return Reply::status(s),
        }
    }
    // The device trims at most u32::MAX bytes at once: larger ranges go in whole-block
    // pieces of 1 GiB.
    const PIECE_BYTES: u64 = 1 << 30;
    for (mut offset, mut len) in ranges {
        while len > 0 {
            let piece = len.min(PIECE_BYTES);
            if let Err(e) = device.trim(offset, piece as u32, false).await {
                return Reply::status(status_of(&e, false));
            }
            offset += piece;
            len -= piece;
        }
    }
    Reply::status(Status::SUCCESS)
}
