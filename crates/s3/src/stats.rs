//! Counters of a gateway's work, exported on the process's `/metrics` (`basalt up
//! --metrics-listen`, `basalt s3 --metrics-listen`): what tests and operators need to see
//! what reached the gateway — object reads and their bytes, listings, writes — and how long
//! each class of API call took, with its answers by status class.

use basalt_metrics::prometheus_client::collector::Collector;
use basalt_metrics::prometheus_client::encoding::DescriptorEncoder;
use basalt_metrics::{counter, family, Kind, LatencyHistogram};
use std::sync::atomic::{AtomicU64, Ordering};

/// Classes of S3 API calls, told apart from the request line alone (before the protocol
/// layer routes it), so every request is timed, refused ones included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiClass {
    /// GET or HEAD of an object (GetObject, HeadObject, GetObjectTagging, ...).
    ObjectRead,
    /// PUT or POST of an object (PutObject, CopyObject, UploadPart, multipart, ...).
    ObjectWrite,
    /// DELETE of an object, or POST ?delete (DeleteObjects).
    ObjectDelete,
    /// GET of a bucket: listings (ListObjects(V2), versions, uploads) and its configuration.
    BucketRead,
    /// Other bucket calls (create, delete, HEAD, configuration changes).
    BucketWrite,
    /// Calls on the service (ListBuckets).
    Service,
}

impl ApiClass {
    const ALL: [ApiClass; 6] = [
        ApiClass::ObjectRead,
        ApiClass::ObjectWrite,
        ApiClass::ObjectDelete,
        ApiClass::BucketRead,
        ApiClass::BucketWrite,
        ApiClass::Service,
    ];

    /// The `class` label.
    pub fn label(self) -> &'static str {
        match self {
            ApiClass::ObjectRead => "object_read",
            ApiClass::ObjectWrite => "object_write",
            ApiClass::ObjectDelete => "object_delete",
            ApiClass::BucketRead => "bucket_read",
            ApiClass::BucketWrite => "bucket_write",
            ApiClass::Service => "service",
        }
    }

    /// The class of a request with `method` on a bucket (`has_bucket`) and an object key
    /// (`has_key`), `query` its query string.
    pub fn of(method: &hyper::Method, has_bucket: bool, has_key: bool, query: &str) -> Self {
        use hyper::Method;
        let delete_objects =
            method == Method::POST && query.split('&').any(|p| p == "delete" || p == "delete=");
        match (has_bucket, has_key) {
            (false, _) => ApiClass::Service,
            _ if delete_objects => ApiClass::ObjectDelete,
            (true, true) if method == Method::GET || method == Method::HEAD => ApiClass::ObjectRead,
            (true, true) if method == Method::DELETE => ApiClass::ObjectDelete,
            (true, true) => ApiClass::ObjectWrite,
            (true, false) if method == Method::GET => ApiClass::BucketRead,
            (true, false) => ApiClass::BucketWrite,
        }
    }
}

/// Timing and answers of one API class.
#[derive(Debug, Default)]
struct ClassStats {
    latency: LatencyHistogram,
    /// Answers by status class: 2xx/3xx, 4xx, 5xx.
    answers: [AtomicU64; 3],
}

/// The counters (monotonic since the gateway started).
#[derive(Debug, Default)]
pub struct GatewayStats {
    get_object: AtomicU64,
    get_object_bytes: AtomicU64,
    head_object: AtomicU64,
    list: AtomicU64,
    put_object: AtomicU64,
    slow_down: AtomicU64,
    classes: [ClassStats; 6],
}

/// What a counter counts.
#[derive(Clone, Copy, Debug)]
pub enum Counted {
    /// A GetObject answered with this many bytes of body.
    GetObject(u64),
    HeadObject,
    /// A ListObjects(V2), ListObjectVersions, ListMultipartUploads or ListParts.
    List,
    PutObject,
}

