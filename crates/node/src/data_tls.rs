//! Making data-plane TLS credentials (docs/design.md, "Data-plane TLS"): a cluster CA and
//! one certificate signed by it, for `basalt cluster init --data-tls DIR` and `basalt up
//! --data-tls DIR` when DIR holds none yet.

use anyhow::Context;
use basalt_auth::tls::{CA_CERT_FILE, CERT_FILE, KEY_FILE, SERVER_NAME};
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The CA's key, kept beside its certificate to sign more certificates (mode 0600).
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// Validity of what is made here.
const VALID_DAYS: u32 = 3650;

/// Make a CA and a certificate for [`SERVER_NAME`] (server and client use) in `dir`, unless
/// it already holds `ca-cert.pem`. Returns whether anything was made.
pub fn ensure(dir: &Path) -> anyhow::Result<bool> {
    if dir.join(CA_CERT_FILE).exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let (ca_key, ca) = make(None, "Basalt cluster CA").context("make the cluster CA")?;
    let (key, cert) = make(Some((&ca_key, &ca)), SERVER_NAME).context("make a certificate")?;
    write(dir, CA_KEY_FILE, &ca_key.private_key_to_pem_pkcs8()?, 0o600)?;
    write(dir, KEY_FILE, &key.private_key_to_pem_pkcs8()?, 0o600)?;
    write(dir, CERT_FILE, &cert.to_pem()?, 0o644)?;
    // Last: its presence means the directory is complete.
    write(dir, CA_CERT_FILE, &ca.to_pem()?, 0o644)?;
    Ok(true)
}

/// A P-256 key and its certificate: self-signed CA when `issuer` is None, else a leaf for
/// [`SERVER_NAME`] signed by `issuer`.
fn make(
    issuer: Option<(&PKey<Private>, &X509)>,
    cn: &str,
) -> anyhow::Result<(PKey<Private>, X509)> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COMMONNAME, cn)?;
    let name = name.build();
    let mut b = X509Builder::new()?;
    b.set_version(2)?;
    let mut serial = BigNum::new()?;
    serial.rand(127, MsbOption::MAYBE_ZERO, false)?;
    let serial = serial.to_asn1_integer()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&name)?;
    b.set_pubkey(&key)?;
    let (from, until) = (
        Asn1Time::days_from_now(0)?,
        Asn1Time::days_from_now(VALID_DAYS)?,
    );
    b.set_not_before(&from)?;
    b.set_not_after(&until)?;
    match issuer {
        None => {
            b.set_issuer_name(&name)?;
            b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
            b.append_extension(
                KeyUsage::new()
                    .critical()
                    .key_cert_sign()
                    .crl_sign()
                    .build()?,
            )?;
            b.sign(&key, MessageDigest::sha256())?;
        }
        Some((ca_key, ca)) => {
            b.set_issuer_name(ca.subject_name())?;
            b.append_extension(BasicConstraints::new().critical().build()?)?;
            b.append_extension(
                KeyUsage::new()
                    .critical()
                    .digital_signature()
                    .key_agreement()
                    .build()?,
            )?;
            b.append_extension(
                ExtendedKeyUsage::new()
                    .server_auth()
                    .client_auth()
                    .build()?,
            )?;
            let san = SubjectAlternativeName::new()
                .dns(SERVER_NAME)
                .build(&b.x509v3_context(Some(ca), None))?;
            b.append_extension(san)?;
            b.sign(ca_key, MessageDigest::sha256())?;
        }
    }
    Ok((key, b.build()))
}

fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("write {}", path.display()))
}

/// Load `dir`'s credentials, saying which flag gave them in errors.
pub fn load(dir: &Path) -> anyhow::Result<std::sync::Arc<basalt_auth::DataTls>> {
    basalt_auth::DataTls::load(dir)
        .with_context(|| format!("load the data-plane TLS credentials of {}", dir.display()))
}
