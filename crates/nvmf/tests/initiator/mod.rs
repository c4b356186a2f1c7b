//! A small NVMe/TCP initiator for the protocol tests: ICReq, Fabrics Connect, properties,
//! admin and NVM commands with in-capsule or R2T data, several commands in flight. Every
//! read from the target is bounded in time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use basalt_nvmf::command::*;
use basalt_nvmf::pdu::{self, CommonHeader, Digests, IcReq, Pdu};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest the target may take to send the next PDU.
pub const PDU_TIMEOUT: Duration = Duration::from_secs(10);
/// The host NQN the tests connect as.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:basalt-test-host";

/// What the target sent that ends the conversation.
#[derive(Debug)]
pub enum Ended {
    /// A C2HTermReq.
    Term(pdu::TermReq),
    /// The connection closed.
    Closed,
}

/// One connection (one queue) to the target.
pub struct Initiator {
    stream: TcpStream,
    pub digests: Digests,
    next_cid: u16,
    /// Data of writes waiting for an R2T, by command id.
    to_send: HashMap<u16, Bytes>,
    /// C2HData received, by command id.
    received: HashMap<u16, Vec<u8>>,
    pub cntlid: u16,
}

impl Initiator {
    /// Open a TCP connection without the ICReq (for tests of bad first PDUs).
    pub async fn raw(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connect to the target");
        stream.set_nodelay(true).expect("nodelay");
        Self {
            stream,
            digests: Digests::default(),
            next_cid: 1,
            to_send: HashMap::new(),
            received: HashMap::new(),
            cntlid: 0,
        }
    }

