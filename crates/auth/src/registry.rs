//! Entities in the metadata store, the cluster's verifier, and the server's key lookup.

use crate::handshake::KeyLookup;
use crate::keys::{
    fill_random, ClusterSecret, EntityName, Key, ADMIN_GENERATION, DAEMON_GENERATION,
};
use crate::{AuthError, Caps};
use async_trait::async_trait;
use basalt_meta::schema::{AUTH_ENTITIES_PREFIX, AUTH_VERIFIER_KEY};
use basalt_meta::MetaStore;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Format version of [`EntityRecord`].
const RECORD_VERSION: u32 = 1;

/// `/basalt/auth/entities/NAME`: what the cluster knows of a client entity (never its key).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EntityRecord {
    pub format_version: u32,
    pub entity: String,
    /// `data` or `admin`.
    pub caps: String,
    /// Random hex; part of the key's derivation, so a re-added entity gets a new key.
    pub generation: String,
    pub created_unix: u64,
}

fn entity_key(name: &EntityName) -> String {
    format!("{AUTH_ENTITIES_PREFIX}{name}")
}

fn decode(key: &str, value: &[u8]) -> Result<EntityRecord, AuthError> {
    let r: EntityRecord = serde_json::from_slice(value).map_err(|e| AuthError::CorruptRecord {
        key: key.into(),
        reason: e.to_string(),
    })?;
    if r.format_version != RECORD_VERSION {
        return Err(AuthError::CorruptRecord {
            key: key.into(),
            reason: format!("format version {} (this build reads 1)", r.format_version),
        });
    }
    Ok(r)
}

/// Record `secret` as this cluster's (`basalt cluster init`). Refused if the cluster has one.
pub async fn init_cluster(meta: &dyn MetaStore, secret: &ClusterSecret) -> Result<(), AuthError> {
    let created = meta
        .compare_and_swap(AUTH_VERIFIER_KEY, 0, secret.verifier().into_bytes())
        .await?;
    match created {
        Some(_) => Ok(()),
        None => Err(AuthError::AlreadyInitialised),
    }
}

