//! `basalt cluster get/set` and `basalt health`: the cluster-wide settings (near-full and
//! full ratios, muted checks) and the health checks, on a multi-host cluster (`--meta`)
//! or `basalt up` (its control socket).

use crate::global::GlobalArgs;
use anyhow::bail;
use basalt_bench::environment::utc_from_unix;
use basalt_client::health::{HealthCheck, CODES};
use basalt_client::ClientError;
use basalt_meta::schema::{ClusterSettings, HealthMute};
use clap::Subcommand;

/// `basalt health ...`
#[derive(Subcommand, Debug)]
pub enum HealthCommand {
    /// Mute a health check: it still shows, marked muted, but no longer makes the cluster
    /// HEALTH_WARN or HEALTH_ERR.
    ///
    /// Examples:
    ///   basalt health mute OSD_DOWN --for 2h     # a host down for maintenance
    ///   basalt health mute OSD_NEARFULL          # until `basalt health unmute`
    #[command(verbatim_doc_comment)]
    Mute {
        /// The check's code, as `basalt health` prints it.
        code: String,
        /// How long: 90s, 30m, 2h, 1d (default: until unmuted).
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        duration: Option<u64>,
    },
    /// Unmute a health check.
    Unmute { code: String },
}

/// What `basalt cluster set` can change.
pub const SETTING_KEYS: [&str; 3] = ["nearfull-ratio", "full-ratio", "noout"];

/// Flags `basalt cluster set FLAG` sets and `basalt cluster unset FLAG` clears.
pub const FLAGS: [&str; 1] = ["noout"];

/// `basalt health`: every failing check with its detail and fix; with a subcommand, mute
/// or unmute one.
pub async fn run_health(global: &GlobalArgs, command: Option<HealthCommand>) -> anyhow::Result<()> {
    match command {
        None => {
            let report = crate::status::report(global, 0).await?;
            let checks = report.health_checks();
            if global.json {
                println!("{}", serde_json::to_string_pretty(&checks)?);
            } else {
                println!("{}", report.health());
                print_checks(&checks, true);
            }
        }
        Some(HealthCommand::Mute { code, duration }) => {
            if !CODES.contains(&code.as_str()) {
                bail!(
                    "unknown health check {code:?} (known: {})",
                    CODES.join(", ")
                );
            }
            let until = duration.map(|d| now() + d);
            let s = change(global, |s| {
                s.mutes.retain(|m| m.code != code);
                s.mutes.push(HealthMute {
                    code: code.clone(),
                    until,
                });
                Ok(())
            })
            .await?;
            print_settings(global, &s, &format!("{code} muted {}", until_text(until)))?;
        }
        Some(HealthCommand::Unmute { code }) => {
            let s = change(global, |s| {
                let before = s.mutes.len();
                s.mutes.retain(|m| m.code != code);
                if s.mutes.len() == before {
                    return Err(ClientError::NotFound {
                        what: format!("a mute of {code}"),
                    });
                }
                Ok(())
            })
            .await?;
            print_settings(global, &s, &format!("{code} unmuted"))?;
        }
    }
    Ok(())
}

/// `basalt cluster get`.
pub async fn get(global: &GlobalArgs) -> anyhow::Result<()> {
    let s = load(global).await?;
    print_settings(global, &s, "")
}

/// `basalt cluster set KEY VALUE` (a ratio) or `basalt cluster set FLAG`.
pub async fn set(global: &GlobalArgs, key: &str, value: Option<&str>) -> anyhow::Result<()> {
    if !SETTING_KEYS.contains(&key) {
        bail!(
            "unknown setting {key:?} (settable: {})",
            SETTING_KEYS.join(", ")
        );
    }
    if FLAGS.contains(&key) {
        if let Some(v) = value {
            bail!("{key} is a flag: `basalt cluster set {key}` sets it, `unset` clears it (got {v:?})");
        }
        return set_flag(global, key, true).await;
    }
    let Some(value) = value else {
        bail!("{key} needs a value (a ratio: 0.85 or 85%)");
    };
    let ratio: f64 = match value.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
        None => value.parse(),
    }
    .map_err(|_| anyhow::anyhow!("{key}: {value:?} is not a ratio (0.85 or 85%)"))?;
    let s = change(global, |s| {
        match key {
            "nearfull-ratio" => s.nearfull_ratio = ratio,
            _ => s.full_ratio = ratio,
        }
        Ok(())
    })
    .await?;
    print_settings(global, &s, &format!("{key} set to {ratio}"))
}

