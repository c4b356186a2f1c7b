//! The etcd backend for multi-host clusters (etcd v3 API through the `etcd-client` crate).
//!
//! Our [`Revision`] is etcd's `mod_revision` (0 = absent); a compare-and-swap is one etcd
//! transaction comparing `mod_revision`. Every key is stored under the configured namespace
//! so several clusters (or tests) can share one etcd. Every request is bounded by the
//! request timeout; any failure to get an answer becomes [`MetaError::Unavailable`] naming
//! the operation, the key and the endpoints. The gRPC channel reconnects on its own, so a
//! restarted etcd is used again without rebuilding the client.

use crate::store::{
    LeaseId, MetaError, MetaStore, Revision, WatchEvent, WatchReceiver, WATCH_QUEUE_EVENTS,
};
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

/// How to reach etcd and where Basalt's keys live in it.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Prepended to every key (e.g. `/basalt/cluster-a`); empty = no prefix.
    pub namespace: String,
    /// Bound on establishing a TCP/HTTP2 connection to one endpoint.
    pub connect_timeout_ms: u64,
    /// Bound on each request, including waiting for a connection.
    pub request_timeout_ms: u64,
    /// etcd's own user/password authentication, when it is enabled.
    pub user: Option<(String, String)>,
    /// TLS to etcd (`https://` endpoints).
    pub tls: Option<EtcdTls>,
}

/// TLS settings of the etcd connection (PEM bytes, read by the caller).
#[derive(Clone, Debug, Default)]
pub struct EtcdTls {
    /// The CA that signed etcd's certificate.
    pub ca_pem: Vec<u8>,
    /// A client certificate and its key, when etcd checks clients (`--client-cert-auth`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdConfig {
    /// Defaults for `endpoints`: no namespace, 2 s to connect, 5 s per request.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            namespace: String::new(),
            connect_timeout_ms: 2_000,
            request_timeout_ms: 5_000,
            user: None,
            tls: None,
        }
    }

    /// The same configuration with every key under `namespace`.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

/// Interval of HTTP/2 pings that detect a dead etcd connection while idle.
const KEEPALIVE_INTERVAL_MS: u64 = 1_000;

/// [`MetaStore`] backed by an etcd cluster.
pub struct EtcdMeta {
    client: Client,
    namespace: String,
    endpoints: String,
    request_timeout: Duration,
    /// The TTL of each lease this process granted and has not revoked (what a keep-alive
    /// renews it for).
    granted: std::sync::Mutex<std::collections::HashMap<LeaseId, u64>>,
}

