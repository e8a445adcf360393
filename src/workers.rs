//! Many loops on one plan. `fleet`: many machines through the git remote
//! (issue 26); the parallel workers on one machine (issue 25) share this
//! folder.

pub(crate) mod fleet;
