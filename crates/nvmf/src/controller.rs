//! A controller: what one host's association with one subsystem shares across its queues
//! (registers, features, held Asynchronous Event Requests), and the admin commands run on
//! its admin queue. A volume controller has one namespace (the volume); the discovery
//! controller lists the volumes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use basalt_nbd::{BlockDevice, Exports};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::command::*;
use crate::identify::{self, ControllerInfo, Namespace};
use crate::queue::{Outgoing, Reply};

/// CC.EN.
const CC_EN: u32 = 1;
/// CSTS.RDY.
const CSTS_RDY: u32 = 1;
/// CSTS.SHST = shutdown processing complete.
const CSTS_SHST_COMPLETE: u32 = 0b10 << 2;

/// Property offsets (controller registers).
const PROP_CAP: u32 = 0x00;
const PROP_VS: u32 = 0x08;
const PROP_CC: u32 = 0x14;
const PROP_CSTS: u32 = 0x1c;

/// Feature ids this target knows.
const FEAT_ARBITRATION: u8 = 0x01;
const FEAT_VOLATILE_WC: u8 = 0x06;
const FEAT_NUM_QUEUES: u8 = 0x07;
const FEAT_ASYNC_EVENT: u8 = 0x0b;
const FEAT_KATO: u8 = 0x0f;

/// Log page ids.
const LOG_ERROR: u8 = 0x01;
const LOG_SMART: u8 = 0x02;
const LOG_FIRMWARE: u8 = 0x03;
const LOG_CHANGED_NS: u8 = 0x04;
const LOG_ANA: u8 = 0x0c;
const LOG_DISCOVERY: u8 = 0x70;

/// AER completion of a namespace attribute notice: type 2 (notice), info 0, log 04h.
const AEN_NS_CHANGED: u64 = 0x02 | ((LOG_CHANGED_NS as u64) << 16);

/// What a controller serves.
pub(crate) enum Kind {
    /// The discovery controller: lists subsystems, no I/O queues.
    Discovery {
        /// The catalogue it lists.
        exports: Arc<dyn Exports>,
    },
    /// One volume as namespace 1.
    Volume {
        /// Volume name.
        name: String,
        /// The storage.
        device: Arc<dyn BlockDevice>,
    },
}

/// Mutable state of a controller.
struct State {
    cc: u32,
    csts: u32,
    /// I/O queues granted by Set Features (Number of Queues).
    io_queues: u16,
    /// I/O queue ids connected now.
    connected: Vec<u16>,
    kato_ms: u32,
    aec: u32,
    /// Held AER command ids, oldest first (at most [`identify::MAX_HELD_AERS`]).
    aers: VecDeque<u16>,
    /// Events waiting for an AER.
    events: VecDeque<u64>,
    /// The changed namespace list holds namespace 1 and its notice is not yet read
    /// (further notices of the type are masked meanwhile).
    ns_changed: bool,
}

/// One controller (one host's association with one subsystem).
pub(crate) struct Controller {
    /// Controller id.
    pub cntlid: u16,
    /// What it serves.
    pub kind: Kind,
    /// Subsystem NQN.
    pub subnqn: String,
    /// The host's NQN (I/O queues must come from the same host).
    pub hostnqn: String,
    /// Where the admin queue's completions go (AERs complete from other tasks).
    admin_tx: mpsc::Sender<Outgoing>,
    /// The address the host reached us at (the discovery log's address).
    local_addr: Option<SocketAddr>,
    /// Most I/O queues a host may create.
    max_io_queues: u16,
    /// The size last reported to the host (a change raises a namespace notice).
    reported_size: AtomicU64,
    /// Set once the admin queue is gone: the controller is being torn down.
    pub closed: AtomicBool,
    /// Counts the I/O commands of a volume controller (None: no metrics kept).
    pub(crate) recorder: Option<basalt_metrics::frontend::Recorder>,
    state: Mutex<State>,
}

