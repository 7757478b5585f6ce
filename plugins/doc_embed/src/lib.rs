//! `doc_embed`: embeds documents with a model the host runs. The guest prepares the text
//! (its own rules, as a UDF author would have them): each row's input columns (a title, a
//! body, ...) joined with ". ", whitespace collapsed, cut to `max_chars`; then one `embed`
//! call for the whole batch. A row whose inputs are all null or blank gives a null vector.
//!
//! Config: `model` (the registered model's name, required), `dimension` (its vector length,
//! required: the column's type is known before any text is embedded), `max_chars` (default
//! 2000).

use lancet_sdk::prelude::*;

pub const DEFAULT_MAX_CHARS: usize = 2000;

struct Settings {
    model: String,
    dimension: usize,
    max_chars: usize,
}

fn settings(config: &Config) -> Result<Settings, UdfError> {
    let model = config
        .get("model")
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| udf_error!("config `model` names the registered model to embed with"))?
        .trim()
        .to_string();
    let dimension: usize = config
        .parse("dimension")?
        .ok_or_else(|| udf_error!("config `dimension` is the model's vector length"))?;
    if dimension == 0 {
        return Err(udf_error!("config `dimension` must be positive"));
    }
    let max_chars = config.parse("max_chars")?.unwrap_or(DEFAULT_MAX_CHARS);
    Ok(Settings {
        model,
        dimension,
        max_chars,
    })
}

/// One row's text: the non-blank parts joined with ". ", whitespace collapsed, at most
/// `max_chars` characters; `None` when nothing is left.
pub fn prepare(parts: &[Option<&str>], max_chars: usize) -> Option<String> {
    let mut out = String::new();
    for part in parts.iter().flatten() {
        let words: Vec<&str> = part.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str(". ");
        }
        out.push_str(&words.join(" "));
    }
    if out.is_empty() {
        return None;
    }
    Some(out.chars().take(max_chars).collect())
}

pub fn doc_embed(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let s = settings(config())?;
    let rows = batch.num_rows();
    let mut columns: Vec<Vec<Option<String>>> = Vec::new();
    for column in batch.columns() {
        let mut values = Vec::with_capacity(rows);
        for_each_str(column, |v| values.push(v.map(str::to_string)))?;
        columns.push(values);
    }
    let texts: Vec<Option<String>> = (0..rows)
        .map(|r| {
            let parts: Vec<Option<&str>> = columns.iter().map(|c| c[r].as_deref()).collect();
            prepare(&parts, s.max_chars)
        })
        .collect();
    let present: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
    let vectors = if present.is_empty() {
        None
    } else {
        let e = embed(&s.model, &present).map_err(|e| udf_error!("{e}"))?;
        if e.dimension != s.dimension {
            return Err(udf_error!(
                "model '{}' gives {} values per vector; config `dimension` says {}",
                s.model,
                e.dimension,
                s.dimension
            ));
        }
        Some(e)
    };
    let mut next = 0;
    let strings: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
    let array: ArrayRef = Arc::new(StringArray::from(strings));
    map_str_to_f32s(&array, s.dimension, |_, out| {
        if let Some(v) = &vectors {
            out.copy_from_slice(v.row(next));
            next += 1;
        }
        true
    })
}

fn init(config: &Config) -> Result<(), UdfError> {
    settings(config).map(drop)
}

export_init!(init);
export_udf!(doc_embed);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_prepared_as_documented() {
        assert_eq!(
            prepare(&[Some("  A  title "), None, Some("body\n\ttext")], 100).as_deref(),
            Some("A title. body text")
        );
        assert_eq!(prepare(&[Some("  "), None], 100), None);
        assert_eq!(prepare(&[Some("ééééé")], 3).as_deref(), Some("ééé"));
    }

    #[test]
    fn settings_need_a_model_and_dimension() {
        let c = |pairs: &[(&str, &str)]| {
            Config::new(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert!(settings(&c(&[("dimension", "4")])).is_err());
        assert!(settings(&c(&[("model", "m")])).is_err());
        assert!(settings(&c(&[("model", "m"), ("dimension", "0")])).is_err());
        let s = settings(&c(&[("model", "m"), ("dimension", "4")])).unwrap();
        assert_eq!(
            (s.model.as_str(), s.dimension, s.max_chars),
            ("m", 4, DEFAULT_MAX_CHARS)
        );
    }
}
