//! `.ralph/windows.json`: the context windows the agent reported for its
//! models, kept past the run that learnt them. They are facts about the
//! account's models, as the quota guard's reading is: a new run (`--fresh`
//! too) starts its meter on them instead of a guess by the model's name.
//! A parallel run's workers and a fleet worker's item loops share their
//! project's file (`RunOptions::home`).
//!
//! The file is a memory, never a requirement: one that cannot be read or
//! parsed is ignored (the caller says so), and the next learnt window
//! replaces it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::context::WindowSource;
use crate::error::Result;

const VERSION: u32 = 1;

/// The file's content: each model's window, the latest learnt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Windows {
    version: u32,
    models: BTreeMap<String, Learnt>,
}

/// One model's window and where it was learnt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Learnt {
    pub(crate) window: u64,
    /// A result's `modelUsage` (`result`) or a live report (`reported`).
    pub(crate) source: WindowSource,
    /// When (RFC 3339) and in which run.
    pub(crate) at: String,
    pub(crate) run_id: String,
}

impl Windows {
    /// The memory of the project at `root`: empty when there is none;
    /// `Err` says why the one there cannot be used.
    pub(crate) fn read(root: &Path) -> std::result::Result<Windows, String> {
        let path = super::Layout::new(root).windows();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Windows::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is not a valid memory of context windows ({e}): ignored, the next window the agent reports replaces it",
                path.display()
            )
        })
    }

    /// The window of each model.
    pub(crate) fn windows(&self) -> BTreeMap<String, u64> {
        self.models
            .iter()
            .map(|(m, l)| (m.clone(), l.window))
            .collect()
    }

    /// Take in what a meter learnt (`ContextMeter::learned_windows`);
    /// whether anything changed (a window already known as it is, is not).
    pub(crate) fn learn(
        &mut self,
        learned: &BTreeMap<String, (u64, WindowSource)>,
        at: &str,
        run_id: &str,
    ) -> bool {
        let mut changed = false;
        for (model, &(window, source)) in learned {
            if self.models.get(model).is_some_and(|l| l.window == window) {
                continue;
            }
            self.models.insert(
                model.clone(),
                Learnt {
                    window,
                    source,
                    at: at.to_string(),
                    run_id: run_id.to_string(),
                },
            );
            changed = true;
        }
        changed
    }

    pub(crate) fn write(&mut self, root: &Path) -> Result<()> {
        self.version = VERSION;
        let json = serde_json::to_string_pretty(self).expect("the windows serialise");
        super::write_atomic(&super::Layout::new(root).windows(), json.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learnt_windows_are_kept_and_a_bad_file_is_an_error_to_ignore() {
        let dir = tempfile::tempdir().unwrap();
        let file = super::super::Layout::new(dir.path()).windows();
        std::fs::create_dir(file.parent().unwrap()).unwrap();
        let learned =
            |w: u64, s: WindowSource| BTreeMap::from([("claude-opus-4-6".to_string(), (w, s))]);
        for (case, before, learn, changed, after) in [
            (
                "nothing yet",
                None,
                learned(1_000_000, WindowSource::Result),
                true,
                Some(1_000_000),
            ),
            (
                "the same again",
                Some(1_000_000),
                learned(1_000_000, WindowSource::Reported),
                false,
                Some(1_000_000),
            ),
            (
                "a new window",
                Some(1_000_000),
                learned(200_000, WindowSource::Result),
                true,
                Some(200_000),
            ),
            (
                "nothing learnt",
                Some(1_000_000),
                BTreeMap::new(),
                false,
                Some(1_000_000),
            ),
        ] {
            let mut w = Windows::default();
            if let Some(b) = before {
                w.learn(&learned(b, WindowSource::Result), "t0", "r0");
            }
            assert_eq!(w.learn(&learn, "t1", "r1"), changed, "{case}");
            assert_eq!(w.windows().get("claude-opus-4-6").copied(), after, "{case}");
        }

        // Absent: empty. Written, then read back whole.
        assert_eq!(Windows::read(dir.path()), Ok(Windows::default()));
        let mut w = Windows::default();
        w.learn(
            &learned(1_000_000, WindowSource::Result),
            "2026-11-27T16:00:00Z",
            "r1",
        );
        w.write(dir.path()).unwrap();
        assert_eq!(Windows::read(dir.path()).as_ref(), Ok(&w));

        // Corrupt or unreadable: an error the caller says and goes past.
        for bad in ["{not json", "{\"models\":{\"m\":{\"window\":\"big\"}}}", ""] {
            std::fs::write(&file, bad).unwrap();
            let why = Windows::read(dir.path()).unwrap_err();
            assert!(why.contains("not a valid memory"), "{bad:?}: {why}");
        }
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(
            Windows::read(dir.path())
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
