//! The config file (`/etc/basalt/basalt.toml`): the flags of a command written down once,
//! so systemd units and scripts carry no long command lines (docs/design.md, "Running a
//! fleet"). It is read before the command line is parsed and only fills in flags that
//! neither the command line nor a `BASALT_*` variable set.
//!
//! ```toml
//! [global]                       # flags every command takes
//! meta = "etcd://10.0.0.1:2379"
//! keyring = "/etc/basalt/keyring"
//!
//! [osd]                          # `basalt osd`
//! listen = "10.0.0.2:6800"
//!
//! [osd.nvme0]                    # `basalt osd --instance nvme0` (a unit's %i)
//! data = "/var/lib/basalt/nvme0"
//! device = "/dev/nvme0n1"
//!
//! [pool.create]                  # `basalt pool create`
//! size = 3
//! ```
//!
//! Keys are the long flags. Every table and key is checked against the command tree, the
//! values with the flags' own parsers: an unknown key or a bad value is an error naming the
//! file and the key, never a daemon started on a default.

use anyhow::{anyhow, bail, Context};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command, CommandFactory};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the config file is read from when neither --config nor BASALT_CONFIG names one.
pub const DEFAULT_PATH: &str = "/etc/basalt/basalt.toml";

/// Flags that only choose the file; they cannot be set from it.
const NOT_IN_FILE: [&str; 4] = ["config", "instance", "help", "version"];

