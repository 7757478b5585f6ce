//! A real `lancet serve` process for the benchmark programs, and an authenticated client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct Served {
    pub child: Child,
    pub base: String,
}

impl Served {
    #[allow(dead_code)]
    pub fn start(bin: &std::path::Path, data: &std::path::Path, args: &[&str]) -> Served {
        Self::start_with(bin, data.to_str().expect("a UTF-8 path"), args, &[])
    }

    /// A server on data root `data` (a directory or an object-store URI), with `env` set.
    #[allow(clippy::zombie_processes)]
    pub fn start_with(
        bin: &std::path::Path,
        data: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Served {
        let mut command = Command::new(bin);
        // `LANCET_BENCH_SERVER_LOG=default`: the server's own default logging (as README
        // command 1 runs it); any other value is its `LANCET_LOG`; unset, errors only.
        match std::env::var("LANCET_BENCH_SERVER_LOG") {
            Ok(v) if v == "default" => command.env_remove("LANCET_LOG"),
            Ok(v) => command.env("LANCET_LOG", v),
            Err(_) => command.env("LANCET_LOG", "error"),
        };
        let mut child = command
            .args(["serve", "--addr", "127.0.0.1:0", "--data", data])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lancet");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("lancet exited before listening: {:?}", child.wait());
            }
            if let Some(base) = line.trim().strip_prefix("listening on ") {
                let base = base.to_string();
                std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
                return Served { child, base };
            }
        }
    }

    #[allow(dead_code)]
    pub fn peak_rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `lancet` binary built beside the running bench (`target/<profile>/examples/..`).
#[allow(dead_code)]
pub fn server_binary() -> std::path::PathBuf {
    // `LANCET_BENCH_SERVER=<path>`: another build of the server (before/after comparisons).
    if let Some(path) = std::env::var_os("LANCET_BENCH_SERVER") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    exe.parent()
        .and_then(|examples| examples.parent())
        .expect("the bench runs from target/<profile>/examples")
        .join("lancet")
}

pub fn client(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .pool_max_idle_per_host(256)
        .build()
        .unwrap()
}
