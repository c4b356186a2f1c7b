//! CORS rules of a bucket, as stored in its record, and how they answer a browser: a
//! preflight (`OPTIONS`) and the headers of an actual cross-origin request. See
//! docs/design.md, "CORS".

use crate::policy::wildcard_match;
use serde::{Deserialize, Serialize};

/// Most rules of one bucket (S3's limit).
pub const MAX_RULES: usize = 100;
/// The methods a rule may allow.
pub const METHODS: &[&str] = &["GET", "PUT", "POST", "DELETE", "HEAD"];

/// One CORS rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Origins, each with at most one `*` wildcard.
    pub origins: Vec<String>,
    pub methods: Vec<String>,
    /// Request headers a preflight may ask for (`*` wildcards), lower case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i32>,
}

/// What a matching rule adds to an answer: `Access-Control-*` headers.
#[derive(Debug, PartialEq, Eq)]
pub struct Allowed {
    pub origin: String,
    pub methods: String,
    pub headers: Option<String>,
    pub expose: Option<String>,
    pub max_age: Option<i32>,
}

/// Why a rule set was refused (InvalidRequest, with this message).
pub fn check(rules: &[Rule]) -> Result<(), String> {
    if rules.is_empty() || rules.len() > MAX_RULES {
        return Err(format!("a CORS configuration has 1 to {MAX_RULES} rules"));
    }
    for r in rules {
        if r.origins.is_empty() || r.methods.is_empty() {
            return Err("a CORS rule needs AllowedOrigin and AllowedMethod".into());
        }
        if let Some(m) = r.methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(format!(
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            ));
        }
        if let Some(o) = r.origins.iter().find(|o| o.matches('*').count() > 1) {
            return Err(format!(
                "AllowedOrigin \"{o}\" can not have more than one wildcard."
            ));
        }
        if let Some(h) = r.headers.iter().find(|h| h.matches('*').count() > 1) {
            return Err(format!(
                "AllowedHeader \"{h}\" can not have more than one wildcard."
            ));
        }
    }
    Ok(())
}

/// The first rule that allows `method` from `origin` with these request `headers` (lower
/// case), and what it adds to the answer. For a preflight, `method` and `headers` are
/// what `Access-Control-Request-*` asked for; for an actual request, its method and none.
pub fn allow(rules: &[Rule], origin: &str, method: &str, headers: &[String]) -> Option<Allowed> {
    let rule = rules.iter().find(|r| {
        r.origins.iter().any(|o| wildcard_match(o, origin))
            && r.methods.iter().any(|m| m == method)
            && headers
                .iter()
                .all(|h| r.headers.iter().any(|a| wildcard_match(a, h)))
    })?;
    let any_origin = rule.origins.iter().any(|o| o == "*");
    Some(Allowed {
        origin: if any_origin {
            "*".into()
        } else {
            origin.into()
        },
        methods: rule.methods.join(", "),
        headers: (!headers.is_empty()).then(|| headers.join(", ")),
        expose: (!rule.expose.is_empty()).then(|| rule.expose.join(", ")),
        max_age: rule.max_age,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<Rule> {
        vec![
            Rule {
                origins: vec!["https://*.example.com".into()],
                methods: vec!["GET".into(), "PUT".into()],
                headers: vec!["content-*".into(), "x-amz-*".into()],
                expose: vec!["ETag".into()],
                max_age: Some(600),
                ..Default::default()
            },
            Rule {
                origins: vec!["*".into()],
                methods: vec!["GET".into()],
                ..Default::default()
            },
        ]
    }

    /// Goal: a preflight is allowed by the first rule matching origin, method and every
    /// requested header; anything else by a later rule or not at all.
    #[test]
    fn preflights() {
        let r = rules();
        let a = allow(
            &r,
            "https://app.example.com",
            "PUT",
            &["content-type".into()],
        )
        .unwrap();
        assert_eq!(a.origin, "https://app.example.com");
        assert_eq!(a.methods, "GET, PUT");
        assert_eq!(a.headers.as_deref(), Some("content-type"));
        assert_eq!((a.expose.as_deref(), a.max_age), (Some("ETag"), Some(600)));
        assert!(allow(&r, "https://app.example.com", "DELETE", &[]).is_none());
        assert!(allow(&r, "https://evil.test", "PUT", &[]).is_none());
        let anyone = allow(&r, "https://evil.test", "GET", &[]).unwrap();
        assert_eq!(anyone.origin, "*");
        assert!(allow(&r, "https://evil.test", "GET", &["authorization".into()]).is_none());
    }

    /// Goal: a configuration S3 would refuse is refused.
    #[test]
    fn checks() {
        assert!(check(&rules()).is_ok());
        assert!(check(&[]).is_err());
        let bad = Rule {
            origins: vec!["*".into()],
            methods: vec!["PATCH".into()],
            ..Default::default()
        };
        assert!(check(&[bad]).unwrap_err().contains("PATCH"));
        let two = Rule {
            origins: vec!["https://*.*.com".into()],
            methods: vec!["GET".into()],
            ..Default::default()
        };
        assert!(check(&[two]).is_err());
    }
}
