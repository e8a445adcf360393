//! The files ralph's own stdout and stderr write to (`nohup ralph run >
//! ralph.log &`, or through a pipe: `ralph run 2>&1 | tee ralph.log`):
//! ralph's files, never the agent's progress, never committed.
//!
//! A pipe is followed one step (Linux): the other processes that hold it
//! (the `tee`) are looked at, and the regular files they have open for
//! writing are taken as ralph's output (`platform::files_written_by`; on
//! macOS only a file ralph writes itself is recognised). A pseudo-terminal
//! is followed the same way to the process holding its other side (`script
//! -qfec 'ralph run' ralph.typescript`, whose typescript grows with every
//! line ralph prints; Linux). A reader that has not opened its
//! file yet when ralph starts (it starts beside ralph, and a loaded machine
//! may run it late) is found at the next look: each iteration looks again,
//! and a file once found stays ralph's.

use std::path::PathBuf;
use std::sync::Mutex;

static OUTPUT_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Note the regular files ralph's stdout and stderr write to, directly or
/// through a pipe, at the start of a run and again before each iteration:
/// they are ralph's files, never the agent's progress and never committed.
pub(crate) fn remember_output_files() {
    let mut found = Vec::new();
    for fd in [1, 2] {
        found.extend(crate::platform::files_written_by(fd));
    }
    let mut files = OUTPUT_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.extend(found);
    files.sort();
    files.dedup();
}

/// The files [`remember_output_files`] found so far (none before it ran).
pub(crate) fn output_files() -> Vec<PathBuf> {
    OUTPUT_FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}