/// `argv` with the flags the config file sets appended (before a `--`, if any), for those
/// the command line and the environment left unset. Without a file, `argv` unchanged.
pub fn apply(argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let mut tree = crate::Cli::command();
    tree.build();
    // A first, lenient parse: which command runs, and which flags are already set. A
    // request for help or the version (or a command line clap refuses) skips the file:
    // the real parse then reports it.
    let Ok(matches) = tree.clone().ignore_errors(true).try_get_matches_from(&argv) else {
        return Ok(argv);
    };
    let (path, leaf, leaf_matches) = running_command(&tree, &matches);
    let instance = leaf_matches
        .try_get_one::<String>("instance")
        .ok()
        .flatten()
        .cloned();
    let Some(file) = config_path(leaf_matches)? else {
        // --instance only selects a table of the file: without one it would do nothing.
        if let Some(name) = instance {
            bail!(
                "--instance {name} selects a table of the config file, and there is none \
                 ({DEFAULT_PATH} does not exist; --config names another)"
            );
        }
        return Ok(argv);
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("read the config file {}", file.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| anyhow!("config file {}: {e}", file.display()))?;
    check_file(&tree, &table).map_err(|e| anyhow!("config file {}: {e}", file.display()))?;
    let settings = settings_for(&table, &path, instance.as_deref())
        .map_err(|e| anyhow!("config file {}: {e}", file.display()))?;
    let mut extra = Vec::new();
    for (key, value) in settings {
        let arg = find_arg(leaf, &key).ok_or_else(|| {
            anyhow!(
                "config file {}: `{}` does not take --{key}",
                file.display(),
                path.join(" ")
            )
        })?;
        let id = arg.get_id().as_str();
        let set = matches!(
            leaf_matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if !set {
            extra.extend(flag_words(&key, &value));
        }
    }
    let mut out = argv;
    let at = out.iter().position(|w| w == "--").unwrap_or(out.len());
    out.splice(at..at, extra);
    Ok(out)
}

/// For each command line a config file configures (`basalt osd --instance nvme0`), the
/// flags it adds.
pub type Configured = Vec<(String, Vec<String>)>;

/// `basalt config check`: the file in force (checked whole by [`apply`] before any command
/// runs), and for each command and instance it configures, the flags it adds.
pub fn describe(file: Option<&Path>) -> anyhow::Result<(PathBuf, Configured)> {
    let file = match file {
        Some(f) => f.to_path_buf(),
        None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
        None => bail!("no config file: {DEFAULT_PATH} does not exist and --config names none"),
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("read the config file {}", file.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| anyhow!("config file {}: {e}", file.display()))?;
    check_file(&crate::Cli::command(), &table)
        .map_err(|e| anyhow!("config file {}: {e}", file.display()))?;
    let mut out = Vec::new();
    let mut tree = crate::Cli::command();
    tree.build();
    let mut walk = vec![(Vec::<String>::new(), &table)];
    // Bound: the file's tables, each visited once.
    while let Some((path, t)) = walk.pop() {
        let mut cmd = &tree;
        for name in &path {
            cmd = cmd.find_subcommand(name).unwrap_or(cmd);
        }
        for (key, value) in t.iter().rev() {
            let toml::Value::Table(inner) = value else {
                continue;
            };
            if key == "global" && path.is_empty() {
                continue;
            }
            if path.is_empty() || cmd.find_subcommand(key).is_some() {
                let mut sub = path.clone();
                sub.push(key.clone());
                walk.push((sub, inner));
            } else {
                let line = format!("basalt {} --instance {key}", path.join(" "));
                let settings = settings_for(&table, &path, Some(key))?;
                out.push((line, words_of(&settings)));
            }
        }
        if !path.is_empty() {
            let settings = settings_for(&table, &path, None)?;
            out.push((format!("basalt {}", path.join(" ")), words_of(&settings)));
        }
    }
    out.sort();
    Ok((file, out))
}

fn words_of(settings: &[(String, toml::Value)]) -> Vec<String> {
    settings
        .iter()
        .flat_map(|(k, v)| flag_words(k, v))
        .map(|w| w.to_string_lossy().into_owned())
        .collect()
}

/// The names of the command that runs (`["osd"]`, `["pool", "create"]`), its definition
/// and its matches.
fn running_command<'a>(
    tree: &'a Command,
    matches: &'a ArgMatches,
) -> (Vec<String>, &'a Command, &'a ArgMatches) {
    let (mut path, mut cmd, mut m) = (Vec::new(), tree, matches);
    while let Some((name, sub)) = m.subcommand() {
        let Some(next) = cmd.find_subcommand(name) else {
            break;
        };
        path.push(name.to_string());
        (cmd, m) = (next, sub);
    }
    (path, cmd, m)
}

/// The file to read: --config or BASALT_CONFIG (which must exist), else the default path
/// when it exists.
fn config_path(matches: &ArgMatches) -> anyhow::Result<Option<PathBuf>> {
    if let Ok(Some(path)) = matches.try_get_one::<PathBuf>("config") {
        if !path.exists() {
            bail!("config file {} does not exist", path.display());
        }
        return Ok(Some(path.clone()));
    }
    let default = Path::new(DEFAULT_PATH);
    Ok(default.exists().then(|| default.to_path_buf()))
}

/// Check every table and key of the file against the command tree and every value with
/// its flag's parser, whichever command runs now.
fn check_file(tree: &Command, table: &toml::Table) -> anyhow::Result<()> {
    for (name, value) in table {
        let toml::Value::Table(inner) = value else {
            bail!("`{name}` is outside a table: flags of every command go under [global]");
        };
        if name == "global" {
            for (key, value) in inner {
                let arg = find_arg(tree, key)
                    .filter(|a| a.is_global_set())
                    .ok_or_else(|| anyhow!("[global] has `{key}`, which is not a global flag"))?;
                check_value(arg, &format!("[global] {key}"), value)?;
            }
            continue;
        }
        let cmd = tree
            .find_subcommand(name)
            .filter(|c| c.get_name() != "help")
            .ok_or_else(|| anyhow!("[{name}]: `basalt {name}` is not a command"))?;
        check_command(cmd, name, inner)?;
    }
    Ok(())
}

/// Check a command's table `[label]`: flags of the command, tables of its subcommands, and
/// instance tables (`[osd.nvme0]`) holding flags of the command.
fn check_command(cmd: &Command, label: &str, table: &toml::Table) -> anyhow::Result<()> {
    for (key, value) in table {
        match value {
            toml::Value::Table(inner) => match cmd.find_subcommand(key) {
                Some(sub) => check_command(sub, &format!("{label}.{key}"), inner)?,
                None => {
                    for (k, v) in inner {
                        if let toml::Value::Table(_) = v {
                            bail!("[{label}.{key}.{k}]: an instance table holds flags only");
                        }
                        check_key(cmd, &format!("{label}.{key}"), k, v)?;
                    }
                }
            },
            _ => check_key(cmd, label, key, value)?,
        }
    }
    Ok(())
}

fn check_key(cmd: &Command, label: &str, key: &str, value: &toml::Value) -> anyhow::Result<()> {
    let arg = find_arg(cmd, key).ok_or_else(|| {
        anyhow!(
            "[{label}] has `{key}`, but `basalt {}` has no --{key}",
            label.replace('.', " ")
        )
    })?;
    check_value(arg, &format!("[{label}] {key}"), value)
}

/// A flag of `cmd` by its long name, unless it only chooses the file.
fn find_arg<'a>(cmd: &'a Command, long: &str) -> Option<&'a clap::Arg> {
    if NOT_IN_FILE.contains(&long) {
        return None;
    }
    cmd.get_arguments().find(|a| a.get_long() == Some(long))
}

