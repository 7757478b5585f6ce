//! A client of Ray's Job Submission REST API (`/api/jobs/`), the API `ray job submit` uses.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

/// Why a call to the Ray head failed.
#[derive(Debug, thiserror::Error)]
pub enum RayError {
    /// No answer: connection refused, reset or timed out (the head is down or cut off).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The head answered with an error.
    #[error("HTTP {status}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The answer's body, shortened.
        message: String,
    },
    /// The head answered something this client does not understand.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

/// A Ray job's state, as the Job Submission API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Waiting for its driver to start.
    Pending,
    /// Its driver runs.
    Running,
    /// Stopped by a stop request.
    Stopped,
    /// Its driver exited 0.
    Succeeded,
    /// Its driver exited non-zero or could not start.
    Failed,
}

impl JobStatus {
    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Stopped | Self::Succeeded | Self::Failed)
    }
}

/// What the head says of a job.
#[derive(Debug, Clone, Deserialize)]
pub struct JobInfo {
    /// Its state.
    pub status: JobStatus,
    /// Why it is in that state (for a failed job, Ray's summary with the driver's last logs).
    #[serde(default)]
    pub message: Option<String>,
}

/// One Ray job to submit.
#[derive(Debug, Clone, Default)]
pub struct Submission {
    /// The shell command of the driver.
    pub entrypoint: String,
    /// Environment variables of the driver and of every task it starts.
    pub env_vars: BTreeMap<String, String>,
    /// Labels shown by Ray's dashboard and `ray job list`.
    pub metadata: BTreeMap<String, String>,
}

/// How [`JobClient::submit_once`] found a job running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// Submitted now, under this id.
    Submitted(String),
    /// Already running (or pending) under this id: submitted earlier, maybe by another node.
    Attached(String),
}

impl Attachment {
    /// The Ray submission id.
    pub fn id(&self) -> &str {
        match self {
            Self::Submitted(id) | Self::Attached(id) => id,
        }
    }
}

/// Ray jobs with ids from one base are looked at in turn, at most this many.
const MAX_GENERATIONS: u32 = 1000;

/// A client of one Ray head's Job Submission API.
#[derive(Debug, Clone)]
pub struct JobClient {
    http: reqwest::Client,
    base: String,
}

impl JobClient {
    /// A client of the head whose dashboard is at `address` (`http://head:8265`).
    pub fn new(address: &str) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a client without TLS builds");
        Self {
            http,
            base: format!("{}/api/jobs/", address.trim_end_matches('/')),
        }
    }

    /// The job submitted under `id`; `None` when the head has no such job.
    pub async fn info(&self, id: &str) -> Result<Option<JobInfo>, RayError> {
        let answer = self.send(self.http.get(self.url(id))).await?;
        if answer.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        json(ok(answer).await?).await.map(Some)
    }

    /// Submit `job` under `id`. Fails (`Api`) if a job with that id exists.
    pub async fn submit(&self, id: &str, job: &Submission) -> Result<(), RayError> {
        let body = json!({
            "entrypoint": job.entrypoint,
            "submission_id": id,
            "runtime_env": {"env_vars": job.env_vars},
            "metadata": job.metadata,
            // The driver only hands tasks out: it holds no CPU a task could use.
            "entrypoint_num_cpus": 0,
        });
        ok(self.send(self.http.post(&self.base).json(&body)).await?).await?;
        Ok(())
    }

    /// The job of `base` that runs, or a new one: the jobs `base`, `base-2`, `base-3`... are
    /// looked at in turn; the first pending or running one is attached to, and if all have
    /// ended, the next id is submitted. Ids are deterministic, so two nodes (or one node
    /// after a restart) never run two drivers for one Lancet job at once; a job stopped (by a
    /// pause) or lost is followed by a new generation.
    pub async fn submit_once(&self, base: &str, job: &Submission) -> Result<Attachment, RayError> {
        for generation in 1..=MAX_GENERATIONS {
            let id = match generation {
                1 => base.to_string(),
                n => format!("{base}-{n}"),
            };
            match self.info(&id).await? {
                Some(info) if info.status.is_terminal() => continue,
                Some(_) => return Ok(Attachment::Attached(id)),
                None => {}
            }
            match self.submit(&id, job).await {
                Ok(()) => return Ok(Attachment::Submitted(id)),
                // Another node submitted it between the look and the submission.
                Err(RayError::Api { .. }) if self.info(&id).await?.is_some() => {
                    return Ok(Attachment::Attached(id));
                }
                Err(e) => return Err(e),
            }
        }
        Err(RayError::Protocol(format!(
            "{MAX_GENERATIONS} Ray jobs of {base} have ended; not submitting another"
        )))
    }

    /// Ask the head to stop the job: `true` if it was running.
    pub async fn stop(&self, id: &str) -> Result<bool, RayError> {
        #[derive(Deserialize)]
        struct Stopped {
            stopped: bool,
        }
        let url = format!("{}/stop", self.url(id));
        let s: Stopped = json(ok(self.send(self.http.post(url)).await?).await?).await?;
        Ok(s.stopped)
    }

    /// The driver's output so far.
    pub async fn logs(&self, id: &str) -> Result<String, RayError> {
        #[derive(Deserialize)]
        struct Logs {
            logs: String,
        }
        let url = format!("{}/logs", self.url(id));
        let l: Logs = json(ok(self.send(self.http.get(url)).await?).await?).await?;
        Ok(l.logs)
    }

    fn url(&self, id: &str) -> String {
        // Ids are ours ("lancet-<job id>"): letters, digits, '-' and '_'; nothing to escape.
        format!("{}{id}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, RayError> {
        request.send().await.map_err(|e| {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            RayError::Unreachable(text)
        })
    }
}

async fn json<T: serde::de::DeserializeOwned>(answer: reqwest::Response) -> Result<T, RayError> {
    answer
        .json()
        .await
        .map_err(|e| RayError::Protocol(e.to_string()))
}

async fn ok(answer: reqwest::Response) -> Result<reqwest::Response, RayError> {
    let status = answer.status();
    if status.is_success() {
        return Ok(answer);
    }
    let body = answer.text().await.unwrap_or_default();
    // Ray answers errors with a Python traceback: its last line says what went wrong.
    let last = body
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(RayError::Api {
        status: status.as_u16(),
        message: last.chars().take(500).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_head_is_told_apart() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = JobClient::new(&format!("http://127.0.0.1:{port}"));
        let e = client.info("lancet-x").await.unwrap_err();
        assert!(matches!(e, RayError::Unreachable(_)), "{e}");
        let e = client
            .submit_once("lancet-x", &Submission::default())
            .await
            .unwrap_err();
        assert!(matches!(e, RayError::Unreachable(_)), "{e}");
    }

    #[test]
    fn statuses_parse_as_ray_spells_them() {
        let info: JobInfo =
            serde_json::from_str(r#"{"status": "FAILED", "message": "exit code 1", "x": 1}"#)
                .unwrap();
        assert_eq!(info.status, JobStatus::Failed);
        assert!(info.status.is_terminal());
        let info: JobInfo = serde_json::from_str(r#"{"status": "PENDING"}"#).unwrap();
        assert!(!info.status.is_terminal());
    }
}
