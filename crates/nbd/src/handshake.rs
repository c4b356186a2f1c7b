//! The fixed newstyle handshake: greeting, client flags, then option haggling until the
//! client enters transmission (`OPT_GO`, `OPT_EXPORT_NAME`) or leaves (`OPT_ABORT`, EOF).
//! `OPT_STARTTLS` ends the plaintext haggling; the server then upgrades the stream and
//! haggling starts over inside TLS ([`option::tls_gate`] decides what TLS allows).
//!
//! Reads here are unbuffered on purpose: nothing the client pipelines after its final
//! option may be swallowed by a buffer that the transmission phase would not see.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::error::NbdError;
use crate::export::{BlockDevice, DeviceError, Exports};
use crate::option::{
    self, ClientOption, MetaMatch, OptionError, OptionHeader, TlsGate, TlsMode, OPTION_HEADER_LEN,
};
use crate::request::Session;
use crate::server::wait_for_shutdown;
use crate::wire::{self, *};

/// What the handshake hands to the transmission phase.
pub(crate) struct Negotiated {
    /// The export's device.
    pub device: Arc<dyn BlockDevice>,
    /// What requests are checked against.
    pub session: Session,
    /// Export name as the client gave it (for logs).
    pub name: String,
    /// Counts the connection's requests (set by the server when it keeps metrics).
    pub recorder: Option<basalt_metrics::frontend::Recorder>,
}

/// How option haggling ended without error.
pub(crate) enum Outcome {
    /// Enter transmission.
    Transmission(Negotiated),
    /// `OPT_STARTTLS` was acknowledged: run the TLS handshake, then haggle again inside it.
    StartTls,
    /// The client aborted, went away, or the server is shutting down.
    Closed,
}

/// Where a connection's negotiation stands; carried across the TLS upgrade.
pub(crate) struct Progress {
    /// The client asked to omit the 124 zero bytes after `OPT_EXPORT_NAME`.
    no_zeroes: bool,
    /// Options read so far (bounded by [`MAX_OPTIONS_PER_CONNECTION`] over the whole
    /// connection, TLS upgrade included).
    options: u32,
    /// Haggling runs inside TLS.
    pub tls_active: bool,
}

/// Transmission flags for a device: everything is advertised except what a read-only device
/// cannot do; `DF` only with structured replies (the protocol forbids it otherwise).
pub fn transmission_flags(read_only: bool, structured: bool) -> u16 {
    let mut flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_CACHE;
    // Devices make flush cover writes acknowledged on every connection (BlockDevice::flush).
    flags |= FLAG_CAN_MULTI_CONN;
    if read_only {
        flags |= FLAG_READ_ONLY;
    } else {
        // FAST_ZERO is advertised even for devices that cannot zero fast: the protocol allows
        // answering every fast request with an immediate ENOTSUP, which is what clients need.
        flags |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        flags |= FLAG_SEND_DF;
    }
    flags
}

/// Check the client's flags: only the two the server offers are allowed.
pub fn check_client_flags(flags: u32) -> Result<bool, NbdError> {
    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(NbdError::ClientFlags { flags });
    }
    Ok(flags & FLAG_C_NO_ZEROES != 0)
}

/// Per-connection negotiation state.
struct Haggle<'a, S> {
    stream: &'a mut S,
    exports: &'a dyn Exports,
    /// Who is connecting ("nbd client 10.0.0.2"): the holder a writer lock names.
    client: &'a str,
    out: BytesMut,
    structured: bool,
    /// Export name and whether `base:allocation` was selected by the last SET_META_CONTEXT.
    meta: Option<(String, bool)>,
}

