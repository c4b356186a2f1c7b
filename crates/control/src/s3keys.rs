//! S3 access key requests: create (the reply carries the secret, once), list, remove.

use crate::protocol::{Request, Response, S3Key};

/// An S3 access key request on the keys in `meta`; new keys are sealed with `master` (None:
/// this process serves no S3, and makes no keys).
pub async fn s3_key_request(
    meta: &dyn basalt_meta::MetaStore,
    master: Option<&basalt_s3::MasterKey>,
    req: Request,
) -> Response {
    use basalt_s3::keys;
    let result = match req {
        Request::S3KeyCreate { user } => {
            let Some(master) = master else {
                return Response::error(
                    "this cluster serves no S3 (started with --s3-listen off): no keys to make"
                        .into(),
                );
            };
            keys::create_key(meta, master, &user)
                .await
                .map(|(record, secret)| Response {
                    ok: true,
                    s3_key: Some(S3Key::of(record, Some(secret))),
                    ..Response::default()
                })
        }
        Request::S3KeyLs => keys::list_keys(meta).await.map(|mut all| {
            all.sort_by(|a, b| a.access_key.cmp(&b.access_key));
            Response {
                ok: true,
                s3_keys: Some(all.into_iter().map(|k| S3Key::of(k, None)).collect()),
                ..Response::default()
            }
        }),
        Request::S3KeyRm { access_key } => {
            keys::remove_key(meta, &access_key)
                .await
                .map(|()| Response {
                    ok: true,
                    ..Response::default()
                })
        }
        _ => return Response::error("not an S3 key request".into()),
    };
    result.unwrap_or_else(|e| {
        use basalt_client::ErrorKind;
        // The kind decides the CLI's exit code: 3 for a missing key, 4 for a taken one.
        let kind = match &e {
            keys::KeyError::NoSuchKey(_) => ErrorKind::NotFound,
            keys::KeyError::KeyExists(_) => ErrorKind::Exists,
            keys::KeyError::BadUser(_) => ErrorKind::Invalid,
            _ => ErrorKind::Other,
        };
        Response {
            kind: Some(kind),
            ..Response::error(e.to_string())
        }
    })
}
