//! `lancet jobs tasks` and `lancet jobs run-task`: a backfill's tasks run by another process
//! over the same root (a Ray task; see docs/ray.md).

use lancet::config::ServeConfig;
use lancet::jobs::kinds::backfill::remote::{self, OpenTask};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Print the job's open tasks, one JSON object a line.
pub async fn list(config: &ServeConfig, job_id: &str) -> Result<()> {
    let app = lancet::server::build_worker(config).await?;
    for task in remote::tasks(&app, job_id).await.map_err(|e| e.message)? {
        println!("{}", serde_json::to_string(&task)?);
    }
    Ok(())
}

/// Compute one task and print what it did as a JSON object.
pub async fn run(config: &ServeConfig, job_id: &str, task: OpenTask, worker: &str) -> Result<()> {
    let app = lancet::server::build_worker(config).await?;
    let rows = remote::run(&app, job_id, task, worker)
        .await
        .map_err(|e| e.message)?;
    println!(
        "{}",
        serde_json::json!({"job_id": job_id, "task": task, "rows": rows, "worker": worker})
    );
    Ok(())
}
