//! The client side: one request to the control socket, its progress lines, its reply.

use crate::protocol::{Request, Response};
use basalt_client::ErrorKind;
use std::path::{Path, PathBuf};
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// What can go wrong calling the control API.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error(
        "connect to the control socket {path} (is `basalt up` running? its banner names the \
         socket; --control or BASALT_CONTROL choose another): {source}"
    )]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("talk to the control API: {0}")]
    Io(#[from] std::io::Error),
    #[error("the control API closed the connection without a reply")]
    NoReply,
    #[error("malformed reply from the control API: {line:?}: {source}")]
    Malformed {
        line: String,
        source: serde_json::Error,
    },
    /// The request was carried out and failed; `kind` says how, when the server said.
    #[error("{message}")]
    Failed {
        kind: Option<ErrorKind>,
        message: String,
    },
}

impl ControlError {
    /// The kind of a failed request (None: the transport failed, or an older server).
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ControlError::Failed { kind, .. } => *kind,
            _ => None,
        }
    }
}

/// Send one request to the control socket at `addr` and return its successful response.
pub async fn call(addr: &Path, req: &Request) -> Result<Response, ControlError> {
    call_with_progress(addr, req, |_, _| {}).await
}

/// Like [`call`], passing the operation's progress lines to `progress(done, total)`.
pub async fn call_with_progress(
    addr: &Path,
    req: &Request,
    progress: impl Fn(u64, u64),
) -> Result<Response, ControlError> {
    let stream = UnixStream::connect(addr)
        .await
        .map_err(|source| ControlError::Connect {
            path: addr.to_path_buf(),
            source,
        })?;
    let (rd, mut wr) = stream.into_split();
    let mut out = serde_json::to_vec(req).map_err(|e| ControlError::Io(e.into()))?;
    out.push(b'\n');
    wr.write_all(&out).await?;
    let mut rd = BufReader::new(rd);
    // Bound: the server sends a bounded number of progress lines, then the reply.
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).await? == 0 {
            return Err(ControlError::NoReply);
        }
        let resp: Response = serde_json::from_str(&line)
            .map_err(|source| ControlError::Malformed { line, source })?;
        if let Some(p) = resp.progress {
            progress(p.done, p.total);
            continue;
        }
        if !resp.ok {
            return Err(resp.into_error());
        }
        return Ok(resp);
    }
}
