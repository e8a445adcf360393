//! Ids that look like the real CLI's (uuids, `msg_…`, `toolu_…`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Random-looking ids without a rand dependency (splitmix64).
pub(crate) struct Ids {
    pub(crate) state: u64,
}

impl Ids {
    pub(crate) fn new() -> Ids {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ids {
            state: nanos
                ^ (u64::from(std::process::id()) << 32)
                ^ COUNTER.fetch_add(0x9E37_79B9, Ordering::Relaxed),
        }
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn hex20(&mut self) -> String {
        format!("{:016x}{:04x}", self.next(), self.next() & 0xffff)
    }

    pub(crate) fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            ((b >> 48) & 0x3fff) | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    pub(crate) fn msg_id(&mut self) -> String {
        format!("msg_{}", self.hex20())
    }

    pub(crate) fn tool_id(&mut self) -> String {
        format!("toolu_{}", self.hex20())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_the_real_ones() {
        let mut ids = Ids::new();
        let uuid = ids.uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert!(ids.msg_id().starts_with("msg_"));
        assert_eq!(ids.tool_id().len(), "toolu_".len() + 20);
        assert_ne!(ids.uuid(), ids.uuid());
    }
}
