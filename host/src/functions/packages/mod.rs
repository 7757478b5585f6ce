//! Pure-Python pip packages for registered Functions, from the package index the server is
//! configured with (`--package-index`, a PEP 503 "simple" index such as
//! `https://pypi.org/simple/` or a mirror). A Function build resolves its requirements and
//! their dependencies (PEP 508 markers evaluated for the sandbox's CPython on WASI), takes each
//! project's newest pure-Python wheel that satisfies every requirement on it, checks its
//! sha256 against the index, and ships its files with the Function: the runner imports them
//! from memory. Resolution is greedy (no backtracking): a later requirement that the version
//! already chosen does not satisfy is an error naming both. Anything that is not a pure-Python
//! wheel (native wheels, source distributions) is refused by name.

mod index;
mod wheel;

use std::collections::{BTreeMap, VecDeque};
use std::str::FromStr;
use std::time::Duration;

use pep508_rs::pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{
    ExtraName, MarkerEnvironment, MarkerEnvironmentBuilder, Requirement, VersionOrUrl,
};
use url::Url;

use crate::error::{ApiError, ApiResult};
use index::Listed;
use wheel::WheelName;

/// Projects one Function may bring in, dependencies included.
const MAX_PROJECTS: usize = 64;
/// A project page or a wheel larger than this is refused.
const MAX_DOWNLOAD: usize = 64 << 20;

/// What a Function's requirements resolved to.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Every wheel's importable files, by path from the import root.
    pub files: Vec<(String, Vec<u8>)>,
    /// `name==version` for each project, in the order they were resolved.
    pub pins: Vec<String>,
}

/// The configured package index.
pub struct PackageIndex {
    base: Url,
    client: reqwest::Client,
}

/// In the refusal of a package only native wheels provide: what tells the build job to try the
/// native tier instead (the message is the one place the reason travels with the error).
const NATIVE_ONLY: &str = "has no pure-Python wheel (only native wheels)";

/// Whether `e` refused a package because only native wheels provide it.
pub fn needs_native(e: &ApiError) -> bool {
    e.message.contains(NATIVE_ONLY)
}

fn refuse(what: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(what.to_string())
}

/// The marker environment of the sandbox's interpreter (`python`: its `sys.version`).
fn environment(python: &str) -> ApiResult<MarkerEnvironment> {
    let full = python.split_whitespace().next().unwrap_or(python);
    let short = full.split('.').take(2).collect::<Vec<_>>().join(".");
    MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
        implementation_name: "cpython",
        implementation_version: full,
        os_name: "posix",
        platform_machine: "wasm32",
        platform_python_implementation: "CPython",
        platform_release: "",
        platform_system: "WASI",
        platform_version: "",
        python_full_version: full,
        python_version: &short,
        sys_platform: "wasi",
    })
    .map_err(|e| ApiError::internal(format!("the sandbox's Python version {python:?}: {e}")))
}

/// A requirement as a Function declares it (`name`, `name==1.2`, `name[extra]>=1; marker`).
/// Direct URLs are refused: packages come from the configured index only.
pub fn parse_requirement(text: &str) -> ApiResult<Requirement> {
    let r = Requirement::from_str(text)
        .map_err(|e| refuse(format!("pip requirement {text:?}: {e}")))?;
    if matches!(r.version_or_url, Some(VersionOrUrl::Url(_))) {
        return Err(refuse(format!(
            "pip requirement {text:?}: direct URLs are not supported; packages come from the \
             server's package index"
        )));
    }
    Ok(r)
}

fn specifiers(r: &Requirement) -> VersionSpecifiers {
    match &r.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(s)) => s.clone(),
        _ => VersionSpecifiers::empty(),
    }
}

struct Wanted {
    requirement: Requirement,
    /// Who asked for it (`requested` or `name==version`), for messages.
    by: String,
}

impl PackageIndex {
    pub fn new(url: &str) -> Result<Self, String> {
        let mut base =
            Url::parse(url).map_err(|e| format!("--package-index {url:?} is not a URL: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(format!(
                "--package-index {url:?}: only http(s) indexes are supported"
            ));
        }
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("lancet/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("package index client: {e}"))?;
        Ok(Self { base, client })
    }

    pub fn url(&self) -> &str {
        self.base.as_str()
    }

