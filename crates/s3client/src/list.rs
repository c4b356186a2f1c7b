//! ListObjectsV2 (with `encoding-type=url`, so any key travels safely) and its answer.

use crate::{bail, encode_query_value, Connection, Context, Result, EMPTY_SHA256};
use quick_xml::events::Event;

/// One listed object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
    /// As the endpoint sent it (quotes included).
    pub etag: String,
    /// `LastModified` as sent (ISO 8601).
    pub last_modified: String,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<Object>,
    pub prefixes: Vec<String>,
    /// The continuation token of the next page (None: this was the last).
    pub next: Option<String>,
}

/// Where a listing starts and how it is grouped.
#[derive(Clone, Copy, Debug, Default)]
pub struct From<'a> {
    /// Group keys by this (common prefixes).
    pub delimiter: Option<&'a str>,
    /// The continuation token of the page before.
    pub token: Option<&'a str>,
    /// Only keys after this one (ignored by S3 with a token).
    pub start_after: Option<&'a str>,
}

/// List one page of `bucket` under `prefix`, from where `from` says.
pub async fn list_objects_v2(
    conn: &mut Connection,
    bucket: &str,
    prefix: &str,
    from: From<'_>,
) -> Result<ListPage> {
    let From {
        delimiter,
        token,
        start_after,
    } = from;
    // Parameters in the canonical (sorted) order, so the query sent is the one signed.
    let mut query = String::new();
    if let Some(t) = token {
        query.push_str("continuation-token=");
        encode_query_value(t, &mut query);
        query.push('&');
    }
    if let Some(d) = delimiter {
        query.push_str("delimiter=");
        encode_query_value(d, &mut query);
        query.push('&');
    }
    query.push_str("encoding-type=url&list-type=2&max-keys=1000&prefix=");
    encode_query_value(prefix, &mut query);
    if let Some(a) = start_after {
        query.push_str("&start-after=");
        encode_query_value(a, &mut query);
    }
    let path = format!("/{bucket}");
    let status = conn
        .send("GET", &path, &query, &[], &[], EMPTY_SHA256)
        .await
        .with_context(|| format!("ListObjectsV2 of {bucket}/{prefix}"))?;
    if status != 200 {
        bail!(
            "ListObjectsV2 of {bucket}/{prefix} answered {status}: {}",
            conn.body_excerpt()
        );
    }
    parse(conn.body()).with_context(|| format!("ListObjectsV2 of {bucket}/{prefix}: the answer"))
}

/// `%XX` decoded (and `+` as a space, as S3's URL encoding sends spaces).
fn url_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).context("bad %-escape")?;
                out.push(u8::from_str_radix(hex, 16).context("bad %-escape")?);
                i += 3;
            }
            b'%' => bail!("truncated %-escape in {s:?}"),
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).with_context(|| format!("the listed name {s:?} is not UTF-8"))
}

/// Parse a ListBucketResult (version 2, URL-encoded names).
pub fn parse(xml: &[u8]) -> Result<ListPage> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut buf = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut page = ListPage::default();
    let mut object = Object::default();
    let mut truncated = false;
    let mut next = None;
    let mut url = false;
    // Bound: each round consumes at least one event of a finite document.
    loop {
        match reader.read_event_into(&mut buf).context("XML")? {
            Event::Start(e) => {
                path.push(String::from_utf8_lossy(e.local_name().as_ref()).into_owned());
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.decode().context("XML text")?),
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref().context("XML character reference")? {
                    Some(c) => c,
                    None => match r.as_ref() {
                        b"amp" => '&',
                        b"lt" => '<',
                        b"gt" => '>',
                        b"quot" => '"',
                        b"apos" => '\'',
                        other => bail!("unknown XML entity &{};", String::from_utf8_lossy(other)),
                    },
                };
                text.push(c);
            }
            Event::End(_) => {
                let name = path.pop().unwrap_or_default();
                let parent = path.last().map(String::as_str).unwrap_or_default();
                let value = std::mem::take(&mut text);
                match (parent, name.as_str()) {
                    ("Contents", "Key") => object.key = value,
                    ("Contents", "Size") => object.size = value.trim().parse().context("Size")?,
                    ("Contents", "ETag") => object.etag = value,
                    ("Contents", "LastModified") => object.last_modified = value,
                    ("ListBucketResult", "Contents") => {
                        page.objects.push(std::mem::take(&mut object))
                    }
                    ("CommonPrefixes", "Prefix") => page.prefixes.push(value),
                    ("ListBucketResult", "IsTruncated") => truncated = value.trim() == "true",
                    ("ListBucketResult", "NextContinuationToken") => next = Some(value),
                    ("ListBucketResult", "EncodingType") => url = value.trim() == "url",
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    if url {
        for o in &mut page.objects {
            o.key = url_decode(&o.key)?;
        }
        for p in &mut page.prefixes {
            *p = url_decode(p)?;
        }
    }
    page.next = if truncated {
        Some(next.context("a truncated listing without NextContinuationToken")?)
    } else {
        None
    };
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: an S3 ListObjectsV2 answer (AWS's documented shape, URL-encoded names, an
    /// entity-escaped ETag) parses to its objects, prefixes and continuation.
    #[test]
    fn parses_a_listing() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>photos%2F</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>
  <Delimiter>%2F</Delimiter><IsTruncated>true</IsTruncated><EncodingType>url</EncodingType>
  <Contents><Key>photos/a%20b%2Bc.jpg</Key><LastModified>2026-11-01T10:00:00.000Z</LastModified>
    <ETag>&quot;0123456789abcdef&quot;</ETag><Size>4096</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>photos/%C3%BC</Key><LastModified>2026-11-02T10:00:00.000Z</LastModified>
    <ETag>"fedc-2"</ETag><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>photos/2025%2F</Prefix></CommonPrefixes>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>"#;
        let page = parse(xml).unwrap();
        assert_eq!(page.objects.len(), 2);
        assert_eq!(page.objects[0].key, "photos/a b+c.jpg");
        assert_eq!(page.objects[0].etag, "\"0123456789abcdef\"");
        assert_eq!(page.objects[0].size, 4096);
        assert_eq!(page.objects[0].last_modified, "2026-11-01T10:00:00.000Z");
        assert_eq!(page.objects[1].key, "photos/ü");
        assert_eq!(page.prefixes, vec!["photos/2025/".to_string()]);
        assert_eq!(
            page.next.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        let last = parse(b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
            .unwrap();
        assert_eq!(last, ListPage::default());
        assert!(
            parse(b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").is_err()
        );
        assert!(url_decode("bad%2").is_err());
        // S3 keys are UTF-8; a listing naming another is refused, naming the key.
        let e = url_decode("photos/%FF.jpg").unwrap_err();
        assert!(
            format!("{e:#}").contains("\"photos/%FF.jpg\" is not UTF-8"),
            "{e:#}"
        );
    }
}
