//! NBD over TLS with the real clients: qemu (`tls-creds-x509`, `tls-creds-psk`) and libnbd's
//! tools (`nbds://` URIs) read and write `basalt up`'s volumes through `NBD_OPT_STARTTLS`;
//! plaintext clients against `--nbd-tls-required`, a wrong CA, a missing client certificate,
//! a wrong PSK and an unknown PSK user are refused; bad TLS flags stop `basalt up` at once.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Bound on `basalt up` refusing bad flags (it exits before starting anything).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(30);
/// The PSK user of the tests, and its key (32 bytes, hex).
const PSK_USER: &str = "alice";
const PSK_KEY: &str = "5f4dcc3b5aa765d61d8327deb882cf995f4dcc3b5aa765d61d8327deb882cf99";

const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=clientAuth\n";

/// The credentials of one test: directories laid out as qemu's `tls-creds-x509` wants them.
struct Pki {
    /// `--nbd-tls-cert`: ca-cert.pem, server-cert.pem, server-key.pem.
    server: PathBuf,
    /// A client trusting the CA, with a client certificate: ca-cert.pem, client-cert.pem,
    /// client-key.pem.
    client: PathBuf,
    /// A client trusting the CA, without a client certificate.
    anonymous: PathBuf,
    /// A client trusting another CA only.
    rogue: PathBuf,
}

fn make_pki(root: &Path) -> Pki {
    let work = root.join("pki");
    std::fs::create_dir_all(&work).unwrap();
    issue(&work, "ca", "Basalt test CA", CA_EXT, None);
    issue(&work, "server", "localhost", SERVER_EXT, Some("ca"));
    issue(&work, "client", "client.test", CLIENT_EXT, Some("ca"));
    issue(&work, "rogue", "Rogue CA", CA_EXT, None);
    let dir = |name: &str, files: &[(&str, &str)]| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (from, to) in files {
            std::fs::copy(work.join(from), d.join(to)).unwrap();
        }
        d
    };
    let ca = ("ca-cert.pem", "ca-cert.pem");
    Pki {
        server: dir(
            "server",
            &[
                ca,
                ("server-cert.pem", "server-cert.pem"),
                ("server-key.pem", "server-key.pem"),
            ],
        ),
        client: dir(
            "client",
            &[
                ca,
                ("client-cert.pem", "client-cert.pem"),
                ("client-key.pem", "client-key.pem"),
            ],
        ),
        anonymous: dir("anonymous", &[ca]),
        rogue: dir("rogue", &[("rogue-cert.pem", "ca-cert.pem")]),
    }
}

/// `driver=nbd,...` image options for qemu against the cluster's TCP address.
fn qemu_nbd_opts(cluster: &Cluster, export: &str, tls: bool) -> String {
    let a = cluster.nbd_addr;
    let mut o = format!(
        "driver=nbd,server.type=inet,server.host={},server.port={},export={export}",
        a.ip(),
        a.port()
    );
    if tls {
        o.push_str(",tls-creds=tls0");
    }
    o
}

/// Run qemu-io (or qemu-img with `img` args) with `object` as `--object` and the image
/// options of `export`; `cmds` are qemu-io commands.
fn qemu_io_tls(cluster: &Cluster, object: &str, export: &str, cmds: &[&str]) -> Output {
    let bin = require_tool("qemu-io", "qemu-utils");
    let mut cmd = Command::new(bin);
    cmd.args(["--object", object, "--image-opts"]);
    for c in cmds {
        cmd.args(["-c", c]);
    }
    cmd.arg(qemu_nbd_opts(cluster, export, true));
    run(&mut cmd, CLIENT_TIMEOUT)
}

