//! Wheels (PEP 427): which a file name says is pure Python, and what one holds: the files
//! `import` finds (the archive's root and its `.data/purelib`), and its `Requires-Dist`.

use std::io::{Cursor, Read};

use pep508_rs::pep440_rs::Version;

/// A wheel's file name, split: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub version: Version,
    /// Whether every tag combination it names runs on any Python 3 (no ABI, any platform).
    pub pure: bool,
}

impl WheelName {
    pub fn parse(filename: &str) -> Option<Self> {
        let stem = filename.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        if parts.len() != 5 && parts.len() != 6 {
            return None;
        }
        let version = parts[1].parse().ok()?;
        let n = parts.len();
        let (python, abi, platform) = (parts[n - 3], parts[n - 2], parts[n - 1]);
        let pure = abi == "none"
            && platform == "any"
            && python
                .split('.')
                .any(|p| p == "py3" || p.starts_with("py3"));
        Some(Self { version, pure })
    }
}

/// What a wheel brings: its importable files (by path from the import root) and the
/// requirements its metadata declares.
#[derive(Debug, Default)]
pub struct Contents {
    pub files: Vec<(String, Vec<u8>)>,
    pub requires: Vec<String>,
}

/// Unpack `bytes` (a wheel) holding at most `budget` bytes in all. Native code (`.so`, `.pyd`,
/// `.dylib`, `.dll`) is refused: the sandbox runs Python only.
pub fn unpack(bytes: &[u8], budget: usize) -> Result<Contents, String> {
    let mut zip =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a wheel: {e}"))?;
    // The entry count comes from the archive's own directory: bounded before anything is read.
    if zip.len() > lancet_udf::MAX_FILES * 2 {
        return Err(format!(
            "it holds {} entries; at most {} files ship with a Function",
            zip.len(),
            lancet_udf::MAX_FILES
        ));
    }
    let mut out = Contents::default();
    let mut used = 0usize;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| format!("not a wheel: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry.name().to_string();
        let top = name.split('/').next().unwrap_or_default();
        let path = if top.ends_with(".dist-info") {
            // METADATA travels too: `importlib.metadata.version(...)` reads it.
            if !name.ends_with(".dist-info/METADATA") {
                continue;
            }
            name.clone()
        } else if top.ends_with(".data") {
            // Only purelib installs beside the packages; scripts, headers, data do not.
            match name.split_once("/purelib/") {
                Some((_, rest)) if !rest.is_empty() => rest.to_string(),
                _ => continue,
            }
        } else {
            name.clone()
        };
        if [".so", ".pyd", ".dylib", ".dll"]
            .iter()
            .any(|ext| path.ends_with(ext) || path.contains(&format!("{ext}.")))
        {
            return Err(format!(
                "{path} is native code: the sandbox runs pure Python only"
            ));
        }
        lancet_udf::check_python_file_path(&path)?;
        let size = entry.size();
        used = used
            .saturating_add(path.len())
            .saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        if used > budget {
            return Err(format!(
                "its files are over the limit of {budget} bytes in all"
            ));
        }
        // No more than the header declares, whatever the stream would inflate to.
        let mut data = Vec::with_capacity(size as usize);
        entry
            .by_ref()
            .take(size)
            .read_to_end(&mut data)
            .map_err(|e| format!("{path}: {e}"))?;
        if path.ends_with(".dist-info/METADATA") {
            out.requires = requires_dist(&String::from_utf8_lossy(&data));
        }
        out.files.push((path, data));
    }
    Ok(out)
}

/// The `Requires-Dist` lines of a core metadata file (RFC 822 headers, before the body).
fn requires_dist(metadata: &str) -> Vec<String> {
    metadata
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("Requires-Dist:"))
        .map(|r| r.trim().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn names_say_which_wheels_are_pure_python() {
        let w = WheelName::parse("tiny_pkg-1.2.0-py3-none-any.whl").unwrap();
        assert!(w.pure && w.version == "1.2.0".parse().unwrap());
        assert!(
            WheelName::parse("six-1.16.0-py2.py3-none-any.whl")
                .unwrap()
                .pure
        );
        assert!(WheelName::parse("x-1.0-1-py3-none-any.whl").unwrap().pure);
        assert!(
            !WheelName::parse("numpy-2.2.0-cp314-cp314-manylinux_2_17_x86_64.whl")
                .unwrap()
                .pure
        );
        assert!(!WheelName::parse("old-1.0-py2-none-any.whl").unwrap().pure);
        assert!(WheelName::parse("x-1.0.tar.gz").is_none());
    }

    fn wheel(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, text) in entries {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(text.as_bytes()).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn a_wheel_gives_its_importable_files_and_requirements() {
        let bytes = wheel(&[
            ("tiny/__init__.py", "X = 1\n"),
            ("tiny/data.txt", "hi"),
            ("tiny-1.0.data/purelib/extra_mod.py", "Y = 2\n"),
            ("tiny-1.0.data/scripts/tool", "#!/bin/sh"),
            (
                "tiny-1.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: tiny\nRequires-Dist: dep>=1\nRequires-Dist: extra-only; extra == \"x\"\n\nRequires-Dist: body, not a header\n",
            ),
        ]);
        let c = unpack(&bytes, 1 << 20).unwrap();
        let paths: Vec<&str> = c.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tiny/__init__.py",
                "tiny/data.txt",
                "extra_mod.py",
                "tiny-1.0.dist-info/METADATA"
            ]
        );
        assert_eq!(c.requires, ["dep>=1", "extra-only; extra == \"x\""]);
        assert!(unpack(&bytes, 10).unwrap_err().contains("over the limit"));
        let native = wheel(&[("fast/_speedups.cpython-314-wasm32-wasi.so", "")]);
        assert!(
            unpack(&native, 1 << 20)
                .unwrap_err()
                .contains("native code")
        );
    }
}
