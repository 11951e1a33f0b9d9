//! Loopback ports for servers that bind their own socket (`redis-server`,
//! a restarted registry on the same address).
//!
//! Binding port 0, reading the port and releasing it races with everything
//! else on the machine: the kernel hands the same range out to other
//! listeners and to every outgoing connection. The ports given here lie
//! below the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), which the kernel never
//! assigns by itself, so only a process that asks for that exact port can
//! take it. Each process starts at its own offset and never hands out a
//! port twice.

use std::{
    net::TcpListener,
    sync::atomic::{AtomicU32, Ordering},
};

/// Lowest port handed out.
const FLOOR: u32 = 10_000;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A loopback port that nothing listens on now and that the kernel will not
/// assign to anyone else. Panics if none is left.
pub fn reserved_port() -> u16 {
    let top = ephemeral_start().max(FLOOR + 1_000);
    let span = top - FLOOR;
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok(port) = u16::try_from(FLOOR + (offset + n) % span) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| reserved_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        let start = ephemeral_start();
        assert!(
            ports
                .iter()
                .all(|&p| u32::from(p) < start.max(FLOOR + 1_000))
        );
        assert!(ports.iter().all(|&p| u32::from(p) >= FLOOR));
    }
}