impl EtcdMeta {
    /// Connect to etcd and check that it answers (one bounded read); fails with
    /// `Unavailable` when it does not.
    pub async fn connect(config: EtcdConfig) -> Result<Self, MetaError> {
        let endpoints = config.endpoints.join(",");
        let request_timeout = Duration::from_millis(config.request_timeout_ms);
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .with_timeout(request_timeout)
            .with_keep_alive(
                Duration::from_millis(KEEPALIVE_INTERVAL_MS),
                Duration::from_millis(config.connect_timeout_ms),
            )
            .with_keep_alive_while_idle(true);
        let options = match &config.user {
            Some((user, password)) => options.with_user(user, password),
            None => options,
        };
        let options = match &config.tls {
            Some(tls) => {
                let mut t = etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem));
                if let Some((cert, key)) = &tls.client {
                    t = t.identity(etcd_client::Identity::from_pem(cert, key));
                }
                options.with_tls(t)
            }
            None => options,
        };
        let connect = Client::connect(&config.endpoints, Some(options));
        let client = match tokio::time::timeout(request_timeout, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(MetaError::Unavailable {
                    reason: format!("etcd at {endpoints}: connect: {e}"),
                })
            }
            Err(_) => {
                return Err(MetaError::Unavailable {
                    reason: format!(
                        "etcd at {endpoints}: connect timed out after {} ms",
                        config.request_timeout_ms
                    ),
                })
            }
        };
        let meta = Self {
            client,
            namespace: config.namespace,
            endpoints,
            request_timeout,
            granted: Default::default(),
        };
        // Probe: the client connects lazily, so ask for the server status to know etcd is
        // there.
        let mut maintenance = meta.client.maintenance_client();
        meta.call("status", "", maintenance.status()).await?;
        // Status needs no permission; a read does: an etcd with authentication enabled
        // refuses a client without a user (or with a wrong one) here, not at first use.
        use crate::store::MetaStore as _;
        meta.get(crate::schema::MAP_KEY).await?;
        Ok(meta)
    }

    /// The etcd key for our `key`.
    fn key(&self, key: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.namespace.len() + key.len());
        k.extend_from_slice(self.namespace.as_bytes());
        k.extend_from_slice(key.as_bytes());
        k
    }

    /// Run one etcd request under the request timeout. The outer error is a timeout, the
    /// inner one what etcd (or the transport) said.
    async fn timed<T>(
        &self,
        what: &str,
        key: &str,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<Result<T, etcd_client::Error>, MetaError> {
        tokio::time::timeout(self.request_timeout, request)
            .await
            .map_err(|_| MetaError::Unavailable {
                reason: format!(
                    "etcd at {}: {what} {key:?} timed out after {} ms",
                    self.endpoints,
                    self.request_timeout.as_millis()
                ),
            })
    }

    /// `timed`, with every etcd error mapped to `Unavailable`.
    async fn call<T>(
        &self,
        what: &str,
        key: &str,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, MetaError> {
        self.timed(what, key, request)
            .await?
            .map_err(|e| self.unavailable(what, key, e))
    }

    fn unavailable(&self, what: &str, key: &str, e: etcd_client::Error) -> MetaError {
        MetaError::Unavailable {
            reason: format!("etcd at {}: {what} {key:?}: {e}", self.endpoints),
        }
    }

    /// Map "lease not found" answers to `LeaseNotFound`, anything else to `Unavailable`.
    fn lease_error(
        &self,
        what: &str,
        subject: &str,
        lease: LeaseId,
        e: etcd_client::Error,
    ) -> MetaError {
        let not_found = match &e {
            etcd_client::Error::GRpcStatus(s) => s.message().contains("lease not found"),
            etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
            _ => false,
        };
        if not_found {
            MetaError::LeaseNotFound { lease }
        } else {
            self.unavailable(what, subject, e)
        }
    }

    /// The revision of a response, from its header.
    fn header_revision(
        &self,
        what: &str,
        key: &str,
        header: Option<&etcd_client::ResponseHeader>,
    ) -> Result<Revision, MetaError> {
        let header = header.ok_or_else(|| MetaError::Unavailable {
            reason: format!(
                "etcd at {}: {what} {key:?}: response has no header",
                self.endpoints
            ),
        })?;
        self.revision(what, key, header.revision())
    }

    /// An etcd revision as ours; etcd never sends a negative one, but it came off a socket.
    fn revision(&self, what: &str, key: &str, rev: i64) -> Result<Revision, MetaError> {
        Revision::try_from(rev).map_err(|_| MetaError::Unavailable {
            reason: format!(
                "etcd at {}: {what} {key:?}: negative revision {rev}",
                self.endpoints
            ),
        })
    }

    /// Strip the namespace from an etcd key and check it is UTF-8.
    fn our_key(&self, what: &str, raw: &[u8]) -> Result<String, MetaError> {
        strip_namespace(&self.namespace, raw).ok_or_else(|| MetaError::Unavailable {
            reason: format!(
                "etcd at {}: {what}: key {:?} is outside namespace {:?} or not UTF-8",
                self.endpoints,
                String::from_utf8_lossy(raw),
                self.namespace
            ),
        })
    }

    fn lease_client(&self) -> etcd_client::LeaseClient {
        self.client.lease_client()
    }
}

/// `raw` without the `namespace` prefix, as UTF-8; None when it is neither.
fn strip_namespace(namespace: &str, raw: &[u8]) -> Option<String> {
    let rest = raw.strip_prefix(namespace.as_bytes())?;
    String::from_utf8(rest.to_vec()).ok()
}

/// Convert one etcd watch event; None when the key is malformed.
fn watch_event(namespace: &str, ev: &etcd_client::Event) -> Option<WatchEvent> {
    let kv = ev.kv()?;
    let key = strip_namespace(namespace, kv.key())?;
    let revision = Revision::try_from(kv.mod_revision()).ok()?;
    Some(match ev.event_type() {
        EventType::Put => WatchEvent::Put {
            key,
            value: kv.value().to_vec(),
            revision,
        },
        EventType::Delete => WatchEvent::Delete { key, revision },
    })
}

#[async_trait]
impl MetaStore for EtcdMeta {
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError> {
        let mut kv = self.client.kv_client();
        let resp = self.call("get", key, kv.get(self.key(key), None)).await?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(entry) => {
                let rev = self.revision("get", key, entry.mod_revision())?;
                Ok(Some((entry.value().to_vec(), rev)))
            }
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError> {
        let mut kv = self.client.kv_client();
        let options = GetOptions::new().with_prefix();
        let resp = self
            .call("list", prefix, kv.get(self.key(prefix), Some(options)))
            .await?;
        // etcd returns a range in key (byte) order, the same order as our String keys.
        resp.kvs()
            .iter()
            .map(|entry| {
                let key = self.our_key("list", entry.key())?;
                let rev = self.revision("list", &key, entry.mod_revision())?;
                Ok((key, entry.value().to_vec(), rev))
            })
            .collect()
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError> {
        let Ok(expected) = i64::try_from(expected) else {
            return Ok(None); // No etcd revision is that large.
        };
        let k = self.key(key);
        // An absent key compares as mod_revision 0, so expected = 0 means "create".
        let txn = Txn::new()
            .when([Compare::mod_revision(k.clone(), CompareOp::Equal, expected)])
            .and_then([TxnOp::put(k, value, None)]);
        let mut kv = self.client.kv_client();
        let resp = self.call("compare-and-swap", key, kv.txn(txn)).await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        self.header_revision("compare-and-swap", key, resp.header())
            .map(Some)
    }

    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError> {
        let Ok(expected) = i64::try_from(expected) else {
            return Ok(false);
        };
        if expected == 0 {
            return Ok(false); // An absent key has nothing to delete.
        }
        let k = self.key(key);
        let txn = Txn::new()
            .when([Compare::mod_revision(k.clone(), CompareOp::Equal, expected)])
            .and_then([TxnOp::delete(k, None)]);
        let mut kv = self.client.kv_client();
        let resp = self.call("compare-and-delete", key, kv.txn(txn)).await?;
        let deleted = resp.succeeded()
            && resp
                .op_responses()
                .iter()
                .any(|op| matches!(op, TxnOpResponse::Delete(d) if d.deleted() > 0));
        Ok(deleted)
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .call("put", key, kv.put(self.key(key), value, None))
            .await?;
        self.header_revision("put", key, resp.header())
    }

    async fn watch_prefix(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<WatchReceiver, MetaError> {
        let start = i64::try_from(from_revision).map_err(|_| MetaError::Compacted {
            requested: from_revision,
            oldest: 0,
        })?;
        let mut options = WatchOptions::new().with_prefix();
        if start > 0 {
            options = options.with_start_revision(start);
        }
        let mut watch_client = self.client.watch_client();
        let mut stream = self
            .call(
                "watch",
                prefix,
                watch_client.watch(self.key(prefix), Some(options)),
            )
            .await?;
        // Wait for etcd to confirm the watch so no later change can be missed.
        let created = self
            .call("watch", prefix, stream.message())
            .await?
            .ok_or_else(|| MetaError::Unavailable {
                reason: format!(
                    "etcd at {}: watch {prefix:?}: stream closed before the watch was created",
                    self.endpoints
                ),
            })?;
        if created.compact_revision() > 0 {
            return Err(MetaError::Compacted {
                requested: from_revision,
                oldest: Revision::try_from(created.compact_revision()).unwrap_or(0),
            });
        }
        let (tx, rx) = mpsc::channel(WATCH_QUEUE_EVENTS);
        let namespace = self.namespace.clone();
        let context = format!("etcd at {}: watch {prefix:?}", self.endpoints);
        tokio::spawn(async move {
            // Loop bound: one etcd response per round; ends when the receiver is dropped,
            // the stream fails or etcd cancels the watch.
            'responses: loop {
                let message = tokio::select! {
                    _ = tx.closed() => break 'responses,
                    m = stream.message() => m,
                };
                let resp = match message {
                    Ok(Some(resp)) => resp,
                    Ok(None) => {
                        let reason = format!("{context}: stream closed by etcd");
                        let _ = tx.send(Err(MetaError::Unavailable { reason })).await;
                        break 'responses;
                    }
                    Err(e) => {
                        let reason = format!("{context}: {e}");
                        let _ = tx.send(Err(MetaError::Unavailable { reason })).await;
                        break 'responses;
                    }
                };
                if resp.compact_revision() > 0 {
                    let err = MetaError::Compacted {
                        requested: from_revision,
                        oldest: Revision::try_from(resp.compact_revision()).unwrap_or(0),
                    };
                    let _ = tx.send(Err(err)).await;
                    break 'responses;
                }
                for ev in resp.events() {
                    let item = watch_event(&namespace, ev).ok_or_else(|| {
                        let reason = format!("{context}: malformed event {ev:?}");
                        MetaError::Unavailable { reason }
                    });
                    let failed = item.is_err();
                    if tx.send(item).await.is_err() || failed {
                        break 'responses;
                    }
                }
                if resp.canceled() {
                    let reason = format!("{context}: cancelled by etcd: {}", resp.cancel_reason());
                    let _ = tx.send(Err(MetaError::Unavailable { reason })).await;
                    break 'responses;
                }
            }
        });
        Ok(rx)
    }

    async fn grant_lease(&self, ttl_secs: u64) -> Result<LeaseId, MetaError> {
        let ttl = i64::try_from(ttl_secs.max(1)).unwrap_or(i64::MAX);
        let mut leases = self.lease_client();
        let what = format!("ttl {ttl} s");
        let resp = self
            .call("grant lease", &what, leases.grant(ttl, None))
            .await?;
        let granted = u64::try_from(resp.ttl()).unwrap_or(ttl_secs.max(1));
        self.granted
            .lock()
            .expect("leases lock")
            .insert(resp.id(), granted);
        Ok(resp.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let what = format!("lease {lease}");
        let mut leases = self.lease_client();
        // The client sends one renewal and checks its answer before returning the stream.
        let renewed = self
            .timed("keep-alive", &what, leases.keep_alive(lease))
            .await?;
        if let Err(e) = renewed {
            let e = self.lease_error("keep-alive", &what, lease, e);
            if matches!(e, MetaError::LeaseNotFound { .. }) {
                self.granted.lock().expect("leases lock").remove(&lease);
            }
            return Err(e);
        }
        // The renewal was answered with a TTL above zero (the client checks): the lease is
        // renewed for the TTL it was granted with, which this process knows for its own
        // leases. Only a lease granted elsewhere costs a second request to learn it.
        if let Some(ttl) = self.granted.lock().expect("leases lock").get(&lease) {
            return Ok(*ttl);
        }
        let resp = self
            .timed("lease TTL", &what, leases.time_to_live(lease, None))
            .await?
            .map_err(|e| self.lease_error("lease TTL", &what, lease, e))?;
        u64::try_from(resp.granted_ttl())
            .ok()
            .filter(|_| resp.ttl() > 0)
            .ok_or(MetaError::LeaseNotFound { lease })
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.granted.lock().expect("leases lock").remove(&lease);
        let mut leases = self.lease_client();
        let what = format!("lease {lease}");
        match self.timed("revoke", &what, leases.revoke(lease)).await? {
            Ok(_) => Ok(()),
            Err(e) => match self.lease_error("revoke", &what, lease, e) {
                MetaError::LeaseNotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn create_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Option<Revision>, MetaError> {
        let k = self.key(key);
        let txn = Txn::new()
            .when([Compare::mod_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                k,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let mut kv = self.client.kv_client();
        let resp = self
            .timed("create with lease", key, kv.txn(txn))
            .await?
            .map_err(|e| self.lease_error("create with lease", key, lease, e))?;
        if !resp.succeeded() {
            return Ok(None);
        }
        self.header_revision("create with lease", key, resp.header())
            .map(Some)
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Revision, MetaError> {
        let mut kv = self.client.kv_client();
        let options = PutOptions::new().with_lease(lease);
        let resp = self
            .timed(
                "put with lease",
                key,
                kv.put(self.key(key), value, Some(options)),
            )
            .await?
            .map_err(|e| self.lease_error("put with lease", key, lease, e))?;
        self.header_revision("put with lease", key, resp.header())
    }
}
