//! The Ray job's entrypoint: `driver.py` (embedded in the binary), run with the cluster's
//! Python and this job's [`TaskRunSpec`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::RayCluster;

/// The driver prints this before the reason when the job fails because of a task (a task's
/// error, or a limit it exceeded); [`failure_in`] finds it in the driver's logs.
pub const FAILURE_PREFIX: &str = "LANCET-FAILURE: ";

const DRIVER: &str = include_str!("driver.py");

/// What the driver needs to run one backfill job's tasks.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRunSpec {
    /// The Lancet job.
    pub job_id: String,
    /// The root the job is under, as `lancet serve --data` takes it.
    pub data: String,
    /// The `lancet` binary on the Ray nodes.
    pub lancet: String,
    /// Extra arguments of `lancet jobs run-task` / `lancet jobs tasks`.
    pub args: Vec<String>,
    /// Ray resources of each task.
    pub num_cpus: f64,
    /// Ray resources of each task.
    pub num_gpus: f64,
    /// Ray's `memory` resource of each task, and the limit on its processes' RSS, in bytes.
    pub memory_bytes: Option<u64>,
    /// Wall-time limit of each task, in seconds.
    pub timeout_seconds: Option<f64>,
    /// Retries of a task whose worker or node died.
    pub max_retries: u32,
}

impl TaskRunSpec {
    /// The spec of `job_id` under `data` on `cluster`.
    pub fn new(cluster: &RayCluster, job_id: &str, data: &str) -> Self {
        Self {
            job_id: job_id.to_string(),
            data: data.to_string(),
            lancet: cluster.lancet.clone(),
            args: cluster.args.clone(),
            num_cpus: cluster.num_cpus,
            num_gpus: cluster.num_gpus,
            memory_bytes: cluster.memory_mb.map(|m| m << 20),
            timeout_seconds: cluster.task_timeout.map(|t| t.as_secs_f64()),
            max_retries: cluster.max_retries,
        }
    }
}

/// The shell command that runs the driver for `spec` with `python`: the script and the spec
/// travel base64-encoded inside the command, so the Ray head needs nothing from Lancet but
/// a Python with `ray` (a working directory upload would need the head's package store).
pub fn entrypoint(python: &str, spec: &TaskRunSpec) -> String {
    let script = STANDARD.encode(DRIVER);
    let spec = STANDARD.encode(serde_json::to_vec(spec).expect("a spec serializes"));
    // The job's working directory may hold a `ray` directory (Ray's session files): drop it
    // from the module path before `import ray`.
    format!(
        "{} -c \"import sys,base64;sys.path=[p for p in sys.path if p];\
         exec(base64.b64decode('{script}'))\" {spec}",
        shell_quote(python)
    )
}

/// The reason the driver gave for failing, from its logs.
pub fn failure_in(logs: &str) -> Option<&str> {
    logs.lines()
        .rev()
        .find_map(|l| l.split_once(FAILURE_PREFIX).map(|(_, why)| why.trim()))
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entrypoint_carries_script_and_spec() {
        let cluster: RayCluster =
            toml::from_str("address = \"http://h:1\"\nmemory_mb = 2\ntask_timeout = \"5s\"")
                .unwrap();
        let spec = TaskRunSpec::new(&cluster, "j1", "s3://b/root");
        let cmd = entrypoint("/opt/my python/bin/python", &spec);
        assert!(cmd.starts_with("'/opt/my python/bin/python' -c \"import sys,base64;"));
        let last = cmd.rsplit(' ').next().unwrap();
        let back: serde_json::Value =
            serde_json::from_slice(&STANDARD.decode(last).unwrap()).unwrap();
        assert_eq!(back["job_id"], "j1");
        assert_eq!(back["data"], "s3://b/root");
        assert_eq!(back["memory_bytes"], 2 << 20);
        assert_eq!(back["timeout_seconds"], 5.0);
        assert!(cmd.contains(&STANDARD.encode(DRIVER)));
    }

    #[test]
    fn failures_are_found_in_logs() {
        let logs = "starting\nLANCET-FAILURE: task fragment 1 rows 0..10 exceeded its time limit of 2 s\nTraceback\n";
        assert_eq!(
            failure_in(logs),
            Some("task fragment 1 rows 0..10 exceeded its time limit of 2 s")
        );
        assert_eq!(failure_in("all good\n"), None);
    }
}
