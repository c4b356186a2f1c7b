//! Bucket policies: the common subset of the AWS policy language, parsed strictly (anything
//! outside the subset is refused when the policy is set, never ignored) and evaluated
//! against one request. See docs/design.md, "Access control".
//!
//! The subset: `Version`, `Id`; statements with `Sid`, `Effect` Allow or Deny, `Principal`
//! `*` or users (`{"AWS": ...}` as `*`, a user name or `arn:aws:iam::ACCOUNT:user/NAME`;
//! `{"CanonicalUser": NAME}`), `Action` patterns (`s3:GetObject`, `s3:Get*`, `s3:*`, `*`)
//! over the actions the gateway checks, `Resource` patterns over this bucket's ARNs
//! (`arn:aws:s3:::BUCKET`, `arn:aws:s3:::BUCKET/KEY-PATTERN`), and the conditions
//! `IpAddress`/`NotIpAddress` on `aws:SourceIp` and `StringEquals`/`StringNotEquals`/
//! `StringLike`/`StringNotLike` on `s3:prefix`.

use serde_json::Value;
use std::net::IpAddr;

/// The actions the gateway checks a policy for (what a statement's `Action` may name).
pub const ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:ListBucket",
    "s3:ListBucketVersions",
    "s3:ListBucketMultipartUploads",
    "s3:ListMultipartUploadParts",
    "s3:AbortMultipartUpload",
    "s3:GetBucketLocation",
    "s3:GetObjectTagging",
    "s3:PutObjectTagging",
    "s3:DeleteObjectTagging",
    "s3:GetObjectRetention",
    "s3:PutObjectRetention",
    "s3:GetObjectLegalHold",
    "s3:PutObjectLegalHold",
    "s3:GetBucketAcl",
    "s3:PutBucketAcl",
    "s3:GetObjectAcl",
    "s3:PutObjectAcl",
];

/// Largest policy document (S3's limit).
pub const MAX_POLICY_BYTES: usize = 20 * 1024;

/// A parsed bucket policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    statements: Vec<Statement>,
}

#[derive(Clone, Debug, PartialEq)]
struct Statement {
    allow: bool,
    /// None: everyone (`*`), anonymous requests included.
    principals: Option<Vec<String>>,
    actions: Vec<String>,
    resources: Vec<String>,
    conditions: Vec<Condition>,
}

#[derive(Clone, Debug, PartialEq)]
enum Condition {
    /// `aws:SourceIp` in (or, negated, outside) every one of... any of these networks.
    SourceIp {
        negate: bool,
        nets: Vec<(IpAddr, u8)>,
    },
    /// `s3:prefix` equal to (or matching, `like`) any of these; `negate` inverts.
    Prefix {
        negate: bool,
        like: bool,
        values: Vec<String>,
    },
}

/// Why a policy document was refused: the S3 error code and a message naming the part.
#[derive(Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// `MalformedPolicy`, or `NotImplemented` for valid AWS policy language outside the subset.
    pub code: &'static str,
    pub message: String,
}

fn malformed(message: impl Into<String>) -> PolicyError {
    PolicyError {
        code: "MalformedPolicy",
        message: message.into(),
    }
}

fn unsupported(message: impl Into<String>) -> PolicyError {
    PolicyError {
        code: "NotImplemented",
        message: message.into(),
    }
}

/// One request as a policy sees it.
#[derive(Clone, Debug)]
pub struct PolicyRequest<'a> {
    /// The user that signed it; None: anonymous.
    pub user: Option<&'a str>,
    /// One of [`ACTIONS`].
    pub action: &'a str,
    /// The bucket's name and, for an object action, the key.
    pub bucket: &'a str,
    pub key: Option<&'a str>,
    pub source_ip: Option<IpAddr>,
    /// The `prefix` of a listing.
    pub prefix: Option<&'a str>,
}

/// What a policy says of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// No statement applies.
    Silent,
}

/// `*` (any run) and `?` (one character) wildcards, as in policy patterns.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A string or a list of strings.
fn strings(v: &Value, what: &str) -> Result<Vec<String>, PolicyError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(String::from)
                    .ok_or_else(|| malformed(format!("{what} must hold strings")))
            })
            .collect(),
        _ => Err(malformed(format!(
            "{what} must be a string or a list of strings"
        ))),
    }
}

