//! The data structures the target returns to Identify and Get Log Page: controller and
//! namespace data, the active namespace list, namespace descriptors, the error, SMART,
//! firmware and changed-namespace logs, and the discovery log. Pure builders over plain
//! values (offsets from the NVMe base spec and the NVMe-oF spec; all little endian).

/// Length of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;
/// The discovery subsystem's NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Prefix of every Basalt volume's subsystem NQN (the volume name follows).
pub const NQN_PREFIX: &str = "nqn.2026-01.io.basalt:";
/// Version reported in VS and Identify (NVMe 1.3: what the Linux initiator needs, without
/// the 2.0 command-set-independent identify paths).
pub const VERSION: u32 = 0x0001_0300;
/// Maximum Data Transfer Size as a power of two of 4 KiB pages (5: 128 KiB).
pub const MDTS: u8 = 5;
/// Bytes one command may move ([`MDTS`] in bytes).
pub const MAX_TRANSFER_BYTES: u32 = 4096 << MDTS;
/// Asynchronous Event Requests held at once (AERL is this minus one).
pub const MAX_HELD_AERS: usize = 4;
/// Queue entries per queue (CAP.MQES is this minus one); also the in-flight bound of a
/// queue: the host never has more commands outstanding than entries.
pub const MAX_QUEUE_ENTRIES: u16 = 128;
/// Bytes of in-capsule data an I/O queue accepts (IOCCSZ covers the 64-byte SQE plus this).
pub const IN_CAPSULE_IO_BYTES: u32 = 8192;
/// OAES bit: namespace attribute notices (the size of a namespace changed).
pub const OAES_NS_ATTR: u32 = 1 << 8;
/// The one namespace id of a volume subsystem.
pub const NSID: u32 = 1;
/// The one ANA group (every gateway reports it optimized).
pub const ANA_GROUP: u32 = 1;
/// ANA state: optimized.
pub const ANA_OPTIMIZED: u8 = 0x01;

