//! [`Endpoint`]: how connections reach Redis, resolved once from the
//! configuration (URLs, the CA certificates `rediss://` trusts, or the
//! Sentinels that name the primary).

use std::sync::Arc;

use redis::{
    Client, ConnectionInfo, TlsCertificates,
    cluster::{ClusterClient, ClusterClientBuilder},
};

use super::Sentinels;
use crate::{config::RedisConfig, error::RedisStoreError};

/// How to reach Redis, resolved once from the configuration: the URLs and,
/// with `tls_ca_file`, the CA certificates `rediss://` connections trust; or
/// the Sentinels that name the primary.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    urls: Vec<String>,
    certs: Option<TlsCertificates>,
    /// With Sentinel: where every new standalone connection finds the primary.
    sentinels: Option<Arc<Sentinels>>,
}

impl Endpoint {
    /// Read the configuration's URLs and CA file (a validated configuration).
    pub(crate) fn resolve(cfg: &RedisConfig) -> Result<Endpoint, RedisStoreError> {
        let certs = match &cfg.tls_ca_file {
            None => None,
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| RedisStoreError::Config(format!("cannot read tls_ca_file {}: {e}", path.display())))?;
                Some(TlsCertificates { client_tls: None, root_cert: Some(pem) })
            }
        };
        let sentinels = match &cfg.sentinel {
            Some(s) => Some(Arc::new(Sentinels::new(s, certs.clone(), cfg.op_timeout)?)),
            None => None,
        };
        Ok(Endpoint { urls: cfg.urls(), certs, sentinels })
    }

    /// A client of the first URL (standalone: the only one). Not with
    /// Sentinel: see [`primary`](Self::primary).
    pub(crate) fn client(&self) -> Result<Client, RedisStoreError> {
        let Some(url) = self.urls.first() else {
            return Err(RedisStoreError::Config("no Redis URL (the primary is found through Sentinel)".into()));
        };
        Ok(match &self.certs {
            Some(certs) => Client::build_with_tls(url.as_str(), certs.clone())?,
            None => Client::open(url.as_str())?,
        })
    }

    /// A client of the standalone server for a new connection: the URL's,
    /// or the primary the Sentinels name now (confirmed by `ROLE`; at most
    /// about twice `op_timeout`).
    pub(crate) async fn primary(&self) -> Result<Client, RedisStoreError> {
        match &self.sentinels {
            None => self.client(),
            Some(s) => Ok(Client::open(s.discover().await?.info)?),
        }
    }

    /// The standalone server known now, without asking anything: the URL's,
    /// or the primary the last discovery confirmed (`None` before the first).
    /// Its `host:port` names it.
    pub(crate) fn known_primary(&self) -> Result<Option<(String, ConnectionInfo)>, RedisStoreError> {
        match &self.sentinels {
            None => {
                let info = self.client()?.get_connection_info().clone();
                Ok(Some((String::new(), info)))
            }
            Some(s) => Ok(s.last().map(|p| (p.address, p.info))),
        }
    }

    /// With Sentinel: why no primary could be found lately (a failover in
    /// progress, the Sentinels unreachable), while none was found since.
    pub(crate) fn trouble(&self) -> Option<String> {
        self.sentinels.as_ref().and_then(|s| s.trouble())
    }

    /// Whether the primary is found through Sentinel.
    pub(crate) fn is_sentinel(&self) -> bool {
        self.sentinels.is_some()
    }

    /// The Sentinels, when the primary is found through them.
    pub(crate) fn sentinels(&self) -> Option<&Arc<Sentinels>> {
        self.sentinels.as_ref()
    }

    /// A cluster client over every seed URL.
    pub(crate) fn cluster(&self) -> ClusterClientBuilder {
        let builder = ClusterClient::builder(self.urls.clone());
        match &self.certs {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
    }
}
