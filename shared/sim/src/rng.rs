//! A small seeded random number generator (SplitMix64): the same seed gives the same
//! targets, duplicates and event ids, so a simulation can be run again exactly. Nothing
//! here needs cryptographic quality, and a dependency for twenty lines would be waste.

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `lo..=hi` (`lo` <= `hi`).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1).max(1) as u64) as i64
    }

    /// One of a fixed list of values, which the compiler knows is not empty: the
    /// generators' draws of a size or a shape.
    pub fn one_of<T: Copy, const N: usize>(&mut self, items: [T; N]) -> T {
        const { assert!(N > 0, "one_of needs at least one item") };
        items[self.below(N)]
    }

    /// One of `items`, or `None` when there is none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len()))
        }
    }

    /// A random (version 4) UUID, as EventBridge event ids are.
    pub fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence_and_another_seed_another() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..4).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn uuids_look_like_version_4_uuids() {
        let mut rng = Rng::new(1);
        let id = rng.uuid();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
    }

    #[test]
    fn unit_values_stay_in_range() {
        let mut rng = Rng::new(3);
        assert!(
            (0..1000)
                .map(|_| rng.unit())
                .all(|u| (0.0..1.0).contains(&u))
        );
        assert!(!rng.chance(0.0));
        assert!((0..100).all(|_| rng.below(3) < 3));
    }

    #[test]
    fn ranges_include_both_ends_and_fixed_lists_give_only_their_values() {
        let mut rng = Rng::new(5);
        let drawn: Vec<i64> = (0..200).map(|_| rng.range(3, 5)).collect();
        assert!(drawn.iter().all(|v| (3..=5).contains(v)));
        assert!(drawn.contains(&3) && drawn.contains(&5));
        assert!((0..50).all(|_| [10, 20].contains(&rng.one_of([10, 20]))));
    }
}
