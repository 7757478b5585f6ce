//! Backfill jobs: `backfill_column` and `/v1/jobs/*`, with real UDFs from the plugins.

use std::collections::BTreeMap;
use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use base64::Engine;
use serde_json::{Value, json};

use crate::common::*;
use crate::udf::plugin;

/// A virtual column definition (not auto-backfilled) for `entry` of plugin `name`.
pub(crate) fn vc(name: &str, entry: &str, inputs: &[&str], config: &[(&str, &str)]) -> Value {
    let wasm = plugin(name);
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let packaged = lancet_udf::package(&wasm, entry, config).unwrap();
    json!({
        "input_columns": inputs,
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "udf_name": entry,
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": false,
    })
}

pub(crate) async fn add_virtual(s: &Server, table: &str, column: &str, def: Value) {
    s.ok(
        &format!("/v1/table/{table}/add_columns"),
        json!({"new_columns": [{"name": column, "virtual_column": def}]}),
    )
    .await;
}

/// Table `name` with `frags` fragments of `per` rows (ids 0..frags*per).
pub(crate) async fn table_with_fragments(s: &Server, name: &str, frags: i64, per: i64) {
    s.create_table(name, per).await;
    for i in 1..frags {
        let (st, b) = s
            .post_arrow(&format!("/v1/table/{name}/insert"), &sample(i * per, per))
            .await;
        assert_eq!(st, 200, "{b}");
    }
}

/// (id, `column`) of every row, sorted.
pub(crate) fn int_pairs(batches: &[RecordBatch], column: &str) -> Vec<(i64, Option<i64>)> {
    let mut out = Vec::new();
    for b in batches {
        let id = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let v = b
            .column_by_name(column)
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            out.push((id.value(i), v.is_valid(i).then(|| v.value(i))));
        }
    }
    out.sort();
    out
}

pub(crate) async fn doubled(s: &Server, table: &str) -> Vec<(i64, Option<i64>)> {
    let rows = s
        .query(table, json!({"columns": ["id", "dbl"], "limit": 100000}))
        .await;
    int_pairs(&rows, "dbl")
}

pub(crate) fn slow(spin: &str) -> Value {
    vc("misbehave", "slow_double", &["id"], &[("spin", spin)])
}

