//! The `embed` host import: a guest asks the host to embed texts with a model the host runs
//! (the server's model registry, behind [`HostEmbed`]), a batch per call.
//!
//! Guest ABI (module `lancet`), two calls so the guest allocates the answer itself:
//! - `embed(req_ptr, req_len) -> i64`: the request is the model name's length (u32 LE), its
//!   bytes, the number of texts (u32 LE), then each text's length (u32 LE) and bytes. The host
//!   runs the model and stages the answer. A result `>= 0` is the staged answer's length in
//!   bytes: the dimension (u32 LE) then the vectors' f32 LE values, row after row. A result
//!   `< 0` is minus the length of a staged UTF-8 error message.
//! - `embed_take(out_ptr, out_len) -> i32`: copies the staged bytes (exactly `out_len` of
//!   them) into guest memory; 0 on success, -1 when nothing of that length is staged or the
//!   range is outside the guest's memory.
//!
//! The epoch deadline cannot interrupt a host call: the model's own deadline bounds it, and
//! the time it takes is not counted against the guest's own limit (`engine::GuestClock`).

use std::sync::Arc;

use wasmtime::Caller;

use crate::instance::HostState;

/// Requests larger than this are refused before they are read.
pub const MAX_EMBED_REQUEST: usize = 16 << 20;

/// Runs models for guests. The server implements it over its model registry, applying the
/// tenant's share of model calls and tokens.
pub trait HostEmbed: Send + Sync {
    /// One vector per text: the dimension and the values, row after row; an error message
    /// the guest sees otherwise.
    fn embed(
        &self,
        tenant: &str,
        model: &str,
        texts: Vec<String>,
    ) -> Result<(usize, Vec<f32>), String>;
}

/// What a store knows to answer `embed`: who is calling and who runs models.
#[derive(Default, Clone)]
pub(crate) struct EmbedContext {
    pub(crate) embedder: Option<Arc<dyn HostEmbed>>,
    pub(crate) tenant: String,
    pub(crate) staged: Vec<u8>,
}

/// Parses a request: the model name and the texts.
fn parse_request(bytes: &[u8]) -> Result<(String, Vec<String>), String> {
    let mut at = 0usize;
    let u32_at = |at: &mut usize| -> Result<usize, String> {
        let b = bytes
            .get(*at..*at + 4)
            .ok_or("embed request: truncated length field")?;
        *at += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let text_at = |at: &mut usize, len: usize| -> Result<String, String> {
        let b = bytes
            .get(*at..at.saturating_add(len))
            .ok_or("embed request: a text runs past the request's end")?;
        *at += len;
        String::from_utf8(b.to_vec()).map_err(|_| "embed request: a text is not UTF-8".to_string())
    };
    let len = u32_at(&mut at)?;
    let model = text_at(&mut at, len)?;
    let count = u32_at(&mut at)?;
    // Each text takes at least its 4-byte length: a count beyond that is a lie.
    if count > (bytes.len() - at) / 4 {
        return Err(format!(
            "embed request: {count} texts cannot fit in the request"
        ));
    }
    let mut texts = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u32_at(&mut at)?;
        texts.push(text_at(&mut at, len)?);
    }
    if at != bytes.len() {
        return Err("embed request: bytes left over after the last text".into());
    }
    Ok((model, texts))
}

fn stage_error(caller: &mut Caller<'_, HostState>, message: String) -> i64 {
    let bytes = message.into_bytes();
    let len = bytes.len() as i64;
    caller.data_mut().embed.staged = bytes;
    -len
}

pub(crate) fn guest_embed(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) -> i64 {
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    if len > MAX_EMBED_REQUEST {
        return stage_error(
            &mut caller,
            format!("embed request of {len} bytes is over the {MAX_EMBED_REQUEST} allowed"),
        );
    }
    let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
        return stage_error(&mut caller, "the guest exports no memory".into());
    };
    let request = match memory.data(&caller).get(start..start.saturating_add(len)) {
        Some(bytes) => parse_request(bytes),
        None => Err("embed request lies outside the guest's memory".into()),
    };
    let (model, texts) = match request {
        Ok(r) => r,
        Err(e) => return stage_error(&mut caller, e),
    };
    let ctx = caller.data().embed.clone();
    let Some(embedder) = ctx.embedder else {
        return stage_error(&mut caller, "this server runs no embedding models".into());
    };
    let started = crate::engine::Mark::now();
    let answer = embedder.embed(&ctx.tenant, &model, texts);
    caller.data_mut().clock.add_host_time(started.elapsed());
    match answer {
        Ok((dimension, values)) => {
            let mut out = Vec::with_capacity(4 + values.len() * 4);
            out.extend_from_slice(&(dimension as u32).to_le_bytes());
            for v in values {
                out.extend_from_slice(&v.to_le_bytes());
            }
            let len = out.len() as i64;
            caller.data_mut().embed.staged = out;
            len
        }
        Err(e) => stage_error(&mut caller, e),
    }
}

pub(crate) fn guest_embed_take(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) -> i32 {
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    let staged = std::mem::take(&mut caller.data_mut().embed.staged);
    if staged.len() != len {
        return -1;
    }
    let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
        return -1;
    };
    match memory
        .data_mut(&mut caller)
        .get_mut(start..start.saturating_add(len))
    {
        Some(target) => {
            target.copy_from_slice(&staged);
            0
        }
        None => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_lies_are_refused() {
        let bytes = lancet_sdk::embed::encode_request("minilm", &["a cat", "", "ünï"]);
        assert_eq!(
            parse_request(&bytes).unwrap(),
            (
                "minilm".into(),
                vec!["a cat".into(), "".into(), "ünï".into()]
            )
        );
        let mut lying = lancet_sdk::embed::encode_request("m", &["x"]);
        lying[5..9].copy_from_slice(&u32::MAX.to_le_bytes()); // count
        assert!(parse_request(&lying).unwrap_err().contains("cannot fit"));
        assert!(parse_request(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(parse_request(&extra).unwrap_err().contains("left over"));
        assert!(parse_request(&[1, 0]).is_err());
    }
}