    async fn get(&self, url: &Url, what: &str) -> ApiResult<Vec<u8>> {
        let failed = |e: String| refuse(format!("the package index could not give {what}: {e}"));
        let resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(refuse(format!(
                "{what} is not on the package index {}",
                self.base
            )));
        }
        if !resp.status().is_success() {
            return Err(failed(format!("{} from {url}", resp.status())));
        }
        if resp
            .content_length()
            .is_some_and(|n| n as usize > MAX_DOWNLOAD)
        {
            return Err(failed(format!("over {MAX_DOWNLOAD} bytes")));
        }
        let bytes = resp.bytes().await.map_err(|e| failed(e.to_string()))?;
        if bytes.len() > MAX_DOWNLOAD {
            return Err(failed(format!("over {MAX_DOWNLOAD} bytes")));
        }
        Ok(bytes.to_vec())
    }

    /// Resolve `requirements` for the sandbox's interpreter (`python`: its `sys.version`) and
    /// fetch their wheels, holding at most `budget` bytes of files in all.
    pub async fn resolve(
        &self,
        requirements: &[String],
        python: &str,
        budget: usize,
    ) -> ApiResult<Resolved> {
        let env = environment(python)?;
        let python_version: Version = env.python_full_version().version.clone();
        let mut queue: VecDeque<Wanted> = VecDeque::new();
        for text in requirements {
            queue.push_back(Wanted {
                requirement: parse_requirement(text)?,
                by: "the Function".to_string(),
            });
        }
        // Chosen versions, and every requirement seen on each project (checked as chosen).
        let mut chosen: BTreeMap<String, Version> = BTreeMap::new();
        let mut out = Resolved::default();
        let mut used = 0usize;
        while let Some(Wanted { requirement, by }) = queue.pop_front() {
            let name = requirement.name.to_string();
            let wanted = specifiers(&requirement);
            if let Some(version) = chosen.get(&name) {
                if !wanted.contains(version) {
                    return Err(refuse(format!(
                        "pip packages conflict: {name}=={version} was chosen, but {by} requires \
                         {name}{wanted}"
                    )));
                }
                continue;
            }
            if chosen.len() >= MAX_PROJECTS {
                return Err(refuse(format!(
                    "the Function's pip packages bring in over {MAX_PROJECTS} projects"
                )));
            }
            let page_url = self
                .base
                .join(&format!("{name}/"))
                .map_err(|e| refuse(format!("pip package {name}: {e}")))?;
            let page = self
                .get(&page_url, &format!("pip package '{name}'"))
                .await?;
            let listed = index::parse(&page_url, &String::from_utf8_lossy(&page));
            let pick = choose(&name, &listed, &wanted, &python_version)?;
            let (file, version) = pick;
            let bytes = self.get(&file.url, &file.filename).await?;
            if let Some(expected) = &file.sha256 {
                let got = lancet_udf::sha256_hex(&bytes);
                if !got.eq_ignore_ascii_case(expected) {
                    return Err(refuse(format!(
                        "{}: sha256 {got} does not match the index's {expected}",
                        file.filename
                    )));
                }
            }
            let contents = wheel::unpack(&bytes, budget.saturating_sub(used))
                .map_err(|e| refuse(format!("pip package {name} ({}): {e}", file.filename)))?;
            used += contents
                .files
                .iter()
                .map(|(p, d)| p.len() + d.len())
                .sum::<usize>();
            let extras: Vec<ExtraName> = requirement.extras.clone();
            for text in &contents.requires {
                let dep = Requirement::from_str(text)
                    .map_err(|e| refuse(format!("{name} {version} requires {text:?}: {e}")))?;
                if dep.marker.evaluate(&env, &extras) {
                    queue.push_back(Wanted {
                        requirement: dep,
                        by: format!("{name}=={version}"),
                    });
                }
            }
            out.files.extend(contents.files);
            out.pins.push(format!("{name}=={version}"));
            chosen.insert(name, version);
        }
        Ok(out)
    }
}

