//! Submission and completion queue entries (NVMe base spec: 64-byte SQE, 16-byte CQE, all
//! fields little endian), the opcodes this target knows and the status codes it answers.

/// Length of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Length of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// Admin opcode: Get Log Page.
pub const ADMIN_GET_LOG_PAGE: u8 = 0x02;
/// Admin opcode: Identify.
pub const ADMIN_IDENTIFY: u8 = 0x06;
/// Admin opcode: Abort.
pub const ADMIN_ABORT: u8 = 0x08;
/// Admin opcode: Set Features.
pub const ADMIN_SET_FEATURES: u8 = 0x09;
/// Admin opcode: Get Features.
pub const ADMIN_GET_FEATURES: u8 = 0x0a;
/// Admin opcode: Asynchronous Event Request.
pub const ADMIN_ASYNC_EVENT: u8 = 0x0c;
/// Admin opcode: Keep Alive.
pub const ADMIN_KEEP_ALIVE: u8 = 0x18;
/// Opcode of every Fabrics command (the command type is in byte 4).
pub const FABRICS: u8 = 0x7f;

/// Fabrics command type: Property Set.
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
/// Fabrics command type: Connect.
pub const FCTYPE_CONNECT: u8 = 0x01;
/// Fabrics command type: Property Get.
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// Fabrics command type: Disconnect (of an I/O queue).
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// NVM opcode: Flush.
pub const NVM_FLUSH: u8 = 0x00;
/// NVM opcode: Write.
pub const NVM_WRITE: u8 = 0x01;
/// NVM opcode: Read.
pub const NVM_READ: u8 = 0x02;
/// NVM opcode: Write Zeroes.
pub const NVM_WRITE_ZEROES: u8 = 0x08;
/// NVM opcode: Dataset Management.
pub const NVM_DSM: u8 = 0x09;

/// SGL descriptor type byte: data block, offset into the capsule (in-capsule data).
pub const SGL_DATA_OFFSET: u8 = 0x01;
/// SGL descriptor type byte: transport data block (data moves by C2HData / R2T+H2CData).
pub const SGL_TRANSPORT: u8 = 0x5a;

/// A submission queue entry as received.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_LEN]);

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sqe(opc {:#04x} cid {} nsid {} cdw10 {:#x})",
            self.opcode(),
            self.cid(),
            self.nsid(),
            self.cdw(10)
        )
    }
}

impl Sqe {
    fn u16_at(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.0[at], self.0[at + 1]])
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    /// A zeroed entry with `opcode` and `cid` (for initiators and tests).
    pub fn new(opcode: u8, cid: u16) -> Self {
        let mut b = [0u8; SQE_LEN];
        b[0] = opcode;
        b[2..4].copy_from_slice(&cid.to_le_bytes());
        Sqe(b)
    }

    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// Command flags: fused bits 0-1, PSDT bits 6-7.
    pub fn flags(&self) -> u8 {
        self.0[1]
    }

    /// Command identifier.
    pub fn cid(&self) -> u16 {
        self.u16_at(2)
    }

    /// Namespace id.
    pub fn nsid(&self) -> u32 {
        self.u32_at(4)
    }

    /// Fabrics command type (byte 4 of a Fabrics command).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }

    /// Command dword `n` (10..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        self.u32_at(n * 4)
    }

    /// Raw byte `at` (command-specific fields of Fabrics commands).
    pub fn byte(&self, at: usize) -> u8 {
        self.0[at]
    }

    /// Little-endian u16 at byte `at`.
    pub fn word(&self, at: usize) -> u16 {
        self.u16_at(at)
    }

    /// Little-endian u64 at byte `at`.
    pub fn qword(&self, at: usize) -> u64 {
        u64::from(self.u32_at(at)) | (u64::from(self.u32_at(at + 4)) << 32)
    }

    /// SGL1 address (for in-capsule data: the offset in the capsule's data).
    pub fn sgl_addr(&self) -> u64 {
        self.qword(24)
    }

    /// SGL1 length in bytes.
    pub fn sgl_len(&self) -> u32 {
        self.u32_at(32)
    }

    /// SGL1 descriptor type byte (type in the high nibble, subtype in the low one).
    pub fn sgl_type(&self) -> u8 {
        self.0[39]
    }

    /// Set namespace id (initiators).
    pub fn set_nsid(&mut self, nsid: u32) {
        self.0[4..8].copy_from_slice(&nsid.to_le_bytes());
    }

    /// Set command dword `n` (initiators).
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        self.0[n * 4..n * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Set byte `at` (initiators).
    pub fn set_byte(&mut self, at: usize, v: u8) {
        self.0[at] = v;
    }

    /// Describe the data with SGL1: `SGL_DATA_OFFSET` (in-capsule) or `SGL_TRANSPORT`.
    pub fn set_sgl(&mut self, sgl_type: u8, len: u32) {
        self.0[1] = (self.0[1] & 0x3f) | 0x40;
        self.0[24..32].copy_from_slice(&0u64.to_le_bytes());
        self.0[32..36].copy_from_slice(&len.to_le_bytes());
        self.0[36..39].fill(0);
        self.0[39] = sgl_type;
    }
}

