//! What `GET /metrics` reports, in the Prometheus text format (0.0.4).
//!
//! Counters the request path updates live in [`Metrics`]' families; figures that other parts
//! of the server already keep (datasets cached, jobs, UDF calls) are read at scrape time, so
//! those parts need no hook for metrics.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::App;

/// The label of requests no credential was found for (or that never reached the check).
pub const NO_TENANT: &str = "none";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectStoreLabels {
    op: String,
    area: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: Cow<'static, str>,
    pub method: Cow<'static, str>,
    pub status: u16,
    pub tenant: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Route and method are static strings for HTTP requests, and the tenant shared: looking up
/// a request's series allocates nothing.
pub struct RouteLabels {
    pub route: Cow<'static, str>,
    pub method: Cow<'static, str>,
    pub tenant: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    /// `global`, `tenant` (in-flight limits) or `body_memory`.
    pub reason: String,
    pub tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    r#type: String,
    state: String,
    tenant: String,
}

type LatencyFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: LatencyFamily,
    pub bytes_in: Family<RouteLabels, Counter>,
    pub bytes_out: Family<RouteLabels, Counter>,
    pub rejections: Family<RejectionLabels, Counter>,
    pub in_flight: Gauge<i64, AtomicI64>,
    pub panics: Counter,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to ~65 s: cached point reads through index builds.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("lancet");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: LatencyFamily = Family::new_with_constructor(latency_histogram);
        let bytes_in = Family::<RouteLabels, Counter>::default();
        let bytes_out = Family::<RouteLabels, Counter>::default();
        let rejections = Family::<RejectionLabels, Counter>::default();
        let in_flight = Gauge::<i64, AtomicI64>::default();
        let panics = Counter::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route, method, status and tenant",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time from a request's arrival to its answer's headers",
            latency.clone(),
        );
        registry.register(
            "http_request_bytes",
            "Request body bytes received",
            bytes_in.clone(),
        );
        registry.register(
            "http_response_bytes",
            "Response body bytes sent",
            bytes_out.clone(),
        );
        registry.register(
            "overload_rejections",
            "Requests refused with 503 by overload control, by reason and tenant",
            rejections.clone(),
        );
        registry.register(
            "http_requests_in_flight",
            "Requests being served",
            in_flight.clone(),
        );
        registry.register(
            "panics",
            "Panics caught in request handlers (each answered 500)",
            panics.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            bytes_in,
            bytes_out,
            rejections,
            in_flight,
            panics,
        }
    }
}

impl Metrics {
    /// A request of a front end other than HTTP (Flight SQL), in the same families:
    /// `route` names the call (`flight/plan`, `flight/run`), `method` is `GRPC`, `status`
    /// the HTTP status of the same meaning.
    pub fn record(&self, route: &str, tenant: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: Cow::Owned(route.to_string()),
                method: Cow::Borrowed("GRPC"),
                status,
                tenant: tenant.into(),
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: Cow::Owned(route.to_string()),
                method: Cow::Borrowed("GRPC"),
                tenant: tenant.into(),
            })
            .observe(seconds);
    }

    pub fn reject(&self, reason: &str, tenant: &str) {
        self.rejections
            .get_or_create(&RejectionLabels {
                reason: reason.to_string(),
                tenant: tenant.to_string(),
            })
            .inc();
    }

    /// Everything, live counters first, then what the rest of the server keeps.
    pub fn render(&self, app: &App) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &scraped(app));
        out
    }
}

