//! Lower-case hex sha256, the one digest every part of the project names files by: the pins
//! (`pins.toml`), the probe's records of mapped libraries, the harness's reports. Kept
//! free of other dependencies, since the probe that uses it is preloaded into every process
//! the harness runs.

use sha2::{Digest, Sha256};
use std::io::{self, Read};
use std::path::Path;

/// Hex sha256 (64 lower-case characters) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Hex sha256 of the file at `path`, read in 1 MiB chunks (a model file is not held in
/// memory). Errors are those of opening or reading the file.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(digest: &[u8]) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn known_digests() {
        assert_eq!(sha256_hex(b"abc"), ABC);
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn file_digest_equals_bytes_digest_across_chunks() {
        let dir = std::env::temp_dir().join(format!("filehash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("abc");
        std::fs::write(&small, b"abc").unwrap();
        assert_eq!(sha256_file(&small).unwrap(), ABC);
        // Larger than one read chunk, so the chunk loop is exercised.
        let big: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 251) as u8).collect();
        let big_path = dir.join("big");
        std::fs::write(&big_path, &big).unwrap();
        assert_eq!(sha256_file(&big_path).unwrap(), sha256_hex(&big));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_file_is_an_error() {
        let e = sha256_file(Path::new("/nonexistent/filehash")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