/// The subsystem NQN of volume `name`.
pub fn volume_nqn(name: &str) -> String {
    format!("{NQN_PREFIX}{name}")
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// `s` in a fixed-width ASCII field, space padded (serial, model, firmware).
fn put_ascii(buf: &mut [u8], at: usize, len: usize, s: &str) {
    let field = &mut buf[at..at + len];
    field.fill(b' ');
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// `s` in a fixed-width field, NUL padded (NQNs, addresses).
fn put_str(buf: &mut [u8], at: usize, len: usize, s: &str) {
    let n = s.len().min(len - 1);
    buf[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
}

/// What Identify Controller says of one controller.
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    /// Controller id.
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Serial number (the same on every gateway serving the subsystem).
    pub serial: String,
    /// A discovery controller (else an I/O controller with one namespace).
    pub discovery: bool,
}

/// Identify Controller (CNS 01h).
pub fn controller(c: &ControllerInfo) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    put_ascii(&mut b, 4, 20, &c.serial);
    put_ascii(
        &mut b,
        24,
        40,
        if c.discovery {
            "Basalt discovery"
        } else {
            "Basalt volume"
        },
    );
    put_ascii(&mut b, 64, 8, env!("CARGO_PKG_VERSION"));
    b[72] = 6; // RAB: recommended arbitration burst
               // CMIC: several ports and controllers (multipath across gateways), ANA reporting.
    b[76] = if c.discovery { 0 } else { 0b1011 };
    b[77] = MDTS;
    put(&mut b, 78, &c.cntlid.to_le_bytes());
    put(&mut b, 80, &VERSION.to_le_bytes());
    let oaes = if c.discovery { 0 } else { OAES_NS_ATTR };
    put(&mut b, 92, &oaes.to_le_bytes());
    b[111] = if c.discovery { 2 } else { 1 }; // CNTRLTYPE
    b[258] = 3; // ACL: 4 aborts
    b[259] = (MAX_HELD_AERS - 1) as u8; // AERL
    b[260] = 0b11; // FRMW: slot 1 read-only, one slot
    b[261] = 0b100; // LPA: extended data for Get Log Page (offsets)
    b[262] = 0; // ELPE: one error log entry
    put(&mut b, 266, &343u16.to_le_bytes()); // WCTEMP (K)
    put(&mut b, 268, &373u16.to_le_bytes()); // CCTEMP (K)
    put(&mut b, 320, &1u16.to_le_bytes()); // KAS: 100 ms granularity
    if !c.discovery {
        b[342] = 10; // ANATT: seconds a transition may take
                     // ANACAP: reports the optimized state; group ids do not change while attached.
        b[343] = 0b0100_0001;
        put(&mut b, 344, &ANA_GROUP.to_le_bytes()); // ANAGRPMAX
        put(&mut b, 348, &ANA_GROUP.to_le_bytes()); // NANAGRPID
        put(&mut b, 540, &1u32.to_le_bytes()); // MNAN
    }
    b[512] = 0x66; // SQES: 64 bytes
    b[513] = 0x44; // CQES: 16 bytes
    put(&mut b, 514, &MAX_QUEUE_ENTRIES.to_le_bytes()); // MAXCMD
    if !c.discovery {
        put(&mut b, 516, &1u32.to_le_bytes()); // NN
                                               // ONCS: Dataset Management (2), Write Zeroes (3).
        put(&mut b, 520, &0b1100u16.to_le_bytes());
        b[525] = 1; // VWC: a volatile write cache (Flush and FUA matter)
    }
    // SGLS: SGLs supported (bit 0), in-capsule data offsets (bit 20).
    put(&mut b, 536, &((1u32 << 0) | (1 << 20)).to_le_bytes());
    put_str(&mut b, 768, 256, &c.subnqn);
    // Fabrics: IOCCSZ (16-byte units, SQE included), IORCSZ, ICDOFF 0, no keyed SGLs.
    let ioccsz = (64 + IN_CAPSULE_IO_BYTES) / 16;
    put(&mut b, 1792, &ioccsz.to_le_bytes());
    put(&mut b, 1796, &1u32.to_le_bytes());
    // Power state 0: 10 W max (MP in centiwatts), latencies 10 us.
    put(&mut b, 2048, &1000u16.to_le_bytes());
    put(&mut b, 2048 + 4, &10u32.to_le_bytes());
    put(&mut b, 2048 + 8, &10u32.to_le_bytes());
    b
}

/// The one namespace of a volume subsystem.
#[derive(Debug, Clone, Copy)]
pub struct Namespace {
    /// Size in bytes (rounded down to whole blocks).
    pub size_bytes: u64,
    /// log2 of the block size (9 or 12).
    pub block_shift: u8,
    /// UUID and NGUID (the same 16 bytes), derived from the volume's id.
    pub uuid: [u8; 16],
    /// Writes are refused.
    pub read_only: bool,
    /// Deallocated (trimmed) blocks read as zeroes.
    pub trim_zeroes: bool,
}

impl Namespace {
    /// Size in blocks.
    pub fn blocks(&self) -> u64 {
        self.size_bytes >> self.block_shift
    }
}

/// A stable 16-byte id for a volume: "basalt", version 8 and variant bits, the id's 8 bytes.
pub fn uuid_of(id: u64) -> [u8; 16] {
    let mut u = [0u8; 16];
    u[..6].copy_from_slice(b"basalt");
    u[6] = 0x80; // version 8 (vendor-defined)
    let id = id.to_be_bytes();
    u[7] = id[0];
    u[8] = 0x80; // RFC 4122 variant
    u[9..16].copy_from_slice(&id[1..]);
    u
}

/// Identify Namespace (CNS 00h).
pub fn namespace(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let blocks = ns.blocks();
    put(&mut b, 0, &blocks.to_le_bytes()); // NSZE
    put(&mut b, 8, &blocks.to_le_bytes()); // NCAP
    put(&mut b, 16, &blocks.to_le_bytes()); // NUSE
    b[24] = 0b1; // NSFEAT: thin provisioned
    b[25] = 0; // NLBAF: one format
    b[26] = 0; // FLBAS: format 0
    b[30] = 1; // NMIC: may be shared by several controllers
               // DLFEAT: Write Zeroes may deallocate; deallocated blocks read as zeroes (or: unknown).
    b[33] = 0b1000 | u8::from(ns.trim_zeroes);
    put(&mut b, 92, &ANA_GROUP.to_le_bytes()); // ANAGRPID
    put(&mut b, 104, &ns.uuid); // NGUID
                                // LBA format 0: no metadata, 2^block_shift bytes, best performance.
    put(
        &mut b,
        128,
        &(u32::from(ns.block_shift) << 16).to_le_bytes(),
    );
    if ns.read_only {
        b[99] = 1; // NSATTR: write protected
    }
    b
}

/// I/O Command Set Independent Identify Namespace (CNS 08h).
pub fn namespace_independent(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    b[0] = 0b1; // NSFEAT
    b[1] = 1; // NMIC
    put(&mut b, 4, &ANA_GROUP.to_le_bytes()); // ANAGRPID
    b[8] = u8::from(ns.read_only); // NSATTR
    b[14] = 1; // NSTAT: ready
    b
}

/// Active Namespace ID list (CNS 02h): the ids above `after`.
pub fn active_namespaces(after: u32) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    if after < NSID {
        put(&mut b, 0, &NSID.to_le_bytes());
    }
    b
}