/// Send the greeting and read the client's flags; `None` if the server shut down first.
pub(crate) async fn greet<S>(
    stream: &mut S,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<Progress>, NbdError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = [0u8; 18];
    greeting[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    greeting[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&greeting).await?;
    stream.flush().await?;

    let client_flags = tokio::select! {
        biased;
        _ = wait_for_shutdown(shutdown) => return Ok(None),
        f = stream.read_u32() => f?,
    };
    Ok(Some(Progress {
        no_zeroes: check_client_flags(client_flags)?,
        options: 0,
        tls_active: false,
    }))
}

/// Haggle options on `stream` until the client enters transmission, asks for TLS, or
/// leaves. After a TLS upgrade it runs again on the TLS stream with a fresh state (nothing
/// negotiated in plaintext carries over, so nothing a man in the middle injected does).
pub(crate) async fn haggle<S>(
    stream: &mut S,
    exports: &dyn Exports,
    client: &str,
    shutdown: &mut watch::Receiver<bool>,
    tls: TlsMode,
    progress: &mut Progress,
) -> Result<Outcome, NbdError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let no_zeroes = progress.no_zeroes;
    let mut h = Haggle {
        stream,
        exports,
        client,
        out: BytesMut::with_capacity(1024),
        structured: false,
        meta: None,
    };
    let mut data = Vec::new();
    while progress.options < MAX_OPTIONS_PER_CONNECTION {
        progress.options += 1;
        let mut hdr = [0u8; OPTION_HEADER_LEN];
        tokio::select! {
            biased;
            // An idle negotiating client is simply dropped on shutdown.
            _ = wait_for_shutdown(shutdown) => return Ok(Outcome::Closed),
            r = h.stream.read_exact(&mut hdr) => match r {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(Outcome::Closed),
                Err(e) => return Err(e.into()),
            },
        }
        let header = OptionHeader::decode(&hdr).map_err(|e| match e {
            OptionError::BadMagic(magic) => NbdError::OptionMagic { magic },
            _ => NbdError::OptionMagic { magic: 0 },
        })?;
        let code = header.code;
        let gate = option::tls_gate(tls, progress.tls_active, code, header.length);
        if header.length > MAX_OPTION_BYTES {
            let (reply, message) = match gate {
                TlsGate::Refuse { reply, message } => (reply, message),
                _ => (REP_ERR_TOO_BIG, "option too large"),
            };
            h.skip_oversized(header, reply, message).await?;
            continue;
        }
        data.clear();
        data.resize(header.length as usize, 0);
        h.stream.read_exact(&mut data).await?;

        if *shutdown.borrow() {
            match code {
                OPT_ABORT => h.reply(code, REP_ACK, &[]).await?,
                OPT_EXPORT_NAME => {}
                _ => {
                    h.error(code, REP_ERR_SHUTDOWN, "server is shutting down")
                        .await?;
                    continue;
                }
            }
            return Ok(Outcome::Closed);
        }

        match gate {
            TlsGate::Proceed => {}
            TlsGate::StartTls => {
                h.reply(OPT_STARTTLS, REP_ACK, &[]).await?;
                return Ok(Outcome::StartTls);
            }
            TlsGate::Refuse { reply, message } => {
                h.error(code, reply, message).await?;
                continue;
            }
            TlsGate::Drop => {
                return Err(NbdError::TlsRequired {
                    name: String::from_utf8_lossy(&data[..data.len().min(256)]).into_owned(),
                })
            }
        }

        let parsed = match option::parse_option(code, &data) {
            Ok(opt) => opt,
            Err(e) if code == OPT_EXPORT_NAME => {
                return Err(NbdError::ExportRefused {
                    name: String::from_utf8_lossy(&data[..data.len().min(256)]).into_owned(),
                    reason: e.to_string(),
                })
            }
            Err(OptionError::TooBig) => {
                h.error(code, REP_ERR_TOO_BIG, "too many queries").await?;
                continue;
            }
            Err(e) => {
                h.error(code, REP_ERR_INVALID, &e.to_string()).await?;
                continue;
            }
        };
        if let Some(outcome) = h.handle(parsed, no_zeroes).await? {
            return Ok(outcome);
        }
    }
    Err(NbdError::TooManyOptions {
        limit: MAX_OPTIONS_PER_CONNECTION,
    })
}

