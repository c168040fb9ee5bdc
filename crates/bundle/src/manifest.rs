//! The bundle's check against its manifest, [`crate::MARKER`].

use crate::MARKER;
use std::path::Path;

/// The files every bundle holds, as its manifest names them.
pub const CORE_FILES: &[&str] = &["ab", "bench", "lib/libggml-base.so.0", "lib/libab_probe.so"];

/// Checks the bundle at `root` against its manifest: every file [`MARKER`] lists must be
/// there with its size (bytes) and sha256. Files the manifest does not list (what the tools
/// wrote under `target/`) are not looked at. About 40 MiB are hashed, a tenth of a second.
///
/// Errors: the manifest cannot be read or parsed, or files are missing or changed; the
/// message names the first few and says how to get a whole bundle again. A bundle copied in
/// part, or a library replaced in it, would otherwise run under the name of the commit the
/// manifest gives.
pub fn verify(root: &Path) -> Result<(), String> {
    let manifest = root.join(MARKER);
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("reading {}: {e}", manifest.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", manifest.display()))?;
    let files = json["files"]
        .as_array()
        .ok_or_else(|| format!("{} has no `files` list", manifest.display()))?;
    // What every bundle holds: a manifest without these is not one `ab bundle` wrote.
    for core in CORE_FILES {
        if !files.iter().any(|f| f["path"].as_str() == Some(core)) {
            return Err(format!(
                "{} does not list {core}, which every bundle holds",
                manifest.display()
            ));
        }
    }
    let mut bad = Vec::new();
    for f in files {
        let (Some(path), Some(bytes), Some(sha)) = (
            f["path"].as_str(),
            f["bytes"].as_u64(),
            f["sha256"].as_str(),
        ) else {
            return Err(format!(
                "{}: an entry without path, bytes and sha256: {f}",
                manifest.display()
            ));
        };
        let inside = Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            return Err(format!(
                "{}: the entry {path:?} is not a path inside the bundle",
                manifest.display()
            ));
        }
        let file = root.join(path);
        let found = match std::fs::metadata(&file) {
            Err(_) => Some("missing".to_string()),
            Ok(m) if !m.is_file() => Some("not a regular file".to_string()),
            Ok(m) if m.len() != bytes => {
                Some(format!("{} bytes, the manifest says {bytes}", m.len()))
            }
            Ok(_) => match filehash::sha256_file(&file) {
                Err(e) => Some(format!("unreadable: {e}")),
                Ok(h) if h != sha => Some(format!("sha256 {h}, the manifest says {sha}")),
                Ok(_) => None,
            },
        };
        if let Some(why) = found {
            bad.push(format!("{path}: {why}"));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let more = bad.len().saturating_sub(3);
    bad.truncate(3);
    Err(format!(
        "the bundle at {} does not match its manifest {MARKER}: {}{}; unpack it again from its \
         .tar.gz, or make a new one with `ab bundle` in a workspace",
        root.display(),
        bad.join("; "),
        if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::has_bundle_shape;

    #[test]
    fn a_bundle_is_checked_against_its_manifest() {
        let d = std::env::temp_dir().join(format!("bundle-verify-{}", std::process::id()));
        std::fs::create_dir_all(d.join("lib")).unwrap();
        std::fs::write(d.join("lib/libggml-base.so.0"), b"base").unwrap();
        std::fs::write(d.join("ab"), b"ab").unwrap();
        std::fs::write(d.join("bench"), b"bench").unwrap();
        std::fs::write(d.join("lib/libab_probe.so"), b"probe").unwrap();
        let entry = |p: &str, bytes: &[u8]| serde_json::json!({"path": p, "bytes": bytes.len(), "sha256": filehash::sha256_hex(bytes)});
        let core = [
            entry("ab", b"ab"),
            entry("bench", b"bench"),
            entry("lib/libggml-base.so.0", b"base"),
            entry("lib/libab_probe.so", b"probe"),
        ];
        let with = |extra: &[serde_json::Value]| {
            let mut files = core.to_vec();
            files.extend_from_slice(extra);
            let m = serde_json::json!({"commit": "x", "files": files});
            std::fs::write(d.join(MARKER), m.to_string()).unwrap();
        };
        with(&[]);
        assert_eq!(verify(&d), Ok(()));
        // A manifest that leaves out a core file, names a path outside the bundle, or lists
        // something that is not a regular file (a device would be read for ever).
        std::fs::write(d.join(MARKER), r#"{"files": []}"#).unwrap();
        assert!(verify(&d).unwrap_err().contains("does not list ab"));
        for outside in ["/etc/hostname", "../x", "lib/../../x"] {
            with(&[serde_json::json!({"path": outside, "bytes": 0, "sha256": "0"})]);
            let e = verify(&d).unwrap_err();
            assert!(e.contains("not a path inside the bundle"), "{e}");
        }
        std::fs::create_dir_all(d.join("sub")).unwrap();
        with(&[serde_json::json!({"path": "sub", "bytes": 4096, "sha256": "0"})]);
        assert!(verify(&d).unwrap_err().contains("sub: not a regular file"));
        with(&[]);
        assert_eq!(verify(&d), Ok(()));
        // Files the manifest does not list (the tools' output) are not looked at.
        std::fs::create_dir_all(d.join("target")).unwrap();
        std::fs::write(d.join("target/report.json"), b"{}").unwrap();
        assert_eq!(verify(&d), Ok(()));
        // A library replaced with one of the same size.
        std::fs::write(d.join("lib/libggml-base.so.0"), b"BASE").unwrap();
        let e = verify(&d).unwrap_err();
        assert!(
            e.contains("lib/libggml-base.so.0: sha256 ") && e.contains("the manifest says"),
            "{e}"
        );
        // A missing file, and one of another size: both named.
        std::fs::remove_file(d.join("ab")).unwrap();
        std::fs::write(d.join("lib/libggml-base.so.0"), b"based").unwrap();
        let e = verify(&d).unwrap_err();
        assert!(e.contains("ab: missing"), "{e}");
        assert!(
            e.contains("lib/libggml-base.so.0: 5 bytes, the manifest says 4"),
            "{e}"
        );
        std::fs::write(d.join(MARKER), "not json").unwrap();
        assert!(verify(&d).unwrap_err().contains("parsing"));
        // Without its manifest the folder still has a bundle's shape.
        std::fs::create_dir_all(d.join("cabi-tests")).unwrap();
        assert!(has_bundle_shape(&d));
        std::fs::remove_dir_all(d.join("cabi-tests")).unwrap();
        assert!(has_bundle_shape(&d), "lib/ alone is a part of a bundle");
        std::fs::remove_dir_all(d.join("lib")).unwrap();
        assert!(!has_bundle_shape(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