/// Figures read from the store, the job manager and the UDF runtime at scrape time.
fn scraped(app: &App) -> Registry {
    let mut r = Registry::with_prefix("lancet");
    r.register(
        "datasets_cached",
        "Lance datasets held open in the dataset cache",
        ConstGauge::new(app.store.cached_datasets() as i64),
    );
    r.register(
        "upkeep_watched_tables",
        "Tables the upkeep scheduler is watching (written recently, not yet settled and cleaned)",
        ConstGauge::new(app.upkeep.watched() as i64),
    );
    let jobs = Family::<JobLabels, Gauge>::default();
    for ((job_type, state, tenant), n) in app.jobs.counts() {
        let state = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        jobs.get_or_create(&JobLabels {
            r#type: job_type,
            state,
            tenant,
        })
        .set(n as i64);
    }
    r.register("jobs", "Background jobs by type, state and tenant", jobs);

    let object_requests = Family::<ObjectStoreLabels, Counter>::default();
    for (area, op, n) in app.object_requests.snapshot() {
        object_requests
            .get_or_create(&ObjectStoreLabels {
                op: op.to_string(),
                area: area.to_string(),
            })
            .inc_by(n);
    }
    r.register(
        "object_store_requests",
        "Object-store requests by operation and area: tables (tenants' tables and catalogs) or \
         server (jobs, auth, UDF modules, functions, secrets); file-system calls on a local root",
        object_requests,
    );
    let local_reads = app.store.local_reads.stats();
    r.register(
        "local_reads_inline",
        "Reads of local tables' files the page cache held, done on the asking thread",
        ConstCounter::new(local_reads.inline),
    );
    r.register(
        "local_reads_pooled",
        "Reads of local tables' files by searches without a filter passed to the blocking pool \
         (not cached, or large)",
        ConstCounter::new(local_reads.pooled),
    );
    if let Some(cache) = &app.object_cache {
        let stats = cache.stats();
        r.register(
            "object_cache_hits",
            "Reads of immutable table files answered from memory instead of the object store",
            ConstCounter::new(stats.hits),
        );
        r.register(
            "object_cache_misses",
            "Reads of immutable table files the object-store range cache did not hold",
            ConstCounter::new(stats.misses),
        );
        r.register(
            "object_cache_bytes",
            "Bytes held by the object-store range cache",
            ConstGauge::new(stats.bytes as i64),
        );
    }

    let runtime = app.virtual_columns.runtime();
    let stats = runtime.stats();
    r.register(
        "udf_modules_compiled",
        "UDF modules compiled with cranelift",
        ConstCounter::new(stats.compiled),
    );
    r.register(
        "udf_modules_loaded",
        "UDF modules loaded from the compiled-code cache",
        ConstCounter::new(stats.loaded_from_disk),
    );
    r.register(
        "udf_instances_discarded",
        "UDF instances dropped after a trap, a limit hit or bad output",
        ConstCounter::new(stats.instances_discarded),
    );
    r.register(
        "udf_instances_retired",
        "UDF instances dropped after a call because their memory grew past half its cap",
        ConstCounter::new(stats.instances_retired),
    );
    let per_tenant = runtime.call_stats();
    type UdfFamily = (
        &'static str,
        &'static str,
        fn(&lancet_udf::CallStats) -> u64,
    );
    let families: [UdfFamily; 6] = [
        ("udf_calls", "UDF guest calls", |s| s.calls),
        ("udf_rows", "Rows passed to UDF guest calls", |s| s.rows),
        ("udf_traps", "UDF calls that trapped", |s| s.traps),
        (
            "udf_limit_hits",
            "UDF calls stopped by a time, memory, stack or output limit",
            |s| s.limit_hits,
        ),
        (
            "udf_guest_errors",
            "UDF calls the guest reported as failed",
            |s| s.guest_errors,
        ),
        (
            "udf_bad_output",
            "UDF calls whose result failed the host's checks",
            |s| s.bad_output,
        ),
    ];
    for (name, help, get) in families {
        let family = Family::<TenantLabel, Counter>::default();
        for (tenant, s) in &per_tenant {
            family
                .get_or_create(&TenantLabel {
                    tenant: tenant.clone(),
                })
                .inc_by(get(s));
        }
        r.register(name, help, family);
    }
    r
}