impl GatewayStats {
    /// Count one answered request.
    pub fn count(&self, what: Counted) {
        let c = match what {
            Counted::GetObject(bytes) => {
                self.get_object_bytes.fetch_add(bytes, Ordering::Relaxed);
                &self.get_object
            }
            Counted::HeadObject => &self.head_object,
            Counted::List => &self.list,
            Counted::PutObject => &self.put_object,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a connection refused with 503 SlowDown (at the connection cap).
    pub fn count_slow_down(&self) {
        self.slow_down.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a request of `class` answered `status` (HTTP) after `start` (the response
    /// head is ready; a body streams after; `None`: latency recording is off).
    pub fn answered(
        &self,
        class: ApiClass,
        status: u16,
        start: impl Into<Option<std::time::Instant>>,
    ) {
        let c = &self.classes[class as usize];
        c.latency.observe_since(start);
        let i = match status {
            500.. => 2,
            400..=499 => 1,
            _ => 0,
        };
        c.answers[i].fetch_add(1, Ordering::Relaxed);
    }
}

impl Collector for GatewayStats {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        family(
            &mut enc,
            "basalt_s3_requests",
            "S3 requests served, by operation (GetObject, HeadObject and PutObject once answered; listings once authorised)",
            Kind::Counter,
            [
                ("GetObject", &self.get_object),
                ("HeadObject", &self.head_object),
                ("List", &self.list),
                ("PutObject", &self.put_object),
            ]
            .map(|(op, c)| ([("op", op)], counter(load(c)))),
        )?;
        family(
            &mut enc,
            "basalt_s3_get_object_bytes",
            "Bytes of object data GetObject answered",
            Kind::Counter,
            [(
                basalt_metrics::NO_LABELS,
                counter(load(&self.get_object_bytes)),
            )],
        )?;
        family(
            &mut enc,
            "basalt_s3_connections_refused",
            "Connections answered 503 SlowDown at the connection cap",
            Kind::Counter,
            [(basalt_metrics::NO_LABELS, counter(load(&self.slow_down)))],
        )?;
        family(
            &mut enc,
            "basalt_s3_request_seconds",
            "Time from a request's head to its response's head, by API class",
            Kind::Histogram,
            ApiClass::ALL.map(|class| {
                (
                    [("class", class.label())],
                    self.classes[class as usize].latency.clone(),
                )
            }),
        )?;
        family(
            &mut enc,
            "basalt_s3_responses",
            "Responses by API class and status class (2xx covers 1xx-3xx)",
            Kind::Counter,
            ApiClass::ALL.into_iter().flat_map(|class| {
                ["2xx", "4xx", "5xx"]
                    .into_iter()
                    .zip(&self.classes[class as usize].answers)
                    .map(move |(code, n)| {
                        ([("class", class.label()), ("code", code)], counter(load(n)))
                    })
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    /// Goal: counts add up and render as Prometheus counters and histograms.
    #[test]
    fn counts_render() {
        let s = std::sync::Arc::new(GatewayStats::default());
        s.count(Counted::GetObject(10));
        s.count(Counted::GetObject(5));
        s.count(Counted::List);
        s.answered(ApiClass::ObjectRead, 200, std::time::Instant::now());
        s.answered(ApiClass::ObjectRead, 404, std::time::Instant::now());
        let mut registry = basalt_metrics::Registry::default();
        registry.register_collector(Box::new(s));
        let text = basalt_metrics::render(&registry);
        assert!(
            text.contains("basalt_s3_requests_total{op=\"GetObject\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("basalt_s3_requests_total{op=\"List\"} 1\n"));
        assert!(text.contains("basalt_s3_get_object_bytes_total 15\n"));
        assert!(text.contains("# TYPE basalt_s3_requests_total counter"));
        assert!(text.contains("basalt_s3_request_seconds_count{class=\"object_read\"} 2\n"));
        assert!(text.contains("basalt_s3_responses_total{class=\"object_read\",code=\"4xx\"} 1\n"));
    }

    /// Goal: requests fall in the classes their method, bucket and key say.
    #[test]
    fn classes_of_requests() {
        assert_eq!(
            ApiClass::of(&Method::GET, false, false, ""),
            ApiClass::Service
        );
        assert_eq!(
            ApiClass::of(&Method::GET, true, true, ""),
            ApiClass::ObjectRead
        );
        assert_eq!(
            ApiClass::of(&Method::HEAD, true, true, ""),
            ApiClass::ObjectRead
        );
        assert_eq!(
            ApiClass::of(&Method::PUT, true, true, ""),
            ApiClass::ObjectWrite
        );
        assert_eq!(
            ApiClass::of(&Method::POST, true, true, "uploadId=1"),
            ApiClass::ObjectWrite
        );
        assert_eq!(
            ApiClass::of(&Method::DELETE, true, true, ""),
            ApiClass::ObjectDelete
        );
        assert_eq!(
            ApiClass::of(&Method::POST, true, false, "delete"),
            ApiClass::ObjectDelete
        );
        assert_eq!(
            ApiClass::of(&Method::GET, true, false, "list-type=2"),
            ApiClass::BucketRead
        );
        assert_eq!(
            ApiClass::of(&Method::PUT, true, false, ""),
            ApiClass::BucketWrite
        );
    }
}
