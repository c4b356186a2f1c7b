//! A minimal NBD client for the benchmarks that read an export at offsets of their own
//! (the `strmvol` section reads whole files of an objvol): fixed-newstyle handshake with
//! `NBD_OPT_GO`, simple replies, one request in flight per connection.

use anyhow::{bail, Context};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const INFO_EXPORT: u16 = 0;
const CMD_READ: u16 = 0;
const CMD_DISC: u16 = 2;
/// Longest wait for the handshake or one reply.
const TIMEOUT: Duration = Duration::from_secs(60);
/// Largest option reply accepted.
const MAX_OPTION_REPLY_BYTES: u32 = 64 << 10;

/// One connection to one export.
pub struct NbdConnection {
    stream: BufReader<TcpStream>,
    size: u64,
    handle: u64,
}

impl NbdConnection {
    /// Connect to `addr` (`IP:PORT`) and open export `name`.
    pub async fn connect(addr: &str, name: &str) -> anyhow::Result<NbdConnection> {
        tokio::time::timeout(TIMEOUT, Self::handshake(addr, name))
            .await
            .map_err(|_| anyhow::anyhow!("NBD handshake with {addr} took over {TIMEOUT:?}"))?
    }

    async fn handshake(addr: &str, name: &str) -> anyhow::Result<NbdConnection> {
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect to NBD {addr}"))?;
        tcp.set_nodelay(true)?;
        let mut s = BufReader::new(tcp);
        if s.read_u64().await? != NBDMAGIC || s.read_u64().await? != IHAVEOPT {
            bail!("{addr} is not a newstyle NBD server");
        }
        let flags = s.read_u16().await?;
        if flags & FLAG_FIXED_NEWSTYLE == 0 {
            bail!("{addr} does not speak fixed newstyle NBD");
        }
        let client_flags = u32::from(FLAG_FIXED_NEWSTYLE | (flags & FLAG_NO_ZEROES));
        let mut msg = Vec::with_capacity(64 + name.len());
        msg.extend_from_slice(&client_flags.to_be_bytes());
        msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
        msg.extend_from_slice(&OPT_GO.to_be_bytes());
        msg.extend_from_slice(&(4 + name.len() as u32 + 2).to_be_bytes());
        msg.extend_from_slice(&(name.len() as u32).to_be_bytes());
        msg.extend_from_slice(name.as_bytes());
        msg.extend_from_slice(&0u16.to_be_bytes());
        s.get_mut().write_all(&msg).await?;
        let mut size = None;
        // Bound: the server sends a few INFO replies, then ACK or an error.
        for _ in 0..64 {
            if s.read_u64().await? != REPLY_MAGIC {
                bail!("bad option reply from {addr}");
            }
            let _option = s.read_u32().await?;
            let kind = s.read_u32().await?;
            let len = s.read_u32().await?;
            if len > MAX_OPTION_REPLY_BYTES {
                bail!("option reply of {len} bytes from {addr}");
            }
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data).await?;
            match kind {
                REP_ACK => {
                    let size = size.context("the server sent no export size")?;
                    return Ok(NbdConnection {
                        stream: s,
                        size,
                        handle: 0,
                    });
                }
                REP_INFO if data.len() >= 12 && data[..2] == INFO_EXPORT.to_be_bytes() => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into()?));
                }
                REP_INFO => {}
                k if k & 0x8000_0000 != 0 => bail!(
                    "export {name:?} refused by {addr}: {}",
                    String::from_utf8_lossy(&data)
                ),
                k => bail!("unexpected option reply {k} from {addr}"),
            }
        }
        bail!("{addr} sent too many option replies")
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub async fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        tokio::time::timeout(TIMEOUT, self.read_inner(offset, buf))
            .await
            .map_err(|_| anyhow::anyhow!("NBD read at {offset} took over {TIMEOUT:?}"))?
    }

    async fn read_inner(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.handle += 1;
        let mut req = [0u8; 28];
        req[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        req[6..8].copy_from_slice(&CMD_READ.to_be_bytes());
        req[8..16].copy_from_slice(&self.handle.to_be_bytes());
        req[16..24].copy_from_slice(&offset.to_be_bytes());
        req[24..28].copy_from_slice(&u32::try_from(buf.len())?.to_be_bytes());
        self.stream.get_mut().write_all(&req).await?;
        if self.stream.read_u32().await? != SIMPLE_REPLY_MAGIC {
            bail!("bad NBD reply magic");
        }
        let error = self.stream.read_u32().await?;
        if self.stream.read_u64().await? != self.handle {
            bail!("NBD reply for another request");
        }
        if error != 0 {
            bail!("NBD read of {} bytes at {offset}: error {error}", buf.len());
        }
        self.stream.read_exact(buf).await?;
        Ok(())
    }

    /// Say goodbye (the server closes the connection).
    pub async fn close(mut self) {
        let mut req = [0u8; 28];
        req[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        req[6..8].copy_from_slice(&CMD_DISC.to_be_bytes());
        let _ = self.stream.get_mut().write_all(&req).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_nbd::mem::MemDevice;
    use basalt_nbd::{ExportMap, Server};
    use std::sync::Arc;

    /// Goal: the client opens an export of Basalt's NBD server by name, learns its size,
    /// reads bytes at any offset exactly, and an unknown export is refused by name.
    #[tokio::test]
    async fn reads_an_export_of_the_nbd_server() {
        let data: Vec<u8> = (0..1_000_000u32)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        let exports = Arc::new(ExportMap::new());
        exports.insert(
            "objvol:x",
            "test",
            Arc::new(MemDevice::read_only_with(1 << 20, &data)),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(Server::new(exports).serve_tcp(listener));
        let mut c = NbdConnection::connect(&addr, "objvol:x").await.unwrap();
        assert_eq!(c.size(), 1 << 20);
        for (off, len) in [(0usize, 4096usize), (4096 * 3, 131_072), (999_000, 1000)] {
            let mut buf = vec![0u8; len];
            c.read(off as u64, &mut buf).await.unwrap();
            assert_eq!(buf, data[off..off + len], "{off}+{len}");
        }
        c.close().await;
        let e = NbdConnection::connect(&addr, "nothing")
            .await
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("nothing"), "{e:#}");
    }
}