fn qemu_img_info(cluster: &Cluster, object: Option<&str>) -> Output {
    let bin = require_tool("qemu-img", "qemu-utils");
    let mut cmd = Command::new(bin);
    cmd.arg("info");
    if let Some(object) = object {
        cmd.args(["--object", object]);
    }
    cmd.args(["--output=json", "--image-opts"]);
    cmd.arg(qemu_nbd_opts(cluster, "vol0", object.is_some()));
    run(&mut cmd, CLIENT_TIMEOUT)
}

fn x509_object(dir: &Path) -> String {
    format!(
        "tls-creds-x509,id=tls0,dir={},endpoint=client",
        dir.display()
    )
}

fn nbdinfo(uri: &str) -> Output {
    let bin = require_tool("nbdinfo", "libnbd-bin");
    run(Command::new(bin).args(["--json", uri]), CLIENT_TIMEOUT)
}

/// The size nbdinfo reports for the single export of `uri`.
fn nbdinfo_size(uri: &str) -> u64 {
    let out = nbdinfo(uri);
    assert_ok(&out, &format!("nbdinfo --json {uri}"));
    let v = parse_json(&out.stdout, "nbdinfo --json");
    v["exports"][0]["export-size"]
        .as_u64()
        .unwrap_or_else(|| panic!("no export-size in {v}"))
}

fn assert_refused(out: &Output, what: &str) {
    assert!(
        !out.status.success(),
        "{what} succeeded but must be refused:\n{}",
        text(out)
    );
}

fn nbds_uri(cluster: &Cluster, export: &str, query: &str) -> String {
    format!("nbds://{}/{export}?{query}", cluster.nbd_addr)
}

/// A PSK URI: libnbd takes the PSK user from the URI's user part.
fn psk_uri(cluster: &Cluster, user: &str, keys: &Path) -> String {
    format!(
        "nbds://{user}@{}/vol0?tls-psk-file={}",
        cluster.nbd_addr,
        keys.display()
    )
}

fn nbdcopy(from: &str, to: &str) {
    let bin = require_tool("nbdcopy", "libnbd-bin");
    let out = run(Command::new(bin).args([from, to]), CLIENT_TIMEOUT);
    assert_ok(&out, &format!("nbdcopy {from} {to}"));
}

