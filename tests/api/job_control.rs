//! `jobs/pause`, `jobs/resume` and `jobs/query_events` on real backfills.

use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, RecordBatch};
use serde_json::{Value, json};

use crate::common::*;
use crate::jobs::{add_virtual, doubled, slow, table_with_fragments};

/// The job's events (an Arrow IPC stream), or the error status and body.
async fn events(s: &Server, body: Value) -> Result<RecordBatch, (u16, Value)> {
    let r = s
        .client
        .post(s.url("/v1/jobs/query_events"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = r.bytes().await.unwrap();
    if status != 200 {
        return Err((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ));
    }
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    Ok(arrow_select::concat::concat_batches(&schema, &batches).unwrap())
}

fn states(batch: &RecordBatch) -> Vec<String> {
    let col = batch.column_by_name("state").unwrap().as_string::<i32>();
    (0..col.len()).map(|i| col.value(i).to_string()).collect()
}

#[tokio::test]
async fn a_paused_backfill_stops_keeps_its_progress_and_resumes_to_the_end() {
    let s = Server::start().await;
    table_with_fragments(&s, "p", 8, 20).await;
    add_virtual(&s, "p", "dbl", slow("300000")).await;
    let before = s.version("p").await;
    let job = s
        .backfill(
            "p",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 2,
                   "max_checkpoint_size": 2, "concurrency": 1}),
        )
        .await;
    s.wait_job_until(&job, 120, |d| d["progress"]["commits"].as_u64() >= Some(1))
        .await;
    let r = s.ok("/v1/jobs/pause", json!({"job_id": job})).await;
    assert_eq!(r["paused"], true, "{r}");
    let d = s
        .wait_job_until(&job, 30, |d| d["job_state"] == "PAUSED")
        .await;
    assert_eq!(d["result"], Value::Null);
    let commits = d["progress"]["commits"].as_u64().unwrap();
    assert!((1..8).contains(&commits), "{d}");
    // Paused again: nothing changes. Nothing lands while paused.
    let r = s.ok("/v1/jobs/pause", json!({"job_id": job})).await;
    assert_eq!(r["paused"], false, "{r}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(s.version("p").await, before + commits);
    assert_eq!(s.describe_job(&job).await["job_state"], "PAUSED");
    let listed = s.ok("/v1/jobs/list", json!({"job_state": "PAUSED"})).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");

    let ev = events(&s, json!({"job_id": job})).await.unwrap();
    let seen = states(&ev);
    for want in [
        "created",
        "claim",
        "claim_complete",
        "pause_requested",
        "paused",
    ] {
        assert!(
            seen.iter().any(|s| s == want),
            "{want} missing from {seen:?}"
        );
    }
    let done = events(
        &s,
        json!({"job_id": job, "filter": "state = 'claim_complete'"}),
    )
    .await
    .unwrap();
    assert_eq!(done.num_rows() as u64, commits);
    let rows = done
        .column_by_name("rows_processed")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert!((0..rows.len()).all(|i| rows.value(i) == 20));
    let newest = events(&s, json!({"job_id": job, "limit": 1}))
        .await
        .unwrap();
    assert_eq!(states(&newest), vec!["paused"]);

    let r = s.ok("/v1/jobs/resume", json!({"job_id": job})).await;
    assert_eq!(r["resumed"], true, "{r}");
    let d = s
        .wait_job_until(&job, 120, |d| d["job_state"] != "IN_PROGRESS")
        .await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert!(
        doubled(&s, "p")
            .await
            .iter()
            .all(|(id, v)| *v == Some(2 * id))
    );
    // Each fragment computed and committed once across the pause.
    assert_eq!(d["result"]["rows_written"], 160, "{d}");
    let total = d["result"]["commits"].as_u64().unwrap();
    assert_eq!(total, 8);
    assert_eq!(s.version("p").await, before + total);
    let ev = events(&s, json!({"job_id": job})).await.unwrap();
    let seen = states(&ev);
    assert_eq!(
        seen.iter().filter(|s| *s == "claim_complete").count(),
        8,
        "{seen:?}"
    );
    assert_eq!(seen.last().map(String::as_str), Some("done"));
    assert!(seen.iter().any(|s| s == "resumed"));

    // A finished job can be neither paused nor resumed.
    let (st, b) = s.post("/v1/jobs/pause", json!({"job_id": job})).await;
    assert_error(st, &b, 409, 19);
    let (st, b) = s.post("/v1/jobs/resume", json!({"job_id": job})).await;
    assert_error(st, &b, 409, 19);
}

#[tokio::test]
async fn a_paused_job_can_be_cancelled_and_bad_requests_are_refused() {
    let s = Server::start().await;
    table_with_fragments(&s, "q", 6, 20).await;
    add_virtual(&s, "q", "dbl", slow("300000")).await;
    let job = s
        .backfill(
            "q",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 2,
                   "max_checkpoint_size": 2, "concurrency": 1}),
        )
        .await;
    // Resuming a running job changes nothing.
    let r = s.ok("/v1/jobs/resume", json!({"job_id": job})).await;
    assert_eq!(
        (r["resumed"].clone(), r["still_pausing"].clone()),
        (json!(false), json!(false))
    );
    s.ok("/v1/jobs/pause", json!({"job_id": job})).await;
    s.wait_job_until(&job, 30, |d| d["job_state"] == "PAUSED")
        .await;
    let d = s.ok("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_eq!(d["job_state"], "CANCELLED", "{d}");
    let seen = states(&events(&s, json!({"job_id": job})).await.unwrap());
    assert_eq!(&seen[seen.len() - 2..], ["cancel_requested", "cancelled"]);

    for (body, status, code) in [
        (json!({}), 400, 13),
        (json!({"job_id": "job-0000000000000-nothere"}), 404, 10),
        (json!({"job_id": job, "limit": 0}), 400, 13),
        (
            json!({"job_id": job, "filter": "no_such_column = 1"}),
            400,
            13,
        ),
    ] {
        let (st, b) = events(&s, body.clone()).await.unwrap_err();
        assert_error(st, &b, status, code);
    }
    for path in ["/v1/jobs/pause", "/v1/jobs/resume"] {
        let (st, b) = s.post(path, json!({"job_id": "nope"})).await;
        assert_error(st, &b, 404, 10);
    }
    // Another tenant does not see the job.
    let other = s.new_key("other", "write", &[]).await;
    let (st, b) = s
        .with_key(&other)
        .post("/v1/jobs/pause", json!({"job_id": job}))
        .await;
    assert_error(st, &b, 404, 10);
}

