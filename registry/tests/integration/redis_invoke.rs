//! Distributed mode through `Invoke`: what agents see while Redis is away,
//! in degrade mode, and how many Redis round trips a call costs.
