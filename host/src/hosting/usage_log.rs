//! Usage under the root: a Lance table at `<root>/_usage/usage.lance`. Every node appends,
//! every `--usage-flush`, one row per tenant that used something since its last append: the
//! counts of that period (`lancet_hosting::usage`), its UDF time, and the tenant's stored
//! bytes as last measured. A node's counts are taken from its counters when appended and
//! given back if the append failed, so each use is stored once, by the node that served it;
//! what a killed node had not appended yet (at most one period) is lost.
//!
//! Reading sums the rows by tenant and hour (bytes stored: the largest figure of the hour).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchIterator, StringArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use lancet_hosting::usage::{Counts, Measure};
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};

const HOUR_MS: i64 = 3_600_000;

fn uri(app: &App) -> String {
    format!("{}/_usage/usage.lance", app.tenants.root())
}

fn schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("node", DataType::Utf8, false),
        Field::new("tenant", DataType::Utf8, false),
        Field::new("hour_ms", DataType::Int64, false),
        Field::new("time_ms", DataType::Int64, false),
    ];
    fields.extend(
        Measure::ALL
            .iter()
            .map(|m| Field::new(m.name(), DataType::UInt64, false)),
    );
    fields.push(Field::new("storage_bytes", DataType::UInt64, false));
    Arc::new(Schema::new(fields))
}

/// A period's row: a tenant's counts and its stored bytes.
struct Row {
    tenant: String,
    counts: Counts,
    storage: u64,
}

/// The counts since the last take, with the UDF time since then (from the runtime's
/// cumulative figures; `seen` keeps what was taken before).
fn take(app: &App, seen: &mut HashMap<String, u64>) -> Vec<Row> {
    let Some(usage) = &app.hosting.usage else {
        return Vec::new();
    };
    for (tenant, stats) in app.virtual_columns.runtime().call_stats() {
        let before = seen.insert(tenant.clone(), stats.busy_us).unwrap_or(0);
        usage.add(
            &tenant,
            Measure::UdfMillis,
            stats.busy_us.saturating_sub(before) / 1000,
        );
    }
    usage
        .take()
        .into_iter()
        .filter(|(tenant, _)| !tenant.is_empty())
        .map(|(tenant, counts)| Row {
            storage: app.hosting.ledger.measured(&tenant),
            tenant,
            counts,
        })
        .collect()
}

async fn append(app: &App, rows: &[Row]) -> Result<(), String> {
    let now = chrono::Utc::now().timestamp_millis();
    let n = rows.len();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![app.node_id.as_str(); n])),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| &r.tenant),
        )),
        Arc::new(Int64Array::from(vec![now - now % HOUR_MS; n])),
        Arc::new(Int64Array::from(vec![now; n])),
    ];
    for m in Measure::ALL {
        columns.push(Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.counts[m as usize]),
        )));
    }
    columns.push(Arc::new(UInt64Array::from_iter_values(
        rows.iter().map(|r| r.storage),
    )));
    let batch = RecordBatch::try_new(schema(), columns).map_err(|e| e.to_string())?;
    let params = WriteParams {
        mode: WriteMode::Append,
        session: Some(app.store.session()),
        store_params: Some(app.store.store_params()),
        ..Default::default()
    };
    Dataset::write(
        RecordBatchIterator::new([Ok(batch)], schema()),
        uri(app).as_str(),
        Some(params),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("usage append: {e}"))
}

/// Appends what was used since the last flush; on failure the counts wait for the next one.
pub async fn flush(app: &App, seen: &mut HashMap<String, u64>) {
    let rows = take(app, seen);
    if rows.is_empty() {
        return;
    }
    if let Err(e) = append(app, &rows).await {
        tracing::warn!(error = %e, "usage not stored; kept for the next flush");
        let back: Vec<(String, Counts)> = rows.into_iter().map(|r| (r.tenant, r.counts)).collect();
        if let Some(u) = &app.hosting.usage {
            u.give_back(&back);
        }
    }
}

/// Flushes every `every` until the process stops (the last flush is `serve`'s, at shutdown).
pub async fn keep_flushing(app: Arc<App>, every: std::time::Duration) {
    let mut seen = HashMap::new();
    // About hourly at the default period: each flush adds a small file and a version.
    let compact_every = (3600.0 / every.as_secs_f64().max(0.1)).max(10.0) as u64;
    let mut flushes = 0u64;
    loop {
        tokio::time::sleep(every).await;
        flush(&app, &mut seen).await;
        flushes += 1;
        if flushes.is_multiple_of(compact_every)
            && let Err(e) = compact(&app).await
        {
            tracing::warn!(error = %e, "usage table not compacted");
        }
    }
}

