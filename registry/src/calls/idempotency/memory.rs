//! [`MemoryIdempotency`]: idempotency keys in this process (embedded mode).
//!
//! At most `capacity` entries: when full, the oldest completed outcomes make
//! room (a call in progress is never forgotten; if every entry is one, the
//! claim fails with [`IdempotencyError::Full`]). Outcomes expire after the
//! retention, calls in progress after their `hold_for`. Entries are indexed
//! by [`IdempotencyKey::digest`], so their size does not depend on the key.
//! Waiting claims sleep on a watch channel of the running call, which carries
//! its outcome, or closes when the key is given back.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use super::{
    Claim, Finisher, IdempotencyError, IdempotencyKey, IdempotencyStore, StoredOutcome, Ticket,
};

type Digest = [u8; 32];

/// Idempotency keys in memory, bounded by an entry count.
pub struct MemoryIdempotency {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Mutex<Inner>,
    retention: Duration,
    capacity: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Digest, Entry>,
    /// Completed entries by expiry (and so by completion: one retention).
    done: BTreeMap<(Instant, u64), Digest>,
    /// Entries in progress by the end of their hold.
    running: BTreeMap<(Instant, u64), Digest>,
    /// Tokens of claims, and sequence numbers of outcomes.
    next: u64,
}

enum Entry {
    Running {
        fingerprint: String,
        token: u64,
        until: Instant,
        /// Carries the outcome; dropped unsent when the key is given back.
        outcome: watch::Sender<Option<StoredOutcome>>,
    },
    Done {
        fingerprint: String,
        outcome: StoredOutcome,
    },
}

impl MemoryIdempotency {
    /// A store keeping outcomes for `retention`, with at most `capacity`
    /// entries (at least one).
    pub fn new(retention: Duration, capacity: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner::default()),
                retention,
                capacity: capacity.max(1),
            }),
        }
    }

    /// Entries held now (outcomes and calls in progress), expired ones
    /// included until the next claim sweeps them.
    pub fn len(&self) -> usize {
        self.shared.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `now + duration`, or far in the future if that overflows.
fn later(now: Instant, duration: Duration) -> Instant {
    now.checked_add(duration)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

impl Inner {
    /// Forgets expired outcomes and calls held past their `hold_for` (whose
    /// waiters then wake up and claim again).
    fn sweep(&mut self, now: Instant) {
        for index in [&mut self.done, &mut self.running] {
            while let Some(first) = index.first_entry()
                && first.key().0 <= now
            {
                self.entries.remove(&first.remove());
            }
        }
    }

    /// Makes room for one entry: evicts the oldest outcome if full.
    fn make_room(&mut self, capacity: usize) -> Result<(), IdempotencyError> {
        while self.entries.len() >= capacity {
            let (_, digest) = self.done.pop_first().ok_or(IdempotencyError::Full)?;
            self.entries.remove(&digest);
        }
        Ok(())
    }

    /// Removes the entry of `digest` if it is the claim `token` in progress.
    fn take_running(&mut self, digest: &Digest, token: u64) -> Option<(String, Sender)> {
        match self.entries.get(digest) {
            Some(Entry::Running { token: t, .. }) if *t == token => {}
            _ => return None,
        }
        match self.entries.remove(digest) {
            Some(Entry::Running {
                fingerprint,
                until,
                outcome,
                ..
            }) => {
                self.running.remove(&(until, token));
                Some((fingerprint, outcome))
            }
            _ => None,
        }
    }
}

type Sender = watch::Sender<Option<StoredOutcome>>;

#[async_trait::async_trait]
impl IdempotencyStore for MemoryIdempotency {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &str,
        hold_for: Duration,
        wait_until: Instant,
    ) -> Result<Claim, IdempotencyError> {
        let digest = key.digest();
        loop {
            let (mut outcome, held_until) = {
                let mut inner = self.shared.lock();
                let now = Instant::now();
                inner.sweep(now);
                match inner.entries.get(&digest) {
                    Some(Entry::Done {
                        fingerprint: first,
                        outcome,
                    }) => {
                        return Ok(if first == fingerprint {
                            Claim::Replay(outcome.clone())
                        } else {
                            Claim::ArgumentsDiffer
                        });
                    }
                    Some(Entry::Running {
                        fingerprint: first,
                        until,
                        outcome,
                        ..
                    }) => {
                        if first != fingerprint {
                            return Ok(Claim::ArgumentsDiffer);
                        }
                        if now >= wait_until {
                            return Err(IdempotencyError::WaitTimedOut);
                        }
                        (outcome.subscribe(), *until)
                    }
                    None => {
                        inner.make_room(self.shared.capacity)?;
                        let token = inner.next;
                        inner.next += 1;
                        let until = later(now, hold_for);
                        inner.running.insert((until, token), digest);
                        inner.entries.insert(
                            digest,
                            Entry::Running {
                                fingerprint: fingerprint.to_owned(),
                                token,
                                until,
                                outcome: watch::channel(None).0,
                            },
                        );
                        return Ok(Claim::Run(Ticket::new(Box::new(MemoryFinisher {
                            shared: self.shared.clone(),
                            digest,
                            token,
                        }))));
                    }
                }
            };
            // Until the outcome, the key's release (the channel closes), or
            // the end of its hold (then the sweep above frees it).
            let wake = wait_until.min(held_until);
            match tokio::time::timeout_at(wake, outcome.wait_for(Option::is_some)).await {
                Ok(Ok(done)) => {
                    if let Some(done) = done.as_ref() {
                        return Ok(Claim::Replay(done.clone()));
                    }
                }
                Ok(Err(_released)) => {}
                Err(_elapsed) if wake >= wait_until => return Err(IdempotencyError::WaitTimedOut),
                Err(_held_too_long) => {}
            }
        }
    }
}

/// Finishes one claim of a [`MemoryIdempotency`], synchronously.
struct MemoryFinisher {
    shared: Arc<Shared>,
    digest: Digest,
    token: u64,
}

impl MemoryFinisher {
    fn release_sync(&self) {
        // Dropping the sender wakes the waiters, which claim again.
        let taken = self.shared.lock().take_running(&self.digest, self.token);
        drop(taken);
    }
}

#[async_trait::async_trait]
impl Finisher for MemoryFinisher {
    async fn complete(&self, outcome: StoredOutcome) {
        let mut inner = self.shared.lock();
        let Some((fingerprint, sender)) = inner.take_running(&self.digest, self.token) else {
            tracing::warn!("idempotency key held past its hold time: outcome not kept");
            return;
        };
        let now = Instant::now();
        let seq = inner.next;
        inner.next += 1;
        inner
            .done
            .insert((later(now, self.shared.retention), seq), self.digest);
        inner.entries.insert(
            self.digest,
            Entry::Done {
                fingerprint,
                outcome: outcome.clone(),
            },
        );
        sender.send_replace(Some(outcome));
    }

    async fn release(&self) {
        self.release_sync();
    }

    fn release_now(&self) {
        self.release_sync();
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