#[test]
fn x509_clients_read_and_write_and_plaintext_is_refused() {
    // Goal: with --nbd-tls-cert and --nbd-tls-required, qemu-io/qemu-img (tls-creds-x509),
    // nbdinfo/nbdcopy (nbds:// with tls-certificates) and fio's nbd engine read back what
    // they wrote over TLS; plaintext TCP clients and a client trusting another CA are
    // refused; the unix socket still serves plaintext and sees the same bytes.
    let pki_root = tempfile::tempdir().unwrap();
    let pki = make_pki(pki_root.path());
    let server = pki.server.to_str().unwrap();
    let cluster = Cluster::start_with(&["--nbd-tls-cert", server, "--nbd-tls-required"]);
    assert!(
        cluster.stdout_text().contains("NBD TLS:     x509"),
        "no TLS banner line:\n{}",
        cluster.stdout_text()
    );

    // qemu: write a pattern, read it back, over TLS.
    let object = x509_object(&pki.anonymous);
    let out = qemu_io_tls(
        &cluster,
        &object,
        "vol0",
        &["write -P 0xa5 1M 1M", "read -P 0xa5 1M 1M"],
    );
    assert_ok(&out, "qemu-io over TLS");
    let all = text(&out);
    assert!(
        all.contains("wrote 1048576/1048576") && all.contains("read 1048576/1048576"),
        "qemu-io over TLS:\n{all}"
    );
    assert!(!all.contains("Pattern verification failed"), "{all}");
    let out = qemu_img_info(&cluster, Some(&object));
    assert_ok(&out, "qemu-img info over TLS");
    let info = parse_json(&out.stdout, "qemu-img info");
    assert_eq!(info["virtual-size"].as_u64(), Some(VOL0_BYTES), "{info}");

    // libnbd: nbdinfo and an nbdcopy round trip of 8 MiB.
    let query = format!("tls-certificates={}", pki.anonymous.display());
    let uri = nbds_uri(&cluster, "vol0", &query);
    assert_eq!(nbdinfo_size(&uri), VOL0_BYTES);
    let scratch = cluster.scratch();
    let data = pseudo_random(15, 8 << 20);
    let src = scratch.join("src.raw");
    std::fs::write(&src, &data).unwrap();
    cluster.volume_ok(&["create", "tlsvol", "--size", "8M"]);
    let vol_uri = nbds_uri(&cluster, "tlsvol", &query);
    nbdcopy(src.to_str().unwrap(), &vol_uri);
    let back = scratch.join("back.raw");
    nbdcopy(&vol_uri, back.to_str().unwrap());
    assert_same_bytes(&std::fs::read(&back).unwrap(), &data, "nbdcopy over TLS");
    // The unix socket offers TLS but does not require it: the same bytes in plaintext.
    let plain = scratch.join("plain.raw");
    nbdcopy(&cluster.unix_uri("tlsvol"), plain.to_str().unwrap());
    assert_same_bytes(&std::fs::read(&plain).unwrap(), &data, "unix socket read");

    // fio's nbd engine (libnbd) refuses URIs that name local files (tls-certificates), and
    // as root libnbd's default CA directory is /etc/pki/libnbd, which a test must not
    // write: fio runs TLS without checking the server (checked by the clients above).
    let fio = require_tool("fio", "fio");
    let fio_uri = nbds_uri(&cluster, "tlsvol", "tls-verify-peer=false");
    let out = run(
        Command::new(fio).args([
            "--name=tls",
            "--ioengine=nbd",
            &format!("--uri={fio_uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=8",
            "--size=4M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
        ]),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "fio --ioengine=nbd over TLS with verify");
    assert!(!text(&out).contains("verify: bad"), "{}", text(&out));

    // Plaintext TCP clients never reach an export.
    let out = nbdinfo(&cluster.uri("vol0"));
    assert_refused(&out, "plaintext nbdinfo");
    assert!(
        text(&out).to_lowercase().contains("tls"),
        "the refusal should say TLS is needed:\n{}",
        text(&out)
    );
    assert_refused(&qemu_img_info(&cluster, None), "plaintext qemu-img info");

    // A client trusting another CA refuses the server (and the server sees a failed
    // handshake, not a session).
    let rogue = format!("tls-certificates={}", pki.rogue.display());
    assert_refused(
        &nbdinfo(&nbds_uri(&cluster, "vol0", &rogue)),
        "nbdinfo with a rogue CA",
    );
    assert_refused(
        &qemu_img_info(&cluster, Some(&x509_object(&pki.rogue))),
        "qemu-img info with a rogue CA",
    );
    assert!(
        cluster.wait_for_stderr("TLS handshake failed", CLIENT_TIMEOUT),
        "no failed TLS handshake logged:\n{}",
        cluster.stderr_text()
    );
}

#[test]
fn x509_verify_peer_requires_a_client_certificate() {
    // Goal: with --nbd-tls-verify-peer, a client with a certificate from the CA reads and
    // writes (qemu-io, nbdinfo), and a client without one is refused.
    let pki_root = tempfile::tempdir().unwrap();
    let pki = make_pki(pki_root.path());
    let server = pki.server.to_str().unwrap();
    let cluster = Cluster::start_with(&[
        "--nbd-tls-cert",
        server,
        "--nbd-tls-verify-peer",
        "--default-volume-size",
        "64M",
    ]);
    let out = qemu_io_tls(
        &cluster,
        &x509_object(&pki.client),
        "vol0",
        &["write -P 0x3c 0 64k", "read -P 0x3c 0 64k"],
    );
    assert_ok(&out, "qemu-io with a client certificate");
    assert!(
        !text(&out).contains("Pattern verification failed"),
        "{}",
        text(&out)
    );
    let query = format!("tls-certificates={}", pki.client.display());
    assert_eq!(nbdinfo_size(&nbds_uri(&cluster, "vol0", &query)), 64 << 20);

    let query = format!("tls-certificates={}", pki.anonymous.display());
    assert_refused(
        &nbdinfo(&nbds_uri(&cluster, "vol0", &query)),
        "nbdinfo without a client certificate",
    );
    assert_refused(
        &qemu_img_info(&cluster, Some(&x509_object(&pki.anonymous))),
        "qemu-img without a client certificate",
    );
    // Optional TLS: a plaintext client is still served.
    assert_eq!(nbd_size(&cluster.uri("vol0")), 64 << 20);
}

#[test]
fn psk_clients_read_and_write_and_wrong_keys_are_refused() {
    // Goal: with --nbd-tls-psk and --nbd-tls-required, qemu-io (tls-creds-psk) and nbdinfo/
    // nbdcopy (tls-psk-file) read back what they wrote; a wrong key and an unknown user are
    // refused.
    let root = tempfile::tempdir().unwrap();
    let keys = root.path().join("keys.psk");
    std::fs::write(&keys, format!("bob:00112233\n{PSK_USER}:{PSK_KEY}\n")).unwrap();
    let cluster = Cluster::start_with(&[
        "--nbd-tls-psk",
        keys.to_str().unwrap(),
        "--nbd-tls-required",
        "--default-volume-size",
        "64M",
    ]);
    assert!(
        cluster
            .stdout_text()
            .contains("NBD TLS:     PSK (2 user(s)"),
        "no TLS banner line:\n{}",
        cluster.stdout_text()
    );
    // qemu's tls-creds-psk reads DIR/keys.psk and sends `username` as the identity.
    let object = format!(
        "tls-creds-psk,id=tls0,dir={},username={PSK_USER},endpoint=client",
        root.path().display()
    );
    let out = qemu_io_tls(
        &cluster,
        &object,
        "vol0",
        &["write -P 0x5a 0 1M", "read -P 0x5a 0 1M"],
    );
    assert_ok(&out, "qemu-io over TLS-PSK");
    let all = text(&out);
    assert!(all.contains("read 1048576/1048576"), "{all}");
    assert!(!all.contains("Pattern verification failed"), "{all}");

    let uri = psk_uri(&cluster, PSK_USER, &keys);
    assert_eq!(nbdinfo_size(&uri), 64 << 20);
    let scratch = cluster.scratch();
    let back = scratch.join("back.raw");
    nbdcopy(&uri, back.to_str().unwrap());
    let got = std::fs::read(&back).unwrap();
    assert!(
        got[..1 << 20].iter().all(|&b| b == 0x5a),
        "qemu's pattern read back by nbdcopy"
    );

    let wrong = root.path().join("wrong.psk");
    std::fs::write(&wrong, format!("{PSK_USER}:{}\n", "ab".repeat(32))).unwrap();
    let uri = psk_uri(&cluster, PSK_USER, &wrong);
    assert_refused(&nbdinfo(&uri), "nbdinfo with a wrong key");
    let stranger = root.path().join("stranger.psk");
    std::fs::write(&stranger, format!("mallory:{PSK_KEY}\n")).unwrap();
    let uri = psk_uri(&cluster, "mallory", &stranger);
    assert_refused(&nbdinfo(&uri), "nbdinfo as an unknown user");
    let wrong_dir = root.path().join("wrongdir");
    std::fs::create_dir_all(&wrong_dir).unwrap();
    std::fs::copy(&wrong, wrong_dir.join("keys.psk")).unwrap();
    let object = format!(
        "tls-creds-psk,id=tls0,dir={},username={PSK_USER},endpoint=client",
        wrong_dir.display()
    );
    assert_refused(
        &qemu_io_tls(&cluster, &object, "vol0", &["read 0 4k"]),
        "qemu-io with a wrong key",
    );
    assert_refused(&nbdinfo(&cluster.uri("vol0")), "plaintext nbdinfo");
}

/// Run `basalt up` with `args` on a fresh data dir; it must exit with an error quickly.
fn up_refuses(args: &[&str]) -> String {
    let data = tempfile::tempdir().unwrap();
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .arg("up")
            .arg("--data-dir")
            .arg(data.path())
            .args(["--nbd-listen", "127.0.0.1:0"])
            .args(["--s3-listen", "off"])
            .args(args),
        REFUSAL_TIMEOUT,
    );
    let all = text(&out);
    assert!(!out.status.success(), "basalt up {args:?} started:\n{all}");
    assert!(
        !all.contains("panicked"),
        "basalt up {args:?} panicked:\n{all}"
    );
    assert!(
        std::fs::read_dir(data.path()).unwrap().next().is_none(),
        "basalt up {args:?} wrote to its data dir before refusing"
    );
    all
}

