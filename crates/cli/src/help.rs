//! `basalt completions` and `basalt man`: generated from the command tree, so they cannot
//! drift from the flags.

use std::io::Write;
use std::path::Path;

/// Print the completion script of `shell` for `cmd` on stdout.
pub fn completions(cmd: &mut clap::Command, shell: clap_complete::Shell) -> anyhow::Result<()> {
    // Into a buffer first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, cmd, "basalt", &mut script);
    std::io::stdout()
        .write_all(&script)
        .map_err(|e| anyhow::anyhow!("write the completion script: {e}"))
}

/// Write a man page for `cmd` and for each of its subcommands into `out`.
pub fn man_pages(cmd: &clap::Command, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("create {}: {e}", out.display()))?;
    clap_mangen::generate_to(cmd.clone(), out)
        .map_err(|e| anyhow::anyhow!("write man pages to {}: {e}", out.display()))?;
    let pages = std::fs::read_dir(out)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
        .count();
    println!("wrote {pages} man pages to {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// Split a command line into words as sh does for the plain lines of examples (quotes,
    /// no expansion), stopping at a comment, a redirection, a pipe or a list operator.
    fn words(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut quote = None;
        for c in line.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => word.push(c),
                None if c == '\'' || c == '"' => {
                    quote = Some(c);
                    in_word = true;
                }
                None if c.is_whitespace() => {
                    if in_word {
                        out.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                None if !in_word && matches!(c, '#' | '>' | '|' | '&' | ';' | '<') => break,
                None => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            out.push(word);
        }
        out
    }

    /// The `basalt ...` command lines in `text`: lines (joined at a trailing `\`) that
    /// start with `basalt ` or `./target/release/basalt `, or pipe into one, after an
    /// optional `Example:` / `Examples:`.
    fn command_lines(text: &str) -> Vec<String> {
        let mut joined = Vec::new();
        let mut pending = String::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head.trim_end());
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            joined.push(std::mem::take(&mut pending));
        }
        joined
            .into_iter()
            .filter_map(|line| {
                let line = line
                    .trim_start_matches("Examples:")
                    .trim_start_matches("Example:")
                    .trim();
                let line = line.strip_prefix("./target/release/").unwrap_or(line);
                let start = if line.starts_with("basalt ") {
                    0
                } else {
                    line.find("| basalt ")? + 2
                };
                Some(line[start..].to_string())
            })
            .collect()
    }

    /// Every `basalt ...` example in the long help of `cmd` and of its subcommands.
    fn help_examples(cmd: &clap::Command, out: &mut Vec<(String, String)>) {
        let text = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|t| t.to_string())
            .unwrap_or_default();
        for line in command_lines(&text) {
            out.push((cmd.get_name().to_string(), line));
        }
        for sub in cmd.get_subcommands() {
            help_examples(sub, out);
        }
    }

    fn parses(line: &str) -> Result<(), String> {
        crate::Cli::try_parse_from(words(line))
            .map(|_| ())
            .map_err(|e| e.render().to_string())
    }

    /// Goal: every example in `--help` is a command line the parser accepts, and every
    /// command has one where it changes the cluster or prints a listing.
    #[test]
    fn every_help_example_parses() {
        let mut examples = Vec::new();
        help_examples(&crate::Cli::command(), &mut examples);
        assert!(examples.len() >= 30, "{} examples found", examples.len());
        let bad: Vec<String> = examples
            .iter()
            .filter_map(|(cmd, line)| parses(line).err().map(|e| format!("{cmd}: {line}\n{e}")))
            .collect();
        assert!(
            bad.is_empty(),
            "examples that do not parse:\n{}",
            bad.join("\n")
        );
    }

    /// Goal: every `basalt ...` line of a shell block of the README, docs/cli.md and
    /// docs/operations.md parses.
    #[test]
    fn every_readme_command_parses() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut checked = 0;
        for doc in ["README.md", "docs/cli.md", "docs/operations.md"] {
            let text = std::fs::read_to_string(format!("{root}/{doc}")).expect("read the doc");
            let mut in_shell = false;
            let mut block = String::new();
            for line in text.lines() {
                if line.starts_with("```") {
                    if in_shell {
                        for cmd in command_lines(&block) {
                            parses(&cmd).unwrap_or_else(|e| panic!("{doc}: {cmd}\n{e}"));
                            checked += 1;
                        }
                        block.clear();
                    }
                    in_shell = !in_shell && (line == "```sh" || line == "```bash");
                } else if in_shell {
                    block.push_str(line);
                    block.push('\n');
                }
            }
        }
        assert!(checked >= 30, "only {checked} command lines found");
    }

    /// Goal: the splitter keeps quoted words and stops at shell syntax.
    #[test]
    fn words_split_as_sh_does() {
        assert_eq!(
            words(r#"basalt completions zsh > "${fpath[1]}/_basalt""#),
            ["basalt", "completions", "zsh"]
        );
        assert_eq!(words("basalt 'a b' c # d"), ["basalt", "a b", "c"]);
        assert_eq!(
            command_lines(
                "Examples:\n  basalt osd \\\n   --listen x\n  xzcat f | basalt image import - d"
            ),
            ["basalt osd --listen x", "basalt image import - d"]
        );
    }
}