/// The newest pure-Python wheel of `name` that `wanted` admits and the sandbox's Python can
/// run; a clear refusal naming what there is otherwise.
fn choose<'a>(
    name: &str,
    listed: &'a [Listed],
    wanted: &VersionSpecifiers,
    python: &Version,
) -> ApiResult<(&'a Listed, Version)> {
    // Pre-releases only when a specifier names one (PEP 440).
    let pre_ok = wanted.iter().any(|s| s.version().any_prerelease());
    let mut matching_versions = 0;
    let mut best: Option<(&Listed, Version)> = None;
    for file in listed.iter().filter(|f| !f.yanked) {
        let Some(w) = WheelName::parse(&file.filename) else {
            continue;
        };
        if !wanted.contains(&w.version) || (w.version.any_prerelease() && !pre_ok) {
            continue;
        }
        if let Some(rp) = &file.requires_python
            && VersionSpecifiers::from_str(rp).is_ok_and(|s| !s.contains(python))
        {
            continue;
        }
        matching_versions += 1;
        if w.pure && best.as_ref().is_none_or(|(_, v)| w.version > *v) {
            best = Some((file, w.version));
        }
    }
    best.ok_or_else(|| {
        let wanted_text = if wanted.is_empty() {
            String::new()
        } else {
            wanted.to_string()
        };
        if matching_versions > 0 {
            refuse(format!(
                "pip package {name}{wanted_text} {NATIVE_ONLY}: Lancet's Wasm sandbox runs pure \
                 Python only (a tenant with the native Python tier runs such Functions there: \
                 docs/native-python.md)"
            ))
        } else if listed.iter().any(|f| !f.filename.ends_with(".whl")) {
            refuse(format!(
                "pip package {name}{wanted_text} has no wheel for Python {python} (only source \
                 distributions, which Lancet does not build)"
            ))
        } else {
            refuse(format!(
                "pip package {name}{wanted_text}: no version on the index matches"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(filename: &str, requires_python: Option<&str>, yanked: bool) -> Listed {
        Listed {
            filename: filename.to_string(),
            url: Url::parse(&format!("http://i.test/{filename}")).unwrap(),
            sha256: None,
            requires_python: requires_python.map(str::to_string),
            yanked,
        }
    }

    #[test]
    fn the_newest_admissible_pure_wheel_is_chosen() {
        let files = vec![
            listed("tiny-1.0-py3-none-any.whl", None, false),
            listed("tiny-1.5-py3-none-any.whl", None, false),
            listed("tiny-2.0-py3-none-any.whl", Some(">=3.20"), false),
            listed("tiny-1.9-py3-none-any.whl", None, true),
            listed("tiny-1.8rc1-py3-none-any.whl", None, false),
            listed(
                "tiny-1.7-cp314-cp314-manylinux_2_17_x86_64.whl",
                None,
                false,
            ),
            listed("tiny-1.6.tar.gz", None, false),
        ];
        let py: Version = "3.14.0".parse().unwrap();
        let any = VersionSpecifiers::empty();
        assert_eq!(
            choose("tiny", &files, &any, &py).unwrap().1.to_string(),
            "1.5"
        );
        let below: VersionSpecifiers = "<1.5".parse().unwrap();
        assert_eq!(
            choose("tiny", &files, &below, &py).unwrap().1.to_string(),
            "1.0"
        );
        let pre: VersionSpecifiers = ">=1.8rc1".parse().unwrap();
        assert_eq!(
            choose("tiny", &files, &pre, &py).unwrap().1.to_string(),
            "1.8rc1"
        );
        let native: VersionSpecifiers = "==1.7".parse().unwrap();
        let e = choose("tiny", &files, &native, &py).unwrap_err().message;
        assert!(e.contains("no pure-Python wheel"), "{e}");
        let sdist: VersionSpecifiers = "==1.6".parse().unwrap();
        let e = choose("tiny", &files, &sdist, &py).unwrap_err().message;
        assert!(e.contains("source distributions"), "{e}");
    }

    #[test]
    fn markers_are_evaluated_for_cpython_on_wasi() {
        let env = environment("3.14.0 (main, ...) [Clang 20]").unwrap();
        let parse = |t: &str| parse_requirement(t).unwrap();
        let yes = parse("a; python_version >= '3.8' and sys_platform == 'wasi'");
        let no = parse("b; python_version < '3.8'");
        let extra = parse("c; extra == 'fast'");
        assert!(yes.marker.evaluate(&env, &[]));
        assert!(!no.marker.evaluate(&env, &[]));
        assert!(!extra.marker.evaluate(&env, &[]));
        let fast = ExtraName::from_str("fast").unwrap();
        assert!(extra.marker.evaluate(&env, &[fast]));
        assert!(parse_requirement("x @ https://example.test/x.whl").is_err());
    }
}