impl Controller {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        cntlid: u16,
        kind: Kind,
        subnqn: String,
        hostnqn: String,
        kato_ms: u32,
        admin_tx: mpsc::Sender<Outgoing>,
        local_addr: Option<SocketAddr>,
        max_io_queues: u16,
        recorder: Option<basalt_metrics::frontend::Recorder>,
    ) -> Self {
        let size = match &kind {
            Kind::Volume { device, .. } => device.size(),
            Kind::Discovery { .. } => 0,
        };
        Self {
            cntlid,
            kind,
            subnqn,
            hostnqn,
            admin_tx,
            local_addr,
            max_io_queues,
            reported_size: AtomicU64::new(size),
            closed: AtomicBool::new(false),
            recorder,
            state: Mutex::new(State {
                cc: 0,
                csts: 0,
                io_queues: 0,
                connected: Vec::new(),
                kato_ms,
                aec: 0,
                aers: VecDeque::new(),
                events: VecDeque::new(),
                ns_changed: false,
            }),
        }
    }

    // A panic while holding this lock leaves plain values behind: still usable.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device of a volume controller.
    pub(crate) fn device(&self) -> Option<&Arc<dyn BlockDevice>> {
        match &self.kind {
            Kind::Volume { device, .. } => Some(device),
            Kind::Discovery { .. } => None,
        }
    }

    /// The keep-alive timeout the host asked for (0: none).
    pub(crate) fn kato_ms(&self) -> u32 {
        self.state().kato_ms
    }

    /// Whether the controller is enabled and ready (I/O queues may connect).
    pub(crate) fn ready(&self) -> bool {
        self.state().csts & CSTS_RDY != 0
    }

    /// Register I/O queue `qid`; false when it is out of range or already connected.
    pub(crate) fn attach_io_queue(&self, qid: u16) -> bool {
        let mut s = self.state();
        let granted = if s.io_queues == 0 {
            self.max_io_queues
        } else {
            s.io_queues
        };
        if qid == 0 || qid > granted || s.connected.contains(&qid) {
            return false;
        }
        s.connected.push(qid);
        true
    }

    /// Forget I/O queue `qid` (its connection ended).
    pub(crate) fn detach_io_queue(&self, qid: u16) {
        self.state().connected.retain(|q| *q != qid);
    }

    /// The namespace as Identify shows it now.
    pub(crate) fn namespace(&self) -> Option<Namespace> {
        let device = self.device()?;
        let size = device.size();
        let block_shift = if size.is_multiple_of(4096) { 12 } else { 9 };
        let id = device.identity().unwrap_or_else(|| match &self.kind {
            Kind::Volume { name, .. } => fnv1a(name.as_bytes()),
            Kind::Discovery { .. } => 0,
        });
        Some(Namespace {
            size_bytes: size >> block_shift << block_shift,
            block_shift,
            uuid: identify::uuid_of(id),
            read_only: device.read_only(),
            trim_zeroes: device.trim_zeroes(),
        })
    }

    /// Serial number: the same for a subsystem on every gateway (multipath needs that).
    fn serial(&self) -> String {
        match self.namespace() {
            Some(ns) => format!(
                "basalt-{:016x}",
                u64::from_be_bytes(ns.uuid[8..16].try_into().unwrap_or([0; 8]))
            ),
            None => "basalt-discovery".into(),
        }
    }

    /// Check the volume's size; when it changed since last reported, raise a namespace
    /// attribute notice (if the host enabled them and the last one was read).
    pub(crate) fn poll_size(&self) {
        let Some(device) = self.device() else { return };
        let size = device.size();
        if self.reported_size.swap(size, Ordering::AcqRel) == size {
            return;
        }
        tracing::info!(cntlid = self.cntlid, subnqn = %self.subnqn, size, "namespace size changed");
        let mut s = self.state();
        if s.ns_changed {
            return;
        }
        s.ns_changed = true;
        if s.aec & identify::OAES_NS_ATTR != 0 {
            s.events.push_back(AEN_NS_CHANGED);
            self.deliver(&mut s);
        }
    }

    /// Complete held AERs with waiting events.
    fn deliver(&self, s: &mut State) {
        while !s.events.is_empty() && !s.aers.is_empty() {
            let (Some(result), Some(cid)) = (s.events.pop_front(), s.aers.pop_front()) else {
                break;
            };
            let cqe = Cqe {
                result,
                sqhd: 0,
                sqid: 0,
                cid,
                status: Status::SUCCESS,
            };
            // Bounded channel: if the admin queue is gone or full, the event is lost with
            // the queue (the host rescans on reconnect).
            if self.admin_tx.try_send(Outgoing::Response(cqe)).is_err() {
                tracing::debug!(cntlid = self.cntlid, "AER completion dropped");
            }
        }
    }

    /// Run one admin command (Fabrics Property Get/Set included). `data` is the command's
    /// host data, already gathered.
    pub(crate) async fn admin(&self, sqe: &Sqe, data: Bytes) -> Reply {
        match sqe.opcode() {
            FABRICS => match sqe.fctype() {
                FCTYPE_PROPERTY_GET => self.property_get(sqe),
                FCTYPE_PROPERTY_SET => self.property_set(sqe).await,
                FCTYPE_CONNECT => Reply::status(Status::COMMAND_SEQUENCE),
                _ => Reply::status(Status::INVALID_OPCODE),
            },
            ADMIN_IDENTIFY => self.identify(sqe),
            ADMIN_GET_LOG_PAGE => self.get_log_page(sqe).await,
            ADMIN_GET_FEATURES => self.get_features(sqe),
            ADMIN_SET_FEATURES => self.set_features(sqe, data),
            ADMIN_KEEP_ALIVE => Reply::status(Status::SUCCESS),
            ADMIN_ASYNC_EVENT => self.async_event(sqe),
            // Commands run to completion quickly here; Abort never finds one to abort
            // (dw0 bit 0: not aborted).
            ADMIN_ABORT => Reply::result(1),
            _ => Reply::status(Status::INVALID_OPCODE),
        }
    }

    fn cap(&self) -> u64 {
        let mqes = u64::from(identify::MAX_QUEUE_ENTRIES - 1);
        let cqr = 1 << 16;
        let timeout_500ms = 30 << 24;
        let css_nvm = 1 << 37;
        mqes | cqr | timeout_500ms | css_nvm
    }

    fn property_get(&self, sqe: &Sqe) -> Reply {
        let eight = sqe.byte(40) & 0b111 == 1;
        let offset = sqe.cdw(11);
        let s = self.state();
        let value = match (offset, eight) {
            (PROP_CAP, true) => self.cap(),
            (PROP_CAP, false) => self.cap() & 0xffff_ffff,
            (4, false) => self.cap() >> 32,
            (PROP_VS, false) => u64::from(identify::VERSION),
            (PROP_CC, false) => u64::from(s.cc),
            (PROP_CSTS, false) => u64::from(s.csts),
            _ => return Reply::status(Status::INVALID_FIELD),
        };
        Reply::result(value)
    }

    async fn property_set(&self, sqe: &Sqe) -> Reply {
        let eight = sqe.byte(40) & 0b111 == 1;
        let offset = sqe.cdw(11);
        if offset != PROP_CC || eight {
            return Reply::status(Status::INVALID_FIELD);
        }
        let cc = sqe.cdw(12);
        let shutdown = (cc >> 14) & 0b11 != 0;
        if shutdown {
            // A shutdown notice: make every acknowledged write durable before saying done.
            if let Some(device) = self.device() {
                if let Err(e) = device.flush().await {
                    tracing::warn!(cntlid = self.cntlid, "flush at shutdown failed: {e}");
                }
            }
        }
        let mut s = self.state();
        s.cc = cc;
        if cc & CC_EN != 0 {
            s.csts |= CSTS_RDY;
        } else {
            s.csts &= !CSTS_RDY;
        }
        if shutdown {
            s.csts |= CSTS_SHST_COMPLETE;
        } else {
            s.csts &= !CSTS_SHST_COMPLETE;
        }
        Reply::status(Status::SUCCESS)
    }

    fn identify(&self, sqe: &Sqe) -> Reply {
        let cns = (sqe.cdw(10) & 0xff) as u8;
        let csi = (sqe.cdw(11) >> 24) as u8;
        let discovery = self.device().is_none();
        if cns == 0x01 {
            return Reply::data(identify::controller(&ControllerInfo {
                cntlid: self.cntlid,
                subnqn: self.subnqn.clone(),
                serial: self.serial(),
                discovery,
            }));
        }
        let Some(ns) = self.namespace() else {
            return Reply::status(Status::INVALID_FIELD);
        };
        let nsid = sqe.nsid();
        let ns_ok = nsid == identify::NSID;
        match cns {
            0x00 | 0x03 | 0x05 | 0x08 if !ns_ok => Reply::status(Status::INVALID_NAMESPACE),
            0x00 => Reply::data(identify::namespace(&ns)),
            0x02 => {
                if nsid >= 0xffff_fffe {
                    return Reply::status(Status::INVALID_NAMESPACE);
                }
                Reply::data(identify::active_namespaces(nsid))
            }
            0x03 => Reply::data(identify::namespace_descriptors(&ns)),
            // NVM command set specific namespace / controller data: nothing beyond the
            // defaults (no limits on DSM ranges or Write Zeroes size).
            0x05 | 0x06 if csi == 0 => Reply::data(vec![0u8; identify::IDENTIFY_LEN]),
            0x08 => Reply::data(identify::namespace_independent(&ns)),
            _ => Reply::status(Status::INVALID_FIELD),
        }
    }

    async fn get_log_page(&self, sqe: &Sqe) -> Reply {
        let cdw10 = sqe.cdw(10);
        let lid = (cdw10 & 0xff) as u8;
        let retain = cdw10 & (1 << 15) != 0;
        let numd = u64::from(cdw10 >> 16) | (u64::from(sqe.cdw(11) & 0xffff) << 16);
        let len = (numd + 1) * 4;
        let offset = u64::from(sqe.cdw(12)) | (u64::from(sqe.cdw(13)) << 32);
        let page = match (&self.kind, lid) {
            (Kind::Discovery { exports }, LOG_DISCOVERY) => match self.discovery_log(exports).await
            {
                Ok(p) => p,
                Err(status) => return Reply::status(status),
            },
            (Kind::Volume { .. }, LOG_ERROR) => vec![0u8; identify::ERROR_ENTRY_LEN],
            (Kind::Volume { .. }, LOG_SMART) => identify::smart_log(),
            (Kind::Volume { .. }, LOG_FIRMWARE) => identify::firmware_log(),
            (Kind::Volume { .. }, LOG_ANA) => identify::ana_log((cdw10 >> 8) & 1 != 0),
            (Kind::Volume { .. }, LOG_CHANGED_NS) => {
                let mut s = self.state();
                let page = identify::changed_namespaces(s.ns_changed);
                if !retain {
                    s.ns_changed = false;
                }
                page
            }
            _ => return Reply::status(Status::INVALID_LOG_PAGE),
        };
        if offset % 4 != 0 || offset > page.len() as u64 {
            return Reply::status(Status::INVALID_FIELD);
        }
        let start = offset as usize;
        let end = (offset.saturating_add(len)).min(page.len() as u64) as usize;
        // Past the page's end the host reads zeroes, up to what it asked for.
        let mut out = page[start..end].to_vec();
        let want = len.min(u64::from(identify::MAX_TRANSFER_BYTES)) as usize;
        out.resize(want.max(out.len()), 0);
        Reply::data(out)
    }

    async fn discovery_log(&self, exports: &Arc<dyn Exports>) -> Result<Vec<u8>, Status> {
        let list = exports.list().await.map_err(|e| {
            tracing::warn!("discovery: list volumes: {e}");
            Status::INTERNAL
        })?;
        let (traddr, trsvcid, ipv6) = match self.local_addr {
            Some(a) => (a.ip().to_string(), a.port().to_string(), a.is_ipv6()),
            None => (String::new(), String::new(), false),
        };
        let entries: Vec<_> = list
            .iter()
            .map(|e| identify::DiscoveryEntry {
                subnqn: identify::volume_nqn(&e.name),
                traddr: traddr.clone(),
                trsvcid: trsvcid.clone(),
                ipv6,
            })
            .collect();
        // The generation changes whenever the list does (hosts re-read on a change).
        let names: Vec<u8> = list
            .iter()
            .flat_map(|e| e.name.bytes().chain([0]))
            .collect();
        Ok(identify::discovery_log(fnv1a(&names), &entries))
    }

    fn get_features(&self, sqe: &Sqe) -> Reply {
        let fid = (sqe.cdw(10) & 0xff) as u8;
        let sel = (sqe.cdw(10) >> 8) & 0b111;
        let volume = self.device().is_some();
        let known = matches!(fid, FEAT_ARBITRATION | FEAT_ASYNC_EVENT | FEAT_KATO)
            || (volume && matches!(fid, FEAT_VOLATILE_WC | FEAT_NUM_QUEUES));
        if !known {
            return Reply::status(Status::INVALID_FIELD);
        }
        if sel == 3 {
            // Supported capabilities: changeable (bit 2), not saveable.
            let changeable = matches!(fid, FEAT_ASYNC_EVENT | FEAT_KATO | FEAT_NUM_QUEUES);
            return Reply::result(if changeable { 0b100 } else { 0 });
        }
        let s = self.state();
        let value = match fid {
            FEAT_ARBITRATION => 0,
            FEAT_VOLATILE_WC => 1,
            FEAT_NUM_QUEUES => {
                let n = u32::from(if s.io_queues == 0 {
                    self.max_io_queues
                } else {
                    s.io_queues
                }) - 1;
                n | (n << 16)
            }
            FEAT_ASYNC_EVENT => s.aec,
            FEAT_KATO => s.kato_ms,
            _ => return Reply::status(Status::INVALID_FIELD),
        };
        Reply::result(u64::from(value))
    }

    fn set_features(&self, sqe: &Sqe, _data: Bytes) -> Reply {
        let fid = (sqe.cdw(10) & 0xff) as u8;
        if sqe.cdw(10) & (1 << 31) != 0 {
            return Reply::status(Status::FEATURE_NOT_SAVEABLE);
        }
        let value = sqe.cdw(11);
        let volume = self.device().is_some();
        let mut s = self.state();
        match fid {
            FEAT_NUM_QUEUES if volume => {
                let nsqr = value & 0xffff;
                let ncqr = value >> 16;
                if nsqr == 0xffff || ncqr == 0xffff {
                    return Reply::status(Status::INVALID_FIELD);
                }
                if !s.connected.is_empty() {
                    return Reply::status(Status::COMMAND_SEQUENCE);
                }
                let want = nsqr.max(ncqr) + 1;
                let granted = want.min(u32::from(self.max_io_queues)) as u16;
                s.io_queues = granted;
                let n = u64::from(granted - 1);
                Reply::result(n | (n << 16))
            }
            FEAT_ASYNC_EVENT => {
                s.aec = value;
                Reply::status(Status::SUCCESS)
            }
            FEAT_KATO => {
                s.kato_ms = value;
                Reply::status(Status::SUCCESS)
            }
            // The cache cannot be turned off: writes stay volatile until Flush or FUA.
            FEAT_VOLATILE_WC if volume && value & 1 == 1 => Reply::status(Status::SUCCESS),
            _ => Reply::status(Status::INVALID_FIELD),
        }
    }

    fn async_event(&self, sqe: &Sqe) -> Reply {
        let mut s = self.state();
        if s.aers.len() >= identify::MAX_HELD_AERS {
            return Reply::status(Status::AER_LIMIT);
        }
        s.aers.push_back(sqe.cid());
        self.deliver(&mut s);
        Reply::Held
    }
}

/// FNV-1a, 64 bits: a stable id from bytes (namespace ids of devices without one, the
/// discovery log's generation).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
