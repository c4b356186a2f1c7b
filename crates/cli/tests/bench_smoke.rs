//! Smoke test of `basalt bench storage --smoke`: a real run of every default section
//! against a real `basalt up` and the local disk, checking the STRUCTURE of what it
//! writes, not its numbers. `--smoke` is `--quick` with 1 s steps and smaller sizes (the
//! same code; `--quick` took over 6 minutes of the suite's 25 in this debug build); the
//! plans of both modes are checked by the bench crate's unit tests.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on the whole benchmark run, a guard against a hang: `--smoke` takes about three
/// minutes of this debug build on 2 quiet cores, and about ten beside another end-to-end
/// binary in scripts/test.sh's lanes (646 s measured, its two guest sections emulated by
/// TCG on the shared cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(1200);
/// Bound on `basalt bench compare`.
const COMPARE_TIMEOUT: Duration = Duration::from_secs(30);

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Run `basalt` with `args`, killing it after `timeout`; returns (success, stdout).
fn basalt(args: &[&str], cwd: &Path, timeout: Duration) -> (bool, String) {
    let out_path = cwd.join(format!("stdout-{}.txt", args[1]));
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start basalt");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("basalt {args:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (
        status.success(),
        std::fs::read_to_string(&out_path).unwrap(),
    )
}

#[test]
fn bench_storage_writes_a_complete_report() {
    // Goal: `basalt bench storage` runs end to end and leaves report.md with every section,
    // a parseable results.json with the documented keys, two SVG plots and the raw outputs.
    if !have("fio") {
        panic!("fio is required for this test: apt-get install -y fio iperf3");
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&data).unwrap();
    // The plasmavmc section boots the test guest.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guest = root.join("target/guest");
    let built = Command::new(root.join("scripts/build-guest-image.sh"))
        .arg(&guest)
        .output()
        .expect("run scripts/build-guest-image.sh");
    assert!(
        built.status.success(),
        "build-guest-image.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (ok, stdout) = basalt(
        &[
            "bench",
            "storage",
            "--smoke",
            "--data-dir",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--guest-dir",
            guest.to_str().unwrap(),
        ],
        dir.path(),
        RUN_TIMEOUT,
    );
    assert!(ok, "bench storage failed");
    assert!(stdout.trim().ends_with("report.md"), "stdout: {stdout}");

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for heading in [
        "# Storage Benchmarks",
        "## Network baseline",
        "## Local disk vs Basalt volume",
        "## Torus profiles",
        "## Vitastor profiles",
        "## Scaling over OSD counts (Simplyblock)",
        "## VM images, clones and snapshots (PlasmaVMC profile)",
        "## CPU cost of Basalt",
        "## Assessment",
    ] {
        assert!(report.contains(heading), "report.md lacks {heading}");
    }
    assert!(report.contains("| Metric | Local disk | Basalt volume | Basalt / local disk |"));
    // The scaling sweep ran: its table (figure and efficiency per OSD count) and its plot.
    assert!(
        report.contains("| OSDs (1 replica) |"),
        "scaling table missing"
    );
    assert!(out.join("scaling.svg").is_file(), "scaling.svg missing");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    for key in [
        "format_version",
        "generated_utc",
        "command",
        "duration_s",
        "sections",
    ] {
        assert!(json.get(key).is_some(), "results.json lacks {key}");
    }
    let env = &json["environment"];
    for key in ["cpu_model", "cores", "kernel", "basalt_version", "pool"] {
        assert!(env.get(key).is_some(), "environment lacks {key}");
    }
    assert_eq!(env["pool"]["replicas"], 3);
    let ids: Vec<&str> = json["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "network",
            "disk",
            "torus",
            "vitastor",
            "scaling",
            "s3",
            "strmvol",
            "plasmavmc",
            "nvmf",
            "memory"
        ]
    );
    // The memory section measured the store's RAM per object copy.
    let memory = json["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "memory")
        .unwrap();
    let rows = memory["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["basalt"]["value"].as_f64().is_some_and(|v| v > 0.0)),
        "memory section without a figure: {memory}"
    );
    // The PlasmaVMC section measured every figure: import, clones, chain, VMs.
    let section = |id: &str| {
        json["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("no section {id}"))
    };
    let vmc = section("plasmavmc");
    assert_eq!(vmc["rows"].as_array().unwrap().len(), 10, "{vmc}");
    for row in vmc["rows"].as_array().unwrap() {
        let v = row["basalt"]["value"].as_f64();
        assert!(
            v.is_some_and(|v| v > 0.0),
            "PlasmaVMC figure missing: {row}"
        );
    }
    // The NVMe/TCP section measured both protocols from the guest, writes and reads.
    let nvmf = section("nvmf");
    assert_eq!(nvmf["rows"].as_array().unwrap().len(), 2, "{nvmf}");
    for row in nvmf["rows"].as_array().unwrap() {
        for side in ["basalt", "baseline"] {
            let v = row[side]["value"].as_f64();
            assert!(v.is_some_and(|v| v > 0.0), "NVMe/TCP figure missing: {row}");
        }
    }
    // The S3 section measured every figure: through boto3 the LightningStor profile (10
    // rows), 4 KiB PUT/GET by 1 and 16 clients (4), versioned against unversioned PUT (3) and
    // the LIST walk (1); through the built-in Rust client 4 KiB PUT/GET by 1 and 16 (4) and
    // versioned against unversioned PUT rounds (3).
    let s3 = section("s3");
    assert_eq!(s3["rows"].as_array().unwrap().len(), 25, "{s3}");
    for row in s3["rows"].as_array().unwrap() {
        let v = row["basalt"]["value"].as_f64();
        assert!(v.is_some_and(|v| v > 0.0), "S3 figure missing: {row}");
    }
    // The scaling sweep reached the erasure-coded pool too.
    let scaling = section("scaling");
    let ec_rows = scaling["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"].as_str().is_some_and(|k| k.contains("_ec2p1_")))
        .count();
    assert!(
        ec_rows > 0,
        "no EC 2+1 row in the scaling section: {scaling}"
    );
    let disk = section("disk");
    let row = &disk["rows"][0];
    for side in ["baseline", "basalt"] {
        let command = row[side]["command"].as_str().unwrap();
        assert!(command.starts_with("fio "), "{side}: {command}");
        let raw = row[side]["raw"].as_str().unwrap();
        assert!(out.join(raw).is_file(), "missing {raw}");
    }
    assert!(row["basalt"]["command"]
        .as_str()
        .unwrap()
        .contains("--ioengine=nbd"));

    for svg in ["latency.svg", "throughput.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(text.starts_with("<svg"), "{svg} does not start with <svg");
    }
    assert!(out.join("raw/basalt-up.log").is_file());
    let leftovers: Vec<_> = std::fs::read_dir(&data).unwrap().collect();
    assert!(leftovers.is_empty(), "scratch left in the data dir");

    // The run compares with itself: every figure present, no change.
    let results = out.join("results.json");
    let r = results.to_str().unwrap();
    let (ok, table) = basalt(&["bench", "compare", r, r], dir.path(), COMPARE_TIMEOUT);
    assert!(ok, "bench compare failed");
    assert!(
        table.contains("| disk/seqread_1m_mib_s/basalt | MiB/s |"),
        "{table}"
    );
    assert!(!table.contains("only in"));
}
