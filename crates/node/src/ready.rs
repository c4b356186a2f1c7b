//! Where a running `basalt up` serves what, and its ready file: the same endpoints its
//! banner shows, as one JSON object written once everything serves, for scripts and tests
//! (the banner is for people and may change).
//!
//! The file (format version 1) is written to a temporary name beside it and renamed into
//! place, so a reader sees it whole or not at all; it is removed at start and on a clean
//! stop, so an old one is never mistaken for this run's.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The ready file's format version.
pub const READY_FORMAT_VERSION: u32 = 1;

/// What `basalt up` serves where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    pub data_dir: PathBuf,
    /// The main pool's name.
    pub pool: String,
    /// How many OSDs run.
    pub osds: usize,
    /// How their stores' I/O runs (`direct uring`, `buffered inline`, ...).
    pub osd_io: String,
    /// The volume served by default (None: none).
    pub default_volume: Option<String>,
    /// NBD over TCP, IP:PORT.
    pub nbd_tcp: SocketAddr,
    /// NBD's unix socket.
    pub nbd_socket: PathBuf,
    /// The control API's unix socket.
    pub control_socket: PathBuf,
    /// The S3 gateway, IP:PORT (None: off).
    pub s3: Option<SocketAddr>,
    /// The S3 admin key's credentials file (None: S3 off).
    pub s3_credentials: Option<PathBuf>,
    /// `/metrics`, IP:PORT (None: off).
    pub metrics: Option<SocketAddr>,
    /// NVMe/TCP, IP:PORT (None: off).
    pub nvmf: Option<SocketAddr>,
}

/// The ready file's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyFile {
    /// [`READY_FORMAT_VERSION`].
    pub version: u32,
    /// The `basalt up` process.
    pub pid: u32,
    #[serde(flatten)]
    pub endpoints: Endpoints,
    /// `http://IP:PORT` of the S3 gateway, as clients take it (None: off).
    pub s3_url: Option<String>,
    /// `nbd://IP:PORT/VOLUME` of the default volume (None: no default volume).
    pub nbd_uri: Option<String>,
}

impl ReadyFile {
    /// The ready file of this process serving `endpoints`.
    pub fn of(endpoints: &Endpoints) -> Self {
        Self {
            version: READY_FORMAT_VERSION,
            pid: std::process::id(),
            s3_url: endpoints.s3.map(|a| format!("http://{a}")),
            nbd_uri: endpoints
                .default_volume
                .as_ref()
                .map(|v| format!("nbd://{}/{v}", endpoints.nbd_tcp)),
            endpoints: endpoints.clone(),
        }
    }

    /// Write it to `path` atomically: to `path.tmp.PID`, synced, then renamed into place.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        let mut bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the file is written whole under its name and reads back as written.
    #[test]
    fn a_ready_file_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let endpoints = Endpoints {
            data_dir: dir.path().into(),
            pool: "rbd".into(),
            osds: 3,
            osd_io: "direct uring".into(),
            default_volume: Some("vol0".into()),
            nbd_tcp: "127.0.0.1:10809".parse().unwrap(),
            nbd_socket: dir.path().join("nbd.sock"),
            control_socket: dir.path().join("control.sock"),
            s3: Some("127.0.0.1:9000".parse().unwrap()),
            s3_credentials: Some(dir.path().join("s3-credentials")),
            metrics: None,
            nvmf: None,
        };
        let path = dir.path().join("ready.json");
        let ready = ReadyFile::of(&endpoints);
        ready.write(&path).unwrap();
        let back: ReadyFile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, ready);
        assert_eq!(back.nbd_uri.as_deref(), Some("nbd://127.0.0.1:10809/vol0"));
        assert_eq!(back.s3_url.as_deref(), Some("http://127.0.0.1:9000"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }
}
