//! The schedule's generator, and what each schedule draws from it before it starts.

/// splitmix64: small, fast, and the same on every platform.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `lo..=hi`.
    pub(crate) fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `per_mille / 1000`.
    pub(crate) fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    pub(crate) fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// What one schedule draws before it starts: how hostile and how busy it is.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) steps: i64,
    pub(crate) max_delay: i64,
    pub(crate) drop: u64,
    pub(crate) min_insync: usize,
    pub(crate) lag: i64,
    pub(crate) produce: u64,
    pub(crate) read: u64,
    pub(crate) crash: u64,
    pub(crate) restart: u64,
    pub(crate) pause: u64,
    /// Pausing the node the metastore names leader, on top of `pause`.
    pub(crate) pause_leader: u64,
    /// A leader stalling right after it appended or served a fetch with batches: the
    /// worst moments, when only some replicas have the newest records.
    pub(crate) stall: u64,
    pub(crate) resume: u64,
    pub(crate) controller: u64,
    pub(crate) prefer: u64,
    pub(crate) isr_tick: u64,
    pub(crate) fsync: u64,
    pub(crate) max_batches: i64,
    /// An admin request to reassign the partition (or to cancel a reassignment).
    pub(crate) reassign: u64,
    /// Of those while one is in progress: cancelling it.
    pub(crate) cancel: u64,
    /// A node's disk lost (the node crashes and comes back on an empty data directory
    /// with a new id), when no acknowledged record is lost with it.
    pub(crate) wipe: u64,
}

impl Params {
    pub(crate) fn draw(rng: &mut Rng) -> Params {
        Params {
            steps: rng.between(150, 400),
            max_delay: rng.between(1, 4),
            drop: rng.pick(&[0, 0, 10, 50, 100]),
            min_insync: if rng.chance(800) { 2 } else { 1 },
            lag: rng.between(5, 14),
            produce: rng.between(200, 700) as u64,
            read: rng.between(100, 300) as u64,
            crash: rng.between(0, 15) as u64,
            restart: rng.between(80, 250) as u64,
            pause: rng.between(0, 20) as u64,
            pause_leader: rng.between(0, 40) as u64,
            stall: rng.pick(&[0, 0, 20, 50, 100]),
            resume: rng.between(30, 120) as u64,
            controller: rng.between(300, 1000) as u64,
            prefer: rng.between(0, 30) as u64,
            isr_tick: rng.between(200, 600) as u64,
            fsync: rng.between(300, 900) as u64,
            max_batches: rng.between(1, 20),
            reassign: rng.pick(&[0, 5, 10, 20, 40]),
            cancel: rng.between(0, 250) as u64,
            wipe: rng.pick(&[0, 0, 5, 10, 20]),
        }
    }
}