#[test]
fn bad_tls_flags_stop_basalt_up_with_a_precise_error() {
    // Goal: missing files, bad PEM, a key of another certificate, a malformed keys file,
    // --nbd-tls-required without credentials: each stops `basalt up` before it starts,
    // with an error naming the culprit.
    let root = tempfile::tempdir().unwrap();
    let pki = make_pki(root.path());
    let missing = root.path().join("nowhere");
    let err = up_refuses(&["--nbd-tls-cert", missing.to_str().unwrap()]);
    assert!(err.contains("server-cert.pem"), "{err}");

    let bad = root.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("server-cert.pem"), "garbage\n").unwrap();
    std::fs::write(bad.join("server-key.pem"), "garbage\n").unwrap();
    let err = up_refuses(&["--nbd-tls-cert", bad.to_str().unwrap()]);
    assert!(
        err.contains("server-cert.pem") && err.contains("no CERTIFICATE"),
        "{err}"
    );

    // The client's key with the server's certificate: they do not match.
    let mixed = root.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::copy(
        pki.server.join("server-cert.pem"),
        mixed.join("server-cert.pem"),
    )
    .unwrap();
    std::fs::copy(
        pki.client.join("client-key.pem"),
        mixed.join("server-key.pem"),
    )
    .unwrap();
    let err = up_refuses(&["--nbd-tls-cert", mixed.to_str().unwrap()]);
    assert!(err.contains("x509 credentials in"), "{err}");

    // verify-peer needs the CA.
    let no_ca = root.path().join("noca");
    std::fs::create_dir_all(&no_ca).unwrap();
    for f in ["server-cert.pem", "server-key.pem"] {
        std::fs::copy(pki.server.join(f), no_ca.join(f)).unwrap();
    }
    let err = up_refuses(&[
        "--nbd-tls-cert",
        no_ca.to_str().unwrap(),
        "--nbd-tls-verify-peer",
    ]);
    assert!(err.contains("ca-cert.pem"), "{err}");

    let keys = root.path().join("keys.psk");
    std::fs::write(&keys, "alice:00ff\nbob=1234\n").unwrap();
    let err = up_refuses(&["--nbd-tls-psk", keys.to_str().unwrap()]);
    assert!(err.contains("line 2"), "{err}");
    let err = up_refuses(&["--nbd-tls-psk", missing.to_str().unwrap()]);
    assert!(err.contains("nowhere"), "{err}");

    let err = up_refuses(&["--nbd-tls-required"]);
    assert!(
        err.contains("--nbd-tls-required needs credentials"),
        "{err}"
    );
    let err = up_refuses(&[
        "--nbd-tls-cert",
        pki.server.to_str().unwrap(),
        "--nbd-tls-psk",
        keys.to_str().unwrap(),
    ]);
    assert!(err.contains("cannot be used with"), "{err}");
}