/// The usage table, if anything was stored yet.
async fn open(app: &App) -> ApiResult<Option<Dataset>> {
    match lance::dataset::builder::DatasetBuilder::from_uri(uri(app))
        .with_session(app.store.session())
        .with_storage_options(app.store.storage_options().clone())
        .load()
        .await
    {
        Ok(ds) => Ok(Some(ds)),
        Err(lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(ApiError::from(e)),
    }
}

/// Merges the usage table's small files.
async fn compact(app: &App) -> ApiResult<()> {
    let Some(mut ds) = open(app).await? else {
        return Ok(());
    };
    lance::dataset::optimize::compact_files(&mut ds, Default::default(), None)
        .await
        .map(|_| ())
        .map_err(ApiError::from)
}

/// One tenant-hour of usage.
#[derive(Debug, Default, Clone)]
pub struct Period {
    pub tenant: String,
    pub hour_ms: i64,
    pub counts: Counts,
    pub storage_bytes: u64,
}

/// Usage summed by tenant and hour, oldest first; `tenant`, `since`/`until` (ms) narrow it.
pub async fn read(
    app: &App,
    tenant: Option<&str>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
) -> ApiResult<Vec<Period>> {
    let Some(ds) = open(app).await? else {
        return Ok(Vec::new());
    };
    let mut terms = Vec::new();
    if let Some(t) = tenant {
        terms.push(format!("tenant = '{}'", t.replace('\'', "''")));
    }
    if let Some(s) = since_ms {
        terms.push(format!("hour_ms >= {}", s - s.rem_euclid(HOUR_MS)));
    }
    if let Some(u) = until_ms {
        terms.push(format!("hour_ms < {u}"));
    }
    let batches = super::scan_all(&ds, &terms.join(" AND "))
        .await
        .map_err(ApiError::from)?;
    let mut by: BTreeMap<(String, i64), Period> = BTreeMap::new();
    for b in &batches {
        let text = |n: &str| {
            b.column_by_name(n)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| ApiError::internal(format!("usage column {n}")))
        };
        let int = |n: &str| {
            b.column_by_name(n)
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
                .ok_or_else(|| ApiError::internal(format!("usage column {n}")))
        };
        let count = |n: &str| {
            b.column_by_name(n)
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>().cloned())
                .ok_or_else(|| ApiError::internal(format!("usage column {n}")))
        };
        let (tenants, hours) = (text("tenant")?, int("hour_ms")?);
        let measures: Vec<UInt64Array> = Measure::ALL
            .iter()
            .map(|m| count(m.name()))
            .collect::<ApiResult<_>>()?;
        let storage = count("storage_bytes")?;
        for i in 0..b.num_rows() {
            let key = (tenants.value(i).to_string(), hours.value(i));
            let p = by.entry(key.clone()).or_insert_with(|| Period {
                tenant: key.0,
                hour_ms: key.1,
                ..Default::default()
            });
            for (k, m) in measures.iter().enumerate() {
                p.counts[k] += m.value(i);
            }
            p.storage_bytes = p.storage_bytes.max(storage.value(i));
        }
    }
    let mut out: Vec<Period> = by.into_values().collect();
    out.sort_by(|a, b| (a.hour_ms, &a.tenant).cmp(&(b.hour_ms, &b.tenant)));
    Ok(out)
}

fn hour(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The periods as JSON objects.
pub fn to_json(periods: &[Period]) -> Value {
    Value::Array(
        periods
            .iter()
            .map(|p| {
                let mut v = json!({"tenant": p.tenant, "hour": hour(p.hour_ms),
                                   "storage_bytes": p.storage_bytes});
                for m in Measure::ALL {
                    v[m.name()] = json!(p.counts[m as usize]);
                }
                v
            })
            .collect(),
    )
}

/// The sums of `periods` (one tenant's) as one JSON object; stored bytes: the latest figure.
pub fn totals(periods: &[Period]) -> Value {
    let mut v = json!({"storage_bytes": periods.last().map_or(0, |p| p.storage_bytes)});
    for m in Measure::ALL {
        v[m.name()] = json!(periods.iter().map(|p| p.counts[m as usize]).sum::<u64>());
    }
    v
}

/// The periods as CSV, a header line first.
pub fn to_csv(periods: &[Period]) -> String {
    let mut out = String::from("tenant,hour");
    for m in Measure::ALL {
        out.push(',');
        out.push_str(m.name());
    }
    out.push_str(",storage_bytes\n");
    for p in periods {
        // Tenant names are plain (a-z, 0-9, '-', '_'): nothing to quote.
        out.push_str(&format!("{},{}", p.tenant, hour(p.hour_ms)));
        for m in Measure::ALL {
            out.push_str(&format!(",{}", p.counts[m as usize]));
        }
        out.push_str(&format!(",{}\n", p.storage_bytes));
    }
    out
}

/// The periods as one Arrow record batch (`hour` as a UTC timestamp in milliseconds).
pub fn to_arrow(periods: &[Period]) -> ApiResult<RecordBatch> {
    let mut fields = vec![
        Field::new("tenant", DataType::Utf8, false),
        Field::new(
            "hour",
            DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
    ];
    fields.extend(
        Measure::ALL
            .iter()
            .map(|m| Field::new(m.name(), DataType::UInt64, false)),
    );
    fields.push(Field::new("storage_bytes", DataType::UInt64, false));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            periods.iter().map(|p| &p.tenant),
        )),
        Arc::new(
            arrow_array::TimestampMillisecondArray::from_iter_values(
                periods.iter().map(|p| p.hour_ms),
            )
            .with_timezone("UTC"),
        ),
    ];
    for m in Measure::ALL {
        columns.push(Arc::new(UInt64Array::from_iter_values(
            periods.iter().map(|p| p.counts[m as usize]),
        )));
    }
    columns.push(Arc::new(UInt64Array::from_iter_values(
        periods.iter().map(|p| p.storage_bytes),
    )));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| ApiError::internal(e.to_string()))
}
