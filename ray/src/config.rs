//! The operator's Ray clusters, read from a TOML file (`lancet serve --clusters FILE`):
//!
//! ```toml
//! [ray.gpu]
//! address = "http://ray-head:8265"   # the head's dashboard (Job Submission API)
//! lancet = "/usr/local/bin/lancet"   # the binary on the Ray nodes
//! num_cpus = 1
//! num_gpus = 1
//! memory_mb = 8192                   # Ray's `memory` resource, and each task's RSS limit
//! task_timeout = "30m"
//! tenants = ["acme"]                 # absent: every tenant may use it
//! [ray.gpu.env]                      # environment of the driver and its tasks
//! LANCET_PYTHON_RUNNER = "/usr/local/lib/lancet/runner.wasm"
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

/// Why a clusters file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The file could not be read.
    #[error("cannot read the clusters file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape, or a value is out of range.
    #[error("clusters file: {0}")]
    Invalid(String),
}

/// The clusters this server may run jobs on, by name, besides `default` (its own nodes).
#[derive(Debug, Clone, Default)]
pub struct Clusters {
    ray: BTreeMap<String, Arc<RayCluster>>,
}

/// One Ray cluster: where its head is, what each task asks for, and who may use it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RayCluster {
    /// The head node's dashboard, where the Job Submission API is (`http://head:8265`).
    pub address: String,
    /// The Python the Ray job's driver runs with (it needs `ray`): on `PATH` of the head.
    #[serde(default = "default_python")]
    pub python: String,
    /// The `lancet` binary on the Ray nodes.
    #[serde(default = "default_lancet")]
    pub lancet: String,
    /// Extra arguments of `lancet jobs run-task` on the Ray nodes (storage options, limits).
    #[serde(default)]
    pub args: Vec<String>,
    /// CPUs each task asks Ray for.
    #[serde(default = "default_cpus")]
    pub num_cpus: f64,
    /// GPUs each task asks Ray for.
    #[serde(default)]
    pub num_gpus: f64,
    /// Memory each task asks Ray for, in MiB; a task whose processes hold more is stopped
    /// and the job fails naming the task and the limit.
    pub memory_mb: Option<u64>,
    /// Wall time one task may take (`"30m"`); past it the task is stopped and the job fails.
    #[serde(default, with = "duration")]
    pub task_timeout: Option<Duration>,
    /// Times Ray runs a task again when its worker or node dies.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// The tenants allowed to run jobs here; absent: every tenant.
    pub tenants: Option<Vec<String>>,
    /// How long the head may be unreachable during a job before the job fails.
    #[serde(default = "default_unreachable", with = "duration")]
    pub unreachable_after: Option<Duration>,
    /// Environment variables of the Ray job (its driver and every task).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

fn default_python() -> String {
    "python".into()
}
fn default_lancet() -> String {
    "lancet".into()
}
fn default_cpus() -> f64 {
    1.0
}
fn default_retries() -> u32 {
    3
}
fn default_unreachable() -> Option<Duration> {
    Some(Duration::from_secs(60))
}

mod duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    ray: BTreeMap<String, RayCluster>,
}

impl Clusters {
    /// Read a clusters file.
    pub fn load(path: &Path) -> Result<Self, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parse a clusters file's text.
    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        let file: File = toml::from_str(text).map_err(|e| ClusterError::Invalid(e.to_string()))?;
        for (name, c) in &file.ray {
            let bad = |why: String| Err(ClusterError::Invalid(format!("ray.{name}: {why}")));
            if name == "default" {
                return bad("'default' is this server's own nodes; pick another name".into());
            }
            if !(c.address.starts_with("http://") || c.address.starts_with("https://")) {
                return bad(format!("address '{}' is not an http(s) URL", c.address));
            }
            if !(c.num_cpus.is_finite() && c.num_cpus >= 0.0) {
                return bad(format!("num_cpus must be >= 0, got {}", c.num_cpus));
            }
            if !(c.num_gpus.is_finite() && c.num_gpus >= 0.0) {
                return bad(format!("num_gpus must be >= 0, got {}", c.num_gpus));
            }
            if c.memory_mb == Some(0) {
                return bad("memory_mb must be > 0".into());
            }
        }
        Ok(Self {
            ray: file
                .ray
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect(),
        })
    }

    /// The Ray cluster of this name.
    pub fn ray(&self, name: &str) -> Option<&Arc<RayCluster>> {
        self.ray.get(name)
    }

    /// Every cluster's name, `default` first.
    pub fn names(&self) -> Vec<&str> {
        std::iter::once("default")
            .chain(self.ray.keys().map(String::as_str))
            .collect()
    }
}

impl RayCluster {
    /// Whether `tenant` may run jobs here.
    pub fn allows(&self, tenant: &str) -> bool {
        self.tenants
            .as_ref()
            .is_none_or(|t| t.iter().any(|t| t == tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_defaults_and_settings() {
        let c = Clusters::parse(
            r#"
            [ray.cpu]
            address = "http://127.0.0.1:8265"
            [ray.gpu]
            address = "http://head:8265"
            num_gpus = 1
            memory_mb = 4096
            task_timeout = "90s"
            tenants = ["acme"]
            env = { A = "1" }
            "#,
        )
        .unwrap();
        assert_eq!(c.names(), ["default", "cpu", "gpu"]);
        let cpu = c.ray("cpu").unwrap();
        assert_eq!((cpu.num_cpus, cpu.num_gpus, cpu.max_retries), (1.0, 0.0, 3));
        assert_eq!(cpu.unreachable_after, Some(Duration::from_secs(60)));
        assert!(cpu.allows("anyone"));
        let gpu = c.ray("gpu").unwrap();
        assert_eq!(gpu.task_timeout, Some(Duration::from_secs(90)));
        assert_eq!(gpu.memory_mb, Some(4096));
        assert!(gpu.allows("acme") && !gpu.allows("other"));
        assert_eq!(gpu.env["A"], "1");
        assert!(c.ray("default").is_none());
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for (text, says) in [
            ("[ray.default]\naddress = \"http://h:1\"", "'default'"),
            ("[ray.x]\naddress = \"h:1\"", "not an http"),
            (
                "[ray.x]\naddress = \"http://h:1\"\nnum_gpus = -1",
                "num_gpus",
            ),
            (
                "[ray.x]\naddress = \"http://h:1\"\ngpus = 1",
                "unknown field `gpus`",
            ),
            (
                "[ray.x]\naddress = \"http://h:1\"\ntask_timeout = \"soon\"",
                "soon",
            ),
            ("[k8s.x]\naddress = \"http://h:1\"", "unknown field `k8s`"),
        ] {
            let e = Clusters::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