/// Is `value` of the type `arg` takes, and does its parser accept it?
fn check_value(arg: &clap::Arg, what: &str, value: &toml::Value) -> anyhow::Result<()> {
    let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    let many = matches!(arg.get_action(), ArgAction::Append);
    let items: Vec<&toml::Value> = match value {
        toml::Value::Boolean(_) if switch => return Ok(()),
        _ if switch => bail!("{what}: must be true or false"),
        toml::Value::Array(items) if many => items.iter().collect(),
        toml::Value::Array(_) => bail!("{what}: takes one value, not a list"),
        other => vec![other],
    };
    for item in items {
        let word =
            scalar_word(item).ok_or_else(|| anyhow!("{what}: must be a string or number"))?;
        parses(arg, &word).map_err(|e| anyhow!("{what} = {word:?}: {}", first_line(&e)))?;
    }
    Ok(())
}

/// Does `arg`'s value parser (its type, range or possible values) accept `word`?
fn parses(arg: &clap::Arg, word: &str) -> Result<(), String> {
    let probe = clap::Arg::new("value").value_parser(arg.get_value_parser().clone());
    Command::new("basalt")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from([word])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A string, integer or float as the command line would spell it.
fn scalar_word(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

fn first_line(message: &str) -> &str {
    let line = message.lines().next().unwrap_or(message);
    line.strip_prefix("error: ").unwrap_or(line)
}

/// The settings that apply to the command at `path`: [global], then the command's table,
/// then its instance table; a later one overrides an earlier one.
fn settings_for(
    table: &toml::Table,
    path: &[String],
    instance: Option<&str>,
) -> anyhow::Result<Vec<(String, toml::Value)>> {
    let mut out: Vec<(String, toml::Value)> = Vec::new();
    let mut put = |key: &str, value: &toml::Value| {
        out.retain(|(k, _)| k != key);
        out.push((key.to_string(), value.clone()));
    };
    if let Some(toml::Value::Table(global)) = table.get("global") {
        global.iter().for_each(|(k, v)| put(k, v));
    }
    let mut current = Some(table);
    for name in path {
        current = match current.and_then(|t| t.get(name)) {
            Some(toml::Value::Table(t)) => Some(t),
            _ => None,
        };
    }
    if let Some(own) = current {
        own.iter()
            .filter(|(_, v)| !v.is_table())
            .for_each(|(k, v)| put(k, v));
    }
    if let Some(name) = instance {
        let label = format!("{}.{name}", path.join("."));
        match current.and_then(|t| t.get(name)) {
            Some(toml::Value::Table(own)) => own.iter().for_each(|(k, v)| put(k, v)),
            _ => bail!("--instance {name}: there is no [{label}] table"),
        }
    }
    Ok(out)
}

/// The command-line words of one setting: `--key=value` per value, `--key` for a true
/// switch, nothing for a false one.
fn flag_words(key: &str, value: &toml::Value) -> Vec<OsString> {
    match value {
        // The flag's name says what it does (`--sparse`, `--no-local-path`): `true` gives it.
        toml::Value::Boolean(true) => vec![format!("--{key}").into()],
        toml::Value::Boolean(false) => Vec::new(),
        toml::Value::Array(items) => items
            .iter()
            .filter_map(scalar_word)
            .map(|w| format!("--{key}={w}").into())
            .collect(),
        other => scalar_word(other)
            .map(|w| vec![format!("--{key}={w}").into()])
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// Parse `line` with the config file holding `toml` (through --config).
    fn with_file(toml: &str, line: &str) -> anyhow::Result<crate::Cli> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("basalt.toml");
        std::fs::write(&file, toml)?;
        let mut argv = words(line);
        argv.push(format!("--config={}", file.display()).into());
        let argv = apply(argv)?;
        Ok(crate::Cli::try_parse_from(argv)?)
    }

    fn debug(cli: &crate::Cli) -> String {
        // The --config flag itself differs between the two parses; everything else must not.
        let mut cli = format!("{cli:?}");
        if let Some(start) = cli.find("config: Some(") {
            let end = cli[start..].find(')').map_or(cli.len(), |e| start + e + 1);
            cli.replace_range(start..end, "config: None");
        }
        cli
    }

    /// A value the flag's parser accepts, from its possible values or a few candidates.
    fn sample(arg: &clap::Arg) -> Option<String> {
        if let Some(v) = arg
            .get_possible_values()
            .into_iter()
            .find(|v| !v.is_hide_set())
        {
            return Some(v.get_name().to_string());
        }
        [
            "7",
            "127.0.0.1:7000",
            "etcd://127.0.0.1:2379",
            "1G",
            "0.5",
            "rr1",
            "zone=z1",
            "off",
            "/tmp/basalt-config-test",
        ]
        .into_iter()
        .find(|w| parses(arg, w).is_ok())
        .map(str::to_string)
    }

    /// Goal: every flag of every daemon means the same in the config file as on the command
    /// line: for each one, `basalt CMD` with `[CMD] flag = value` parses to exactly what
    /// `basalt CMD --flag value` parses to.
    #[test]
    fn every_daemon_flag_means_the_same_in_the_file() {
        let mut tree = crate::Cli::command();
        tree.build();
        let mut checked = 0;
        for name in ["up", "osd", "mon", "nbd", "nvmf", "s3"] {
            let cmd = tree.find_subcommand(name).expect("a daemon command");
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if NOT_IN_FILE.contains(&long) || arg.is_global_set() {
                    continue;
                }
                let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
                let (line, toml) = if switch {
                    (
                        format!("basalt {name} --{long}"),
                        format!("[{name}]\n{long} = true\n"),
                    )
                } else {
                    let value = sample(arg)
                        .unwrap_or_else(|| panic!("no sample value for {name} --{long}"));
                    (
                        format!("basalt {name} --{long} {value}"),
                        format!("[{name}]\n{long} = {value:?}\n"),
                    )
                };
                let Ok(direct) = crate::Cli::try_parse_from(words(&line)) else {
                    // A flag that needs a companion (--nbd-tls-verify-peer needs TLS
                    // credentials) cannot be given alone; the others all are.
                    continue;
                };
                let from_file = with_file(&toml, &format!("basalt {name}"))
                    .unwrap_or_else(|e| panic!("{name}: {toml}: {e:#}"));
                assert_eq!(debug(&from_file), debug(&direct), "{name} --{long}");
                checked += 1;
            }
        }
        eprintln!("checked {checked} flags");
        assert!(checked > 60, "only {checked} flags checked");
    }

    /// Goal: global flags come from [global] for any command, and the command line and
    /// BASALT_* variables win over the file.
    #[test]
    fn global_table_and_precedence() {
        let toml = "[global]\nmeta = \"etcd://10.0.0.9:2379\"\njson = true\n\
                    [osd]\nlisten = \"10.0.0.2:6800\"\n";
        let cli = with_file(toml, "basalt volume ls").unwrap();
        assert_eq!(
            cli.global.meta.meta.as_deref(),
            Some("etcd://10.0.0.9:2379")
        );
        assert!(cli.global.json);
        let cli = with_file(toml, "basalt volume ls --meta etcd://10.0.0.1:2379").unwrap();
        assert_eq!(
            cli.global.meta.meta.as_deref(),
            Some("etcd://10.0.0.1:2379")
        );
        let direct = crate::Cli::try_parse_from(words(
            "basalt osd --listen 10.0.0.3:6800 --meta etcd://10.0.0.9:2379 --json",
        ))
        .unwrap();
        let cli = with_file(toml, "basalt osd --listen 10.0.0.3:6800").unwrap();
        assert_eq!(debug(&cli), debug(&direct), "the command line wins");
        // `osd ls` is another command: [osd]'s listen does not apply to it.
        assert!(with_file(toml, "basalt osd ls").is_ok());
        // A subcommand's table.
        let toml = "[pool.create]\npgs = 64\nfailure-domain = \"osd\"\n";
        let cli = with_file(toml, "basalt pool create p").unwrap();
        let direct =
            crate::Cli::try_parse_from(words("basalt pool create p --pgs 64 --failure-domain osd"))
                .unwrap();
        assert_eq!(debug(&cli), debug(&direct));
    }

    /// Goal: an instance table (a systemd template's %i) adds to and overrides its
    /// command's table; naming one that does not exist is an error.
    #[test]
    fn instance_tables() {
        let toml = "[osd]\nlisten = \"10.0.0.2:6800\"\nsparse = true\n\
                    [osd.nvme0]\ndata = \"/var/lib/basalt/nvme0\"\nlisten = \"10.0.0.2:6801\"\n";
        let cli = with_file(toml, "basalt osd --instance nvme0").unwrap();
        let direct = crate::Cli::try_parse_from(words(
            "basalt osd --data /var/lib/basalt/nvme0 --listen 10.0.0.2:6801 --sparse \
             --instance nvme0",
        ))
        .unwrap();
        assert_eq!(debug(&cli), debug(&direct));
        let err = with_file(toml, "basalt osd --instance nvme1").unwrap_err();
        assert!(err.to_string().contains("no [osd.nvme1] table"), "{err}");
    }

    /// Goal: the example shipped beside the units is a file Basalt accepts, and an OSD unit's
    /// instance gets its own data directory and device from it.
    #[test]
    fn the_shipped_example_is_valid() {
        let example = include_str!("../../../contrib/systemd/basalt.toml");
        let table: toml::Table = example.parse().unwrap();
        check_file(&crate::Cli::command(), &table).unwrap();
        let cli = with_file(example, "basalt osd --instance nvme1").unwrap();
        let direct = crate::Cli::try_parse_from(words(
            "basalt osd --instance nvme1 --meta etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 \
             --keyring /etc/basalt/keyring --host host1 --location zone=z1,rack=r1 \
             --data /var/lib/basalt/nvme1 \
             --device /dev/disk/by-id/nvme-EXAMPLE_SERIAL_1 --listen 10.0.0.1:6801",
        ))
        .unwrap();
        assert_eq!(debug(&cli), debug(&direct));
    }

    /// Goal: `basalt config check` lists every command and instance the example configures,
    /// with the flags each gets (global ones included, instances over their command's).
    #[test]
    fn check_lists_what_each_command_gets() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("basalt.toml");
        std::fs::write(&file, include_str!("../../../contrib/systemd/basalt.toml")).unwrap();
        let (_, lines) = describe(Some(&file)).unwrap();
        let find = |cmd: &str| {
            lines
                .iter()
                .find(|(c, _)| c == cmd)
                .map(|(_, w)| w.join(" "))
                .unwrap_or_else(|| panic!("no {cmd} in {lines:?}"))
        };
        let nvme1 = find("basalt osd --instance nvme1");
        assert!(nvme1.contains("--listen=10.0.0.1:6801"), "{nvme1}");
        assert!(
            nvme1.contains("--host=host1") && nvme1.contains("--keyring="),
            "{nvme1}"
        );
        assert!(!nvme1.contains("6800"), "{nvme1}");
        assert!(find("basalt s3").contains("--master-key=/etc/basalt/s3-master.key"));
        assert_eq!(lines.len(), 6, "{lines:?}");
    }

    /// Goal: a typo or a bad value anywhere in the file is an error naming the table and
    /// key, whichever command runs, and a --config that does not exist is an error.
    #[test]
    fn bad_files_are_refused_precisely() {
        for (toml, expect) in [
            ("[osd]\nlisen = \"x\"\n", "[osd] has `lisen`"),
            ("[global]\nlisten = \"x\"\n", "not a global flag"),
            ("[nbd]\nlisten = \"not an address\"\n", "[nbd] listen"),
            ("[osd]\nsparse = \"yes\"\n", "must be true or false"),
            ("meta = \"etcd://x:1\"\n", "outside a table"),
            ("[osdd]\nlisten = \"x\"\n", "`basalt osdd` is not a command"),
            ("[global]\nconfig = \"/x\"\n", "not a global flag"),
            ("[nbd]\nlisten = [\"127.0.0.1:1\"]\n", "takes one value"),
            ("[osd\n", "config file"),
        ] {
            let err = with_file(toml, "basalt volume ls").unwrap_err();
            assert!(err.to_string().contains(expect), "{toml}: {err}");
        }
        let argv = words("basalt volume ls --config /nonexistent/basalt.toml");
        let err = apply(argv).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        // --instance without a file to select from is refused, not ignored (the test
        // machine has no /etc/basalt/basalt.toml; with one this case does not arise).
        if !Path::new(DEFAULT_PATH).exists() {
            let err = apply(words("basalt osd --instance nvme0")).unwrap_err();
            assert!(err.to_string().contains("there is none"), "{err}");
        }
    }
}
