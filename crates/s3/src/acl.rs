//! Access control lists: who, besides an owner, may read or write a bucket or an object
//! version (see docs/design.md, "ACL grants"). Pure: the grants as stored, canned ACLs and
//! `x-amz-grant-*` headers turned into grants, and what a grant lets a caller do. The
//! gateway stores them (bucket record, index entry) and asks [`grants`] when it decides.

use serde::{Deserialize, Serialize};
use std::fmt;

/// S3's group of every requester, signed or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// S3's group of every signed requester.
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
/// Most grants one ACL may hold (S3's limit).
pub const MAX_GRANTS: usize = 100;

/// Who a grant is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grantee {
    /// One user (a canonical user id is the user's name here).
    User(String),
    /// Everyone, anonymous requests included.
    AllUsers,
    /// Every request signed by a known key.
    AuthenticatedUsers,
}

impl Grantee {
    /// Whether the grant is public (S3: a grant to AllUsers or AuthenticatedUsers), which
    /// the public access block acts on.
    pub fn is_public(&self) -> bool {
        !matches!(self, Grantee::User(_))
    }

    /// Whether `caller` (None: anonymous) is among the grantees.
    fn includes(&self, caller: Option<&str>) -> bool {
        match self {
            Grantee::User(u) => caller == Some(u.as_str()),
            Grantee::AllUsers => true,
            Grantee::AuthenticatedUsers => caller.is_some(),
        }
    }
}

/// What a grant permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Permission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl Permission {
    /// The name S3 gives it (`READ`, `FULL_CONTROL`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }

    /// From S3's name.
    pub fn parse(name: &str) -> Result<Self, AclError> {
        Ok(match name {
            "READ" => Permission::Read,
            "WRITE" => Permission::Write,
            "READ_ACP" => Permission::ReadAcp,
            "WRITE_ACP" => Permission::WriteAcp,
            "FULL_CONTROL" => Permission::FullControl,
            other => return Err(AclError::Malformed(format!("unknown permission {other:?}"))),
        })
    }

    fn covers(self, needed: Permission) -> bool {
        self == needed || self == Permission::FullControl
    }
}

/// One grant of an ACL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

/// A bucket's object ownership (S3's ownership controls): whether ACLs act, and who owns
/// the objects others write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ownership {
    /// ACLs are disabled: the bucket's owner owns every object, only policies grant.
    #[default]
    BucketOwnerEnforced,
    /// ACLs act; an object written with `bucket-owner-full-control` belongs to the bucket's
    /// owner, any other to its writer.
    BucketOwnerPreferred,
    /// ACLs act; an object belongs to its writer.
    ObjectWriter,
    /// No ownership controls (DeleteBucketOwnershipControls): as ObjectWriter.
    NoControls,
}

impl Ownership {
    /// Whether ACL grants act in the bucket.
    pub fn acls_enabled(self) -> bool {
        self != Ownership::BucketOwnerEnforced
    }

    /// The owner of an object `writer` (None: anonymous) writes with `canned` into a bucket
    /// owned by `bucket_owner`; None is the bucket's owner (and always is for anonymous
    /// writers and in BucketOwnerEnforced buckets).
    pub fn object_owner(
        self,
        bucket_owner: &str,
        writer: Option<&str>,
        canned: Option<&str>,
    ) -> Option<String> {
        let writer = writer.filter(|w| *w != bucket_owner)?;
        match self {
            Ownership::BucketOwnerEnforced => None,
            Ownership::BucketOwnerPreferred if canned == Some("bucket-owner-full-control") => None,
            _ => Some(writer.to_string()),
        }
    }
}

/// What reading or editing one object version needs, decided once the version is read (its
/// owner and ACL are in it): set by the gateway's authorisation in buckets with ACLs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionCheck {
    /// Who asks (None: anonymous).
    pub caller: Option<String>,
    /// What the version's ACL must grant (None: ACLs grant nothing for this action).
    pub permission: Option<Permission>,
    /// Whether the bucket allows it for versions its owner owns (the caller is the bucket's
    /// owner, or the policy allows the action); S3 lets a bucket's owner grant access only
    /// to objects it owns.
    pub bucket_allows: bool,
    /// Whether public grants count (not with IgnorePublicAcls).
    pub public_counts: bool,
}

impl VersionCheck {
    /// Whether the version with owner `owner` (None: the bucket's) and `acl` may be used.
    pub fn allows(&self, owner: Option<&str>, acl: &[Grant]) -> bool {
        match owner {
            Some(o) if self.caller.as_deref() == Some(o) => return true,
            None if self.bucket_allows => return true,
            _ => {}
        }
        self.permission
            .is_some_and(|p| grants(acl, self.caller.as_deref(), p, self.public_counts))
    }
}

/// Why an ACL cannot be taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AclError {
    /// Not valid ACL language (InvalidArgument / MalformedACLError).
    Malformed(String),
    /// Valid S3, not implemented here (NotImplemented).
    Unsupported(String),
}