    /// Connect and exchange ICReq/ICResp asking for `digests`.
    pub async fn connect(addr: SocketAddr, digests: Digests) -> Self {
        let mut i = Self::raw(addr).await;
        let req = Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests,
            maxr2t: 0,
        });
        i.send_raw(&pdu::encode(&req, Digests::default(), 0)).await;
        match i.read_pdu().await {
            Ok(Pdu::IcResp(r)) => {
                assert_eq!(
                    r.digests, digests,
                    "the target grants the digests asked for"
                );
                assert!(r.maxh2cdata >= 4096 && r.maxh2cdata % 4 == 0);
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
        i.digests = digests;
        i
    }

    /// Send bytes as they are.
    pub async fn send_raw(&mut self, b: &[u8]) {
        self.stream.write_all(b).await.expect("send to the target");
    }

    /// Send one PDU with the negotiated digests.
    pub async fn send(&mut self, p: &Pdu) {
        let b = pdu::encode(p, self.digests, 0);
        self.send_raw(&b).await;
    }

    /// Read one PDU (Err: the target closed or sent garbage).
    pub async fn read_pdu(&mut self) -> Result<Pdu, Ended> {
        let mut chb = [0u8; pdu::COMMON_LEN];
        let read = tokio::time::timeout(PDU_TIMEOUT, self.stream.read_exact(&mut chb))
            .await
            .expect("the target answers in time");
        if read.is_err() {
            return Err(Ended::Closed);
        }
        let ch = CommonHeader::parse(&chb);
        let mut buf = BytesMut::zeroed(ch.plen as usize);
        buf[..pdu::COMMON_LEN].copy_from_slice(&chb);
        tokio::time::timeout(
            PDU_TIMEOUT,
            self.stream.read_exact(&mut buf[pdu::COMMON_LEN..]),
        )
        .await
        .expect("the target finishes its PDU in time")
        .expect("read the PDU's body");
        let p = pdu::decode(buf.freeze(), self.digests).expect("the target's PDU decodes");
        match p {
            Pdu::C2hTermReq(t) => Err(Ended::Term(t)),
            p => Ok(p),
        }
    }

    /// Expect the target to end the connection: its TermReq (None: a plain close).
    pub async fn expect_end(&mut self) -> Option<pdu::TermReq> {
        // Loop bound: PDUs already queued before the TermReq, at most a few.
        for _ in 0..64 {
            match self.read_pdu().await {
                Ok(_) => continue,
                Err(Ended::Term(t)) => {
                    let mut rest = [0u8; 1];
                    let n = tokio::time::timeout(PDU_TIMEOUT, self.stream.read(&mut rest))
                        .await
                        .expect("the target closes after its TermReq");
                    assert!(matches!(n, Ok(0) | Err(_)), "nothing follows a TermReq");
                    return Some(t);
                }
                Err(Ended::Closed) => return None,
            }
        }
        panic!("the target kept talking instead of closing");
    }

    /// A fresh command id.
    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Send `sqe` (its cid set by the caller) with `data` in the capsule or, when
    /// `in_capsule` is false, on the target's R2T. `read_len`: bytes the host expects back.
    pub async fn submit(
        &mut self,
        mut sqe: Sqe,
        data: Option<Bytes>,
        in_capsule: bool,
        read_len: u32,
    ) {
        let cid = sqe.cid();
        let capsule_data = match data {
            Some(d) if in_capsule => {
                sqe.set_sgl(SGL_DATA_OFFSET, d.len() as u32);
                d
            }
            Some(d) => {
                sqe.set_sgl(SGL_TRANSPORT, d.len() as u32);
                self.to_send.insert(cid, d);
                Bytes::new()
            }
            None => {
                sqe.set_sgl(SGL_TRANSPORT, read_len);
                Bytes::new()
            }
        };
        self.send(&Pdu::CapsuleCmd {
            sqe,
            data: capsule_data,
        })
        .await;
    }

    /// Serve R2Ts and gather C2HData until the next completion; its data comes with it.
    pub async fn next_completion(&mut self) -> (Cqe, Vec<u8>) {
        // Loop bound: each turn consumes one PDU; the test's commands are finite.
        loop {
            match self.read_pdu().await {
                Ok(Pdu::CapsuleResp(cqe)) => {
                    let data = self.received.remove(&cqe.cid).unwrap_or_default();
                    return (cqe, data);
                }
                Ok(Pdu::C2hData(d)) => {
                    let buf = self.received.entry(d.cccid).or_default();
                    assert_eq!(d.offset as usize, buf.len(), "C2HData in order");
                    buf.extend_from_slice(&d.data);
                }
                Ok(Pdu::R2t(r)) => {
                    let data = self
                        .to_send
                        .remove(&r.cccid)
                        .expect("R2T for a write we sent");
                    let piece = data.slice(r.offset as usize..(r.offset + r.len) as usize);
                    self.send(&Pdu::H2cData(pdu::DataPdu {
                        cccid: r.cccid,
                        ttag: r.ttag,
                        offset: r.offset,
                        last: true,
                        success: false,
                        data: piece,
                    }))
                    .await;
                }
                Ok(other) => panic!("unexpected PDU {other:?}"),
                Err(e) => panic!("connection ended: {e:?}"),
            }
        }
    }

    /// Run one command to its completion.
    pub async fn run(
        &mut self,
        sqe: Sqe,
        data: Option<Bytes>,
        in_capsule: bool,
        read_len: u32,
    ) -> (Cqe, Vec<u8>) {
        self.submit(sqe, data, in_capsule, read_len).await;
        let (cqe, data) = self.next_completion().await;
        assert_eq!(cqe.cid, sqe.cid());
        (cqe, data)
    }

    /// Fabrics Connect of queue `qid` to `subnqn` (controller `cntlid`, 0xffff: new).
    pub async fn fabrics_connect(
        &mut self,
        qid: u16,
        sqsize: u16,
        subnqn: &str,
        cntlid: u16,
        kato_ms: u32,
    ) -> Cqe {
        let cid = self.cid();
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_byte(4, FCTYPE_CONNECT);
        sqe.set_cdw(10, u32::from(qid) << 16);
        sqe.set_cdw(11, u32::from(sqsize));
        sqe.set_cdw(12, kato_ms);
        let mut data = vec![0u8; 1024];
        data[16..18].copy_from_slice(&cntlid.to_le_bytes());
        data[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
        data[512..512 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
        let (cqe, _) = self.run(sqe, Some(Bytes::from(data)), true, 0).await;
        if cqe.status.is_success() {
            self.cntlid = cqe.result as u16;
        }
        cqe
    }

    /// Property Get (`eight`: 8-byte property).
    pub async fn property_get(&mut self, offset: u32, eight: bool) -> u64 {
        let cid = self.cid();
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_byte(4, FCTYPE_PROPERTY_GET);
        sqe.set_byte(40, u8::from(eight));
        sqe.set_cdw(11, offset);
        let (cqe, _) = self.run(sqe, None, false, 0).await;
        assert!(
            cqe.status.is_success(),
            "property get {offset:#x}: {:?}",
            cqe.status
        );
        cqe.result
    }

    /// Property Set of a 4-byte property.
    pub async fn property_set(&mut self, offset: u32, value: u32) -> Cqe {
        let cid = self.cid();
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_byte(4, FCTYPE_PROPERTY_SET);
        sqe.set_cdw(11, offset);
        sqe.set_cdw(12, value);
        self.run(sqe, None, false, 0).await.0
    }

    /// Connect an admin queue to `subnqn` and enable the controller, as the kernel does.
    pub async fn admin(addr: SocketAddr, subnqn: &str, digests: Digests, kato_ms: u32) -> Self {
        let mut a = Self::connect(addr, digests).await;
        let cqe = a.fabrics_connect(0, 31, subnqn, 0xffff, kato_ms).await;
        assert!(cqe.status.is_success(), "admin connect: {:?}", cqe.status);
        let cap = a.property_get(0, true).await;
        assert_eq!(cap & 0xffff, 127, "CAP.MQES");
        // IOCQES 4, IOSQES 6, EN.
        assert!(a
            .property_set(0x14, (4 << 20) | (6 << 16) | 1)
            .await
            .status
            .is_success());
        assert_eq!(a.property_get(0x1c, false).await & 1, 1, "CSTS.RDY");
        a
    }

    /// An admin command with no host data and `len` bytes back.
    pub async fn admin_cmd(
        &mut self,
        opcode: u8,
        nsid: u32,
        cdws: &[(usize, u32)],
        len: u32,
    ) -> (Cqe, Vec<u8>) {
        let cid = self.cid();
        let mut sqe = Sqe::new(opcode, cid);
        sqe.set_nsid(nsid);
        for (n, v) in cdws {
            sqe.set_cdw(*n, *v);
        }
        self.run(sqe, None, false, len).await
    }

    /// Get Log Page `lid` of `nsid`, `len` bytes (a multiple of 4).
    pub async fn get_log(&mut self, lid: u8, nsid: u32, len: u32) -> (Cqe, Vec<u8>) {
        let numd = len / 4 - 1;
        let cdws = [(10, u32::from(lid) | (numd << 16)), (11, numd >> 16)];
        self.admin_cmd(ADMIN_GET_LOG_PAGE, nsid, &cdws, len).await
    }

    /// An NVM read/write-style command's SQE.
    pub fn nvm(&mut self, opcode: u8, slba: u64, blocks: u32, cdw12_flags: u32) -> Sqe {
        let cid = self.cid();
        let mut sqe = Sqe::new(opcode, cid);
        sqe.set_nsid(1);
        sqe.set_cdw(10, slba as u32);
        sqe.set_cdw(11, (slba >> 32) as u32);
        sqe.set_cdw(12, (blocks - 1) | cdw12_flags);
        sqe
    }
}