#[tokio::test]
async fn backfill_fills_null_rows_commits_per_group_and_reports_progress() {
    let s = Server::start().await;
    table_with_fragments(&s, "b", 3, 100).await;
    add_virtual(&s, "b", "slug", vc("slugify", "slugify", &["text"], &[])).await;
    let before = s.version("b").await;
    let job = s
        .backfill(
            "b",
            json!({"column": "slug", "commit_granularity": 1, "checkpoint_size": 16,
                   "batch_checkpoint_flush_interval_seconds": 0.5, "concurrency": 2}),
        )
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["job_type"], "backfill");
    assert!(d["creation_ms"].as_i64().unwrap() > 0);
    assert_eq!(d["spec"]["where"], "`slug` IS NULL");
    assert_eq!(d["spec"]["read_version"], before);
    let p = &d["progress"];
    assert_eq!(
        (p["rows_done"].as_u64(), p["rows_total"].as_u64()),
        (Some(300), Some(300)),
        "{d}"
    );
    assert_eq!(p["fragments_done"], 3);
    assert_eq!(p["fragments_total"], 3);
    assert_eq!(p["commits"], 3, "one commit per fragment: {d}");
    assert_eq!(d["result"]["rows_written"], 300);
    assert_eq!(d["result"]["version"], before + 3);
    assert_eq!(d["failure"], Value::Null);
    assert_eq!(s.version("b").await, before + 3);
    let rows = s
        .query("b", json!({"columns": ["id", "slug"], "limit": 1000}))
        .await;
    let mut got: Vec<(i64, Option<String>)> =
        ids(&rows).into_iter().zip(strings(&rows, "slug")).collect();
    got.sort();
    let want: Vec<(i64, Option<String>)> =
        (0..300).map(|i| (i, Some(format!("row-{i}")))).collect();
    assert_eq!(got, want);

    // The CLI needs a key like any client ...
    let watch = || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lancet"));
        cmd.args([
            "jobs",
            "watch",
            &job,
            "--url",
            &s.base,
            "--interval",
            "0.05",
        ])
        .env_remove("LANCET_API_KEY");
        cmd
    };
    let refused = watch().output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    // ... and with one draws the finished job's bar and exits 0.
    let out = watch().env("LANCET_API_KEY", ADMIN_KEY).output().unwrap();
    let bar = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{bar}");
    assert!(
        bar.contains(&format!(
            "[{}] 100% rows 300/300 fragments 3/3 commits 3 DONE",
            "#".repeat(30)
        )),
        "{bar}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lancet"))
        .args(["jobs", "watch", "job-nope", "--url", &s.base])
        .env("LANCET_API_KEY", ADMIN_KEY)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("job not found"));

    // Nothing left to do: a second run selects no rows and commits nothing.
    let job = s.backfill("b", json!({"column": "slug"})).await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["progress"]["rows_total"], 0);
    assert_eq!(d["result"]["commits"], 0);
    assert_eq!(s.version("b").await, before + 3);

    // The job list: paginated, filtered by table and state.
    let l = s.ok("/v1/jobs/list", json!({"limit": 1})).await;
    assert_eq!(l["jobs"].as_array().unwrap().len(), 1);
    let token = l["page_token"].as_str().unwrap().to_string();
    let l2 = s
        .ok("/v1/jobs/list", json!({"limit": 5, "page_token": token}))
        .await;
    assert_eq!(l2["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(l2["page_token"], Value::Null);
    assert_ne!(l["jobs"][0]["job_id"], l2["jobs"][0]["job_id"]);
    let l = s
        .ok(
            "/v1/jobs/list",
            json!({"table_id": ["b"], "job_state": "DONE"}),
        )
        .await;
    assert_eq!(l["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(l["jobs"][0]["state"], "DONE");
    let l = s.ok("/v1/jobs/list", json!({"table_id": ["other"]})).await;
    assert_eq!(l["jobs"], json!([]));
    let l = s.ok("/v1/jobs/list", json!({"job_state": "FAILED"})).await;
    assert_eq!(l["jobs"], json!([]));
}

#[tokio::test]
async fn where_selects_rows_and_unselected_rows_keep_their_values() {
    let s = Server::start().await;
    table_with_fragments(&s, "w", 2, 50).await;
    add_virtual(&s, "w", "dbl", slow("1")).await;
    // On a branch: main is not touched.
    s.ok("/v1/table/w/branches/create", json!({"name": "dev"}))
        .await;
    let main_version = s.version("w").await;
    let job = s
        .backfill("w", json!({"column": "dbl", "branch": "dev", "intra_applier_concurrency": 3, "checkpoint_size": 4}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_written"], 100);
    assert_eq!(d["spec"]["branch"], "dev");
    assert_eq!(s.version("w").await, main_version);
    let rows = s
        .query(
            "w",
            json!({"columns": ["id", "dbl"], "branch": "dev", "limit": 1000}),
        )
        .await;
    assert!(
        int_pairs(&rows, "dbl")
            .iter()
            .all(|(id, v)| *v == Some(2 * id))
    );
    assert!(doubled(&s, "w").await.iter().all(|(_, v)| v.is_none()));

    // Only ids < 30; every other row keeps its (null) value. Small, growing calls (4, 8, 16,
    // ... rows) split the selected rows of one read batch over several results to merge back.
    let job = s
        .backfill(
            "w",
            json!({"column": "dbl", "where": "id < 30", "checkpoint_size": 4, "min_checkpoint_size": 1}),
        )
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["progress"]["rows_total"], 30);
    assert_eq!(d["progress"]["fragments_total"], 2);
    assert_eq!(
        d["result"]["commits"], 1,
        "the second fragment selects nothing: {d}"
    );
    let want: Vec<(i64, Option<i64>)> = (0..100).map(|i| (i, (i < 30).then_some(2 * i))).collect();
    assert_eq!(doubled(&s, "w").await, want);
    // Then the default (still-null rows): computed values already written are kept.
    s.ok("/v1/table/w/delete", json!({"predicate": "id = 99"}))
        .await;
    let job = s.backfill("w", json!({"column": "dbl"})).await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["progress"]["rows_total"], 69, "{d}");
    let want: Vec<(i64, Option<i64>)> = (0..99).map(|i| (i, Some(2 * i))).collect();
    assert_eq!(doubled(&s, "w").await, want);
    // `true` recomputes every row; num_frags limits the job to the first fragment.
    let v = s.version("w").await;
    let job = s
        .backfill(
            "w",
            json!({"column": "dbl", "where": "true", "num_frags": 1}),
        )
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["progress"]["rows_total"], 50, "{d}");
    assert_eq!(d["progress"]["fragments_total"], 1);
    assert_eq!(s.version("w").await, v + 1);
}

#[tokio::test]
async fn bad_backfill_requests_are_refused() {
    let s = Server::start().await;
    table_with_fragments(&s, "x", 1, 20).await;
    add_virtual(&s, "x", "dbl", slow("3000000")).await;
    let post = |body: Value| s.post("/v1/table/x/backfill_column", body);

    let (st, b) = post(json!({"column": "text"})).await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["detail"]
            .as_str()
            .unwrap()
            .contains("not a virtual column"),
        "{b}"
    );
    let (st, b) = post(json!({"column": "nosuch"})).await;
    assert_error(st, &b, 400, 12);
    let (st, b) = post(json!({"column": ""})).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = post(json!({"column": "dbl", "where": "id >>> 3"})).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = post(json!({"column": "dbl", "where": "nosuch > 3"})).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = post(json!({"column": "dbl", "read_version": 99})).await;
    assert_error(st, &b, 404, 11);
    for (k, v) in [
        ("concurrency", json!(0)),
        ("intra_applier_concurrency", json!(-1)),
        ("task_size", json!(0)),
        ("num_frags", json!(-3)),
        ("checkpoint_size", json!(0)),
        ("min_checkpoint_size", json!(-1)),
        ("max_checkpoint_size", json!(0)),
        ("commit_granularity", json!(0)),
        ("batch_checkpoint_flush_interval_seconds", json!(-1)),
        ("read_version", json!(-1)),
        ("cluster", json!("gpu-pool")),
        ("concurrency", json!("many")),
    ] {
        let (st, b) = post(json!({"column": "dbl", k: v})).await;
        assert_error(st, &b, 400, 13);
    }
    let (st, b) = post(json!({"column": "dbl", "manifest": "{not json"})).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post("/v1/table/nosuch/backfill_column", json!({"column": "dbl"}))
        .await;
    assert_error(st, &b, 404, 4);
    assert_eq!(s.ok("/v1/jobs/list", json!({})).await["jobs"], json!([]));

    // A second backfill of a column while one runs: 409.
    let job = s
        .backfill("x", json!({"column": "dbl", "checkpoint_size": 1}))
        .await;
    let (st, b) = post(json!({"column": "dbl"})).await;
    assert_error(st, &b, 409, 14);
    assert!(b["detail"].as_str().unwrap().contains(&job), "{b}");
    let d = s.ok("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_eq!(d["job_state"], "CANCELLED", "{d}");

    // Unknown and finished jobs.
    for path in ["/v1/jobs/describe", "/v1/jobs/cancel"] {
        let (st, b) = s.post(path, json!({"job_id": "job-nope"})).await;
        assert_error(st, &b, 404, 10);
        let (st, b) = s.post(path, json!({})).await;
        assert_error(st, &b, 400, 13);
    }
    let (st, b) = s.post("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_error(st, &b, 409, 19);
    let (st, b) = s
        .post("/v1/jobs/list", json!({"job_state": "RUNNING"}))
        .await;
    assert_error(st, &b, 400, 13);
}

#[tokio::test]
async fn cancel_stops_promptly_and_keeps_only_whole_commits() {
    let s = Server::start().await;
    table_with_fragments(&s, "c", 8, 20).await;
    add_virtual(&s, "c", "dbl", slow("300000")).await;
    let before = s.version("c").await;
    let job = s
        .backfill(
            "c",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 2,
                   "max_checkpoint_size": 2, "concurrency": 1}),
        )
        .await;
    s.wait_job_until(&job, 120, |d| d["progress"]["commits"].as_u64() >= Some(1))
        .await;
    let started = std::time::Instant::now();
    let d = s.ok("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_eq!(d["job_state"], "CANCELLED", "{d}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        started.elapsed()
    );
    assert_eq!(d["result"], Value::Null);
    let commits = d["progress"]["commits"].as_u64().unwrap();
    assert!((1..8).contains(&commits), "{d}");
    // What was committed stays; nothing more lands afterwards.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.version("c").await, before + commits);
    let values = doubled(&s, "c").await;
    let filled: Vec<i64> = values
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|p| p.0)
        .collect();
    assert_eq!(filled.len() as u64, commits * 20, "whole fragments only");
    assert!(values.iter().all(|(id, v)| v.is_none_or(|v| v == 2 * id)));
    let again = s.describe_job(&job).await;
    assert_eq!(again["job_state"], "CANCELLED");
    // A cancelled job cannot be cancelled again, and a new backfill finishes the rest.
    let (st, b) = s.post("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_error(st, &b, 409, 19);
    let job = s
        .backfill("c", json!({"column": "dbl", "checkpoint_size": 64}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(
        d["progress"]["rows_total"].as_u64(),
        Some(160 - commits * 20)
    );
    assert!(
        doubled(&s, "c")
            .await
            .iter()
            .all(|(id, v)| *v == Some(2 * id))
    );
}

#[tokio::test]
async fn concurrent_writes_during_a_backfill() {
    let s = Server::start().await;
    table_with_fragments(&s, "k", 6, 20).await;
    // ~20 ms a row (the spin runs at about 1 ns an iteration): the job runs ~2.5 s, so the
    // writes below land while it does (at 200,000 it ended in ~0.1 s, before them when a
    // write took longer than usual).
    add_virtual(&s, "k", "dbl", slow("20000000")).await;
    let job = s
        .backfill(
            "k",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 4,
                   "max_checkpoint_size": 4, "concurrency": 1}),
        )
        .await;
    s.wait_job_until(&job, 120, |d| {
        d["progress"]["rows_done"].as_u64() >= Some(10)
    })
    .await;
    // An insert (new fragment, not part of the job), a delete in fragment 0, and an update
    // that moves rows out of the last fragment (so its computed file would be stale).
    let (st, b) = s.post_arrow("/v1/table/k/insert", &sample(1000, 5)).await;
    assert_eq!(st, 200, "{b}");
    s.ok("/v1/table/k/delete", json!({"predicate": "id = 3"}))
        .await;
    s.ok(
        "/v1/table/k/update",
        json!({"updates": [["text", "'changed'"]], "predicate": "id >= 110"}),
    )
    .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(
        s.count("k", json!({})).await,
        124,
        "the inserted rows are kept"
    );
    let skipped = d["result"]["fragments_skipped"].as_array().unwrap();
    assert_eq!(
        skipped.len(),
        1,
        "the updated fragment is refused by lance: {d}"
    );
    assert_eq!(skipped[0]["fragment"], 5);
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("concurrent"),
        "{d}"
    );
    assert_eq!(d["result"]["rows_written"], 100);
    for (id, v) in doubled(&s, "k").await {
        match id {
            0..100 => assert_eq!(v, Some(2 * id), "id {id}"),
            // Rows moved by the update and the inserted rows were not part of the job.
            _ => assert_eq!(v, None, "id {id}"),
        }
    }
    // A later backfill picks up what was left.
    let job = s
        .backfill("k", json!({"column": "dbl", "checkpoint_size": 64}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["progress"]["rows_total"], 25, "{d}");
    assert!(
        doubled(&s, "k")
            .await
            .iter()
            .all(|(id, v)| *v == Some(2 * id))
    );
}

#[tokio::test]
async fn udf_failures_fail_the_job_or_become_nulls() {
    let s = Server::start().await;
    s.create_table("f", 10).await;
    let (st, b) = s.post_arrow("/v1/table/f/insert", &sample(-5, 5)).await;
    assert_eq!(st, 200, "{b}");
    let def = vc("misbehave", "fail_negative", &["id"], &[]);
    let manifest = def["manifest"].as_str().unwrap().to_string();
    add_virtual(&s, "f", "checked", def).await;
    let job = s
        .backfill("f", json!({"column": "checked", "checkpoint_size": 2}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "FAILED", "{d}");
    assert_eq!(d["result"], Value::Null);
    let msg = d["failure"]["message"].as_str().unwrap();
    assert!(msg.contains("fragment 1 rows 0..2"), "{msg}");
    assert!(msg.contains("fail_negative"), "{msg}");
    assert_eq!(d["failure"]["phase"], "compute");

    // The same UDF with on_error = null (a manifest override for this job only).
    let mut m: Value = serde_json::from_str(&manifest).unwrap();
    m["on_error"] = json!("null");
    let job = s
        .backfill(
            "f",
            json!({"column": "checked", "checkpoint_size": 2, "manifest": m.to_string()}),
        )
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_nulled"], 5);
    assert_eq!(d["result"]["rows_written"], 15);
    let rows = s
        .query("f", json!({"columns": ["id", "checked"], "limit": 100}))
        .await;
    for (id, v) in int_pairs(&rows, "checked") {
        assert_eq!(v, (id >= 0).then_some(id), "id {id}");
    }
    // Each nulled row is recorded with its error (the lancedb client's `function_errors`).
    let errs = s.ok("/v1/table/f/errors", json!({})).await;
    let recs = errs["records"].as_array().unwrap();
    let mut offsets: Vec<u64> = recs
        .iter()
        .map(|r| r["row_offset"].as_u64().unwrap())
        .collect();
    offsets.sort();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4], "{errs}");
    for r in recs {
        assert_eq!(
            (
                &r["job_id"],
                &r["fragment_id"],
                &r["column"],
                &r["error_type"]
            ),
            (
                &json!(job),
                &json!(1),
                &json!("checked"),
                &json!("guest_error")
            ),
            "{r}"
        );
        assert_eq!(r["table_version"], d["spec"]["read_version"], "{r}");
        assert!(!r["error_message"].as_str().unwrap().is_empty(), "{r}");
    }
    assert_eq!(errs["truncated"], false);
    let limited = s.ok("/v1/table/f/errors", json!({"limit": 2})).await;
    assert_eq!(limited["records"].as_array().unwrap().len(), 2, "{limited}");
    assert_eq!(limited["truncated"], true);
    for body in [json!({"column": "id"}), json!({"job_id": "job-0-none"})] {
        let none = s.ok("/v1/table/f/errors", body).await;
        assert_eq!(none["records"], json!([]), "{none}");
    }
    let (st, b) = s.post("/v1/table/f/errors", json!({"limit": 0})).await;
    assert_error(st, &b, 400, 13);
    // Past 100 failures in one checkpoint the rest are counted, as a capped fragment.
    let (st, b) = s.post_arrow("/v1/table/g/create", &sample(-150, 150)).await;
    assert_eq!(st, 200, "{b}");
    add_virtual(
        &s,
        "g",
        "checked",
        vc("misbehave", "fail_negative", &["id"], &[]),
    )
    .await;
    let job = s
        .backfill("g", json!({"column": "checked", "manifest": m.to_string()}))
        .await;
    assert_eq!(s.wait_job(&job).await["result"]["rows_nulled"], 150);
    let errs = s.ok("/v1/table/g/errors", json!({})).await;
    assert_eq!(errs["records"].as_array().unwrap().len(), 100);
    assert_eq!(
        errs["fragments"],
        json!([{"job_id": job, "fragment_id": 0, "rows_skipped": 150, "rows_recorded": 100}])
    );

    // The jobs and their UDF calls show in /metrics, by tenant.
    use crate::operability::{metric as metric_value, scrape};
    let text = scrape(&s).await;
    let jobs = |state: &str| {
        metric_value(
            &text,
            &format!(r#"lancet_jobs{{type="backfill",state="{state}",tenant="default"}}"#),
        )
    };
    assert_eq!(
        (jobs("FAILED"), jobs("DONE")),
        (Some(1.0), Some(2.0)),
        "{text}"
    );
    let calls = metric_value(&text, r#"lancet_udf_calls_total{tenant="default"}"#).unwrap();
    let failed = metric_value(&text, r#"lancet_udf_guest_errors_total{tenant="default"}"#);
    assert!(calls >= 10.0, "{text}");
    assert!(failed.unwrap() >= 1.0, "{text}");
}

async fn setup_resumable(s: &Server, frags: i64, per: i64) {
    table_with_fragments(s, "r", frags, per).await;
    add_virtual(s, "r", "dbl", slow("150000")).await;
}

#[tokio::test]
async fn killed_server_resumes_backfills_and_matches_an_unkilled_run() {
    const FRAGS: i64 = 8;
    const PER: i64 = 30;
    let job_body = json!({"column": "dbl", "commit_granularity": 2, "checkpoint_size": 3,
                          "max_checkpoint_size": 3, "concurrency": 2,
                          "batch_checkpoint_flush_interval_seconds": 0});

    // The reference: never killed.
    let a = Server::start().await;
    setup_resumable(&a, FRAGS, PER).await;
    let job = a.backfill("r", job_body.clone()).await;
    let reference = a.wait_job(&job).await;
    assert_eq!(reference["job_state"], "DONE", "{reference}");
    let want = doubled(&a, "r").await;
    assert_eq!(want.len() as i64, FRAGS * PER);
    assert!(want.iter().all(|(id, v)| *v == Some(2 * id)));
    drop(a);

    // Killed at several points: mid-computation before any commit, after some commits,
    // and late in the job.
    let mut b = Server::start().await;
    setup_resumable(&b, FRAGS, PER).await;
    let before = b.version("r").await;
    let job = b.backfill("r", job_body.clone()).await;
    let mut kills = 0;
    for point in [15u64, 100, 200] {
        let d = b
            .wait_job_until(&job, 120, |d| {
                d["job_state"] != "IN_PROGRESS"
                    || d["progress"]["rows_done"].as_u64() >= Some(point)
            })
            .await;
        if d["job_state"] != "IN_PROGRESS" {
            break;
        }
        b = b.restart().await;
        kills += 1;
        // The record survived the kill and the job runs again: on a fast machine the rows
        // left after the last kill point may all be done before this describe.
        let d = b.describe_job(&job).await;
        assert!(
            d["job_state"] == "IN_PROGRESS" || d["job_state"] == "DONE",
            "{d}"
        );
    }
    assert!(
        kills >= 2,
        "the job finished before it could be killed twice"
    );
    let d = b.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(doubled(&b, "r").await, want);
    // Every row computed into the table exactly once: the same counts as the reference.
    for key in ["rows_written", "rows_nulled", "fragments_committed"] {
        assert_eq!(d["result"][key], reference["result"][key], "{key}: {d}");
    }
    assert_eq!(d["progress"]["rows_done"], FRAGS * PER);
    assert_eq!(d["progress"]["rows_total"], FRAGS * PER);
    assert_eq!(d["result"]["fragments_skipped"], json!([]));
    // One version per commit; no commit was made twice.
    let commits = d["result"]["commits"].as_u64().unwrap();
    assert_eq!(b.version("r").await, before + commits);
    assert_eq!(commits, reference["result"]["commits"].as_u64().unwrap());
    let list = b.ok("/v1/jobs/list", json!({})).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_panicking_job_fails_and_the_server_serves_on() {
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_FAULT_JOB_PANIC", "1"),
        ],
    )
    .await;
    s.create_table("p", 20).await;
    add_virtual(&s, "p", "slug", vc("slugify", "slugify", &["text"], &[])).await;
    let job = s.backfill("p", json!({"column": "slug"})).await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "FAILED", "{d}");
    let msg = d["failure"]["message"].as_str().unwrap();
    assert!(msg.contains("crashed"), "{msg}");
    // Nothing was written and the server answers as before.
    assert_eq!(s.count("p", json!({"predicate": "slug IS NULL"})).await, 20);
    let (status, _) = s.post("/v1/jobs/list", json!({})).await;
    assert_eq!(status, 200);
}