fn principal_name(p: &str) -> Result<String, PolicyError> {
    if p == "*" {
        return Ok(p.into());
    }
    if let Some(rest) = p.strip_prefix("arn:aws:iam::") {
        let (_account, resource) = rest
            .split_once(':')
            .ok_or_else(|| malformed(format!("invalid principal {p:?}")))?;
        return match resource.strip_prefix("user/") {
            Some(name) if !name.is_empty() => Ok(name.into()),
            _ => Err(unsupported(format!(
                "principal {p:?}: only users (arn:aws:iam::ACCOUNT:user/NAME) are supported"
            ))),
        };
    }
    if p.contains(':') || p.is_empty() {
        return Err(malformed(format!("invalid principal {p:?}")));
    }
    Ok(p.into())
}

fn parse_principal(v: &Value) -> Result<Option<Vec<String>>, PolicyError> {
    let names = match v {
        Value::String(s) if s == "*" => return Ok(None),
        Value::Object(map) => {
            let mut names = Vec::new();
            for (kind, who) in map {
                match kind.as_str() {
                    "AWS" | "CanonicalUser" => {
                        for p in strings(who, "Principal")? {
                            names.push(principal_name(&p)?);
                        }
                    }
                    other => {
                        return Err(unsupported(format!(
                            "principal type {other:?} (only AWS and CanonicalUser)"
                        )))
                    }
                }
            }
            names
        }
        _ => return Err(malformed("Principal must be \"*\" or an object")),
    };
    if names.is_empty() {
        return Err(malformed("Principal names no one"));
    }
    Ok(if names.iter().any(|n| n == "*") {
        None
    } else {
        Some(names)
    })
}

fn parse_net(s: &str) -> Result<(IpAddr, u8), PolicyError> {
    let bad = || malformed(format!("invalid aws:SourceIp {s:?}"));
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len: u8 = match len {
        Some(l) => l.parse().map_err(|_| bad())?,
        None => max,
    };
    if len > max {
        return Err(bad());
    }
    Ok((ip, len))
}