/// Namespace Identification Descriptor list (CNS 03h): NGUID, UUID, command set (NVM).
pub fn namespace_descriptors(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let mut at = 0;
    for (nidt, id) in [(2u8, &ns.uuid[..]), (3, &ns.uuid[..]), (4, &[0u8][..])] {
        b[at] = nidt;
        b[at + 1] = id.len() as u8;
        put(&mut b, at + 4, id);
        at += 4 + id.len();
    }
    b
}

/// Length of one error log entry.
pub const ERROR_ENTRY_LEN: usize = 64;
/// Length of the SMART / health log and of the firmware slot log.
pub const SMART_LEN: usize = 512;
/// Length of the changed namespace list log.
pub const CHANGED_NS_LEN: usize = 4096;

/// SMART / Health Information (log 02h): healthy, 100 % spare, 27 °C.
pub fn smart_log() -> Vec<u8> {
    let mut b = vec![0u8; SMART_LEN];
    put(&mut b, 1, &300u16.to_le_bytes()); // composite temperature (K)
    b[3] = 100; // available spare
    b[4] = 10; // available spare threshold
    b
}

/// Firmware Slot Information (log 03h): slot 1 active, this version.
pub fn firmware_log() -> Vec<u8> {
    let mut b = vec![0u8; SMART_LEN];
    b[0] = 1;
    put_ascii(&mut b, 8, 8, env!("CARGO_PKG_VERSION"));
    b
}

/// Changed Namespace List (log 04h): namespace 1 when it changed.
pub fn changed_namespaces(changed: bool) -> Vec<u8> {
    let mut b = vec![0u8; CHANGED_NS_LEN];
    if changed {
        put(&mut b, 0, &NSID.to_le_bytes());
    }
    b
}

/// Asymmetric Namespace Access log (0Ch): one group, optimized, holding namespace 1 (with
/// `groups_only`, the RGO bit, no namespace list).
pub fn ana_log(groups_only: bool) -> Vec<u8> {
    let nsids: u32 = if groups_only { 0 } else { 1 };
    let mut b = vec![0u8; 16 + 32 + 4 * nsids as usize];
    put(&mut b, 8, &1u16.to_le_bytes()); // NGRPS
    put(&mut b, 16, &ANA_GROUP.to_le_bytes());
    put(&mut b, 20, &nsids.to_le_bytes());
    b[32] = ANA_OPTIMIZED;
    if nsids > 0 {
        put(&mut b, 48, &NSID.to_le_bytes());
    }
    b
}

/// One subsystem in the discovery log.
#[derive(Debug, Clone)]
pub struct DiscoveryEntry {
    /// Subsystem NQN.
    pub subnqn: String,
    /// Address to connect to.
    pub traddr: String,
    /// Port.
    pub trsvcid: String,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
}

