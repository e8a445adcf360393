//! (placeholder until the module lands)
use std::path::PathBuf;
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    pub scenario: PathBuf,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub claude_args: Vec<String>,
}
pub fn run(_args: &SimArgs) -> crate::Result<i32> {
    Err(crate::Error::internal("sim not yet built"))
}
