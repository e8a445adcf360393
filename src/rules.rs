//! Pure judgements on what the agent did: whether it is going round in
//! circles (the circuit breaker), whether it claims completion, whether it
//! hit a usage limit and when that resets.
//!
//! ```text
//! rules.rs           this map
//! rules/
//!   breaker.rs       no progress, same error, failures, denials; closed/half-open/open
//!   completion.rs    <promise>TEXT</promise> in the agent's own final text
//!   fatal.rs         errors no session gets past: authentication, billing, cannot start
//!   limits.rs        usage limits in the agent's lines, reset times with time zones
//!   login.rs         a claude.ai login that may end before the run does (credential_expires_at)
//!   quota.rs         the quota guard: the 5-hour and weekly windows used, past their share
//! ```

pub(crate) mod breaker;
pub(crate) mod completion;
pub(crate) mod fatal;
pub(crate) mod limits;
pub(crate) mod login;
pub(crate) mod quota;