impl<S: AsyncRead + AsyncWrite + Unpin> Haggle<'_, S> {
    async fn send(&mut self) -> Result<(), NbdError> {
        self.stream.write_all(&self.out).await?;
        self.stream.flush().await?;
        self.out.clear();
        Ok(())
    }

    async fn reply(&mut self, code: u32, reply_type: u32, data: &[u8]) -> Result<(), NbdError> {
        option::encode_reply(&mut self.out, code, reply_type, data);
        self.send().await
    }

    async fn error(&mut self, code: u32, reply_type: u32, msg: &str) -> Result<(), NbdError> {
        option::encode_error(&mut self.out, code, reply_type, msg);
        self.send().await
    }

    /// Skip a moderately oversized option and refuse it with `reply`; drop the connection
    /// for an absurd one rather than reading gigabytes (the protocol allows a hard
    /// disconnect for abuse).
    async fn skip_oversized(
        &mut self,
        header: OptionHeader,
        reply: u32,
        message: &str,
    ) -> Result<(), NbdError> {
        let err = NbdError::OptionTooLarge {
            code: header.code,
            length: header.length,
        };
        if header.code == OPT_EXPORT_NAME || header.length > MAX_OPTION_SKIP_BYTES {
            if header.code != OPT_EXPORT_NAME {
                self.error(header.code, reply, message).await?;
            }
            return Err(err);
        }
        let mut rest = (&mut *self.stream).take(header.length as u64);
        let skipped = tokio::io::copy(&mut rest, &mut tokio::io::sink()).await?;
        if skipped != header.length as u64 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        self.error(header.code, reply, message).await
    }

    async fn open(&self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError> {
        self.exports.open_as(name, self.client).await
    }

    /// Handle one decoded option; `Some` ends the handshake.
    async fn handle(
        &mut self,
        opt: ClientOption<'_>,
        no_zeroes: bool,
    ) -> Result<Option<Outcome>, NbdError> {
        let go = matches!(opt, ClientOption::Go(_));
        match opt {
            ClientOption::ExportName(name) => {
                let device = match self.open(name).await {
                    Ok(Some(d)) => d,
                    Ok(None) => {
                        return Err(NbdError::ExportRefused {
                            name: name.to_owned(),
                            reason: "unknown export".into(),
                        })
                    }
                    Err(source) => {
                        return Err(NbdError::Open {
                            name: name.to_owned(),
                            source,
                        })
                    }
                };
                let neg = self.negotiated(name, device);
                self.out.put_u64(neg.session.size);
                self.out.put_u16(neg.session.flags);
                if !no_zeroes {
                    self.out.put_bytes(0, 124);
                }
                self.send().await?;
                Ok(Some(Outcome::Transmission(neg)))
            }
            ClientOption::Abort => {
                // The client may already have closed; the ack is best effort.
                let _ = self.reply(OPT_ABORT, REP_ACK, &[]).await;
                Ok(Some(Outcome::Closed))
            }
            ClientOption::List => {
                match self.exports.list().await {
                    Ok(list) => {
                        for e in list.iter().filter(|e| e.name.len() <= MAX_STRING_BYTES) {
                            option::encode_server(&mut self.out, &e.name, &e.description);
                        }
                        option::encode_reply(&mut self.out, OPT_LIST, REP_ACK, &[]);
                        self.send().await?;
                    }
                    Err(e) => {
                        self.error(OPT_LIST, open_error_reply(&e), &e.to_string())
                            .await?
                    }
                }
                Ok(None)
            }
            ClientOption::StartTls => {
                // tls_gate answers every STARTTLS before it is decoded; never reached.
                let msg = "STARTTLS is not valid here";
                self.error(OPT_STARTTLS, REP_ERR_INVALID, msg).await?;
                Ok(None)
            }
            ClientOption::Info(req) | ClientOption::Go(req) => {
                let code = if go { OPT_GO } else { OPT_INFO };
                let device = match self.open(req.name).await {
                    Ok(Some(d)) => d,
                    Ok(None) => {
                        let msg = format!("unknown export {:?}", req.name);
                        self.error(code, REP_ERR_UNKNOWN, &msg).await?;
                        return Ok(None);
                    }
                    Err(e) => {
                        let msg = format!("cannot open export {:?}: {e}", req.name);
                        self.error(code, open_error_reply(&e), &msg).await?;
                        return Ok(None);
                    }
                };
                let neg = self.negotiated(req.name, device);
                option::encode_info_export(
                    &mut self.out,
                    code,
                    neg.session.size,
                    neg.session.flags,
                );
                if req.info.name && !req.name.is_empty() {
                    option::encode_info_string(&mut self.out, code, INFO_NAME, req.name);
                }
                if req.info.description {
                    let description = self.exports.describe(req.name).await.unwrap_or_default();
                    if !description.is_empty() {
                        let item = INFO_DESCRIPTION;
                        option::encode_info_string(&mut self.out, code, item, &description);
                    }
                }
                // Sent even unrequested: clients that ignore it lose nothing, and the maximum
                // is stricter than the protocol default.
                let (min, pref, max) = (MIN_BLOCK_BYTES, PREFERRED_BLOCK_BYTES, MAX_BLOCK_BYTES);
                option::encode_info_block_size(&mut self.out, code, min, pref, max);
                option::encode_reply(&mut self.out, code, REP_ACK, &[]);
                self.send().await?;
                Ok(go.then_some(Outcome::Transmission(neg)))
            }
            ClientOption::StructuredReply => {
                self.structured = true;
                self.reply(OPT_STRUCTURED_REPLY, REP_ACK, &[]).await?;
                Ok(None)
            }
            ClientOption::ListMetaContext(req) => {
                self.meta_context(OPT_LIST_META_CONTEXT, req).await?;
                Ok(None)
            }
            ClientOption::SetMetaContext(req) => {
                self.meta = None; // replaced even when the option fails
                if !self.structured {
                    let msg = "structured replies must be negotiated first";
                    self.error(OPT_SET_META_CONTEXT, REP_ERR_INVALID, msg)
                        .await?;
                    return Ok(None);
                }
                self.meta_context(OPT_SET_META_CONTEXT, req).await?;
                Ok(None)
            }
            ClientOption::Unknown(code) => {
                self.error(code, REP_ERR_UNSUP, "option not supported")
                    .await?;
                Ok(None)
            }
        }
    }

    /// LIST or SET metadata contexts. Unknown namespaces and leaves select nothing (the
    /// protocol forbids refusing them); `base:` lists `base:allocation` but selects nothing.
    async fn meta_context(
        &mut self,
        code: u32,
        req: option::MetaRequest<'_>,
    ) -> Result<(), NbdError> {
        let set = code == OPT_SET_META_CONTEXT;
        match self.open(req.export).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let msg = format!("unknown export {:?}", req.export);
                return self.error(code, REP_ERR_UNKNOWN, &msg).await;
            }
            Err(e) => return self.error(code, open_error_reply(&e), &e.to_string()).await,
        }
        let mut allocation = !set && req.queries.is_empty();
        for q in &req.queries {
            match option::match_meta_query(q) {
                MetaMatch::BaseAllocation => allocation = true,
                MetaMatch::BaseWildcard => allocation |= !set,
                MetaMatch::Nothing => {}
                MetaMatch::Malformed => {
                    let msg = format!("query {q:?} is not namespace:leaf");
                    return self.error(code, REP_ERR_INVALID, &msg).await;
                }
            }
        }
        if allocation {
            // Listed contexts carry id 0, as the protocol recommends.
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            option::encode_meta_context(&mut self.out, code, id, BASE_ALLOCATION);
        }
        option::encode_reply(&mut self.out, code, REP_ACK, &[]);
        if set {
            self.meta = Some((req.export.to_owned(), allocation));
        }
        self.send().await
    }

    fn negotiated(&self, name: &str, device: Arc<dyn BlockDevice>) -> Negotiated {
        let block_status = self
            .meta
            .as_ref()
            .is_some_and(|(export, selected)| *selected && export == name);
        let session = Session {
            size: device.size(),
            flags: transmission_flags(device.read_only(), self.structured),
            structured: self.structured,
            block_status,
            fast_zero: device.fast_zero(),
        };
        Negotiated {
            device,
            session,
            name: name.to_owned(),
            recorder: None,
        }
    }
}

