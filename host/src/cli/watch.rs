//! `lancet jobs watch`: polls `/v1/jobs/describe` and redraws a one-line progress bar until
//! the job ends. A client of the HTTP API only; it shares no state with the server.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

const BAR_WIDTH: usize = 30;

/// The bar line for a describe answer.
pub fn render(d: &Value) -> String {
    let p = &d["progress"];
    let n = |k: &str| p[k].as_u64().unwrap_or(0);
    let (done, total) = (n("rows_done"), n("rows_total"));
    let fraction = if total == 0 {
        if d["job_state"] == "DONE" { 1.0 } else { 0.0 }
    } else {
        (done as f64 / total as f64).min(1.0)
    };
    let filled = (fraction * BAR_WIDTH as f64).round() as usize;
    format!(
        "[{}{}] {:>3}% rows {}/{} fragments {}/{} commits {} {}",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled),
        (fraction * 100.0).floor() as u64,
        done,
        total,
        n("fragments_done"),
        n("fragments_total"),
        n("commits"),
        d["job_state"].as_str().unwrap_or("?"),
    )
}

/// Poll until the job ends; Ok(final describe) when it is DONE, Err(message) otherwise.
pub async fn watch(
    url: &str,
    job_id: &str,
    api_key: Option<&str>,
    every: Duration,
) -> Result<Value, String> {
    let client = reqwest::Client::new();
    let endpoint = format!("{}/v1/jobs/describe", url.trim_end_matches('/'));
    let mut out = std::io::stderr();
    loop {
        let mut req = client.post(&endpoint).json(&json!({ "job_id": job_id }));
        if let Some(key) = api_key {
            req = req.header("x-api-key", key).bearer_auth(key);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("cannot reach {endpoint}: {e}"))?;
        let status = resp.status();
        let body: Value = resp
            .json()
            .await
            .map_err(|e| format!("unreadable answer from {endpoint}: {e}"))?;
        if !status.is_success() {
            let detail = body["detail"].as_str().unwrap_or("").to_string();
            return Err(format!("{status}: {detail}"));
        }
        let _ = write!(out, "\r{}", render(&body));
        let _ = out.flush();
        match body["job_state"].as_str() {
            Some("IN_PROGRESS") | None => tokio::time::sleep(every).await,
            Some("DONE") => {
                let _ = writeln!(out);
                return Ok(body);
            }
            Some(other) => {
                let _ = writeln!(out);
                let why = body["failure"]["message"].as_str().unwrap_or("");
                return Err(format!("job {job_id} ended {other} {why}")
                    .trim()
                    .to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_shows_progress() {
        let d = json!({"job_state": "IN_PROGRESS", "progress": {"rows_done": 50, "rows_total": 200,
            "fragments_done": 1, "fragments_total": 4, "commits": 1}});
        let line = render(&d);
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(8), ".".repeat(22))),
            "{line}"
        );
        assert!(
            line.contains(" 25% rows 50/200 fragments 1/4 commits 1 IN_PROGRESS"),
            "{line}"
        );
        let done = json!({"job_state": "DONE", "progress": {"rows_total": 0}});
        assert!(render(&done).contains("100%"));
    }
}