impl fmt::Display for AclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclError::Malformed(m) | AclError::Unsupported(m) => f.write_str(m),
        }
    }
}

/// Whether `acl` lets `caller` (None: anonymous) do what `needed` permits. Public grants
/// count only when `public_counts` (the public access block's IgnorePublicAcls turns them
/// off).
pub fn grants(
    acl: &[Grant],
    caller: Option<&str>,
    needed: Permission,
    public_counts: bool,
) -> bool {
    acl.iter().any(|g| {
        g.permission.covers(needed)
            && g.grantee.includes(caller)
            && (public_counts || !g.grantee.is_public())
    })
}

/// Whether any grant of `acl` is public.
pub fn is_public(acl: &[Grant]) -> bool {
    acl.iter().any(|g| g.grantee.is_public())
}

/// Where an ACL is set, for the canned ACLs that only make sense on one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclTarget {
    Bucket,
    Object,
}

/// The grants a canned ACL (`x-amz-acl`) gives beyond the owner's FULL_CONTROL.
/// `bucket_owner` is the owner of the bucket an object is written to (the
/// `bucket-owner-*` ACLs grant it access to an object someone else owns).
pub fn canned(name: &str, target: AclTarget, bucket_owner: &str) -> Result<Vec<Grant>, AclError> {
    let grant = |grantee, permission| Grant {
        grantee,
        permission,
    };
    Ok(match (name, target) {
        ("private", _) => Vec::new(),
        ("public-read", _) => vec![grant(Grantee::AllUsers, Permission::Read)],
        ("public-read-write", _) => vec![
            grant(Grantee::AllUsers, Permission::Read),
            grant(Grantee::AllUsers, Permission::Write),
        ],
        ("authenticated-read", _) => vec![grant(Grantee::AuthenticatedUsers, Permission::Read)],
        ("bucket-owner-read", AclTarget::Object) => {
            vec![grant(Grantee::User(bucket_owner.into()), Permission::Read)]
        }
        ("bucket-owner-full-control", AclTarget::Object) => vec![grant(
            Grantee::User(bucket_owner.into()),
            Permission::FullControl,
        )],
        ("aws-exec-read" | "log-delivery-write", _) => {
            return Err(AclError::Unsupported(format!(
                "canned ACL {name:?} is not supported: it grants to AWS services this \
                 cluster does not have"
            )))
        }
        _ => {
            return Err(AclError::Malformed(format!(
                "canned ACL {name:?} is not valid here"
            )))
        }
    })
}

/// The grants of one `x-amz-grant-*` header: `id="user"` and `uri="group"` items separated
/// by commas, each given `permission`.
pub fn header(value: &str, permission: Permission) -> Result<Vec<Grant>, AclError> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, quoted) = item
            .split_once('=')
            .ok_or_else(|| AclError::Malformed(format!("grant {item:?} is not type=\"value\"")))?;
        let v = quoted.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        out.push(Grant {
            grantee: grantee(kind.trim(), v)?,
            permission,
        });
    }
    if out.is_empty() {
        return Err(AclError::Malformed("an empty grant header".into()));
    }
    Ok(out)
}

/// A grantee from its type (`id`, `uri`, `emailAddress` in headers; `CanonicalUser`,
/// `Group`, `AmazonCustomerByEmail` in documents) and value.
pub fn grantee(kind: &str, value: &str) -> Result<Grantee, AclError> {
    match kind {
        "id" | "CanonicalUser" if !value.is_empty() => Ok(Grantee::User(value.into())),
        "uri" | "Group" => match value {
            ALL_USERS => Ok(Grantee::AllUsers),
            AUTHENTICATED_USERS => Ok(Grantee::AuthenticatedUsers),
            other => Err(AclError::Unsupported(format!(
                "grants to the group {other:?} are not supported (AllUsers and \
                 AuthenticatedUsers are)"
            ))),
        },
        "emailAddress" | "AmazonCustomerByEmail" => Err(AclError::Unsupported(
            "grants by e-mail address are not supported: users have no e-mail here; grant \
             to the user's id"
                .into(),
        )),
        _ => Err(AclError::Malformed(format!(
            "grantee type {kind:?} with value {value:?} is not valid"
        ))),
    }
}

