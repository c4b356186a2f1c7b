//! An access key and its secret, and the one reader of the files that hold them: the AWS
//! shared credentials format (`[profile]` sections of `aws_access_key_id` and
//! `aws_secret_access_key`, as `basalt up` writes `DATA_DIR/s3-credentials`), or a file of
//! one line `ACCESS:SECRET`. objvol builds and reads, and the bench's S3 sections, read
//! their keys through it.

use std::path::{Path, PathBuf};

/// The profile taken when none is named and the file has one of this name.
pub const DEFAULT_PROFILE: &str = "default";
/// The key of the access key id in a profile.
const ACCESS_KEY_FIELD: &str = "aws_access_key_id";
/// The key of the secret in a profile.
const SECRET_KEY_FIELD: &str = "aws_secret_access_key";

/// An access key and its secret (Debug never shows the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AKIA...`, `BK...`).
    pub access_key: String,
    /// Its secret.
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, secret hidden)", self.access_key)
    }
}

/// Why credentials could not be read. No variant carries a secret or a line's text.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("read the credentials {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// What is wrong with the text of the file at `path`.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        source: Box<CredentialsError>,
    },
    /// Nothing but blank lines and comments.
    #[error("holds no credentials (an AWS credentials file, or one line ACCESS:SECRET)")]
    Empty,
    /// The named profile is not in the file.
    #[error("no profile [{profile}] (profiles: {})", if found.is_empty() { "none".to_string() } else { found.join(", ") })]
    NoProfile { profile: String, found: Vec<String> },
    /// The profile lacks a key, or gives it no value.
    #[error("profile [{profile}] has no {key}")]
    MissingKey { profile: String, key: &'static str },
    /// A line of an AWS file that is neither `[profile]`, `KEY = VALUE`, a comment nor an
    /// indented continuation.
    #[error("line {line}: expected [PROFILE] or KEY = VALUE")]
    BadLine { line: usize },
    /// A one-line file that is not `ACCESS:SECRET` with both parts.
    #[error("line {line}: expected ACCESS:SECRET (or an AWS credentials file)")]
    BadPair { line: usize },
}

/// One `[profile]` of an AWS file: its name and its keys in file order.
struct Profile<'a> {
    name: &'a str,
    fields: Vec<(String, &'a str)>,
}

impl Profile<'_> {
    /// The value of `key` (case-insensitive, as the AWS tools read it); an empty value is
    /// none.
    fn get(&self, key: &'static str) -> Result<String, CredentialsError> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| CredentialsError::MissingKey {
                profile: self.name.to_string(),
                key,
            })
    }
}

impl Credentials {
    /// The credentials `access_key` / `secret_key`.
    pub fn new(access_key: &str, secret_key: &str) -> Self {
        Self {
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
        }
    }

    /// Read the credentials file at `path` (see [`Credentials::parse`]; no profile named).
    pub fn load(path: &Path) -> Result<Self, CredentialsError> {
        Self::load_profile(path, None)
    }