/// The status field of a completion: type, code and Do Not Retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Status code type (0 generic, 1 command specific, 2 media and data integrity).
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do Not Retry: the same command will fail again.
    pub dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status::new(0, 0x00, false);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Status = Status::new(0, 0x01, true);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Status = Status::new(0, 0x02, true);
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Status = Status::new(0, 0x04, false);
    /// Internal Error.
    pub const INTERNAL: Status = Status::new(0, 0x06, false);
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: Status = Status::new(0, 0x0b, true);
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE: Status = Status::new(0, 0x0c, true);
    /// Data SGL Length Invalid.
    pub const SGL_LENGTH_INVALID: Status = Status::new(0, 0x0f, true);
    /// SGL Descriptor Type Invalid.
    pub const SGL_TYPE_INVALID: Status = Status::new(0, 0x11, true);
    /// Namespace is Write Protected.
    pub const WRITE_PROTECTED: Status = Status::new(0, 0x20, true);
    /// Transient Transport Error (a data digest mismatch): the host may retry.
    pub const TRANSIENT_TRANSPORT: Status = Status::new(0, 0x22, false);
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: Status = Status::new(0, 0x80, true);
    /// Capacity Exceeded.
    pub const CAPACITY_EXCEEDED: Status = Status::new(0, 0x81, true);
    /// Namespace Not Ready (retry later).
    pub const NAMESPACE_NOT_READY: Status = Status::new(0, 0x82, false);
    /// Command specific: Invalid Queue Identifier.
    pub const INVALID_QUEUE_ID: Status = Status::new(1, 0x01, true);
    /// Command specific: Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT: Status = Status::new(1, 0x05, true);
    /// Command specific: Invalid Log Page.
    pub const INVALID_LOG_PAGE: Status = Status::new(1, 0x09, true);
    /// Command specific: Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Status = Status::new(1, 0x0d, true);
    /// Fabrics Connect: Controller Busy.
    pub const CONNECT_CTRL_BUSY: Status = Status::new(1, 0x81, false);
    /// Fabrics Connect: Invalid Parameters (dw0 says which).
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::new(1, 0x82, true);
    /// Fabrics Connect: Invalid Host.
    pub const CONNECT_INVALID_HOST: Status = Status::new(1, 0x84, true);
    /// Media: Write Fault.
    pub const WRITE_FAULT: Status = Status::new(2, 0x80, false);
    /// Media: Unrecovered Read Error.
    pub const UNRECOVERED_READ: Status = Status::new(2, 0x81, false);

    /// A status from its parts.
    pub const fn new(sct: u8, sc: u8, dnr: bool) -> Self {
        Self { sct, sc, dnr }
    }

    /// Whether this is success.
    pub fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 16-bit field of the CQE (phase tag 0).
    pub fn to_wire(self) -> u16 {
        (u16::from(self.sc) << 1) | (u16::from(self.sct & 7) << 9) | (u16::from(self.dnr) << 15)
    }

    /// Parse the CQE's 16-bit field.
    pub fn from_wire(w: u16) -> Self {
        Self {
            sc: (w >> 1) as u8,
            sct: ((w >> 9) & 7) as u8,
            dnr: w & 0x8000 != 0,
        }
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// Command-specific result (dwords 0 and 1; Property Get returns 8 bytes here).
    pub result: u64,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue id.
    pub sqid: u16,
    /// Command id.
    pub cid: u16,
    /// Status.
    pub status: Status,
}

impl Cqe {
    /// Encode to its 16 bytes.
    pub fn encode(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..8].copy_from_slice(&self.result.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.to_wire().to_le_bytes());
        b
    }

    /// Decode from its 16 bytes.
    pub fn decode(b: &[u8; CQE_LEN]) -> Self {
        let mut r = [0u8; 8];
        r.copy_from_slice(&b[0..8]);
        Self {
            result: u64::from_le_bytes(r),
            sqhd: u16::from_le_bytes([b[8], b[9]]),
            sqid: u16::from_le_bytes([b[10], b[11]]),
            cid: u16::from_le_bytes([b[12], b[13]]),
            status: Status::from_wire(u16::from_le_bytes([b[14], b[15]])),
        }
    }
}

/// Which way a command moves data, from its opcode's two low bits (Fabrics Connect carries
/// host data whatever its opcode says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// No data.
    None,
    /// Host to controller (writes, Connect, DSM ranges).
    HostToController,
    /// Controller to host (reads, Identify, logs).
    ControllerToHost,
}

impl Direction {
    /// The direction of `sqe`.
    pub fn of(sqe: &Sqe) -> Self {
        if sqe.opcode() == FABRICS {
            return match sqe.fctype() {
                FCTYPE_CONNECT => Direction::HostToController,
                _ => Direction::None,
            };
        }
        match sqe.opcode() & 3 {
            1 => Direction::HostToController,
            2 => Direction::ControllerToHost,
            _ => Direction::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the CQE's status field places SC, SCT and DNR where the spec says, and a CQE
    /// round-trips.
    #[test]
    fn status_and_cqe_layout() {
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_wire(), (0x80 << 1) | 0x8000);
        assert_eq!(Status::WRITE_FAULT.to_wire(), (0x80 << 1) | (2 << 9));
        for s in [
            Status::SUCCESS,
            Status::CONNECT_INVALID_HOST,
            Status::AER_LIMIT,
        ] {
            assert_eq!(Status::from_wire(s.to_wire()), s);
        }
        let cqe = Cqe {
            result: 7,
            sqhd: 1,
            sqid: 2,
            cid: 3,
            status: Status::INVALID_FIELD,
        };
        assert_eq!(Cqe::decode(&cqe.encode()), cqe);
        assert_eq!(
            Direction::of(&Sqe::new(NVM_WRITE, 1)),
            Direction::HostToController
        );
        assert_eq!(
            Direction::of(&Sqe::new(NVM_READ, 1)),
            Direction::ControllerToHost
        );
        assert_eq!(Direction::of(&Sqe::new(NVM_FLUSH, 1)), Direction::None);
    }
}
