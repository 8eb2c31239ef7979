//! Container memory from cgroup v2 (the kernel's Documentation/admin-guide/cgroup-v2):
//! `memory.current / memory.max`, summed over the groups under the cgroup root that have a
//! limit — seed 003's container memory share `D_i`.
//!
//! A group whose `memory.max` reads `max` has no limit and is skipped (its use has nothing to
//! be a share of). A limited group's children live inside its limit, so the walk stops at the
//! first limited group of each branch: counting a child as well would count its memory twice.
//! The figure is `Σ current / Σ max` over those groups, the containers' memory as one pool;
//! with no limited group it is 0. Groups that vanish between the listing and the read (a
//! container stopping) or whose files are garbage are skipped.

use std::path::Path;

use super::{ParseError, share};

/// How deep the walk goes below the root; real hierarchies (systemd slices, a container
/// runtime's groups) are a handful of levels.
const MAX_DEPTH: usize = 8;

/// `memory.max`: `None` for `max` (no limit).
pub fn parse_max(text: &str) -> Result<Option<u64>, ParseError> {
    match text.trim() {
        "max" => Ok(None),
        value => value
            .parse()
            .map(Some)
            .map_err(|_| ParseError::new(format!("memory.max {value:?} is neither bytes nor max"))),
    }
}

/// `memory.current`, in bytes.
pub fn parse_current(text: &str) -> Result<u64, ParseError> {
    let value = text.trim();
    value
        .parse()
        .map_err(|_| ParseError::new(format!("memory.current {value:?} is not bytes")))
}

/// One limited group's use and limit, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub current: u64,
    pub max: u64,
}

/// `Σ current / Σ max`, clamped into [0, 1]; 0 without groups.
pub fn utilization(groups: &[Group]) -> f64 {
    let current: f64 = groups.iter().map(|g| g.current as f64).sum();
    let max: f64 = groups.iter().map(|g| g.max as f64).sum();
    share(current, max)
}

/// The outermost limited groups below `root` (the root itself has no `memory.max`). Fails
/// only when `root` cannot be listed.
pub fn scan(root: &Path) -> std::io::Result<Vec<Group>> {
    let mut groups = Vec::new();
    let entries = std::fs::read_dir(root)?;
    let mut pending: Vec<(std::path::PathBuf, usize)> = entries
        .filter_map(Result::ok)
        .map(|e| (e.path(), 1))
        .collect();
    while let Some((dir, depth)) = pending.pop() {
        // Only real directories: a symbolic link could lead the walk anywhere.
        let is_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir());
        if !is_dir {
            continue;
        }
        let read = |name: &str| std::fs::read_to_string(dir.join(name));
        let max = read("memory.max")
            .ok()
            .and_then(|t| parse_max(&t).ok())
            .flatten();
        if let Some(max) = max {
            if let Some(current) = read("memory.current")
                .ok()
                .and_then(|t| parse_current(&t).ok())
            {
                groups.push(Group { current, max });
            }
            continue;
        }
        if depth < MAX_DEPTH
            && let Ok(children) = std::fs::read_dir(&dir)
        {
            pending.extend(
                children
                    .filter_map(Result::ok)
                    .map(|e| (e.path(), depth + 1)),
            );
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_max("max\n"), Ok(None));
        assert_eq!(parse_max("1073741824\n"), Ok(Some(1 << 30)));
        assert!(parse_max("").is_err());
        assert!(parse_max("-1").is_err());
        assert!(parse_max("1G").is_err());
        assert_eq!(parse_current("4096\n"), Ok(4096));
        assert!(parse_current("lots").is_err());
        assert!(parse_current("").is_err());
    }

    #[test]
    fn summed_over_groups() {
        let groups = [
            Group {
                current: 100,
                max: 400,
            },
            Group {
                current: 300,
                max: 400,
            },
        ];
        assert_eq!(utilization(&groups), 0.5);
        assert_eq!(utilization(&[]), 0.0);
        let over = [Group {
            current: 900,
            max: 400,
        }];
        assert_eq!(utilization(&over), 1.0);
        let zero = [Group { current: 5, max: 0 }];
        assert_eq!(utilization(&zero), 0.0);
    }

    /// A scratch cgroup tree, removed when dropped.
    struct Tree(std::path::PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let root = std::env::temp_dir().join(format!(
                "fulcrum-agent-cgroup-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            Tree(root)
        }

        fn group(&self, path: &str, max: &str, current: &str) {
            let dir = self.0.join(path);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("memory.max"), max).unwrap();
            std::fs::write(dir.join("memory.current"), current).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn scan_counts_the_outermost_limited_groups() {
        let tree = Tree::new("scan");
        tree.group("system.slice", "max\n", "999999\n");
        tree.group("system.slice/web.service", "400\n", "100\n");
        // Inside a limited group: already counted by its parent.
        tree.group("system.slice/web.service/worker", "200\n", "50\n");
        tree.group("system.slice/db.service", "400\n", "300\n");
        tree.group("garbage", "lots\n", "1\n");
        tree.group("unlimited", "max\n", "5\n");
        let mut groups = scan(&tree.0).unwrap();
        groups.sort_by_key(|g| g.current);
        assert_eq!(
            groups,
            [
                Group {
                    current: 100,
                    max: 400
                },
                Group {
                    current: 300,
                    max: 400
                }
            ]
        );
        assert_eq!(utilization(&groups), 0.5);
    }

    #[test]
    fn scan_of_a_missing_root_fails() {
        assert!(scan(Path::new("/nonexistent/fulcrum-agent-cgroup")).is_err());
    }
}
