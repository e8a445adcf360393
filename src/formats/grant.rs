//! `.ralph/grant.json` in a worker's project: the number of sessions its
//! loop may start, written by the coordinator (`workers::grant` decides),
//! read by the loop before each session (`supervisor/grant.rs`).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The grant file's content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Grant {
    /// Sessions the worker's loop (this process of it) may start in all.
    pub(crate) sessions: u32,
}

impl Grant {
    /// The grant in the project at `dir`; None when there is none.
    pub(crate) fn read(dir: &Path) -> Option<Grant> {
        let bytes = std::fs::read(super::Layout::new(dir).grant()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub(crate) fn write(&self, dir: &Path) -> crate::error::Result<()> {
        let text = serde_json::to_string(self).expect("a grant serialises");
        super::write_atomic(&super::Layout::new(dir).grant(), text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grant_file_round_trips_and_its_absence_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Grant::read(dir.path()), None);
        std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
        Grant { sessions: 3 }.write(dir.path()).unwrap();
        assert_eq!(Grant::read(dir.path()), Some(Grant { sessions: 3 }));
    }
}