    /// Read the credentials file at `path`, of `profile` if named (see
    /// [`Credentials::parse`]); an error names the file.
    pub fn load_profile(path: &Path, profile: Option<&str>) -> Result<Self, CredentialsError> {
        let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, profile).map_err(|e| CredentialsError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    /// The credentials in `text`: an AWS shared credentials file, or one line
    /// `ACCESS:SECRET`. In an AWS file, `profile` names the section (`[NAME]`, or `[profile
    /// NAME]` as in AWS config files); with none, `[default]` if present, else the first
    /// profile. Blank lines and lines starting with `#` or `;` are comments; space around
    /// names, keys and values is dropped; key names are case-insensitive; indented lines
    /// after `KEY =` with no value are its nested settings and are skipped. Keys before any
    /// `[profile]` belong to an unnamed first profile.
    pub fn parse(text: &str, profile: Option<&str>) -> Result<Self, CredentialsError> {
        let lines = || {
            text.lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l))
                .filter(|(_, l)| {
                    let t = l.trim();
                    !t.is_empty() && !t.starts_with('#') && !t.starts_with(';')
                })
        };
        let Some((first_line, first)) = lines().next() else {
            return Err(CredentialsError::Empty);
        };
        // `ACCESS:SECRET` may hold '=' (base64 secrets): a line is `KEY = VALUE` only when
        // its '=' comes before any ':'.
        let assignment = |l: &str| match (l.find('='), l.find(':')) {
            (Some(e), Some(c)) => e < c,
            (Some(_), None) => true,
            _ => false,
        };
        let aws = lines().any(|(_, l)| l.trim_start().starts_with('[') || assignment(l));
        if !aws {
            return Self::parse_pair(first.trim(), first_line);
        }
        let profiles = Self::profiles(lines())?;
        let chosen = match profile {
            Some(name) => profiles.iter().find(|p| p.name == name),
            None => profiles
                .iter()
                .find(|p| p.name == DEFAULT_PROFILE)
                .or(profiles.first()),
        };
        let Some(chosen) = chosen else {
            return Err(CredentialsError::NoProfile {
                profile: profile.unwrap_or(DEFAULT_PROFILE).to_string(),
                found: profiles
                    .iter()
                    .filter(|p| !p.name.is_empty())
                    .map(|p| p.name.to_string())
                    .collect(),
            });
        };
        Ok(Self {
            access_key: chosen.get(ACCESS_KEY_FIELD)?,
            secret_key: chosen.get(SECRET_KEY_FIELD)?,
        })
    }

    /// `ACCESS:SECRET` (line `line` of the file).
    fn parse_pair(text: &str, line: usize) -> Result<Self, CredentialsError> {
        match text.split_once(':') {
            Some((a, s)) if !a.trim().is_empty() && !s.trim().is_empty() => {
                Ok(Self::new(a.trim(), s.trim()))
            }
            _ => Err(CredentialsError::BadPair { line }),
        }
    }

    /// The profiles of an AWS file's meaningful `lines` (number, text), in file order.
    fn profiles<'a>(
        lines: impl Iterator<Item = (usize, &'a str)>,
    ) -> Result<Vec<Profile<'a>>, CredentialsError> {
        let mut profiles: Vec<Profile<'a>> = Vec::new();
        // After `KEY =` with no value, indented lines are that key's nested settings.
        let mut nested = false;
        for (n, raw) in lines {
            if nested && raw.starts_with([' ', '\t']) {
                continue;
            }
            nested = false;
            let t = raw.trim();
            if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                let name = name.trim();
                let name = name.strip_prefix("profile ").map_or(name, str::trim);
                profiles.push(Profile {
                    name,
                    fields: Vec::new(),
                });
                continue;
            }
            let Some((k, v)) = t.split_once('=') else {
                return Err(CredentialsError::BadLine { line: n });
            };
            if profiles.is_empty() {
                profiles.push(Profile {
                    name: "",
                    fields: Vec::new(),
                });
            }
            nested = v.trim().is_empty();
            if let Some(p) = profiles.last_mut() {
                p.fields.push((k.trim().to_ascii_lowercase(), v.trim()));
            }
        }
        Ok(profiles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, profile: Option<&str>) -> Result<Credentials, String> {
        Credentials::parse(text, profile).map_err(|e| e.to_string())
    }

    /// Goal: the file `basalt up` writes reads, and so does the one-line form.
    #[test]
    fn reads_both_formats() {
        let up = "[basalt]\naws_access_key_id = BK1\naws_secret_access_key = s3cr3t\n";
        assert_eq!(parse(up, None), Ok(Credentials::new("BK1", "s3cr3t")));
        assert_eq!(parse("AK:SK\n", None), Ok(Credentials::new("AK", "SK")));
        assert_eq!(
            parse("# a key\n\n  AK : S/K+=\n", None),
            Ok(Credentials::new("AK", "S/K+="))
        );
    }

    /// Goal: a named profile is that profile's keys; with none, `[default]` wins over an
    /// earlier profile, else the first; `[profile NAME]` names NAME; a missing profile is
    /// an error listing those there are.
    #[test]
    fn profiles() {
        let text = "[ci]\naws_access_key_id = CI\naws_secret_access_key = ci-secret\n\
                    [profile prod]\naws_access_key_id = PROD\naws_secret_access_key = p\n\
                    [default]\naws_access_key_id = DEF\naws_secret_access_key = d\n";
        assert_eq!(parse(text, None).unwrap().access_key, "DEF");
        assert_eq!(parse(text, Some("ci")).unwrap().secret_key, "ci-secret");
        assert_eq!(parse(text, Some("prod")).unwrap().access_key, "PROD");
        assert_eq!(
            parse(text, Some("dev")).unwrap_err(),
            "no profile [dev] (profiles: ci, prod, default)"
        );
        let no_default = "[a]\naws_access_key_id = A\naws_secret_access_key = 1\n\
                          [b]\naws_access_key_id = B\naws_secret_access_key = 2\n";
        assert_eq!(parse(no_default, None).unwrap().access_key, "A");
        // Keys of one profile never fill in another's.
        let split = "[a]\naws_access_key_id = A\n[b]\naws_secret_access_key = 2\n";
        assert_eq!(
            parse(split, None).unwrap_err(),
            "profile [a] has no aws_secret_access_key"
        );
    }

    /// Goal: comments (`#`, `;`), blank lines, space around everything, key case and
    /// indented nested settings do not change what is read.
    #[test]
    fn comments_and_whitespace() {
        let text = "; made by hand\n\n  [ default ]  \n# the key\n\
                    AWS_ACCESS_KEY_ID=AK\n\taws_secret_access_key   =   SK  \n\
                    s3 =\n    max_concurrent_requests = 4\nregion = eu-west-1\n";
        assert_eq!(parse(text, None), Ok(Credentials::new("AK", "SK")));
        let no_header = "aws_access_key_id = AK\naws_secret_access_key = SK\n";
        assert_eq!(parse(no_header, None), Ok(Credentials::new("AK", "SK")));
    }

    /// Goal: what cannot be read is refused with an error that says what is missing (and
    /// never shows a secret).
    #[test]
    fn missing_keys_and_bad_files_are_clear_errors() {
        let cases = [
            ("", "holds no credentials"),
            ("# only a comment\n", "holds no credentials"),
            (
                "[basalt]\naws_secret_access_key = s3cr3t\n",
                "profile [basalt] has no aws_access_key_id",
            ),
            (
                "[basalt]\naws_access_key_id = BK1\naws_secret_access_key =\n",
                "profile [basalt] has no aws_secret_access_key",
            ),
            (
                "[basalt]\naws_access_key_id = BK1\ns3cr3t\n",
                "line 3: expected [PROFILE] or KEY = VALUE",
            ),
            ("AK only\n", "line 1: expected ACCESS:SECRET"),
            (":s3cr3t\n", "line 1: expected ACCESS:SECRET"),
        ];
        for (text, want) in cases {
            let e = parse(text, None).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains("s3cr3t"), "{text:?}: {e}");
        }
        let c = Credentials::new("AK", "s3cr3t");
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    /// Goal: a file's errors name the file; an unreadable one says so.
    #[test]
    fn loading_names_the_file() {
        let dir = std::env::temp_dir().join(format!("s3client-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("creds");
        std::fs::write(&path, "[x]\naws_access_key_id = A\n").unwrap();
        let e = Credentials::load(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: profile [x] has no aws_secret_access_key",
                path.display()
            )
        );
        std::fs::write(
            &path,
            "[x]\naws_access_key_id = A\naws_secret_access_key = B\n",
        )
        .unwrap();
        assert_eq!(
            Credentials::load_profile(&path, Some("x")).unwrap(),
            Credentials::new("A", "B")
        );
        let e = Credentials::load(&dir.join("absent"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("read the credentials"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
