//! `basalt cluster init` and `basalt auth`: the cluster secret and client keys of a
//! multi-host cluster (docs/design.md, "Data-plane authentication").

use crate::daemons::MetaArgs;
use crate::global::GlobalArgs;
use anyhow::{bail, Context};
use basalt_auth::{registry, Caps, EntityName, Keyring};
use basalt_bench::environment::utc_from_unix;
use clap::Subcommand;
use std::path::PathBuf;

/// `basalt cluster ...`
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Make the cluster's secret, once, before any daemon starts.
    ///
    /// Writes the admin keyring to --keyring (mode 0600; an existing file is never
    /// overwritten) and records a verifier of the secret (never the secret) in the
    /// metadata, so daemons started with another cluster's keyring refuse to start. Copy the
    /// file to every OSD, monitor and admin host; hypervisors get keys of their own
    /// (`basalt auth add`).
    ///
    /// With --data-tls DIR and no ca-cert.pem there yet, also makes the data-plane TLS
    /// credentials: a cluster CA (ca-cert.pem, ca-key.pem) and a certificate (cert.pem,
    /// key.pem) every host may present.
    ///
    /// Example:
    ///   basalt cluster init --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring
    #[command(verbatim_doc_comment)]
    Init,
    /// Show the cluster-wide settings: near-full and full ratios, muted health checks.
    Get,
    /// Change a cluster-wide setting, or set a flag.
    ///
    /// nearfull-ratio (default 0.85): an OSD with this share of its object slots in use is
    /// a warning (OSD_NEARFULL). full-ratio (default 0.95): an error (OSD_FULL); writes that
    /// need new objects fail with ENOSPC when an OSD has no slot left.
    /// noout (a flag): no down OSD is marked out, however long it is down, so a host can
    /// reboot or be serviced without its data being re-replicated (status warns meanwhile).
    ///
    /// Examples:
    ///   basalt cluster set nearfull-ratio 0.80
    ///   basalt cluster set full-ratio 90%
    ///   basalt cluster set noout      # before maintenance; `basalt cluster unset noout` after
    #[command(verbatim_doc_comment)]
    Set {
        /// nearfull-ratio, full-ratio or noout.
        key: String,
        /// A ratio: 0.85 or 85% (none for a flag).
        value: Option<String>,
    },
    /// Clear a flag set with `basalt cluster set` (noout).
    Unset {
        /// noout.
        key: String,
    },
}

/// `basalt auth ...`
#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Make a client key: `client.NAME` with `data` (volume and bucket I/O) or `admin`
    /// capabilities. Needs the admin keyring.
    ///
    /// Examples:
    ///   basalt auth add client.hv1 --out hv1.keyring
    ///   basalt nbd --meta etcd://10.0.0.1:2379 --keyring hv1.keyring    # then, on hv1
    #[command(verbatim_doc_comment)]
    Add {
        /// Entity name: client.NAME (letters, digits, '-', '_', '.').
        entity: String,
        /// Capabilities: data or admin.
        #[arg(long, default_value = "data")]
        caps: String,
        /// Write the client's keyring here (mode 0600) instead of to stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// List client entities and their capabilities (never keys).
    Ls,
    /// Revoke a client key: OSDs refuse it at once and close its open connections.
    Rm {
        /// Entity name: client.NAME.
        entity: String,
    },
}

/// `basalt cluster init --json`: what was made.
#[derive(serde::Serialize)]
struct InitResult<'a> {
    keyring: &'a std::path::Path,
    /// The data-plane TLS directory, when --data-tls was given.
    data_tls: Option<&'a std::path::Path>,
    /// Whether this run made the CA and certificate there (false: they existed).
    data_tls_made: bool,
}

/// `basalt auth add --json`: the new entity; its keyring text unless written to --out.
#[derive(serde::Serialize)]
struct AddResult<'a> {
    entity: String,
    caps: String,
    keyring_path: Option<&'a std::path::Path>,
    keyring: Option<String>,
}

