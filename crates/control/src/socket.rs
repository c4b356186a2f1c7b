//! The control socket itself: private to the user running the cluster.

use std::path::Path;

/// Listen on a unix socket at `path` that only this user can connect to: bound under a
/// temporary name, made mode 0600, then renamed into place, so no one can connect while it
/// is still open to all.
pub fn bind_private_socket(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path)?;
    Ok(listener)
}
