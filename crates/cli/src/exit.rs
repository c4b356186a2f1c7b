//! Exit codes of `basalt` (docs/cli.md), mapped in this one place from the kinds of the
//! libraries' errors.

use basalt_client::{ClientError, ErrorKind};

/// Success.
pub const OK: u8 = 0;
/// Any failure without a code of its own.
pub const ERROR: u8 = 1;
/// The command line is wrong (clap exits with it before any work is done).
pub const USAGE: u8 = 2;
/// The named volume, snapshot, image, pool or OSD does not exist.
pub const NOT_FOUND: u8 = 3;
/// It exists already, or the change conflicts with the state of something else (in use,
/// depended on, changed concurrently).
pub const CONFLICT: u8 = 4;
/// The change is made but clients did not see it within --wait-timeout.
pub const NOT_VISIBLE: u8 = 5;

/// The exit code of `kind`.
pub fn code_of(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NotFound => NOT_FOUND,
        ErrorKind::Exists | ErrorKind::Conflict => CONFLICT,
        ErrorKind::Timeout => NOT_VISIBLE,
        ErrorKind::Invalid | ErrorKind::Other => ERROR,
    }
}

/// The exit code for `err`: that of the first error of known kind in its chain.
pub fn code(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|cause| {
            if let Some(e) = cause.downcast_ref::<ClientError>() {
                Some(e.kind())
            } else if let Some(e) = cause.downcast_ref::<basalt_control::ControlError>() {
                e.kind()
            } else if let Some(basalt_placement::MapError::NoSuchPool { .. }) =
                cause.downcast_ref::<basalt_placement::MapError>()
            {
                Some(ErrorKind::NotFound)
            } else {
                None
            }
        })
        .map_or(ERROR, code_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a kind is found however deep its error is wrapped in context.
    #[test]
    fn the_kind_of_a_wrapped_error_sets_the_code() {
        let e = anyhow::Error::from(ClientError::NoSuchVolume { name: "v".into() })
            .context("show volume v");
        assert_eq!(code(&e), NOT_FOUND);
        let e = anyhow::Error::from(basalt_control::ControlError::Failed {
            kind: Some(ErrorKind::Exists),
            message: "pool \"p\" exists".into(),
        })
        .context("create pool p");
        assert_eq!(code(&e), CONFLICT);
        assert_eq!(code(&anyhow::anyhow!("plain")), ERROR);
        assert_eq!(OK, 0);
        assert_eq!(USAGE, 2);
    }
}
