//! Running Basalt under systemd: the units of contrib/systemd pass `systemd-analyze verify`,
//! and a daemon started the way they start it (config file, `$NOTIFY_SOCKET`) takes its
//! flags from the file and tells systemd when it is ready and when it stops. Also the other
//! deployment files: the Kubernetes manifests of contrib/kubernetes pass a strict offline
//! check (scripts/k8s-validate) and give `basalt` only arguments it accepts.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::{require_tool, wait_timeout};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// Goal: every unit in contrib/systemd is one systemd accepts without a warning (unknown
/// settings, bad values, missing executables), with `ExecStart` pointed at this build.
#[test]
fn units_pass_systemd_analyze_verify() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for entry in std::fs::read_dir(contrib()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !(name.ends_with(".service") || name.ends_with(".target")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            name.ends_with(".target") || text.contains("ExecStart=/usr/local/bin/basalt "),
            "{name}: ExecStart should run /usr/local/bin/basalt"
        );
        let text = text.replace("/usr/local/bin/basalt", env!("CARGO_BIN_EXE_basalt"));
        std::fs::write(dir.path().join(&name), text).unwrap();
        // A template is verified through an instance of it.
        units.push(name.replace("@.service", "@nvme0.service"));
    }
    for expected in [
        "basalt-osd@nvme0.service",
        "basalt-mon.service",
        "basalt-nbd.service",
        "basalt-nvmf.service",
        "basalt-s3.service",
        "basalt.target",
    ] {
        assert!(
            units.iter().any(|u| u == expected),
            "no {expected} in contrib/systemd"
        );
    }
    for unit in &units {
        let out = Command::new(&analyze)
            .current_dir(dir.path())
            .args(["verify", "--man=no"])
            .arg(if unit.contains('@') {
                unit.clone()
            } else {
                format!("./{unit}")
            })
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // verify exits 0 on settings it ignores with a warning: any output is a failure.
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "systemd-analyze verify {unit}: {}\n{stderr}",
            out.status
        );
    }
    // The etcd drop-in only sets [Service] keys systemd knows: verify it on a stand-in unit.
    let stand_in = dir.path().join("etcd.service");
    std::fs::write(&stand_in, "[Service]\nType=simple\nExecStart=/bin/true\n").unwrap();
    let drop_in = dir.path().join("etcd.service.d");
    std::fs::create_dir_all(&drop_in).unwrap();
    std::fs::copy(
        contrib().join("etcd.service.d/basalt.conf"),
        drop_in.join("basalt.conf"),
    )
    .unwrap();
    let out = Command::new(&analyze)
        .current_dir(dir.path())
        .args(["verify", "--man=no", "./etcd.service"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify etcd.service with the drop-in: {}\n{stderr}",
        out.status
    );
}

/// Wait up to `limit` for a notification datagram containing `word`; returns all received.
fn await_notification(socket: &UnixDatagram, word: &str, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    // Bound: `limit`, in reads of at most 200 ms.
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.lines().any(|l| l == word) {
                return Some(seen);
            }
        }
    }
    None
}

/// Goal: `basalt up` started as a `Type=notify` unit starts it — flags from the config file
/// only, `$NOTIFY_SOCKET` set — serves what the file says, sends READY=1 only once it
/// serves, and STOPPING=1 on SIGTERM before it exits cleanly.
#[test]
fn daemon_reads_its_config_file_and_notifies_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ready_file = dir.path().join("ready.json");
    let config = dir.path().join("basalt.toml");
    std::fs::write(
        &config,
        format!(
            "[up]\n\
             data-dir = {data:?}\n\
             default-volume = \"from-config\"\n\
             default-volume-size = \"64M\"\n\
             osd-size = \"256M\"\n\
             wal-size = {wal:?}\n\
             nbd-listen = \"127.0.0.1:0\"\n\
             s3-listen = \"127.0.0.1:0\"\n\
             metrics-listen = \"off\"\n\
             ready-file = {ready_file:?}\n",
            wal = basalt_testcluster::basalt::TEST_WAL_SIZE,
        ),
    )
    .unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["up", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env_remove("BASALT_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();

    let got = await_notification(&notify, "READY=1", Duration::from_secs(120));
    let Some(got) = got else {
        let _ = child.kill();
        panic!("no READY=1 within 120 s\n--- stderr ---\n{}", stderr());
    };
    assert!(got.contains("STATUS=serving nbd://127.0.0.1:"), "{got}");
    // Ready means serving: the ready file (written before READY=1) names what the file
    // asked for, in the directory it asked for.
    let endpoints: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&ready_file).expect("ready file before READY=1"))
            .unwrap();
    assert_eq!(endpoints["default_volume"], "from-config", "{endpoints}");
    assert_eq!(endpoints["data_dir"], data.to_str().unwrap(), "{endpoints}");
    let nbd = endpoints["nbd_tcp"].as_str().unwrap().to_string();
    std::net::TcpStream::connect(&nbd).expect("the NBD port serves once READY=1 was sent");

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let got = await_notification(&notify, "STOPPING=1", Duration::from_secs(30));
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    assert!(got.is_some(), "no STOPPING=1 after SIGTERM\n{}", stderr());
    assert!(
        status.is_some_and(|s| s.success()),
        "basalt up did not exit cleanly: {status:?}\n{}",
        stderr()
    );
}