pub async fn run_cluster(global: &GlobalArgs, command: ClusterCommand) -> anyhow::Result<()> {
    let (meta, json) = (&global.meta, global.json);
    match command {
        ClusterCommand::Get => crate::settings_cmd::get(global).await,
        ClusterCommand::Set { key, value } => {
            crate::settings_cmd::set(global, &key, value.as_deref()).await
        }
        ClusterCommand::Unset { key } => crate::settings_cmd::unset(global, &key).await,
        ClusterCommand::Init => {
            let Some(path) = meta.keyring.clone() else {
                bail!("--keyring FILE is required: where to write the new admin keyring");
            };
            if path.exists() {
                bail!(
                    "{} exists; cluster init never overwrites a keyring",
                    path.display()
                );
            }
            let store = meta.connect().await?;
            registry::init_cluster_keyring(store.as_ref(), &path).await?;
            if !json {
                println!(
                    "cluster secret made; admin keyring written to {} (mode 0600)",
                    path.display()
                );
                println!("copy it to every OSD and admin host; give hypervisors their own keys with `basalt auth add`");
            }
            let mut made = false;
            if let Some(dir) = &meta.data_tls {
                made = basalt_node::data_tls::ensure(dir)?;
                if made && !json {
                    println!(
                        "data-plane TLS: cluster CA and certificate made in {} (ca-key.pem \
                         stays with the admin; copy ca-cert.pem, cert.pem, key.pem to every host)",
                        dir.display()
                    );
                }
                basalt_node::data_tls::load(dir)?;
            }
            if json {
                let result = InitResult {
                    keyring: &path,
                    data_tls: meta.data_tls.as_deref(),
                    data_tls_made: made,
                };
                println!("{}", serde_json::to_string_pretty(&result)?);
            }
            Ok(())
        }
    }
}

pub async fn run_auth(meta: &MetaArgs, json: bool, command: AuthCommand) -> anyhow::Result<()> {
    let store = meta.connect().await?;
    match command {
        AuthCommand::Add { entity, caps, out } => {
            let name = EntityName::parse(&entity)?;
            let caps = Caps::parse(&caps)?;
            let secret = meta.checked_secret(store.as_ref()).await?;
            if let Some(path) = &out {
                if path.exists() {
                    bail!(
                        "{} exists; auth add never overwrites a keyring",
                        path.display()
                    );
                }
            }
            let key = registry::add_entity(store.as_ref(), &secret, &name, caps).await?;
            let ring = Keyring::Entity {
                entity: name.clone(),
                key,
            };
            if let Some(path) = &out {
                ring.write_new(path)
                    .with_context(|| format!("{name} was added; its keyring could not be written (`basalt auth rm {name}` and retry)"))?;
            }
            if json {
                let result = AddResult {
                    entity: name.to_string(),
                    caps: caps.to_string(),
                    keyring_path: out.as_deref(),
                    keyring: out.is_none().then(|| ring.render()),
                };
                println!("{}", serde_json::to_string_pretty(&result)?);
                return Ok(());
            }
            match out {
                Some(path) => {
                    println!(
                        "added {name} ({caps}); keyring written to {} (mode 0600)",
                        path.display()
                    );
                }
                None => {
                    eprintln!("added {name} ({caps}); its keyring follows (store it mode 0600)");
                    print!("{}", ring.render());
                }
            }
        }
        AuthCommand::Ls => {
            let records = registry::list_entities(store.as_ref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&records)?);
                return Ok(());
            }
            println!("{:<32} {:<6} CREATED", "ENTITY", "CAPS");
            println!(
                "{:<32} {:<6} (built in: the cluster secret's holders)",
                "client.admin", "admin"
            );
            for r in records {
                println!(
                    "{:<32} {:<6} {}",
                    r.entity,
                    r.caps,
                    utc_from_unix(r.created_unix)
                );
            }
        }
        AuthCommand::Rm { entity } => {
            let name = EntityName::parse(&entity)?;
            if name.is_builtin() {
                bail!("{name} is built in: its key derives from the cluster secret and cannot be revoked alone");
            }
            registry::remove_entity(store.as_ref(), &name).await?;
            if json {
                println!("{}", serde_json::json!({ "removed": name.to_string() }));
                return Ok(());
            }
            println!(
                "revoked {name}: OSDs refuse its key and close its connections within a second"
            );
        }
    }
    Ok(())
}
