//! Randomness for jitter and generated ids. With the clock pinned (tq_clock), draws come
//! from a hash of the pinned time and a salt taken from the store, so two copies of a store
//! running the same statements draw the same numbers (REP-01). Otherwise they are ambient.

use crate::sqlite::Conn;

/// A 64-bit draw; `salt` must differ between draws made at the same pinned time.
pub fn draw(conn: &Conn, salt: u64) -> u64 {
    match conn.clock.get() {
        Some(ms) => splitmix64((ms as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ splitmix64(salt)),
        None => rand::random(),
    }
}

/// A factor in [1 - spread, 1 + spread].
pub fn jitter(conn: &Conn, salt: u64, spread: f64) -> f64 {
    let unit = (draw(conn, salt) >> 11) as f64 / (1u64 << 53) as f64;
    1.0 - spread + 2.0 * spread * unit
}

/// SplitMix64's step: a fixed bijection that mixes every input bit into every output bit.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `tq_` + 26 Crockford base-32 characters: 48 bits of time, then 80 random bits.
pub fn job_id(ms: i64, hi: u64, lo: u64) -> String {
    let value: u128 = ((ms as u128 & 0xFFFF_FFFF_FFFF) << 80) | ((u128::from(hi) & 0xFFFF) << 64) | u128::from(lo);
    let mut out = String::with_capacity(29);
    out.push_str("tq_");
    for i in (0..26).rev() {
        out.push(CROCKFORD[((value >> (i * 5)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_and_have_the_reserved_prefix() {
        let a = job_id(1_000, u64::MAX, u64::MAX);
        let b = job_id(1_001, 0, 0);
        assert!(a < b);
        assert!(a.starts_with("tq_") && a.len() == 29);
    }

    #[test]
    fn splitmix_spreads() {
        assert_ne!(splitmix64(1), splitmix64(2));
    }
}