#[tokio::test]
async fn a_second_node_helps_compute_a_backfill_and_every_row_is_written_once() {
    let env = |node: &'static str| [("LANCET_JOB_LEASE_TTL", "3s"), ("LANCET_NODE_ID", node)];
    let a = Server::start_with(tempfile::tempdir().unwrap(), &env("node-a")).await;
    let b = Server::start_at(a.data_dir(), &env("node-b")).await;
    // Long enough (seconds) for b's scans of the root (every second here) to find it.
    table_with_fragments(&a, "h", 8, 20).await;
    add_virtual(&a, "h", "dbl", slow("30000000")).await;
    let before = a.version("h").await;
    let job = a
        .backfill(
            "h",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 5,
                   "max_checkpoint_size": 5, "concurrency": 1}),
        )
        .await;
    let d = a.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_written"], 160, "{d}");
    assert_eq!(d["result"]["fragments_committed"], 8);
    let commits = d["result"]["commits"].as_u64().unwrap();
    assert_eq!(
        a.version("h").await,
        before + commits,
        "no fragment committed twice"
    );
    assert!(
        doubled(&b, "h")
            .await
            .iter()
            .all(|(id, v)| *v == Some(2 * id))
    );
    // Node b computed some of the tasks; node a committed them all.
    let ev = events(&b, json!({"job_id": job})).await.unwrap();
    let by = ev.column_by_name("emitted_by").unwrap().as_string::<i32>();
    let st = ev.column_by_name("state").unwrap().as_string::<i32>();
    let helped = (0..ev.num_rows())
        .filter(|&i| st.value(i) == "task_complete" && by.value(i) == "node-b")
        .count();
    assert!(helped >= 1, "node b helped with no task: {:?}", states(&ev));
    let committed_elsewhere = (0..ev.num_rows())
        .filter(|&i| st.value(i) == "claim_complete" && by.value(i) != "node-a")
        .count();
    assert_eq!(committed_elsewhere, 0, "only the owner commits");
}