/// Option error for a catalogue failure.
fn open_error_reply(e: &DeviceError) -> u32 {
    match e {
        DeviceError::ShuttingDown => wire::REP_ERR_SHUTDOWN,
        DeviceError::Locked(_) => wire::REP_ERR_POLICY,
        _ => wire::REP_ERR_UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_device_and_negotiation() {
        // Goal: read-only exports drop write features; DF appears only with structured replies.
        let rw = transmission_flags(false, false);
        assert_eq!(rw & FLAG_READ_ONLY, 0);
        assert_ne!(rw & FLAG_SEND_TRIM, 0);
        assert_ne!(rw & FLAG_CAN_MULTI_CONN, 0);
        assert_eq!(rw & FLAG_SEND_DF, 0);
        let ro = transmission_flags(true, true);
        assert_ne!(ro & FLAG_READ_ONLY, 0);
        assert_eq!(
            ro & (FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO),
            0
        );
        assert_ne!(ro & FLAG_SEND_DF, 0);
    }

    /// One option as a client sends it.
    fn opt(code: u32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    /// Read one option reply: (option, reply type, data).
    async fn read_reply(c: &mut tokio::io::DuplexStream) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        c.read_exact(&mut h).await.unwrap();
        assert_eq!(
            u64::from_be_bytes(h[0..8].try_into().unwrap()),
            OPTION_REPLY_MAGIC
        );
        let code = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
        c.read_exact(&mut data).await.unwrap();
        (code, kind, data)
    }

    /// Run `haggle` under `mode` on one end of a pipe, after the client flags; `client`
    /// drives the other end. Returns haggle's result.
    async fn haggle_with<F, Fut>(
        mode: TlsMode,
        tls_active: bool,
        client: F,
    ) -> Result<Outcome, NbdError>
    where
        F: FnOnce(tokio::io::DuplexStream) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let exports = crate::ExportMap::new();
        exports.insert("e", "", Arc::new(crate::MemDevice::new(1 << 20)));
        let (mut server, c) = tokio::io::duplex(1 << 16);
        let (_tx, mut rx) = watch::channel(false);
        let talk = tokio::spawn(client(c));
        let mut progress = Progress {
            no_zeroes: true,
            options: 0,
            tls_active,
        };
        let r = haggle(
            &mut server,
            &exports,
            "test client",
            &mut rx,
            mode,
            &mut progress,
        )
        .await;
        drop(server);
        talk.await.unwrap();
        r
    }

    #[tokio::test]
    async fn forced_tls_refuses_options_until_starttls() {
        // Goal: in FORCEDTLS mode a plaintext client gets ERR_TLS_REQD for LIST, GO and an
        // unknown option, ERR_INVALID for STARTTLS with data, and STARTTLS is acknowledged
        // and ends the plaintext haggling (nothing read after it).
        let r = haggle_with(TlsMode::Required, false, |mut c| async move {
            let go = [&1u32.to_be_bytes()[..], b"e", &0u16.to_be_bytes()].concat();
            for (code, data) in [(OPT_LIST, &[][..]), (OPT_GO, &go[..]), (99, &[][..])] {
                c.write_all(&opt(code, data)).await.unwrap();
                assert_eq!(
                    read_reply(&mut c).await,
                    (
                        code,
                        REP_ERR_TLS_REQD,
                        b"this server requires TLS: send NBD_OPT_STARTTLS first".to_vec()
                    )
                );
            }
            c.write_all(&opt(OPT_STARTTLS, b"x")).await.unwrap();
            assert_eq!(read_reply(&mut c).await.1, REP_ERR_INVALID);
            c.write_all(&opt(OPT_STARTTLS, &[])).await.unwrap();
            assert_eq!(read_reply(&mut c).await, (OPT_STARTTLS, REP_ACK, vec![]));
        })
        .await;
        assert!(matches!(r, Ok(Outcome::StartTls)));
    }

    #[tokio::test]
    async fn forced_tls_drops_export_name_without_tls() {
        // Goal: OPT_EXPORT_NAME cannot be refused, so in FORCEDTLS mode it ends the session
        // before any export is opened.
        let r = haggle_with(TlsMode::Required, false, |mut c| async move {
            c.write_all(&opt(OPT_EXPORT_NAME, b"e")).await.unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "the server answered {rest:?}");
        })
        .await;
        assert!(
            matches!(r, Err(NbdError::TlsRequired { ref name }) if name == "e"),
            "{:?}",
            r.err()
        );
    }

    #[tokio::test]
    async fn inside_tls_options_work_and_starttls_twice_is_invalid() {
        // Goal: once TLS runs, a second STARTTLS is ERR_INVALID and the client reaches an
        // export with GO, in forced mode as in optional mode; without credentials STARTTLS
        // is ERR_UNSUP and plaintext clients are served.
        for (mode, tls) in [
            (TlsMode::Required, true),
            (TlsMode::Offered, true),
            (TlsMode::Offered, false),
            (TlsMode::Off, false),
        ] {
            let r = haggle_with(mode, tls, move |mut c| async move {
                c.write_all(&opt(OPT_STARTTLS, &[])).await.unwrap();
                let want = if mode == TlsMode::Off {
                    REP_ERR_UNSUP
                } else {
                    REP_ERR_INVALID
                };
                if tls || mode == TlsMode::Off {
                    assert_eq!(read_reply(&mut c).await.1, want);
                    let go = [&1u32.to_be_bytes()[..], b"e", &0u16.to_be_bytes()].concat();
                    c.write_all(&opt(OPT_GO, &go)).await.unwrap();
                    let (code, kind, _) = read_reply(&mut c).await;
                    assert_eq!((code, kind), (OPT_GO, REP_INFO));
                } else {
                    assert_eq!(read_reply(&mut c).await.1, REP_ACK);
                }
            })
            .await;
            match r {
                Ok(Outcome::Transmission(n)) => assert_eq!(n.name, "e"),
                Ok(Outcome::StartTls) => assert!(!tls && mode == TlsMode::Offered),
                _ => panic!("{mode:?} tls={tls}: unexpected end {:?}", r.err()),
            }
        }
    }

    #[test]
    fn client_flags_are_checked() {
        // Goal: only FIXED_NEWSTYLE and NO_ZEROES are accepted.
        assert!(!check_client_flags(1).unwrap());
        assert!(check_client_flags(3).unwrap());
        assert!(check_client_flags(4).is_err());
    }
}