fn in_net(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn parse_conditions(v: &Value) -> Result<Vec<Condition>, PolicyError> {
    let Value::Object(ops) = v else {
        return Err(malformed("Condition must be an object"));
    };
    let mut out = Vec::new();
    for (op, keys) in ops {
        let Value::Object(keys) = keys else {
            return Err(malformed(format!("condition {op} must be an object")));
        };
        for (key, values) in keys {
            let values = strings(values, &format!("condition {op} {key}"))?;
            let cond = match (op.as_str(), key.to_ascii_lowercase().as_str()) {
                ("IpAddress" | "NotIpAddress", "aws:sourceip") => Condition::SourceIp {
                    negate: op == "NotIpAddress",
                    nets: values
                        .iter()
                        .map(|v| parse_net(v))
                        .collect::<Result<_, _>>()?,
                },
                (
                    "StringEquals" | "StringNotEquals" | "StringLike" | "StringNotLike",
                    "s3:prefix",
                ) => Condition::Prefix {
                    negate: op.contains("Not"),
                    like: op.ends_with("Like"),
                    values,
                },
                _ => {
                    return Err(unsupported(format!(
                        "condition {op} on {key}: supported are IpAddress/NotIpAddress on \
                         aws:SourceIp and StringEquals/StringNotEquals/StringLike/StringNotLike \
                         on s3:prefix"
                    )))
                }
            };
            out.push(cond);
        }
    }
    Ok(out)
}

/// Parse and check the policy document of bucket `bucket`.
pub fn parse(doc: &str, bucket: &str) -> Result<Policy, PolicyError> {
    if doc.len() > MAX_POLICY_BYTES {
        return Err(malformed(format!(
            "the policy is {} bytes; at most {MAX_POLICY_BYTES}",
            doc.len()
        )));
    }
    let v: Value = serde_json::from_str(doc).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let Value::Object(top) = &v else {
        return Err(malformed("a policy is a JSON object"));
    };
    for key in top.keys() {
        if !matches!(key.as_str(), "Version" | "Id" | "Statement") {
            return Err(malformed(format!("unknown policy element {key:?}")));
        }
    }
    if let Some(version) = top.get("Version") {
        if !matches!(version.as_str(), Some("2012-10-17" | "2008-10-17")) {
            return Err(malformed("Version must be 2012-10-17 or 2008-10-17"));
        }
    }
    let statements = match top.get("Statement") {
        Some(Value::Array(s)) if !s.is_empty() => s.clone(),
        Some(s @ Value::Object(_)) => vec![s.clone()],
        _ => return Err(malformed("Statement is missing or empty")),
    };
    let bucket_arn = format!("arn:aws:s3:::{bucket}");
    let mut out = Vec::new();
    for s in &statements {
        let Value::Object(s) = s else {
            return Err(malformed("a statement is a JSON object"));
        };
        for key in s.keys() {
            match key.as_str() {
                "Sid" | "Effect" | "Principal" | "Action" | "Resource" | "Condition" => {}
                "NotPrincipal" | "NotAction" | "NotResource" => {
                    return Err(unsupported(format!("{key} is not supported")))
                }
                other => return Err(malformed(format!("unknown statement element {other:?}"))),
            }
        }
        let allow = match s.get("Effect").and_then(Value::as_str) {
            Some("Allow") => true,
            Some("Deny") => false,
            _ => return Err(malformed("Effect must be Allow or Deny")),
        };
        let principals = parse_principal(
            s.get("Principal")
                .ok_or_else(|| malformed("a statement needs a Principal"))?,
        )?;
        let actions = strings(
            s.get("Action")
                .ok_or_else(|| malformed("a statement needs an Action"))?,
            "Action",
        )?;
        for a in &actions {
            if a != "*" && !a.to_ascii_lowercase().starts_with("s3:") {
                return Err(malformed(format!("invalid action {a:?}")));
            }
            let lower = a.to_ascii_lowercase();
            if !ACTIONS
                .iter()
                .any(|known| wildcard_match(&lower, &known.to_ascii_lowercase()))
            {
                return Err(unsupported(format!(
                    "action {a:?} is not one the gateway checks (supported: {})",
                    ACTIONS.join(", ")
                )));
            }
        }
        let resources = strings(
            s.get("Resource")
                .ok_or_else(|| malformed("a statement needs a Resource"))?,
            "Resource",
        )?;
        for r in &resources {
            let ours = r == &bucket_arn
                || r.strip_prefix(&bucket_arn)
                    .is_some_and(|rest| rest.starts_with('/'));
            if !ours {
                return Err(malformed(format!(
                    "Policy has invalid resource {r:?}: it must be {bucket_arn} or \
                     {bucket_arn}/KEY (wildcards allowed in KEY)"
                )));
            }
        }
        let conditions = match s.get("Condition") {
            Some(c) => parse_conditions(c)?,
            None => Vec::new(),
        };
        out.push(Statement {
            allow,
            principals,
            actions: actions.iter().map(|a| a.to_ascii_lowercase()).collect(),
            resources,
            conditions,
        });
    }
    Ok(Policy { statements: out })
}

impl Statement {
    fn applies(&self, req: &PolicyRequest<'_>) -> bool {
        let principal = match (&self.principals, req.user) {
            (None, _) => true,
            (Some(names), Some(user)) => names.iter().any(|n| n == user),
            (Some(_), None) => false,
        };
        let action = req.action.to_ascii_lowercase();
        let resource = match req.key {
            Some(k) => format!("arn:aws:s3:::{}/{k}", req.bucket),
            None => format!("arn:aws:s3:::{}", req.bucket),
        };
        principal
            && self.actions.iter().any(|a| wildcard_match(a, &action))
            && self.resources.iter().any(|r| wildcard_match(r, &resource))
            && self.conditions.iter().all(|c| c.holds(req))
    }

    /// Grants everyone, with nothing that narrows who (a source network does).
    fn is_public(&self) -> bool {
        self.allow
            && self.principals.is_none()
            && !self
                .conditions
                .iter()
                .any(|c| matches!(c, Condition::SourceIp { negate: false, .. }))
    }
}

impl Condition {
    fn holds(&self, req: &PolicyRequest<'_>) -> bool {
        match self {
            Condition::SourceIp { negate, nets } => match req.source_ip {
                // A request whose source is unknown matches no network either way.
                None => false,
                Some(ip) => nets.iter().any(|n| in_net(ip, *n)) != *negate,
            },
            Condition::Prefix {
                negate,
                like,
                values,
            } => {
                let prefix = req.prefix.unwrap_or("");
                let found = values.iter().any(|v| {
                    if *like {
                        wildcard_match(v, prefix)
                    } else {
                        v == prefix
                    }
                });
                found != *negate
            }
        }
    }
}

impl Policy {
    /// What the policy says of `req`: an applicable Deny wins over any Allow.
    pub fn evaluate(&self, req: &PolicyRequest<'_>) -> Decision {
        self.evaluate_where(req, |_| true)
    }

    /// [`Policy::evaluate`] counting only the statements `keep` accepts (`true`: public).
    fn evaluate_where(&self, req: &PolicyRequest<'_>, keep: impl Fn(bool) -> bool) -> Decision {
        let mut decision = Decision::Silent;
        for s in self.statements.iter().filter(|s| keep(s.is_public())) {
            if s.applies(req) {
                if !s.allow {
                    return Decision::Deny;
                }
                decision = Decision::Allow;
            }
        }
        decision
    }

    /// Without the statements that grant everyone (RestrictPublicBuckets).
    pub fn evaluate_non_public(&self, req: &PolicyRequest<'_>) -> Decision {
        self.evaluate_where(req, |public| !public)
    }

    /// Whether a statement grants access to everyone (S3's "public" policy).
    pub fn is_public(&self) -> bool {
        self.statements.iter().any(Statement::is_public)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(user: Option<&'a str>, action: &'a str, key: Option<&'a str>) -> PolicyRequest<'a> {
        PolicyRequest {
            user,
            action,
            bucket: "pics",
            key,
            source_ip: Some("10.1.2.3".parse().unwrap()),
            prefix: None,
        }
    }

    /// Goal: `*` and `?` match as in policies.
    #[test]
    fn wildcards() {
        assert!(wildcard_match("s3:get*", "s3:getobject"));
        assert!(wildcard_match("arn:aws:s3:::b/*", "arn:aws:s3:::b/x/y"));
        assert!(wildcard_match("a?c", "abc") && !wildcard_match("a?c", "ac"));
        assert!(wildcard_match("*", "") && !wildcard_match("a*b", "ac"));
    }

    /// Goal: public read of one prefix to everyone, a Deny that wins over it, and a user
    /// grant limited by source network.
    #[test]
    fn evaluation() {
        let p = parse(
            r#"{"Version":"2012-10-17","Statement":[
              {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/public/*"},
              {"Effect":"Deny","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/public/secret*"},
              {"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123:user/bob"},"Action":["s3:PutObject","s3:ListBucket"],
               "Resource":["arn:aws:s3:::pics","arn:aws:s3:::pics/*"],"Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}
            ]}"#,
            "pics",
        )
        .unwrap();
        assert!(p.is_public());
        assert_eq!(
            p.evaluate(&req(None, "s3:GetObject", Some("public/a.png"))),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:GetObject", Some("public/secret.png"))),
            Decision::Deny
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:GetObject", Some("private/a.png"))),
            Decision::Silent
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:PutObject", Some("public/a.png"))),
            Decision::Silent
        );
        assert_eq!(
            p.evaluate(&req(Some("bob"), "s3:PutObject", Some("x"))),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(Some("bob"), "s3:ListBucket", None)),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(Some("carol"), "s3:PutObject", Some("x"))),
            Decision::Silent
        );
        let mut far = req(Some("bob"), "s3:PutObject", Some("x"));
        far.source_ip = Some("192.168.1.1".parse().unwrap());
        assert_eq!(p.evaluate(&far), Decision::Silent);
        assert_eq!(
            p.evaluate_non_public(&req(None, "s3:GetObject", Some("public/a.png"))),
            Decision::Silent
        );
    }

    /// Goal: `s3:prefix` conditions narrow listings.
    #[test]
    fn prefix_conditions() {
        let p = parse(
            r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:ListBucket",
               "Resource":"arn:aws:s3:::pics","Condition":{"StringLike":{"s3:prefix":["home/bob/*"]}}}}"#,
            "pics",
        )
        .unwrap();
        assert!(!p.is_public());
        let mut r = req(Some("bob"), "s3:ListBucket", None);
        r.prefix = Some("home/bob/photos");
        assert_eq!(p.evaluate(&r), Decision::Allow);
        r.prefix = Some("home/alice/");
        assert_eq!(p.evaluate(&r), Decision::Silent);
    }

    /// Goal: what is outside the subset is refused by name, never ignored.
    #[test]
    fn refusals() {
        let code = |doc: &str| parse(doc, "pics").unwrap_err().code;
        let st = |s: &str| format!(r#"{{"Statement":[{s}]}}"#);
        assert_eq!(code("not json"), "MalformedPolicy");
        assert_eq!(
            code(&st(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}"#
            )),
            "MalformedPolicy"
        );
        assert_eq!(
            code(&st(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:PutBucketPolicy","Resource":"arn:aws:s3:::pics"}"#
            )),
            "NotImplemented"
        );
        assert_eq!(
            code(&st(
                r#"{"Effect":"Allow","NotPrincipal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*"}"#
            )),
            "NotImplemented"
        );
        assert_eq!(
            code(&st(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*","Condition":{"Bool":{"aws:SecureTransport":"true"}}}"#
            )),
            "NotImplemented"
        );
        assert_eq!(
            code(&st(
                r#"{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*"}"#
            )),
            "MalformedPolicy"
        );
        assert_eq!(
            code(&st(
                r#"{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*"}"#
            )),
            "NotImplemented"
        );
    }
}
