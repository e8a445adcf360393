//! The subcommands other than the loop's core: each module loads what it
//! needs, does one thing, and returns an exit code.

mod control;
mod demo;
mod run;

pub use control::{checkpoint, stop};
pub use demo::demo;
pub use run::{load_config, run};
