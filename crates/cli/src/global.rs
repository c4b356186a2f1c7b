//! The flags every `basalt` command takes, in any position (`basalt --json volume ls` and
//! `basalt volume ls --json` are the same), each also read from a `BASALT_*` environment
//! variable. docs/cli.md lists them.

use crate::daemons::MetaArgs;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Longest wait of a command for its change to be visible, unless --wait-timeout says.
pub const DEFAULT_WAIT_TIMEOUT_SECS: u64 = 60;

/// Flags shared by every subcommand.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    #[command(flatten)]
    pub meta: MetaArgs,
    /// Control socket of `basalt up` (DATA_DIR/control.sock), used when --meta is not given.
    #[arg(long, global = true, env = "BASALT_CONTROL", default_value = crate::DEFAULT_CONTROL)]
    pub control: PathBuf,
    /// Print JSON (the schemas of docs/cli.md) instead of text.
    #[arg(long, global = true, env = "BASALT_JSON", value_parser = clap::builder::FalseyValueParser::new())]
    pub json: bool,
    /// Return as soon as a change is made, without waiting until clients see it.
    #[arg(long, global = true, env = "BASALT_NO_WAIT", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_wait: bool,
    /// Seconds a command waits at most for its change to be visible to clients; past it,
    /// it fails with exit code 5 (the change itself is made).
    #[arg(long, global = true, env = "BASALT_WAIT_TIMEOUT", value_name = "SECONDS",
          default_value_t = DEFAULT_WAIT_TIMEOUT_SECS)]
    pub wait_timeout: u64,
    /// Config file: flags of every command under [global], of one command under [osd],
    /// [nbd], [pool.create], ...; the command line and BASALT_* variables override it
    /// [default: /etc/basalt/basalt.toml when it exists].
    #[arg(long, global = true, env = "BASALT_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Also apply the config file's table [COMMAND.NAME] (a systemd template unit passes
    /// its instance, `basalt osd --instance %i`).
    #[arg(long, global = true, env = "BASALT_INSTANCE", value_name = "NAME")]
    pub instance: Option<String>,
}

impl GlobalArgs {
    /// How long to wait for a change to be visible (None: --no-wait).
    pub fn wait(&self) -> Option<Duration> {
        (!self.no_wait).then(|| Duration::from_secs(self.wait_timeout))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// Goal: a global flag means the same in every position and on every level, daemons and
    /// subcommands of subcommands included.
    #[test]
    fn global_flags_parse_in_any_position() {
        let meta = "etcd://10.0.0.1:2379";
        for line in [
            "basalt --json --meta URL volume ls",
            "basalt volume --json --meta URL ls",
            "basalt volume ls --json --meta URL",
            "basalt osd --meta URL ls --json",
            "basalt s3 key ls --json --meta URL",
            "basalt s3 --json key --meta URL ls",
            "basalt pool --meta URL ls --json",
            "basalt volume snapshot --json ls db1 --meta URL",
            "basalt status --json --meta URL",
            "basalt --json osd --meta URL --data /d --listen 10.0.0.2:6800",
            "basalt auth ls --json --meta URL",
        ] {
            let words = line.replace("URL", meta);
            let cli = crate::Cli::try_parse_from(words.split_whitespace())
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(cli.global.json, "{line}");
            assert_eq!(cli.global.meta.meta.as_deref(), Some(meta), "{line}");
        }
        let cli = crate::Cli::try_parse_from(["basalt", "pool", "ls", "--no-wait"]).unwrap();
        assert_eq!(cli.global.wait(), None);
        let cli =
            crate::Cli::try_parse_from(["basalt", "pool", "ls", "--wait-timeout", "7"]).unwrap();
        assert_eq!(cli.global.wait(), Some(std::time::Duration::from_secs(7)));
    }
}
