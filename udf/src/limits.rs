//! Per-call resource limits, and how a manifest may tighten them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits for one UDF call. The server passes its (or the tenant's) limits to each call;
/// a manifest can only lower them (see [`Limits::tightened_by`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Guest CPU time per call (wall time at most `engine::WALL_FACTOR` times it), enforced
    /// by epoch interruption (checked at the ticks, one each 5 ms of wall time).
    pub timeout: Duration,
    /// Cap on the instance's linear memory. Also bounded by the runtime's pool slot size
    /// (`RuntimeConfig::default_limits.max_memory_bytes`).
    pub max_memory_bytes: usize,
    /// Wasm stack. Engine-wide: only the runtime's `default_limits` value is used.
    pub max_stack_bytes: usize,
    /// Largest result buffer accepted from the guest (status byte excluded).
    pub max_output_bytes: usize,
    /// Larger batches are split into calls of at most this many rows.
    pub max_rows_per_call: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_memory_bytes: 256 << 20,
            max_stack_bytes: 512 << 10,
            max_output_bytes: 64 << 20,
            max_rows_per_call: 65_536,
        }
    }
}

/// The `limits` object of a manifest. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rows_per_call: Option<usize>,
}

impl Limits {
    /// These limits lowered (never raised) by a manifest's override: a module's author may ask
    /// for less than the server grants, not more.
    pub fn tightened_by(&self, o: Option<&LimitsOverride>) -> Limits {
        let Some(o) = o else { return self.clone() };
        let min = |ours: usize, theirs: Option<usize>| theirs.map_or(ours, |t| t.min(ours));
        Limits {
            timeout: o.timeout_ms.map_or(self.timeout, |ms| {
                Duration::from_millis(ms).min(self.timeout)
            }),
            max_memory_bytes: min(self.max_memory_bytes, o.max_memory_bytes),
            max_stack_bytes: self.max_stack_bytes,
            max_output_bytes: min(self.max_output_bytes, o.max_output_bytes),
            max_rows_per_call: min(self.max_rows_per_call, o.max_rows_per_call).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_only_lower() {
        let server = Limits::default();
        let o = LimitsOverride {
            timeout_ms: Some(60_000),
            max_memory_bytes: Some(1 << 20),
            max_output_bytes: None,
            max_rows_per_call: Some(0),
        };
        let l = server.tightened_by(Some(&o));
        assert_eq!(l.timeout, server.timeout);
        assert_eq!(l.max_memory_bytes, 1 << 20);
        assert_eq!(l.max_output_bytes, server.max_output_bytes);
        assert_eq!(l.max_rows_per_call, 1);
        assert_eq!(server.tightened_by(None), server);
    }
}
