//! Embeddings by a model the host runs: `embed("minilm", &texts)` from inside a UDF. The
//! guest keeps its own text preparation (joining fields, cleaning, chunking) and whatever it
//! does with the vectors; tokenising and the model run on the host, under the server's limits
//! for the tenant. Registering models is the server's (`POST /v1/model/{name}/create`).

/// Vectors from one [`embed`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Length of each vector.
    pub dimension: usize,
    /// The vectors' values, row after row (`texts.len() * dimension`).
    pub values: Vec<f32>,
}

impl Embeddings {
    /// Row `i`'s vector.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.dimension..(i + 1) * self.dimension]
    }

    /// How many vectors.
    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.dimension).unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The request the host's `lancet.embed` import reads: the model name's length (u32 LE) and
/// bytes, the number of texts (u32 LE), then each text's length (u32 LE) and bytes.
pub fn encode_request(model: &str, texts: &[&str]) -> Vec<u8> {
    let size = 8 + model.len() + texts.iter().map(|t| 4 + t.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(model.len() as u32).to_le_bytes());
    out.extend_from_slice(model.as_bytes());
    out.extend_from_slice(&(texts.len() as u32).to_le_bytes());
    for t in texts {
        out.extend_from_slice(&(t.len() as u32).to_le_bytes());
        out.extend_from_slice(t.as_bytes());
    }
    out
}

/// Decodes the host's answer: the dimension (u32 LE) then f32 LE values.
pub fn decode_answer(bytes: &[u8], texts: usize) -> Result<Embeddings, String> {
    let (head, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or("embed: the host's answer is too short")?;
    let dimension = u32::from_le_bytes(*head) as usize;
    if rest.len() != texts * dimension * 4 {
        return Err(format!(
            "embed: the host answered {} bytes for {texts} vectors of {dimension}",
            rest.len()
        ));
    }
    let values = rest
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Embeddings { dimension, values })
}

/// Embeds `texts` with the tenant's registered model `model`, one vector each, in order.
/// Errors are the host's message (no such model, a text over the limits, the tenant's
/// budget spent, the model past its deadline).
pub fn embed(model: &str, texts: &[&str]) -> Result<Embeddings, String> {
    #[cfg(target_arch = "wasm32")]
    {
        #[link(wasm_import_module = "lancet")]
        unsafe extern "C" {
            #[link_name = "embed"]
            fn host_embed(ptr: *const u8, len: usize) -> i64;
            #[link_name = "embed_take"]
            fn host_embed_take(ptr: *mut u8, len: usize) -> i32;
        }
        let request = encode_request(model, texts);
        // SAFETY: the host reads `len` bytes at `ptr` of this instance's memory, and writes
        // exactly the staged length into the buffer we allocated for it.
        let staged = unsafe { host_embed(request.as_ptr(), request.len()) };
        let mut answer = vec![0u8; staged.unsigned_abs() as usize];
        if unsafe { host_embed_take(answer.as_mut_ptr(), answer.len()) } != 0 {
            return Err("embed: the host's answer could not be read".into());
        }
        if staged < 0 {
            return Err(String::from_utf8_lossy(&answer).into_owned());
        }
        decode_answer(&answer, texts.len())
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (model, texts);
        Err("embed: models run only inside a Lancet server (a wasm32 guest)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode_and_lengths_are_checked() {
        let mut bytes = 2u32.to_le_bytes().to_vec();
        for v in [1.0f32, 2.0, 3.0, 4.0] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let e = decode_answer(&bytes, 2).unwrap();
        assert_eq!((e.len(), e.row(1)), (2, &[3.0f32, 4.0][..]));
        assert!(decode_answer(&bytes, 3).is_err());
        assert!(decode_answer(&[1], 0).is_err());
        assert!(embed("m", &["x"]).is_err());
    }
}
