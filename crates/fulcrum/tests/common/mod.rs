//! What the binary's test files share.

#![allow(dead_code)]

use std::path::PathBuf;

/// A fresh directory under the system's temporary one, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `fulcrum-{suite}-{pid}-{name}`, empty.
    pub fn new(suite: &str, name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("fulcrum-{suite}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