/// Longest one run of the manifest validator may take.
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(60);

/// The manifest validator (scripts/k8s-validate): on PATH, or where a run of
/// scripts/install-test-deps.sh as a user puts it.
fn k8s_validate() -> PathBuf {
    if let Some(p) = common::find_tool("basalt-k8s-validate") {
        return p;
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let local = Path::new(&home).join(".local/bin/basalt-k8s-validate");
    assert!(
        local.is_file(),
        "basalt-k8s-validate is missing: scripts/install-test-deps.sh builds it (go build in \
         scripts/k8s-validate into /usr/local/bin)"
    );
    local
}

/// Goal: the Kubernetes manifests of contrib/kubernetes are what an API server would take
/// as written — every document decodes strictly into its typed object (a copy with a
/// misspelled or wrongly cased field is refused), volumes, sockets and references hold
/// together — and every argument they give `basalt` is one this build accepts.
#[test]
fn kubernetes_manifests_are_valid() {
    let validate = k8s_validate();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/kubernetes");
    let out = common::run(
        Command::new(&validate).arg("-containers").arg(&dir),
        VALIDATE_TIMEOUT,
    );
    let all = common::text(&out);
    assert!(
        out.status.success(),
        "basalt-k8s-validate {}: {}\n{all}",
        dir.display(),
        out.status
    );
    // Every manifest was read, those this test expects and any added later.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    for expected in [
        "namespace.yaml",
        "csidriver.yaml",
        "rbac.yaml",
        "controller.yaml",
        "node.yaml",
        "storageclass.yaml",
        "volumesnapshotclass.yaml",
    ] {
        assert!(
            files.iter().any(|f| f == expected),
            "no {expected} in contrib/kubernetes"
        );
    }
    files.sort();
    for file in &files {
        assert!(
            all.lines()
                .any(|l| l.starts_with("ok ") && l.contains(&format!("/{file} "))),
            "{file}: no object of it validated\n{all}"
        );
    }

    // What the manifests run `basalt` with, checked against this build: the flags are in
    // `basalt csi --help`, and this build parses the whole argument list, values included.
    let help = common::run(
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["csi", "--help"])
            .env_remove("BASALT_CONFIG"),
        VALIDATE_TIMEOUT,
    );
    common::assert_ok(&help, "basalt csi --help");
    let help = common::text(&help);
    let mut modes = Vec::new();
    for line in all.lines() {
        let Some(json) = line.strip_prefix("container ") else {
            continue;
        };
        let c: serde_json::Value = serde_json::from_str(json).unwrap();
        if !c["image"]
            .as_str()
            .unwrap()
            .starts_with("ghcr.io/basalt-storage/basalt:")
        {
            continue;
        }
        let args: Vec<String> = c["args"]
            .as_array()
            .unwrap_or_else(|| panic!("{json}: the basalt container has no args"))
            .iter()
            .map(|a| a.as_str().unwrap().replace("$(NODE_NAME)", "node-1"))
            .collect();
        assert_eq!(args.first().map(String::as_str), Some("csi"), "{json}");
        let mode = args
            .iter()
            .position(|a| a == "--mode")
            .and_then(|i| args.get(i + 1))
            .unwrap_or_else(|| panic!("{json}: no --mode"))
            .clone();
        let mut wanted = vec!["--mode", "--endpoint"];
        if mode == "node" {
            wanted.extend(["--node-id", "--nbd-uri", "--state-dir"]);
        }
        for flag in wanted {
            assert!(
                args.iter().any(|a| a == flag),
                "{json}: the {mode} plugin is not given {flag}"
            );
        }
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} <")),
                "{json}: {flag} is not in `basalt csi --help`:\n{help}"
            );
        }
        // clap parses (and checks the values of) every argument before it meets --help.
        let parsed = common::run(
            Command::new(env!("CARGO_BIN_EXE_basalt"))
                .args(&args)
                .arg("--help")
                .env_remove("BASALT_CONFIG"),
            VALIDATE_TIMEOUT,
        );
        assert!(
            parsed.status.success(),
            "{json}: basalt refuses these arguments\n{}",
            common::text(&parsed)
        );
        modes.push(mode);
    }
    modes.sort();
    assert_eq!(modes, ["controller", "node"], "basalt containers\n{all}");

    // The validator is strict: a field misspelled or in the wrong case is refused.
    let storage_class = std::fs::read_to_string(dir.join("storageclass.yaml")).unwrap();
    assert!(storage_class.contains("\nallowVolumeExpansion: true"));
    for wrong in ["alowVolumeExpansion", "AllowVolumeExpansion"] {
        let bad = tempfile::tempdir().unwrap();
        std::fs::write(
            bad.path().join("storageclass.yaml"),
            storage_class.replace("\nallowVolumeExpansion:", &format!("\n{wrong}:")),
        )
        .unwrap();
        let out = common::run(Command::new(&validate).arg(bad.path()), VALIDATE_TIMEOUT);
        let text = common::text(&out);
        assert!(
            !out.status.success() && text.contains(wrong),
            "basalt-k8s-validate took a StorageClass with {wrong}: {}\n{text}",
            out.status
        );
    }
}
