//! `--meta` URLs: where a daemon or tool finds the cluster's metadata.

use crate::etcd::{EtcdConfig, EtcdMeta, EtcdTls};
use crate::store::{MetaError, MetaStore};
use std::sync::Arc;

/// How to reach a secured etcd: TLS files and etcd's own user/password (each optional).
#[derive(Clone, Debug, Default)]
pub struct MetaAccess {
    /// CA certificate (PEM) that signed etcd's server certificate; required by `etcds://`.
    pub ca: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM), when etcd checks client certificates.
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    /// etcd user, and a file holding its password (first line).
    pub user: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
}

impl MetaAccess {
    /// Fill `config`'s TLS and user settings from the files named here.
    fn apply(&self, url: &str, config: &mut EtcdConfig) -> Result<(), MetaError> {
        let bad = |reason: String| MetaError::Unavailable { reason };
        let read = |what: &str, p: &std::path::Path| {
            std::fs::read(p).map_err(|e| bad(format!("read the {what} {}: {e}", p.display())))
        };
        let https = config.endpoints.iter().all(|e| e.starts_with("https://"));
        match (&self.ca, https) {
            (Some(ca), true) => {
                let client = match (&self.cert, &self.key) {
                    (Some(c), Some(k)) => Some((
                        read("etcd client certificate", c)?,
                        read("etcd client key", k)?,
                    )),
                    (None, None) => None,
                    _ => return Err(bad(
                        "--meta-cert and --meta-key go together (a client certificate and its key)"
                            .into(),
                    )),
                };
                config.tls = Some(EtcdTls {
                    ca_pem: read("etcd CA certificate", ca)?,
                    client,
                });
            }
            (None, true) => {
                return Err(bad(format!(
                    "{url}: etcds:// needs --meta-ca FILE (the CA that signed etcd's certificate)"
                )))
            }
            (Some(_), false) | (None, false) if self.cert.is_some() || self.ca.is_some() => {
                return Err(bad(format!(
                    "{url}: TLS files were given for a plain etcd:// URL; use etcds://"
                )))
            }
            _ => {}
        }
        match (&self.user, &self.password_file) {
            (Some(user), Some(file)) => {
                let text = String::from_utf8(read("etcd password file", file)?)
                    .map_err(|_| bad(format!("{}: not UTF-8", file.display())))?;
                let password = text.lines().next().unwrap_or("").to_string();
                if password.is_empty() {
                    return Err(bad(format!("{}: empty password", file.display())));
                }
                config.user = Some((user.clone(), password));
            }
            (Some(_), None) => {
                return Err(bad(
                    "--meta-user needs --meta-password-file FILE (its password)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(bad("--meta-password-file needs --meta-user NAME".into()))
            }
            (None, None) => {}
        }
        Ok(())
    }
}

/// Parse `etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]` (or `etcds://` for TLS) into an etcd
/// configuration. Every key lives under NAMESPACE when one is given, so several clusters can
/// share one etcd.
pub fn parse_meta_url(url: &str) -> Result<EtcdConfig, MetaError> {
    let bad = |why: &str| {
        MetaError::Unavailable {
        reason: format!(
            "invalid metadata URL \"{url}\": {why} (expected etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE])"
        ),
    }
    };
    let (scheme, rest) = match (url.strip_prefix("etcd://"), url.strip_prefix("etcds://")) {
        (Some(rest), _) => ("http", rest),
        (_, Some(rest)) => ("https", rest),
        _ => return Err(bad("it must start with etcd:// (or etcds:// for TLS)")),
    };
    let (hosts, namespace) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if hosts.is_empty() {
        return Err(bad("no endpoint"));
    }
    let mut endpoints = Vec::new();
    for h in hosts.split(',') {
        let (host, port) = h
            .rsplit_once(':')
            .ok_or_else(|| bad("an endpoint has no port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad(&format!("endpoint \"{h}\" is not HOST:PORT")));
        }
        endpoints.push(format!("{scheme}://{h}"));
    }
    Ok(EtcdConfig::new(endpoints).with_namespace(namespace))
}

/// Connect to the metadata store a `--meta` URL names.
pub async fn connect_meta(url: &str) -> Result<Arc<dyn MetaStore>, MetaError> {
    connect_meta_with(url, &MetaAccess::default()).await
}

/// Connect to the metadata store a `--meta` URL names, with TLS and user settings.
pub async fn connect_meta_with(
    url: &str,
    access: &MetaAccess,
) -> Result<Arc<dyn MetaStore>, MetaError> {
    let mut config = parse_meta_url(url)?;
    access.apply(url, &mut config)?;
    Ok(Arc::new(EtcdMeta::connect(config).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: URLs parse into endpoints and a namespace; bad ones say what is wrong.
    #[test]
    fn parse() {
        let c = parse_meta_url("etcd://10.0.0.1:2379").unwrap();
        assert_eq!(c.endpoints, vec!["http://10.0.0.1:2379"]);
        assert_eq!(c.namespace, "");
        let c = parse_meta_url("etcd://a:1,b:2/prod/").unwrap();
        assert_eq!(c.endpoints, vec!["http://a:1", "http://b:2"]);
        assert_eq!(c.namespace, "/prod");
        for bad in [
            "http://a:1",
            "etcd://",
            "etcd://a",
            "etcd://a:x",
            "etcd://:1",
        ] {
            let e = parse_meta_url(bad).unwrap_err().to_string();
            assert!(e.contains("invalid metadata URL"), "{bad}: {e}");
        }
    }
}
