//! Why a connection ended other than by the host's clean close.

use std::time::Duration;

use thiserror::Error;

use crate::pdu::PduError;

/// The ways a connection can end badly; none affects other connections.
#[derive(Debug, Error)]
pub enum NvmfError {
    /// The socket failed or the host went away mid-PDU.
    #[error("connection i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The host broke the transport protocol (it was sent a C2HTermReq saying why).
    #[error("protocol error: {0}")]
    Protocol(PduError),
    /// The host sent an H2CTermReq.
    #[error("host terminated the connection (fatal error status {fes:#x})")]
    HostTerminated {
        /// Its fatal error status.
        fes: u16,
    },
    /// No ICReq within the bound.
    #[error("no ICReq within {limit:?}")]
    HandshakeTimeout {
        /// The bound.
        limit: Duration,
    },
    /// The admin queue was silent past its keep-alive timeout.
    #[error("keep-alive timeout ({timeout:?} without a command)")]
    KeepAliveExpired {
        /// The allowance that passed.
        timeout: Duration,
    },
    /// A PDU's header arrived but not the rest of it.
    #[error("host stalled in the middle of a PDU")]
    Stalled,
}
