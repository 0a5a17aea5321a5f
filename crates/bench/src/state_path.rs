//! Where `foliocache run` and `foliocache mount` keep a cache's
//! warm-restart state file by default: one per served directory (or set
//! of directories), under `$XDG_STATE_HOME/foliocache/` or
//! `~/.local/state/foliocache/`, named after the last directory and a
//! hash of the canonical paths, so that a run and a mount of the same
//! directory share it. `--state FILE` moves it, `--no-state` turns warm
//! restarts off.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

/// The options of warm restarts, shared by `run` and `mount`.
#[derive(Debug, Clone, Default, Args)]
pub struct StateArgs {
    /// The warm-restart state file: the list of cached ranges saved at
    /// exit (and every 30 s) and loaded at start (default: one per
    /// directory under $XDG_STATE_HOME/foliocache or
    /// ~/.local/state/foliocache).
    #[arg(long, value_name = "FILE", conflicts_with = "no_state")]
    pub state: Option<PathBuf>,

    /// No warm restarts: start with an empty cache, save no list.
    #[arg(long)]
    pub no_state: bool,
}

/// The directory of default state files, from `XDG_STATE_HOME` or `HOME`
/// (`None` when neither is set).
fn state_home(xdg: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    match (xdg, home) {
        (Some(x), _) if x.is_absolute() => Some(x.join("foliocache")),
        (_, Some(h)) if h.is_absolute() => Some(h.join(".local/state/foliocache")),
        _ => None,
    }
}

/// The default state file's name for the canonical directories `dirs`.
fn file_name(dirs: &[PathBuf]) -> String {
    // FNV-1a over the paths, NUL-separated: a stable name across runs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for d in dirs {
        for &b in d.as_os_str().as_encoded_bytes().iter().chain(&[0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let last: String = dirs
        .first()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{last}-{h:016x}.state")
}

impl StateArgs {
    /// The state file for a cache serving the canonical directories
    /// `dirs`: `--state`, else the default (its directory made), else
    /// `None` with `--no-state` or when no state directory can be named
    /// (said on stderr).
    ///
    /// # Errors
    /// The default directory cannot be made.
    pub fn resolve(&self, dirs: &[PathBuf]) -> Result<Option<PathBuf>> {
        if self.no_state {
            return Ok(None);
        }
        if let Some(p) = &self.state {
            return Ok(Some(std::path::absolute(p)?));
        }
        let xdg = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let Some(dir) = state_home(xdg.as_deref(), home.as_deref()) else {
            eprintln!(
                "foliocache: neither XDG_STATE_HOME nor HOME is set: no warm-restart state \
                 file (name one with --state)"
            );
            return Ok(None);
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("making the state directory {}", dir.display()))?;
        Ok(Some(dir.join(file_name(dirs))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_home_is_xdg_then_home() {
        let x = Path::new("/x");
        let h = Path::new("/h");
        assert_eq!(
            state_home(Some(x), Some(h)),
            Some(PathBuf::from("/x/foliocache"))
        );
        assert_eq!(
            state_home(None, Some(h)),
            Some(PathBuf::from("/h/.local/state/foliocache"))
        );
        assert_eq!(
            state_home(Some(Path::new("rel")), Some(h)),
            Some(PathBuf::from("/h/.local/state/foliocache")),
            "a relative XDG_STATE_HOME is ignored, as the spec says"
        );
        assert_eq!(state_home(None, None), None);
    }

    #[test]
    fn each_set_of_directories_has_its_own_file() {
        let a = file_name(&[PathBuf::from("/srv/db")]);
        let b = file_name(&[PathBuf::from("/srv/db2")]);
        let ab = file_name(&[PathBuf::from("/srv/db"), PathBuf::from("/srv/db2")]);
        assert!(a.starts_with("db-") && a.ends_with(".state"), "{a}");
        assert_ne!(a, b);
        assert_ne!(a, ab);
        assert_eq!(a, file_name(&[PathBuf::from("/srv/db")]), "stable");
        assert!(file_name(&[PathBuf::from("/a b/c:d")]).starts_with("c_d-"));
    }
}
