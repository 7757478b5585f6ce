//! `embed`: a deterministic hashing-trick text embedding into `FixedSizeList<Float32, 32>`,
//! L2-normalised, so the column can be vector-searched. Each lowercase alphanumeric token adds
//! ±1 to one of 32 buckets, and each of its character trigrams ±0.5 (so near-spellings land
//! near each other). Text without tokens gives a null row (a zero vector has no direction).

use lancet_sdk::prelude::*;

pub const DIM: usize = 32;
const TOKEN_WEIGHT: f32 = 1.0;
const TRIGRAM_WEIGHT: f32 = 0.5;

/// Embeds text; hashes are computed while bytes stream past, so embedding a row allocates
/// nothing and touches each byte once.
#[derive(Default)]
pub struct Embedder {
    /// FNV state of the token so far.
    token_hash: u64,
    /// Bytes in the token so far (only 0, 1, 2 and "more" matter).
    token_len: usize,
    /// The token's last two bytes, for its trigrams.
    prev: [u8; 2],
    any: bool,
}

impl Embedder {
    /// Fills `out` (length [`DIM`], zeroed) with the embedding of `text`; false if it has no tokens.
    pub fn embed_into(&mut self, text: &str, out: &mut [f32]) -> bool {
        let out: &mut [f32; DIM] = out.try_into().expect("a row has DIM values");
        self.any = false;
        self.token_len = 0;
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            // ASCII is handled byte by byte; anything else is decoded as a char.
            let b = bytes[i];
            if b.is_ascii() {
                i += 1;
                if b.is_ascii_alphanumeric() {
                    self.push(b.to_ascii_lowercase(), out);
                    continue;
                }
            } else {
                let c = text[i..].chars().next().expect("i is on a char boundary");
                i += c.len_utf8();
                if c.is_alphanumeric() {
                    let mut buf = [0u8; 4];
                    for l in c.to_lowercase() {
                        for &b in l.encode_utf8(&mut buf).as_bytes() {
                            self.push(b, out);
                        }
                    }
                    continue;
                }
            }
            self.end_token(out);
        }
        self.end_token(out);
        let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt();
        if !self.any || norm == 0.0 {
            return false;
        }
        let scale = 1.0 / norm;
        out.iter_mut().for_each(|v| *v *= scale);
        true
    }

    /// Adds a byte to the current token, and the trigram it completes to `out`. (Every value
    /// added is a multiple of 0.5 far below 2^24, so f32 sums are exact in any order.)
    #[inline]
    fn push(&mut self, b: u8, out: &mut [f32; DIM]) {
        if self.token_len == 0 {
            self.token_hash = FNV_OFFSET;
        }
        self.token_hash = fnv_step(self.token_hash, b);
        if self.token_len >= 2 {
            let gram = fnv_step(
                fnv_step(fnv_step(FNV_OFFSET, self.prev[0]), self.prev[1]),
                b,
            );
            add(out, finish(gram) ^ 0x9e37_79b9_7f4a_7c15, TRIGRAM_WEIGHT);
        }
        self.prev = [self.prev[1], b];
        self.token_len += 1;
    }

    /// Adds the finished token (if any) to `out`.
    #[inline]
    fn end_token(&mut self, out: &mut [f32; DIM]) {
        if self.token_len > 0 {
            add(out, finish(self.token_hash), TOKEN_WEIGHT);
            self.token_len = 0;
            self.any = true;
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

#[inline]
fn fnv_step(h: u64, b: u8) -> u64 {
    (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
}

/// FNV-1a with a splitmix finaliser: stable across platforms and releases (unlike std's
/// hasher), which is what makes the embedding deterministic.
#[cfg(test)]
fn hash(bytes: &[u8]) -> u64 {
    finish(bytes.iter().fold(FNV_OFFSET, |h, &b| fnv_step(h, b)))
}

/// The splitmix finaliser over an FNV state.
#[inline]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[inline]
fn add(out: &mut [f32; DIM], h: u64, weight: f32) {
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

    /// The definition, written the obvious way: split into lowercase tokens, then add each
    /// token's hash and its byte trigrams' hashes.
    fn reference(text: &str) -> Option<Vec<f32>> {
        let mut out = [0f32; DIM];
        let tokens: Vec<Vec<u8>> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.chars()
                    .flat_map(char::to_lowercase)
                    .collect::<String>()
                    .into_bytes()
            })
            .collect();
        for t in &tokens {
            add(&mut out, hash(t), TOKEN_WEIGHT);
            for gram in t.windows(3) {
                add(&mut out, hash(gram) ^ 0x9e37_79b9_7f4a_7c15, TRIGRAM_WEIGHT);
            }
        }
        let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt();
        (!tokens.is_empty() && norm != 0.0).then(|| out.iter().map(|v| v / norm).collect())
    }

    #[test]
    fn streaming_hashes_match_the_definition() {
        for text in [
            "The quick brown fox",
            "a bb ccc dddd",
            "Crème brûlée, Déjà vu! Ñandú İstanbul ΣΊΣΥΦΟΣ",
            "x",
            "",
            "--",
            "WebAssembly2026 sandbox_index",
        ] {
            let got = vec_of(text);
            let want = reference(text);
            assert_eq!(got.is_some(), want.is_some(), "{text:?}");
            if let (Some(g), Some(w)) = (got, want) {
                for (a, b) in g.iter().zip(&w) {
                    assert!((a - b).abs() < 1e-6, "{text:?}: {g:?} vs {w:?}");
                }
            }
        }
    }
}
