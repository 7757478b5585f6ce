//! Functions' environments: their requirements installed by pip (native wheels allowed) into a
//! directory named by the hash of the request, built once, then shared read-only by every
//! worker of every function that asks for the same set.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::NativeError;

/// Where environments are built and how.
#[derive(Debug)]
pub struct Environments {
    root: PathBuf,
    installer: PathBuf,
    python_minor: String,
    index_url: Option<String>,
    base: Vec<String>,
    timeout: Duration,
    building: Mutex<()>,
}

/// Marks a finished environment (a directory without it is a build that did not end).
const COMPLETE: &str = ".lancet-complete";

impl Environments {
    /// Environments under `root` (created world-readable: sandboxed workers run as other
    /// uids), installed by `installer` (a Python with pip: `installer -m pip install`) for
    /// Python `python_minor` (`3.11`), from `index_url` (pip's default when `None`). Every
    /// environment holds `base` too (the worker needs pyarrow; pickled functions cloudpickle).
    pub fn new(
        root: &Path,
        installer: &Path,
        python_minor: &str,
        index_url: Option<String>,
        base: Vec<String>,
    ) -> Result<Self, NativeError> {
        std::fs::create_dir_all(root)?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))?;
        Ok(Environments {
            root: root.to_path_buf(),
            installer: installer.to_path_buf(),
            python_minor: python_minor.to_string(),
            index_url,
            base,
            timeout: Duration::from_secs(900),
            building: Mutex::new(()),
        })
    }

    /// The environment holding `requirements` (pip requirement specifiers such as
    /// `numpy==2.1.3` or `pandas>=2`), built now if it is not yet. Blocking (pip runs).
    pub fn ensure(&self, requirements: &[String]) -> Result<PathBuf, NativeError> {
        let mut all: Vec<String> = Vec::new();
        for r in self.base.iter().chain(requirements) {
            let r = r.trim();
            check_requirement(r)?;
            if !all.iter().any(|a| a == r) {
                all.push(r.to_string());
            }
        }
        all.sort();
        let mut h = Sha256::new();
        h.update(self.python_minor.as_bytes());
        h.update([0]);
        h.update(self.index_url.as_deref().unwrap_or("").as_bytes());
        for r in &all {
            h.update([0]);
            h.update(r.as_bytes());
        }
        let dir = self.root.join(&hex::encode(h.finalize())[..24]);
        if dir.join(COMPLETE).exists() {
            return Ok(dir);
        }
        // One build at a time in this process; another replica building the same set wins or
        // loses the final rename, with the same content either way.
        let _one = self.building.lock().unwrap_or_else(|p| p.into_inner());
        if dir.join(COMPLETE).exists() {
            return Ok(dir);
        }
        let tmp = tempfile::Builder::new()
            .prefix(".building-")
            .tempdir_in(&self.root)?;
        self.pip(tmp.path(), &all)?;
        std::fs::write(tmp.path().join(COMPLETE), all.join("\n"))?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
        let built = tmp.keep();
        if let Err(e) = std::fs::rename(&built, &dir) {
            let _ = std::fs::remove_dir_all(&built);
            if !dir.join(COMPLETE).exists() {
                return Err(e.into());
            }
        }
        Ok(dir)
    }

    /// What an environment built by [`Environments::ensure`] holds, as `name==version`
    /// (from pip's `*.dist-info` directories), sorted.
    pub fn installed(dir: &Path) -> Result<Vec<String>, NativeError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".dist-info")) else {
                continue;
            };
            // `name-version`: the name's own dashes are underscores in these directories.
            if let Some((project, version)) = stem.split_once('-') {
                out.push(format!("{project}=={version}"));
            }
        }
        out.sort();
        Ok(out)
    }

    fn pip(&self, target: &Path, requirements: &[String]) -> Result<(), NativeError> {
        let mut cmd = Command::new(&self.installer);
        cmd.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-input",
            "--disable-pip-version-check",
        ])
        .args([
            "--only-binary=:all:",
            "--python-version",
            &self.python_minor,
            "--target",
        ])
        .arg(target);
        if let Some(url) = &self.index_url {
            cmd.args(["--index-url", url]);
        }
        cmd.arg("--").args(requirements);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| NativeError::Environment(format!("{}: {e}", self.installer.display())))?;
        let mut stderr = child.stderr.take().expect("piped stderr");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        });
        let until = Instant::now() + self.timeout;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NativeError::Environment(format!(
                    "pip did not finish within {:?}",
                    self.timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let err = reader.join().unwrap_or_default();
        if !status.success() {
            let last: Vec<&str> = err
                .lines()
                .filter(|l| !l.trim().is_empty())
                .rev()
                .take(4)
                .collect();
            return Err(NativeError::Environment(
                last.into_iter().rev().collect::<Vec<_>>().join(" | "),
            ));
        }
        Ok(())
    }
}

/// A requirement must be a plain specifier: no pip options, paths, URLs or whitespace.
fn check_requirement(r: &str) -> Result<(), NativeError> {
    let ok = !r.is_empty()
        && r.len() <= 200
        && r.as_bytes()[0].is_ascii_alphanumeric()
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-[],=<>!~*;'\"".contains(&b))
        && !r.contains("://");
    if ok {
        Ok(())
    } else {
        Err(NativeError::Environment(format!(
            "'{r}' is not a requirement this server installs: name a package with an optional \
             version (e.g. 'numpy==2.1.3'); options, paths and URLs are refused"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::check_requirement;

    #[test]
    fn requirements_are_plain_specifiers() {
        for good in [
            "numpy",
            "numpy==2.1.3",
            "pandas>=2,<3",
            "requests[socks]~=2.0",
        ] {
            check_requirement(good).unwrap();
        }
        for bad in [
            "",
            "-r x",
            "--index-url=x",
            "git+https://x/y",
            "/tmp/x.whl",
            "a b",
            "numpy @ file:///x",
        ] {
            assert!(check_requirement(bad).is_err(), "{bad}");
        }
    }
}
