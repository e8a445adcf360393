//! `ralph completions SHELL` and `ralph man`: shell completion scripts
//! (clap_complete) and the man page (clap_mangen, roff), both generated
//! from the clap definitions of `cli` so they never drift from them.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;
use crate::error::{Error, Result};

/// `ralph completions bash|zsh|fish|elvish|powershell`: the script on stdout.
pub(crate) fn completions(shell: Shell) -> Result<i32> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ralph", &mut out);
    super::print_own(&String::from_utf8_lossy(&out))?;
    Ok(0)
}

/// `ralph man`: the man page (roff) on stdout, e.g. `ralph man > ralph.1`.
pub(crate) fn man() -> Result<i32> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Error::wrap("cannot render the man page", e))?;
    super::print_own(&String::from_utf8_lossy(&out))?;
    Ok(0)
}
