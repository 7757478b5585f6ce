//! Checks an array decoded from a guest's output before anything reads it.
//!
//! The checks are arrow's `ArrayData::validate_full`, node by node, except for the values of
//! string arrays: arrow walks their offsets through a chain of `Result`-returning iterator
//! adapters and checks every boundary twice, which cost a string UDF as much as copying its
//! output (udf_bench, email_parts). Here one tight loop checks that the offsets never
//! decrease, stay within the text, and fall on character boundaries — a check skipped when
//! the text is all ASCII, as UDF output mostly is.

use arrow_buffer::ArrowNativeType;
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType};

/// `ArrayData::validate_full`: layout, null counts, child nullability and values, recursively.
pub(crate) fn validate_full(data: &ArrayData) -> Result<(), ArrowError> {
    data.validate()?;
    data.validate_nulls()?;
    let strings_ok = match data.data_type() {
        DataType::Utf8 => Some(utf8_ok::<i32>(data)),
        DataType::LargeUtf8 => Some(utf8_ok::<i64>(data)),
        _ => None,
    };
    // The fast check accepts only what arrow accepts; anything else gets arrow's own check,
    // which has the last word (it allows bytes outside every value not to be UTF-8) and
    // names the offending value.
    if strings_ok != Some(true) {
        data.validate_values()?;
    }
    for (i, child) in data.child_data().iter().enumerate() {
        validate_full(child).map_err(|e| {
            ArrowError::InvalidArgumentError(format!(
                "{} child #{i} invalid: {e}",
                data.data_type()
            ))
        })?;
    }
    Ok(())
}

/// Whether a string array's whole text is UTF-8 and its offsets delimit whole characters
/// within it. Its layout (buffer count and sizes) must already have passed
/// `ArrayData::validate`.
fn utf8_ok<O: ArrowNativeType>(data: &ArrayData) -> bool {
    let offsets = data.buffer::<O>(0);
    let Some(offsets) = offsets.get(..data.len() + 1) else {
        // Only an empty array may have no offsets at all.
        return data.is_empty() && offsets.is_empty();
    };
    let text = data.buffers()[1].as_slice();
    let ascii = text.is_ascii();
    if !ascii && std::str::from_utf8(text).is_err() {
        return false;
    }
    // Every offset is a boundary when the text is ASCII; otherwise, not a continuation byte
    // (an offset equal to the length is the end).
    let boundary = |at: usize| ascii || text.get(at).is_none_or(|&b| (b as i8) >= -0x40);
    let mut previous = 0;
    let mut ok = true;
    // No early exit: the loop stays branch-free, and a failure is rare (arrow's slower check
    // then decides).
    for offset in offsets {
        // A negative offset becomes usize::MAX and fails the range test.
        let at = offset.to_usize().unwrap_or(usize::MAX);
        ok &= previous <= at && at <= text.len() && boundary(at);
        previous = at;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, LargeStringArray, StringArray, StructArray};
    use arrow_buffer::Buffer;
    use arrow_schema::Field;
    use std::sync::Arc;

    fn utf8(offsets: &[i32], text: &[u8]) -> ArrayData {
        unsafe {
            ArrayData::new_unchecked(
                DataType::Utf8,
                offsets.len().saturating_sub(1),
                None,
                None,
                0,
                vec![
                    Buffer::from_slice_ref(offsets),
                    Buffer::from_slice_ref(text),
                ],
                vec![],
            )
        }
    }

    /// Agrees with arrow on every case, valid or not.
    #[test]
    fn string_checks_agree_with_arrow() {
        let cases: Vec<(&[i32], &[u8])> = vec![
            (&[0, 3, 5], b"abcde"),
            (&[0, 2, 4], "éé".as_bytes()),
            (&[0], b""),
            (&[2, 3], b"abc"),
            (&[0, 1, 4], "aéé".as_bytes()),
            // inside a character
            (&[0, 1, 3], "éé".as_bytes()),
            // decreasing
            (&[0, 3, 2], b"abc"),
            // past the end
            (&[0, 4], b"abc"),
            // negative
            (&[-1, 2], b"abc"),
            // not UTF-8: outside every value (allowed), inside one (not)
            (&[0, 1], b"a\xff"),
            (&[0, 2], b"a\xff"),
            (&[0, 1], b"a\xc3"),
        ];
        for (offsets, text) in cases {
            let data = utf8(offsets, text);
            assert_eq!(
                validate_full(&data).is_ok(),
                data.validate_full().is_ok(),
                "{offsets:?} {text:?}"
            );
        }
    }

    #[test]
    fn checks_children_and_large_strings() {
        let good: Arc<dyn Array> = Arc::new(StringArray::from(vec!["a", "bc"]));
        let bad = utf8(&[0, 1, 3], "éé".as_bytes());
        let bad = arrow_array::make_array(bad);
        let fields = vec![
            Field::new("ok", DataType::Utf8, true),
            Field::new("bad", DataType::Utf8, true),
        ];
        let parent = unsafe { StructArray::new_unchecked(fields.into(), vec![good, bad], None) };
        let err = validate_full(&parent.to_data()).unwrap_err().to_string();
        assert!(err.contains("child #1"), "{err}");
        let large = LargeStringArray::from(vec![Some("x"), None, Some("ü")]);
        validate_full(&large.to_data()).unwrap();
    }
}
