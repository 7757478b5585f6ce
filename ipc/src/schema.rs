//! The schema checks: everything `arrow_ipc::convert::fb_to_schema` would `panic!`,
//! `unwrap` or `unimplemented!` on, rule for rule (its `get_data_type`), so that it can then
//! be called safely.

use arrow_ipc::{DateUnit, Endianness, IntervalUnit, Precision, TimeUnit, Type, UnionMode};
use arrow_schema::{Field, Schema, UnionFields};

use crate::{IpcError, Result};

/// The arrow schema of a checked flatbuffer schema.
pub(crate) fn check(fb: arrow_ipc::Schema<'_>) -> Result<Schema> {
    // arrow-rs reads little-endian data only; the readers would refuse it later anyway.
    if fb.endianness() != Endianness::Little {
        return Err(IpcError::new(
            "the schema is big-endian, which is not supported",
        ));
    }
    let fields = fb
        .fields()
        .ok_or_else(|| IpcError::new("the schema has no field list"))?;
    for field in fields {
        check_field(field, "", true)?;
    }
    Ok(arrow_ipc::convert::fb_to_schema(fb))
}

fn check_field(field: arrow_ipc::Field<'_>, parent: &str, may_be_dictionary: bool) -> Result<()> {
    let path = match parent {
        "" => field.name().unwrap_or("").to_string(),
        _ => format!("{parent}.{}", field.name().unwrap_or("")),
    };
    let bad = |why: String| Err(IpcError::new(format!("field `{path}`: {why}")));
    let ty = field.type_type();
    if let Some(dictionary) = field.dictionary()
        && may_be_dictionary
    {
        let Some(index) = dictionary.indexType() else {
            return bad("a dictionary without an index type".into());
        };
        if !matches!(index.bitWidth(), 8 | 16 | 32 | 64) {
            return bad(format!("a dictionary index of {} bits", index.bitWidth()));
        }
        return check_field(field, parent, false);
    }
    // A type table missing for its tag would be an `unwrap` on None in arrow.
    let missing = || bad(format!("type {ty:?} without its parameters"));
    let children = |n: usize| -> Result<()> {
        match field.children() {
            Some(c) if c.len() == n => c.iter().try_for_each(|c| check_field(c, &path, true)),
            Some(c) => bad(format!(
                "type {ty:?} with {} children instead of {n}",
                c.len()
            )),
            None => bad(format!("type {ty:?} without children")),
        }
    };
    match ty {
        Type::Null
        | Type::Bool
        | Type::Binary
        | Type::BinaryView
        | Type::LargeBinary
        | Type::Utf8
        | Type::Utf8View
        | Type::LargeUtf8 => Ok(()),
        Type::Int => match field.type_as_int() {
            None => missing(),
            Some(int) if matches!(int.bitWidth(), 8 | 16 | 32 | 64) => Ok(()),
            Some(int) => bad(format!("an integer of {} bits", int.bitWidth())),
        },
        Type::FixedSizeBinary => match field.type_as_fixed_size_binary() {
            None => missing(),
            Some(fsb) if fsb.byteWidth() >= 0 => Ok(()),
            Some(fsb) => bad(format!("a fixed-size binary of width {}", fsb.byteWidth())),
        },
        Type::FloatingPoint => match field.type_as_floating_point() {
            None => missing(),
            Some(f)
                if matches!(
                    f.precision(),
                    Precision::HALF | Precision::SINGLE | Precision::DOUBLE
                ) =>
            {
                Ok(())
            }
            Some(f) => bad(format!("a floating point precision of {:?}", f.precision())),
        },
        Type::Date => match field.type_as_date() {
            None => missing(),
            Some(d) if matches!(d.unit(), DateUnit::DAY | DateUnit::MILLISECOND) => Ok(()),
            Some(d) => bad(format!("a date unit of {:?}", d.unit())),
        },
        Type::Time => match field.type_as_time() {
            None => missing(),
            Some(t) => match (t.bitWidth(), t.unit()) {
                (32, TimeUnit::SECOND | TimeUnit::MILLISECOND)
                | (64, TimeUnit::MICROSECOND | TimeUnit::NANOSECOND) => Ok(()),
                (bits, unit) => bad(format!("a time of {bits} bits in {unit:?}")),
            },
        },
        Type::Timestamp => match field.type_as_timestamp() {
            None => missing(),
            Some(t) if is_time_unit(t.unit()) => Ok(()),
            Some(t) => bad(format!("a timestamp unit of {:?}", t.unit())),
        },
        Type::Duration => match field.type_as_duration() {
            None => missing(),
            Some(d) if is_time_unit(d.unit()) => Ok(()),
            Some(d) => bad(format!("a duration unit of {:?}", d.unit())),
        },
        Type::Interval => match field.type_as_interval() {
            None => missing(),
            Some(i)
                if matches!(
                    i.unit(),
                    IntervalUnit::YEAR_MONTH
                        | IntervalUnit::DAY_TIME
                        | IntervalUnit::MONTH_DAY_NANO
                ) =>
            {
                Ok(())
            }
            Some(i) => bad(format!("an interval unit of {:?}", i.unit())),
        },
        Type::List | Type::LargeList | Type::ListView | Type::LargeListView => children(1),
        Type::FixedSizeList => match field.type_as_fixed_size_list() {
            None => missing(),
            Some(l) if l.listSize() < 0 => {
                bad(format!("a fixed-size list of size {}", l.listSize()))
            }
            Some(_) => children(1),
        },
        Type::Map => match field.type_as_map() {
            None => missing(),
            Some(_) => {
                children(1)?;
                // MapArray's conversion from ArrayData `expect`s a struct of two fields.
                let entries = field.children().expect("checked").get(0);
                match entries.children() {
                    Some(c) if entries.type_type() == Type::Struct_ && c.len() == 2 => Ok(()),
                    _ => bad("map entries that are not a struct of a key and a value".into()),
                }
            }
        },
        Type::RunEndEncoded => children(2),
        Type::Struct_ => field
            .children()
            .into_iter()
            .flatten()
            .try_for_each(|c| check_field(c, &path, true)),
        Type::Decimal => match field.type_as_decimal() {
            None => missing(),
            Some(d) if u8::try_from(d.precision()).is_err() || i8::try_from(d.scale()).is_err() => {
                bad(format!(
                    "a decimal of precision {} and scale {}",
                    d.precision(),
                    d.scale()
                ))
            }
            Some(d) if matches!(d.bitWidth(), 32 | 64 | 128 | 256) => Ok(()),
            Some(d) => bad(format!("a decimal of {} bits", d.bitWidth())),
        },
        Type::Union => {
            let Some(union) = field.type_as_union() else {
                return missing();
            };
            if !matches!(union.mode(), UnionMode::Sparse | UnionMode::Dense) {
                return bad(format!("a union mode of {:?}", union.mode()));
            }
            let members: Vec<_> = field.children().into_iter().flatten().collect();
            for c in &members {
                check_field(*c, &path, true)?;
            }
            let fields: Vec<Field> = members.into_iter().map(Field::from).collect();
            match union.typeIds() {
                None if fields.len() > 128 => {
                    bad(format!("a union of {} members (at most 128)", fields.len()))
                }
                None => Ok(()),
                Some(ids) => match UnionFields::try_new(ids.iter().map(|i| i as i8), fields) {
                    Ok(_) => Ok(()),
                    Err(e) => bad(format!("union type ids: {e}")),
                },
            }
        }
        other => bad(format!("type {other:?}, which arrow cannot read")),
    }
}

fn is_time_unit(unit: TimeUnit) -> bool {
    matches!(
        unit,
        TimeUnit::SECOND | TimeUnit::MILLISECOND | TimeUnit::MICROSECOND | TimeUnit::NANOSECOND
    )
}
