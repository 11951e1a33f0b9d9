//! The call path: one `Invoke` from lookup to answer (`invoke`), its
//! attempts (`retry`) on the instance `balance` picks, through the
//! [`proxy`] to a sidecar; before it runs, the arguments checked by the
//! tool's compiled [`Entry`](crate::catalog::Entry), [`ratelimit`] and
//! [`idempotency`]; after, `call_log`'s one line.

pub(crate) mod balance;
pub(crate) mod call_log;
pub mod idempotency;
pub(crate) mod invoke;
pub mod proxy;
pub mod ratelimit;
pub(crate) mod retry;
pub(crate) mod tail;
