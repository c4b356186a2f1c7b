//! `--meta` URLs: where a daemon or tool finds the cluster's metadata.

use crate::etcd::{EtcdConfig, EtcdMeta};
use crate::store::{MetaError, MetaStore};
use std::sync::Arc;

/// Parse `etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]` into an etcd configuration. Every key
/// lives under NAMESPACE when one is given, so several clusters can share one etcd.
pub fn parse_meta_url(url: &str) -> Result<EtcdConfig, MetaError> {
    let bad = |why: &str| {
        MetaError::Unavailable {
        reason: format!(
            "invalid metadata URL \"{url}\": {why} (expected etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE])"
        ),
    }
    };
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| bad("it must start with etcd://"))?;
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
        endpoints.push(format!("http://{h}"));
    }
    Ok(EtcdConfig::new(endpoints).with_namespace(namespace))
}

/// Connect to the metadata store a `--meta` URL names.
pub async fn connect_meta(url: &str) -> Result<Arc<dyn MetaStore>, MetaError> {
    let config = parse_meta_url(url)?;
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
