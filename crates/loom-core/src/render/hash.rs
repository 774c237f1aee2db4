//! The render room's hasher: a small, fast one for keys the pipeline makes itself. Layout, costing
//! and the reducers all hash with it; it depends on nothing in the room, so none of them depends
//! on another for it.

/// A small, fast hasher for the memo's integer keys (SipHash's DoS resistance buys nothing for
/// keys the pipeline makes itself, and the memo is hit several thousand times per render).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = std::hash::BuildHasherDefault<Fx>;
