//! A cheap "has this table changed?" on a local root: every commit adds a file to the
//! table's `_versions` directory, so the directory's mtime (one `stat`) moves with it, where
//! lance's own check reads the whole directory (one entry per version kept).
//!
//! File times come from a coarse clock (Linux advances them in ticks of 1-10 ms): a commit
//! in the same tick as the check that saw the previous time leaves the time unchanged. So a
//! time is trusted as a stamp only once it is [`GRACE`] older than the moment it was read:
//! every later change then shows as a newer time. A time with no fraction of a second is never
//! trusted: the filesystem may keep whole seconds only, and then a change within the same
//! second would not show.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How much older than its reading a directory time must be to be trusted.
pub const GRACE: Duration = Duration::from_millis(100);

/// `_versions` of the dataset at `uri` when it is on a local filesystem.
pub fn versions_dir(uri: &str) -> Option<PathBuf> {
    let path = uri.strip_prefix("file://").unwrap_or(uri);
    (!path.contains("://")).then(|| Path::new(path).join("_versions"))
}

/// The time `dir` last changed, read now, and whether it is old enough to be a stamp.
pub fn read(dir: &Path) -> Option<(SystemTime, bool)> {
    let now = SystemTime::now();
    let modified = std::fs::metadata(dir).and_then(|m| m.modified()).ok()?;
    let fine = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() != 0);
    let settled = fine && now.duration_since(modified).is_ok_and(|age| age >= GRACE);
    Some((modified, settled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_uris_have_a_versions_dir() {
        assert_eq!(
            versions_dir("/data/t.lance"),
            Some(PathBuf::from("/data/t.lance/_versions"))
        );
        assert_eq!(
            versions_dir("file:///data/t.lance"),
            Some(PathBuf::from("/data/t.lance/_versions"))
        );
        assert_eq!(versions_dir("s3://bucket/t.lance"), None);
    }

    #[test]
    fn a_fresh_change_is_not_settled_and_an_old_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let (_, settled) = read(dir.path()).unwrap();
        assert!(!settled, "a directory made just now is not a stamp yet");
        let old = SystemTime::now() - Duration::from_millis(5_250);
        std::fs::File::open(dir.path())
            .unwrap()
            .set_modified(old)
            .unwrap();
        let (t, settled) = read(dir.path()).unwrap();
        assert!(settled);
        assert_eq!(t, old);
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        std::fs::File::open(dir.path())
            .unwrap()
            .set_modified(whole)
            .unwrap();
        assert!(
            !read(dir.path()).unwrap().1,
            "whole seconds may hide a change"
        );
        assert!(read(&dir.path().join("missing")).is_none());
    }
}