/// Length of the discovery log's header and of each entry.
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// Discovery Log Page (log 70h).
pub fn discovery_log(generation: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut b = vec![0u8; DISCOVERY_ENTRY_LEN * (1 + entries.len())];
    put(&mut b, 0, &generation.to_le_bytes());
    put(&mut b, 8, &(entries.len() as u64).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let at = DISCOVERY_ENTRY_LEN * (i + 1);
        b[at] = 3; // TRTYPE: TCP
        b[at + 1] = if e.ipv6 { 2 } else { 1 }; // ADRFAM
        b[at + 2] = 2; // SUBTYPE: NVMe subsystem
        b[at + 3] = 0b10; // TREQ: secure channel not required
        put(&mut b, at + 4, &1u16.to_le_bytes()); // PORTID
        put(&mut b, at + 6, &0xffffu16.to_le_bytes()); // CNTLID: dynamic
        put(&mut b, at + 8, &32u16.to_le_bytes()); // ASQSZ
        put_str(&mut b, at + 32, 32, &e.trsvcid);
        put_str(&mut b, at + 256, 256, &e.subnqn);
        put_str(&mut b, at + 512, 256, &e.traddr);
        // TSAS (TCP): SECTYPE 0, no security.
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the fields the Linux initiator checks sit at their spec offsets.
    #[test]
    fn identify_fields_at_their_offsets() {
        let c = controller(&ControllerInfo {
            cntlid: 7,
            subnqn: volume_nqn("vol0"),
            serial: "basalt-1".into(),
            discovery: false,
        });
        assert_eq!(c.len(), IDENTIFY_LEN);
        assert_eq!(&c[4..12], b"basalt-1");
        assert_eq!(u16::from_le_bytes([c[78], c[79]]), 7);
        assert_eq!(c[111], 1);
        assert_eq!(u16::from_le_bytes([c[514], c[515]]), 128, "MAXCMD");
        assert_eq!(&c[768..768 + 26], b"nqn.2026-01.io.basalt:vol0");
        assert_eq!(c[768 + 26], 0);
        assert_eq!(
            u32::from_le_bytes([c[1792], c[1793], c[1794], c[1795]]),
            516
        );
        assert_eq!(u16::from_le_bytes([c[1800], c[1801]]), 0, "ICDOFF");
        assert_eq!(c[76] & 0b1000, 0b1000, "CMIC: ANA reporting");
        assert_eq!(
            u32::from_le_bytes([c[540], c[541], c[542], c[543]]),
            1,
            "MNAN"
        );
        let ana = ana_log(false);
        assert_eq!(
            (ana.len(), ana[8], ana[16], ana[20], ana[32], ana[48]),
            (52, 1, 1, 1, 1, 1)
        );
        let ns = Namespace {
            size_bytes: 1 << 30,
            block_shift: 12,
            uuid: uuid_of(0x0102_0304_0506_0708),
            read_only: false,
            trim_zeroes: true,
        };
        let n = namespace(&ns);
        assert_eq!(u64::from_le_bytes(n[0..8].try_into().unwrap()), 1 << 18);
        assert_eq!(n[128 + 2], 12, "LBADS");
        assert_eq!(&n[104..120], &ns.uuid);
        assert_eq!(ns.uuid[6] >> 4, 8);
        let d = namespace_descriptors(&ns);
        assert_eq!((d[0], d[1]), (2, 16));
        assert_eq!((d[20], d[21]), (3, 16));
        assert_eq!((d[40], d[41], d[44]), (4, 1, 0));
        let log = discovery_log(
            9,
            &[DiscoveryEntry {
                subnqn: volume_nqn("a"),
                traddr: "10.0.2.2".into(),
                trsvcid: "4420".into(),
                ipv6: false,
            }],
        );
        assert_eq!(log.len(), 2048);
        assert_eq!(log[8], 1);
        assert_eq!(&log[1024 + 32..1024 + 36], b"4420");
        assert_eq!(&log[1024 + 512..1024 + 520], b"10.0.2.2");
    }
}
