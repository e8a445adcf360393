//! The files ralph's own stdout and stderr write to (`nohup ralph run >
//! ralph.log &`): ralph's files, never the agent's progress, never committed.

use std::path::PathBuf;
use std::sync::OnceLock;

static OUTPUT_FILES: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Note the regular files ralph's stdout and stderr write to, once, at the
/// start of a run: they are ralph's files, never the agent's progress and
/// never committed.
pub fn remember_output_files() {
    OUTPUT_FILES.get_or_init(|| {
        let mut files: Vec<PathBuf> = [1, 2]
            .iter()
            .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
            .collect();
        files.dedup();
        files
    });
}

/// The files [`remember_output_files`] found (none before it ran).
pub fn output_files() -> &'static [PathBuf] {
    OUTPUT_FILES.get().map_or(&[], Vec::as_slice)
}