/// Check a whole ACL as set: at most [`MAX_GRANTS`] grants, duplicates folded.
pub fn normalise(mut acl: Vec<Grant>) -> Result<Vec<Grant>, AclError> {
    let mut seen = Vec::with_capacity(acl.len());
    acl.retain(|g| {
        let fresh = !seen.contains(g);
        if fresh {
            seen.push(g.clone());
        }
        fresh
    });
    if acl.len() > MAX_GRANTS {
        return Err(AclError::Malformed(format!(
            "an ACL holds at most {MAX_GRANTS} grants, not {}",
            acl.len()
        )));
    }
    Ok(acl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(grantee: Grantee, permission: Permission) -> Grant {
        Grant {
            grantee,
            permission,
        }
    }

    #[test]
    fn grants_follow_grantee_and_permission() {
        let acl = vec![
            g(Grantee::User("bob".into()), Permission::Read),
            g(Grantee::AuthenticatedUsers, Permission::ReadAcp),
            g(Grantee::User("carol".into()), Permission::FullControl),
        ];
        assert!(grants(&acl, Some("bob"), Permission::Read, true));
        assert!(!grants(&acl, Some("bob"), Permission::Write, true));
        assert!(!grants(&acl, Some("dave"), Permission::Read, true));
        assert!(grants(&acl, Some("dave"), Permission::ReadAcp, true));
        assert!(
            !grants(&acl, None, Permission::ReadAcp, true),
            "anonymous is not signed"
        );
        assert!(
            !grants(&acl, Some("dave"), Permission::ReadAcp, false),
            "public ignored"
        );
        assert!(grants(&acl, Some("carol"), Permission::WriteAcp, false));
        let public = vec![g(Grantee::AllUsers, Permission::Read)];
        assert!(grants(&public, None, Permission::Read, true));
        assert!(!grants(&public, None, Permission::Read, false));
        assert!(is_public(&public) && !is_public(&acl[..1]));
    }

    #[test]
    fn canned_acls() {
        assert_eq!(canned("private", AclTarget::Bucket, "o"), Ok(vec![]));
        assert_eq!(
            canned("public-read-write", AclTarget::Bucket, "o")
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            canned("bucket-owner-full-control", AclTarget::Object, "o"),
            Ok(vec![g(Grantee::User("o".into()), Permission::FullControl)])
        );
        assert!(matches!(
            canned("bucket-owner-read", AclTarget::Bucket, "o"),
            Err(AclError::Malformed(_))
        ));
        assert!(matches!(
            canned("log-delivery-write", AclTarget::Bucket, "o"),
            Err(AclError::Unsupported(_))
        ));
        assert!(matches!(
            canned("nonsense", AclTarget::Object, "o"),
            Err(AclError::Malformed(_))
        ));
    }

    #[test]
    fn grant_headers() {
        let got = header(
            &format!("id=\"bob\", uri=\"{ALL_USERS}\",id=carol"),
            Permission::Read,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                g(Grantee::User("bob".into()), Permission::Read),
                g(Grantee::AllUsers, Permission::Read),
                g(Grantee::User("carol".into()), Permission::Read),
            ]
        );
        assert!(matches!(
            header("emailAddress=\"a@b.c\"", Permission::Read),
            Err(AclError::Unsupported(_))
        ));
        assert!(matches!(
            header(
                "uri=\"http://acs.amazonaws.com/groups/s3/LogDelivery\"",
                Permission::Write
            ),
            Err(AclError::Unsupported(_))
        ));
        for bad in ["", "bob", "id=\"\"", "colour=\"red\""] {
            assert!(
                matches!(header(bad, Permission::Read), Err(AclError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn version_checks() {
        let check = |caller: Option<&str>, permission, bucket_allows| VersionCheck {
            caller: caller.map(String::from),
            permission,
            bucket_allows,
            public_counts: true,
        };
        let read_bob = vec![g(Grantee::User("bob".into()), Permission::Read)];
        // The object's owner may; the bucket's allowance covers only its owner's objects.
        assert!(check(Some("carol"), None, false).allows(Some("carol"), &[]));
        assert!(check(Some("bob"), None, true).allows(None, &[]));
        assert!(!check(Some("alice"), Some(Permission::Read), true).allows(Some("carol"), &[]));
        assert!(check(Some("bob"), Some(Permission::Read), false).allows(Some("carol"), &read_bob));
        assert!(!check(Some("bob"), None, false).allows(Some("carol"), &read_bob));
        assert!(!check(None, Some(Permission::Read), false).allows(None, &read_bob));
    }

    #[test]
    fn object_owners() {
        use Ownership::*;
        assert_eq!(BucketOwnerEnforced.object_owner("a", Some("b"), None), None);
        assert_eq!(
            ObjectWriter.object_owner("a", Some("b"), None),
            Some("b".into())
        );
        assert_eq!(
            NoControls.object_owner("a", Some("b"), None),
            Some("b".into())
        );
        assert_eq!(ObjectWriter.object_owner("a", Some("a"), None), None);
        assert_eq!(ObjectWriter.object_owner("a", None, None), None);
        let full = Some("bucket-owner-full-control");
        assert_eq!(
            BucketOwnerPreferred.object_owner("a", Some("b"), full),
            None
        );
        assert_eq!(
            BucketOwnerPreferred.object_owner("a", Some("b"), Some("private")),
            Some("b".into())
        );
        assert!(!BucketOwnerEnforced.acls_enabled() && NoControls.acls_enabled());
    }

    #[test]
    fn normalise_folds_duplicates_and_bounds_size() {
        let one = g(Grantee::AllUsers, Permission::Read);
        assert_eq!(normalise(vec![one.clone(), one.clone()]), Ok(vec![one]));
        let many = (0..=MAX_GRANTS)
            .map(|i| g(Grantee::User(format!("u{i}")), Permission::Read))
            .collect();
        assert!(normalise(many).is_err());
    }
}
