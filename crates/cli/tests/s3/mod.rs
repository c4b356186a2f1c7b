//! Harness of the S3 client tests: the gateway's address and key pair, client programs run
//! with a private configuration, file trees to sync and compare, and parsers for what the
//! clients print.

use crate::common::{
    assert_ok, assert_same_bytes, pseudo_random, require_tool, run, text, Cluster, CLIENT_TIMEOUT,
};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// The access key pair `basalt up` wrote to DATA_DIR/s3-credentials.
pub fn credentials(data_dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(data_dir.join("s3-credentials"))
        .expect("basalt up writes DATA_DIR/s3-credentials");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_prefix('='))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("{name} in s3-credentials:\n{text}"))
    };
    (field("aws_access_key_id"), field("aws_secret_access_key"))
}

/// The gateway's URL, `http://ADDR`.
pub fn endpoint(cluster: &Cluster) -> String {
    format!(
        "http://{}",
        cluster.s3_addr.expect("basalt up prints its S3 address")
    )
}

/// The last `n` bytes of `s` (from a character boundary), for failure messages.
pub fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

/// Variables through which a client could pick up configuration other than the test's own
/// (the user's AWS profile, an rclone or s3cmd config, a proxy for the loopback address).
pub const FOREIGN_ENV: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    // rclone's AWS SDK refuses to start over plain HTTP with a CA bundle set.
    "AWS_CA_BUNDLE",
    "RCLONE_CONFIG",
    "S3CMD_CONFIG",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// One S3 client program with the test's private configuration: leading arguments and
/// environment variables added to every run, every variable of `FOREIGN_ENV` removed.
pub struct Client {
    name: &'static str,
    bin: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Client {
    /// The installed program `name` (Debian package or origin `package`, for the message
    /// when it is missing), with no arguments or variables of its own yet.
    pub fn new(name: &'static str, package: &str) -> Client {
        Client {
            name,
            bin: require_tool(name, package),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Add a leading argument to every run.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Client {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Set a variable for every run.
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Client {
        self.env
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    /// Run with `args` (bounded by CLIENT_TIMEOUT); the outcome is not checked.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        let mut cmd = Command::new(&self.bin);
        for v in FOREIGN_ENV {
            cmd.env_remove(v);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(&self.args)
            .args(args);
        run(&mut cmd, CLIENT_TIMEOUT)
    }

    /// Run with `args`, assert success; returns stdout and stderr together.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.run(args);
        assert_ok(&out, &self.describe(args));
        text(&out)
    }

    /// Run with `args`, assert failure; returns stdout and stderr together.
    pub fn fails<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "{} succeeded, expected a failure:\n{}",
            self.describe(args),
            text(&out)
        );
        text(&out)
    }

    fn describe<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
        format!("{} {}", self.name, args.join(" "))
    }
}

/// Files of the trees the clients sync, as (relative path, size): nested directories, empty
/// files, names with spaces, unicode and URL-special characters, sizes around the 128 KiB
/// chunk of `basalt up`, and one file over the aws CLI's 8 MiB multipart threshold.
pub fn tree_spec() -> Vec<(String, usize)> {
    let named: [(&str, usize); 18] = [
        ("top.txt", 1000),
        ("empty.txt", 0),
        ("file with spaces.txt", 777),
        ("naïve café.txt", 4096),
        ("日本語/データ ファイル.bin", 65_536),
        ("emoji/🦀 crab.bin", 300_000),
        ("dir a/b c/deep file.bin", 131_072),
        ("dir a/b c/chunk+1.bin", 131_073),
        ("dir a/chunk-1.bin", 131_071),
        ("deep/1/2/3/4/5/leaf.txt", 12),
        ("deep/1/2/empty", 0),
        ("special/a+b=c&d.txt", 33),
        ("special/(parens) [brackets] {braces}.txt", 44),
        ("special/semi;colon,comma'quote.txt", 55),
        ("special/percent%41 hash#.txt", 66),
        ("special/tilde~dollar$at@!.txt", 77),
        ("special/question?mark.txt", 88),
        ("big/nine MiB.bin", 9 * MIB + 5),
    ];
    let mut files: Vec<(String, usize)> = named.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    for i in 0..34usize {
        let size = match i % 6 {
            0 => i,
            1 => 4096 * i + 1,
            2 => 131_072 * (i % 3 + 1),
            3 => 1000 * i * i,
            4 => 65_536 - i,
            _ => 200_000 + i,
        };
        files.push((format!("many/f{i:02}.bin"), size));
    }
    files
}

/// Write `files` under `root` with bytes from `seed`; returns what was written.
pub fn write_files(root: &Path, files: &[(String, usize)], seed: u64) -> BTreeMap<String, Vec<u8>> {
    let mut written = BTreeMap::new();
    for (i, (name, size)) in files.iter().enumerate() {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().expect("a file has a parent"))
            .unwrap_or_else(|e| panic!("create the directory of {}: {e}", path.display()));
        let bytes = pseudo_random(seed.wrapping_mul(1000) + i as u64, *size);
        std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        written.insert(name.clone(), bytes);
    }
    written
}

/// Every file under `root`, by path relative to it ('/'-separated).
pub fn read_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under the root");
                let rel = rel.to_str().expect("UTF-8 file name").to_string();
                let bytes =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                out.insert(rel, bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The tree under `root` holds exactly `want`, byte for byte.
pub fn assert_same_tree(root: &Path, want: &BTreeMap<String, Vec<u8>>, what: &str) {
    let got = read_tree(root);
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:?}, unexpected {extra:?}"
    );
    for (name, bytes) in want {
        assert_same_bytes(&got[name], bytes, &format!("{what}: {name}"));
    }
}

/// Lines of `out` that start with `prefix` (after leading blanks).
pub fn count_lines(out: &str, prefix: &str) -> usize {
    out.lines()
        .filter(|l| l.trim_start().starts_with(prefix))
        .count()
}

/// Lines of `out` that contain `needle`.
pub fn count_lines_containing(out: &str, needle: &str) -> usize {
    out.lines().filter(|l| l.contains(needle)).count()
}

/// The objects (key -> size) and the common prefixes of an `aws s3 ls` listing: object lines
/// are "DATE TIME SIZE KEY", prefix lines "PRE NAME/".
pub fn aws_ls(out: &str) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut objects = BTreeMap::new();
    let mut prefixes = Vec::new();
    for line in out.lines() {
        if let Some(p) = line.trim_start().strip_prefix("PRE ") {
            prefixes.push(p.to_string());
            continue;
        }
        let mut rest = line;
        let mut fields = Vec::new();
        for _ in 0..3 {
            rest = rest.trim_start();
            let end = rest
                .find(' ')
                .unwrap_or_else(|| panic!("bad `aws s3 ls` line {line:?}"));
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let key = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("bad `aws s3 ls` line {line:?}"));
        let size = fields[2]
            .parse()
            .unwrap_or_else(|e| panic!("size in `aws s3 ls` line {line:?}: {e}"));
        objects.insert(key.to_string(), size);
    }
    (objects, prefixes)
}

/// Parse the JSON a client printed.
pub fn json(out: &str, what: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: bad JSON ({e}):\n{out}"))
}

/// Hex MD5 of the file at `path` (coreutils' md5sum; the test crate has no MD5 of its own).
pub fn md5_hex(path: &Path) -> String {
    let out = run(Command::new("md5sum").arg(path), CLIENT_TIMEOUT);
    assert_ok(&out, &format!("md5sum {}", path.display()));
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("md5sum printed {s:?}"))
        .to_string()
}