/// `basalt cluster unset FLAG`.
pub async fn unset(global: &GlobalArgs, key: &str) -> anyhow::Result<()> {
    if !FLAGS.contains(&key) {
        bail!("unknown flag {key:?} (flags: {})", FLAGS.join(", "));
    }
    set_flag(global, key, false).await
}

async fn set_flag(global: &GlobalArgs, key: &str, on: bool) -> anyhow::Result<()> {
    let s = change(global, |s| {
        s.noout = on;
        Ok(())
    })
    .await?;
    let done = match on {
        true => format!("{key} set: down OSDs stay in, their data is not re-replicated"),
        false => format!("{key} unset"),
    };
    print_settings(global, &s, &done)
}

/// The failing checks, one line each with what clears it; `detail` adds the OSDs/PGs.
pub fn print_checks(checks: &[HealthCheck], detail: bool) {
    for c in checks {
        let severity = match c.severity {
            basalt_client::health::Severity::Warn => "WARN",
            basalt_client::health::Severity::Err => "ERR",
        };
        let muted = if c.muted { " (muted)" } else { "" };
        println!("  [{severity}] {}{muted}: {}", c.code, c.summary);
        if detail {
            for line in &c.detail {
                println!("      {line}");
            }
        }
        println!("      fix: {}", c.fix);
    }
}

fn print_settings(global: &GlobalArgs, s: &ClusterSettings, done: &str) -> anyhow::Result<()> {
    if global.json {
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(());
    }
    if !done.is_empty() {
        println!("{done}");
    }
    println!("nearfull-ratio {}", s.nearfull_ratio);
    println!("full-ratio     {}", s.full_ratio);
    if s.noout {
        println!("flags          noout");
    }
    for m in &s.mutes {
        println!("muted          {} {}", m.code, until_text(m.until));
    }
    Ok(())
}

fn until_text(until: Option<u64>) -> String {
    match until {
        Some(t) => format!("until {}", utc_from_unix(t)),
        None => "until unmuted".into(),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn load(global: &GlobalArgs) -> anyhow::Result<ClusterSettings> {
    if global.meta.meta.is_some() {
        let meta = global.meta.connect().await?;
        return Ok(basalt_client::settings::load(meta.as_ref()).await?);
    }
    let resp = crate::control::call(
        &global.control,
        &crate::control::Request::Settings { put: None },
    )
    .await?;
    resp.settings
        .ok_or_else(|| anyhow::anyhow!("the control API sent no settings"))
}

/// Apply `change` to the settings: under compare-and-swap in the metadata (`--meta`), or
/// read, changed and written back through `basalt up`'s control socket.
async fn change(
    global: &GlobalArgs,
    mut change: impl FnMut(&mut ClusterSettings) -> Result<(), ClientError>,
) -> anyhow::Result<ClusterSettings> {
    if global.meta.meta.is_some() {
        let meta = global.meta.connect().await?;
        return Ok(basalt_client::settings::update(meta.as_ref(), change).await?);
    }
    let mut s = load(global).await?;
    change(&mut s)?;
    let resp = crate::control::call(
        &global.control,
        &crate::control::Request::Settings { put: Some(s) },
    )
    .await?;
    resp.settings
        .ok_or_else(|| anyhow::anyhow!("the control API sent no settings"))
}

/// `90s`, `30m`, `2h`, `1d` or plain seconds.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (90s, 30m, 2h, 1d)"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: unit must be s, m, h or d")),
    };
    n.checked_mul(scale)
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("{text:?} is not a positive duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_people_write_them() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("30m"), Ok(1800));
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("1d"), Ok(86_400));
        assert_eq!(parse_duration("45"), Ok(45));
        for bad in ["", "h", "2w", "0s", "-1h", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