/// Make a new cluster secret, write it to the new keyring file `path` (mode 0600, never
/// over an existing file) and record it as this cluster's (`basalt cluster init`). When the
/// cluster refuses it (it has a secret already), the file is removed: a keyring nobody can
/// use must not look valid.
pub async fn init_cluster_keyring(
    meta: &dyn MetaStore,
    path: &std::path::Path,
) -> Result<ClusterSecret, AuthError> {
    let secret = ClusterSecret::generate()?;
    crate::Keyring::Cluster(secret.clone()).write_new(path)?;
    if let Err(e) = init_cluster(meta, &secret).await {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(secret)
}

/// Is `secret` this cluster's? (A daemon checks before it serves.)
pub async fn check_cluster(meta: &dyn MetaStore, secret: &ClusterSecret) -> Result<(), AuthError> {
    match meta.get(AUTH_VERIFIER_KEY).await? {
        None => Err(AuthError::NotInitialised),
        Some((v, _)) if v == secret.verifier().as_bytes() => Ok(()),
        Some(_) => Err(AuthError::WrongCluster),
    }
}

/// Record `secret` if the cluster has none yet, else check it (`basalt up`'s own metadata).
pub async fn ensure_cluster(meta: &dyn MetaStore, secret: &ClusterSecret) -> Result<(), AuthError> {
    match check_cluster(meta, secret).await {
        Err(AuthError::NotInitialised) => init_cluster(meta, secret).await,
        other => other,
    }
}

/// Make a client entity with `caps`; returns its key (the only time it is shown).
pub async fn add_entity(
    meta: &dyn MetaStore,
    secret: &ClusterSecret,
    name: &EntityName,
    caps: Caps,
) -> Result<Key, AuthError> {
    if name.is_builtin() {
        return Err(AuthError::BadEntity {
            name: name.to_string(),
            reason: "built in: its key derives from the cluster secret".into(),
        });
    }
    let mut g = [0u8; 16];
    fill_random(&mut g)?;
    let record = EntityRecord {
        format_version: RECORD_VERSION,
        entity: name.to_string(),
        caps: caps.to_string(),
        generation: hex::encode(g),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let value = serde_json::to_vec(&record).expect("a record serialises");
    match meta.compare_and_swap(&entity_key(name), 0, value).await? {
        Some(_) => Ok(secret.entity_key(name, &record.generation)),
        None => Err(AuthError::EntityExists {
            name: name.to_string(),
        }),
    }
}

/// Every client entity with a record, by name.
pub async fn list_entities(meta: &dyn MetaStore) -> Result<Vec<EntityRecord>, AuthError> {
    let mut out = Vec::new();
    for (k, v, _) in meta.list(AUTH_ENTITIES_PREFIX).await? {
        out.push(decode(&k, &v)?);
    }
    Ok(out)
}

/// Revoke a client entity: its key stops working at once (OSDs close its connections).
pub async fn remove_entity(meta: &dyn MetaStore, name: &EntityName) -> Result<(), AuthError> {
    let key = entity_key(name);
    let gone = || AuthError::NoSuchEntity {
        name: name.to_string(),
    };
    let (_, rev) = meta.get(&key).await?.ok_or_else(gone)?;
    if meta.compare_and_delete(&key, rev).await? {
        Ok(())
    } else {
        Err(gone())
    }
}

/// A server's view of the cluster's entities: derives keys from the secret, reads
/// generations and capabilities from the metadata store.
pub struct Authority {
    secret: ClusterSecret,
    meta: Arc<dyn MetaStore>,
}

impl Authority {
    /// An authority over `meta`'s entities.
    pub fn new(secret: ClusterSecret, meta: Arc<dyn MetaStore>) -> Self {
        Self { secret, meta }
    }

    /// What OSD `id` proves to its peers.
    pub fn daemon_credentials(&self, id: u32) -> crate::Credentials {
        self.secret.daemon_credentials(id)
    }

    /// The current generation of every client entity with a record: a session whose
    /// (entity, generation) is not here was revoked.
    /// Changes to the entity records from now on (a key revoked or re-keyed): what open
    /// sessions are checked against again.
    pub async fn watch_entities(&self) -> Result<basalt_meta::WatchReceiver, AuthError> {
        Ok(self.meta.watch_prefix(AUTH_ENTITIES_PREFIX, 0).await?)
    }

    pub async fn live_generations(&self) -> Result<HashMap<String, String>, AuthError> {
        Ok(list_entities(self.meta.as_ref())
            .await?
            .into_iter()
            .map(|r| (r.entity, r.generation))
            .collect())
    }
}

#[async_trait]
impl KeyLookup for Authority {
    async fn lookup(&self, entity: &EntityName) -> Result<Option<(Key, Caps, String)>, AuthError> {
        if entity.is_daemon() {
            let key = self.secret.entity_key(entity, DAEMON_GENERATION);
            return Ok(Some((key, Caps::OSD, DAEMON_GENERATION.into())));
        }
        if entity.is_builtin() {
            let key = self.secret.entity_key(entity, ADMIN_GENERATION);
            return Ok(Some((key, Caps::ADMIN, ADMIN_GENERATION.into())));
        }
        let key = entity_key(entity);
        let Some((v, _)) = self.meta.get(&key).await? else {
            return Ok(None);
        };
        let r = decode(&key, &v)?;
        let caps = Caps::parse(&r.caps)?;
        Ok(Some((
            self.secret.entity_key(entity, &r.generation),
            caps,
            r.generation,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::EmbeddedMeta;

    #[tokio::test]
    async fn cluster_init_keeps_its_keyring_only_when_the_cluster_took_the_secret() {
        // Goal: the first init writes a keyring holding the recorded secret; a second one,
        // refused by the cluster, leaves no keyring behind; an existing file is never
        // overwritten.
        let dir = tempfile::tempdir().unwrap();
        let meta: Arc<dyn MetaStore> =
            Arc::new(EmbeddedMeta::open(&dir.path().join("meta.json")).unwrap());
        let first = dir.path().join("admin.keyring");
        let secret = init_cluster_keyring(meta.as_ref(), &first).await.unwrap();
        let loaded = crate::Keyring::load(&first).unwrap();
        assert_eq!(loaded.secret().unwrap().verifier(), secret.verifier());
        check_cluster(meta.as_ref(), &secret).await.unwrap();
        let second = dir.path().join("second.keyring");
        assert!(matches!(
            init_cluster_keyring(meta.as_ref(), &second).await,
            Err(AuthError::AlreadyInitialised)
        ));
        assert!(!second.exists(), "a refused secret's keyring is removed");
        assert!(init_cluster_keyring(meta.as_ref(), &first).await.is_err());
        let again = crate::Keyring::load(&first).unwrap();
        assert_eq!(again.secret().unwrap().verifier(), secret.verifier());
    }

    #[tokio::test]
    async fn entities_come_and_go_and_a_readded_one_gets_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let meta: Arc<dyn MetaStore> =
            Arc::new(EmbeddedMeta::open(&dir.path().join("meta.json")).unwrap());
        let secret = ClusterSecret::generate().unwrap();
        assert!(matches!(
            check_cluster(meta.as_ref(), &secret).await,
            Err(AuthError::NotInitialised)
        ));
        init_cluster(meta.as_ref(), &secret).await.unwrap();
        check_cluster(meta.as_ref(), &secret).await.unwrap();
        let other = ClusterSecret::generate().unwrap();
        assert!(matches!(
            check_cluster(meta.as_ref(), &other).await,
            Err(AuthError::WrongCluster)
        ));
        assert!(matches!(
            init_cluster(meta.as_ref(), &other).await,
            Err(AuthError::AlreadyInitialised)
        ));

        let hv1 = EntityName::parse("client.hv1").unwrap();
        let k1 = add_entity(meta.as_ref(), &secret, &hv1, Caps::DATA)
            .await
            .unwrap();
        assert!(matches!(
            add_entity(meta.as_ref(), &secret, &hv1, Caps::DATA).await,
            Err(AuthError::EntityExists { .. })
        ));
        let auth = Authority::new(secret.clone(), meta.clone());
        let (k, caps, g) = auth.lookup(&hv1).await.unwrap().unwrap();
        assert_eq!((k, caps), (k1.clone(), Caps::DATA));
        assert_eq!(auth.live_generations().await.unwrap()["client.hv1"], g);
        let listed = list_entities(meta.as_ref()).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(!serde_json::to_string(&listed)
            .unwrap()
            .contains(&k1.to_hex()));

        remove_entity(meta.as_ref(), &hv1).await.unwrap();
        assert!(auth.lookup(&hv1).await.unwrap().is_none());
        assert!(matches!(
            remove_entity(meta.as_ref(), &hv1).await,
            Err(AuthError::NoSuchEntity { .. })
        ));
        let k2 = add_entity(meta.as_ref(), &secret, &hv1, Caps::ADMIN)
            .await
            .unwrap();
        assert_ne!(k1, k2);
        let admin = EntityName::admin();
        assert!(add_entity(meta.as_ref(), &secret, &admin, Caps::DATA)
            .await
            .is_err());
        assert_eq!(auth.lookup(&admin).await.unwrap().unwrap().1, Caps::ADMIN);
        assert_eq!(
            auth.lookup(&EntityName::osd(4)).await.unwrap().unwrap().1,
            Caps::OSD
        );
    }
}
