//! Keyring files: the cluster secret, or one entity's key (docs/design.md, "Keyring file").

use crate::keys::{ClusterSecret, EntityName, Key, ADMIN_GENERATION, DAEMON_GENERATION};
use crate::AuthError;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What a keyring file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keyring {
    /// `[cluster] secret = HEX`: daemons and administrators.
    Cluster(ClusterSecret),
    /// `[client.NAME] key = HEX`: one client's own key.
    Entity { entity: EntityName, key: Key },
}

/// An identity and its key: what a client proves in the handshake; with data-plane TLS
/// also the certificate it presents, and the CA it checks OSDs against.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub entity: EntityName,
    pub key: Key,
    /// Run every connection inside TLS with these credentials (None: plaintext).
    pub tls: Option<std::sync::Arc<crate::DataTls>>,
}

impl Credentials {
    /// The same identity, connecting through `tls` (None: plaintext).
    pub fn with_tls(mut self, tls: Option<std::sync::Arc<crate::DataTls>>) -> Self {
        self.tls = tls;
        self
    }
}

impl Keyring {
    /// Read a keyring file, refusing one that group or others can read.
    pub fn load(path: &Path) -> Result<Keyring, AuthError> {
        let shown = path.display().to_string();
        let io = |op, source| AuthError::Io {
            op,
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(|e| io("read keyring", e))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AuthError::OpenPermissions { path: shown, mode });
        }
        let text = std::fs::read_to_string(path).map_err(|e| io("read keyring", e))?;
        Keyring::parse(&text, &shown)
    }

    /// Parse a keyring's text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Keyring, AuthError> {
        let bad = |line: usize, reason: String| AuthError::BadKeyring {
            path: path.into(),
            line,
            reason,
        };
        let mut section: Option<(usize, String)> = None;
        let mut found: Option<Keyring> = None;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = Some((n, name.trim().to_string()));
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(bad(n, format!("expected `name = value`, found {line:?}")));
            };
            let (k, v) = (k.trim(), v.trim());
            let Some((_, sec)) = &section else {
                return Err(bad(n, "a value before any [section]".into()));
            };
            if found.is_some() {
                return Err(bad(n, "a keyring holds one secret or one key".into()));
            }
            let key = Key::from_hex(v).map_err(|e| bad(n, format!("{k}: {e}")))?;
            found = Some(match (sec.as_str(), k) {
                ("cluster", "secret") => Keyring::Cluster(ClusterSecret(key)),
                (entity, "key") if entity != "cluster" => {
                    let entity = EntityName::parse(entity).map_err(|e| bad(n, e.to_string()))?;
                    Keyring::Entity { entity, key }
                }
                _ => return Err(bad(n, format!("unknown setting {k:?} in [{sec}]"))),
            });
        }
        found.ok_or(AuthError::EmptyKeyring { path: path.into() })
    }

    /// The keyring's text.
    pub fn render(&self) -> String {
        let head = "# Basalt keyring: it holds a secret; keep it mode 0600.\n";
        match self {
            Keyring::Cluster(s) => format!("{head}[cluster]\nsecret = {}\n", s.0.to_hex()),
            Keyring::Entity { entity, key } => {
                format!("{head}[{entity}]\nkey = {}\n", key.to_hex())
            }
        }
    }

    /// Write a new keyring file with mode 0600; an existing file is never overwritten.
    pub fn write_new(&self, path: &Path) -> Result<(), AuthError> {
        let io = |op, source| AuthError::Io {
            op,
            path: path.display().to_string(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io("create keyring", e))?;
        f.write_all(self.render().as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| io("write keyring", e))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("sync directory of keyring", e))?;
        }
        Ok(())
    }

    /// The cluster secret, for operations that need it.
    pub fn secret(&self) -> Result<&ClusterSecret, AuthError> {
        match self {
            Keyring::Cluster(s) => Ok(s),
            Keyring::Entity { entity, .. } => Err(AuthError::NeedsSecret {
                entity: entity.to_string(),
            }),
        }
    }

    /// What a client proves: its own key, or `client.admin`'s for a cluster secret.
    pub fn client_credentials(&self) -> Credentials {
        match self {
            Keyring::Cluster(s) => {
                let entity = EntityName::admin();
                let key = s.entity_key(&entity, ADMIN_GENERATION);
                Credentials {
                    entity,
                    key,
                    tls: None,
                }
            }
            Keyring::Entity { entity, key } => Credentials {
                entity: entity.clone(),
                key: key.clone(),
                tls: None,
            },
        }
    }
}

impl ClusterSecret {
    /// What OSD `id` proves to its peers.
    pub fn daemon_credentials(&self, id: u32) -> Credentials {
        let entity = EntityName::osd(id);
        let key = self.entity_key(&entity, DAEMON_GENERATION);
        Credentials {
            entity,
            key,
            tls: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_written_0600_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let ring = Keyring::Cluster(ClusterSecret::generate().unwrap());
        ring.write_new(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Keyring::load(&path).unwrap(), ring);
        let again = ring.write_new(&path).unwrap_err().to_string();
        assert!(again.contains("create keyring"), "{again}");

        let entity = EntityName::parse("client.hv1").unwrap();
        let one = Keyring::Entity {
            entity,
            key: Key::random().unwrap(),
        };
        assert_eq!(Keyring::parse(&one.render(), "x").unwrap(), one);
    }

    #[test]
    fn a_keyring_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        Keyring::Cluster(ClusterSecret::generate().unwrap())
            .write_new(&path)
            .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Keyring::load(&path).unwrap_err().to_string();
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
    }

    #[test]
    fn bad_keyrings_say_where() {
        let hex = "ab".repeat(32);
        let cases = [
            ("", "no [cluster] secret"),
            ("secret = 00\n", "line 1: a value before any [section]"),
            ("[cluster]\nsecret = zz\n", "line 2: secret: not hex"),
            ("[cluster]\nsecret = abab\n", "2 bytes, expected 32"),
            ("[cluster]\nkey = x\n", "not hex"),
            ("[mon.a]\nkey = X\n", "not hex"),
            ("[cluster]\nflavour = 1\n", "not hex"),
            ("[cluster]\njunk\n", "expected `name = value`"),
        ];
        for (text, want) in cases {
            let e = Keyring::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let e = Keyring::parse(&format!("[mon.a]\nkey = {hex}\n"), "f").unwrap_err();
        assert!(e.to_string().contains("names start with"), "{e}");
        let e = Keyring::parse(&format!("[cluster]\nflavour = {hex}\n"), "f").unwrap_err();
        assert!(e.to_string().contains("unknown setting"), "{e}");
        let two = format!("[cluster]\nsecret = {hex}\nsecret = {hex}\n");
        let e = Keyring::parse(&two, "f").unwrap_err();
        assert!(e.to_string().contains("one secret or one key"), "{e}");
    }
}
