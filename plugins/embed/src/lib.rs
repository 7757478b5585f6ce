//! `embed`: a deterministic hashing-trick text embedding into `FixedSizeList<Float32, 32>`,
//! L2-normalised, so the column can be vector-searched. Each lowercase alphanumeric token adds
//! ±1 to one of 32 buckets, and each of its character trigrams ±0.5 (so near-spellings land
//! near each other). Text without tokens gives a null row (a zero vector has no direction).

use lancet_sdk::prelude::*;

pub const DIM: usize = 32;
const TOKEN_WEIGHT: f32 = 1.0;
const TRIGRAM_WEIGHT: f32 = 0.5;

/// Reusable scratch space so embedding a row allocates nothing.
#[derive(Default)]
pub struct Embedder {
    token: Vec<u8>,
}

impl Embedder {
    /// Fills `out` (length [`DIM`], zeroed) with the embedding of `text`; false if it has no tokens.
    pub fn embed_into(&mut self, text: &str, out: &mut [f32]) -> bool {
        let mut any = false;
        self.token.clear();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            // ASCII is handled byte by byte; anything else is decoded as a char.
            let b = bytes[i];
            if b.is_ascii() {
                i += 1;
                if b.is_ascii_alphanumeric() {
                    self.token.push(b.to_ascii_lowercase());
                    continue;
                }
            } else {
                let c = text[i..].chars().next().expect("i is on a char boundary");
                i += c.len_utf8();
                if c.is_alphanumeric() {
                    let mut buf = [0u8; 4];
                    for l in c.to_lowercase() {
                        self.token
                            .extend_from_slice(l.encode_utf8(&mut buf).as_bytes());
                    }
                    continue;
                }
            }
            if !self.token.is_empty() {
                any = true;
                self.add_token(out);
            }
        }
        if !self.token.is_empty() {
            any = true;
            self.add_token(out);
        }
        let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt();
        if !any || norm == 0.0 {
            return false;
        }
        let scale = 1.0 / norm;
        out.iter_mut().for_each(|v| *v *= scale);
        true
    }

    /// Adds the current token (and its trigrams) to `out` and clears it.
    fn add_token(&mut self, out: &mut [f32]) {
        add(out, hash(&self.token), TOKEN_WEIGHT);
        for gram in self.token.windows(3) {
            add(out, hash(gram) ^ 0x9e37_79b9_7f4a_7c15, TRIGRAM_WEIGHT);
        }
        self.token.clear();
    }
}

/// FNV-1a with a splitmix finaliser: stable across platforms and releases (unlike std's
/// hasher), which is what makes the embedding deterministic.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn add(out: &mut [f32], h: u64, weight: f32) {
    let bucket = (h % DIM as u64) as usize;
    let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
    out[bucket] += sign * weight;
}

pub fn embed(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let mut embedder = Embedder::default();
    map_str_to_f32s(arg(batch, 0)?, DIM, |text, out| {
        embedder.embed_into(text, out)
    })
}

export_udf!(embed);

#[cfg(test)]
mod tests {
    use super::*;

    fn vec_of(s: &str) -> Option<Vec<f32>> {
        let mut out = vec![0.0; DIM];
        Embedder::default().embed_into(s, &mut out).then_some(out)
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn normalised_deterministic_and_similarity_preserving() {
        let a = vec_of("The quick brown fox").unwrap();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert_eq!(Some(a.clone()), vec_of("the QUICK brown fox!"));
        let near = vec_of("quick brown foxes").unwrap();
        let far = vec_of("database index compaction").unwrap();
        assert!(dot(&a, &near) > dot(&a, &far));
        assert_eq!(vec_of("  ...  "), None);
    }
}
