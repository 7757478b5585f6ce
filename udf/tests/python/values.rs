//! Values in and out: every scalar kind, nulls, nested values, errors with Python's message.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray,
    StringArray,
};
use arrow_schema::{DataType, Field};
use lancet_udf::{OnError, UdfError};

use crate::{batch, call, prepare, runtime, spec};

#[test]
fn an_integer_function_computes_every_row() {
    let udf = prepare(
        "def triple(id: int) -> int:\n    return id * 3 + 1\n",
        "triple",
    );
    assert_eq!(udf.signature().return_type(), Some(DataType::Int64));
    assert!(udf.signature().python_version().starts_with("3."));
    let ids: Vec<i64> = (0..10_000).collect();
    let input = batch(vec![("id", Arc::new(Int64Array::from(ids.clone())))]);
    let out = call(&udf, "t1", &input, &DataType::Int64).unwrap();
    let got = out.array.as_primitive::<Int64Type>();
    assert_eq!(got.len(), ids.len());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(got.value(i), id * 3 + 1);
    }
    assert_eq!(out.nulled_rows, 0);
}

#[test]
fn strings_floats_bools_bytes_and_nulls_cross_both_ways() {
    let source = r#"
import re, unicodedata

def slug(title, score, flag, raw):
    if title is None:
        return None
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") + f":{score:.1f}:{flag}:{len(raw or b'')}"
"#;
    let udf = prepare(source, "slug");
    let input = batch(vec![
        (
            "title",
            Arc::new(StringArray::from(vec![
                Some("Héllo, World!"),
                None,
                Some("a b"),
            ])) as ArrayRef,
        ),
        ("score", Arc::new(Float64Array::from(vec![1.25, 2.0, 3.5]))),
        (
            "flag",
            Arc::new(BooleanArray::from(vec![true, false, true])),
        ),
        (
            "raw",
            Arc::new(BinaryArray::from_opt_vec(vec![
                Some(b"xy"),
                Some(b""),
                None,
            ])),
        ),
    ]);
    let out = call(&udf, "t1", &input, &DataType::Utf8).unwrap();
    let got = out.array.as_string::<i32>();
    assert_eq!(got.value(0), "hello-world:1.2:True:2");
    assert!(got.is_null(1));
    assert_eq!(got.value(2), "a-b:3.5:True:0");

    // Nulls arrive as None.
    let floats = prepare(
        "def half(x):\n    return None if x is None else x / 2\n",
        "half",
    );
    let input = batch(vec![(
        "x",
        Arc::new(Int32Array::from(vec![Some(3), None])) as ArrayRef,
    )]);
    let out = call(&floats, "t1", &input, &DataType::Float32).unwrap();
    assert_eq!(out.array.data_type(), &DataType::Float32);
    assert_eq!(
        out.array
            .as_primitive::<arrow_array::types::Float32Type>()
            .value(0),
        1.5
    );
    assert!(out.array.is_null(1));
}

#[test]
fn lists_and_dicts_cross_as_python_lists_and_dicts() {
    let source = "def parts(email):\n    user, _, domain = email.partition('@')\n    return {'user': user, 'domains': domain.split('.')}\n";
    let udf = prepare(source, "parts");
    let out_type = DataType::Struct(
        vec![
            Field::new("user", DataType::Utf8, true),
            Field::new(
                "domains",
                DataType::List(Field::new("item", DataType::Utf8, true).into()),
                true,
            ),
        ]
        .into(),
    );
    let input = batch(vec![(
        "email",
        Arc::new(StringArray::from(vec!["ann@example.org"])) as ArrayRef,
    )]);
    let out = call(&udf, "t1", &input, &out_type).unwrap();
    let s = out.array.as_struct();
    assert_eq!(s.column(0).as_string::<i32>().value(0), "ann");
    let domains = s.column(1).as_list::<i32>().value(0);
    let domains: Vec<_> = domains.as_string::<i32>().iter().flatten().collect();
    assert_eq!(domains, ["example", "org"]);

    let sum = prepare("def total(xs):\n    return float(sum(xs))\n", "total");
    let list =
        ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![Some(1), Some(2)])]);
    let input = batch(vec![("xs", Arc::new(list) as ArrayRef)]);
    let out = call(&sum, "t1", &input, &DataType::Float64).unwrap();
    assert_eq!(out.array.as_primitive::<Float64Type>().value(0), 3.0);
}

#[test]
fn python_exceptions_are_the_udfs_errors_with_their_line() {
    let source = "def inv(x):\n    y = x - 1\n    return 10 // y\n";
    let udf = prepare(source, "inv");
    let input = batch(vec![(
        "x",
        Arc::new(Int64Array::from(vec![3, 1, 2])) as ArrayRef,
    )]);
    let err = call(&udf, "t1", &input, &DataType::Int64).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ZeroDivisionError: division by zero (line 3)") && text.contains("row 1"),
        "{text}"
    );
    // The interpreter survives its own exceptions: the next call works.
    let ok = batch(vec![("x", Arc::new(Int64Array::from(vec![3])) as ArrayRef)]);
    assert_eq!(
        call(&udf, "t1", &ok, &DataType::Int64)
            .unwrap()
            .array
            .as_primitive::<Int64Type>()
            .value(0),
        5
    );

    // Under on_error: null only the failing rows are null, and each is listed.
    let mut nulling = spec(source, "inv");
    nulling.on_error = OnError::Null;
    let udf = runtime().prepare_python(&nulling).unwrap();
    let out = call(&udf, "t1", &input, &DataType::Int64).unwrap();
    let got = out.array.as_primitive::<Int64Type>();
    assert_eq!((got.value(0), got.is_null(1), got.value(2)), (5, true, 10));
    assert_eq!(out.nulled_rows, 1);
    assert_eq!(out.failures[0].offset, 1);
    assert!(out.failures[0].message.starts_with("ZeroDivisionError"));
}

#[test]
fn a_value_of_the_wrong_type_is_a_row_error() {
    let udf = prepare("def f(x):\n    return 'text'\n", "f");
    let input = batch(vec![("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]);
    let err = call(&udf, "t1", &input, &DataType::Int64).unwrap_err();
    assert!(
        err.to_string()
            .contains("TypeError: returned str, the column holds integers"),
        "{err}"
    );
}

#[test]
fn definition_errors_are_pythons_own() {
    let err = runtime()
        .prepare_python(&spec("def f(x):\n    return x +\n", "f"))
        .unwrap_err();
    assert!(
        matches!(err, UdfError::PythonSource(_)) && err.is_definition_error(),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("SyntaxError") && err.to_string().contains("line 2"),
        "{err}"
    );
    let err = runtime()
        .prepare_python(&spec("def f(x):\n    return x\n", "g"))
        .unwrap_err();
    assert!(err.to_string().contains("defines no 'g'"), "{err}");
    let err = runtime()
        .prepare_python(&spec("raise ValueError('at import')\n", "f"))
        .unwrap_err();
    assert!(
        err.to_string().contains("ValueError: at import (line 1)"),
        "{err}"
    );
    let sig = prepare("def f(a, b=2):\n    return a\n", "f");
    assert!(sig.signature().check_arity(1).is_ok() && sig.signature().check_arity(2).is_ok());
    assert!(sig.signature().check_arity(3).is_err());
}

#[test]
fn a_struct_of_scalars_crosses_field_by_field() {
    let source = "import collections\ndef parts(email):\n    if '@' not in email:\n        return None\n    user, domain = email.split('@')\n    if user == 'n':\n        return {'user': 1, 'domain': domain}\n    if user == 'o':\n        return collections.OrderedDict(user=user, domain=domain)\n    if user == 'l':\n        return [user, domain]\n    return {'user': user, 'domain': domain}\n";
    let mut s = spec(source, "parts");
    s.on_error = OnError::Null;
    let udf = runtime().prepare_python(&s).unwrap();
    let out_type = DataType::Struct(
        vec![
            Field::new("user", DataType::Utf8, true),
            Field::new("domain", DataType::LargeUtf8, true),
        ]
        .into(),
    );
    let input = batch(vec![(
        "email",
        Arc::new(StringArray::from(vec![
            "ann@ex.org",
            "nobody",
            "n@x.io",
            "o@y.io",
            "l@z.io",
        ])) as ArrayRef,
    )]);
    let out = call(&udf, "t1", &input, &out_type).unwrap();
    assert_eq!(out.array.data_type(), &out_type);
    let s = out.array.as_struct();
    assert_eq!(s.column(0).as_string::<i32>().value(0), "ann");
    assert_eq!(s.column(1).as_string::<i64>().value(0), "ex.org");
    assert!(s.is_null(1), "None is a null row");
    assert!(s.column(0).is_null(2), "a wrong-typed field is null");
    assert_eq!(s.column(1).as_string::<i64>().value(2), "x.io");
    assert!(s.is_valid(3), "a dict subclass is a dict");
    assert_eq!(s.column(0).as_string::<i32>().value(3), "o");
    assert_eq!(s.column(1).as_string::<i64>().value(3), "y.io");
    assert!(s.is_null(4), "a list is no struct");
    assert!(s.column(0).is_null(4) && s.column(1).is_null(4));
    let failures: Vec<(usize, &str)> = out
        .failures
        .iter()
        .map(|f| (f.offset, f.message.as_str()))
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(failures[0].0, 2);
    assert!(
        failures[0]
            .1
            .starts_with("field 'user': TypeError: returned int"),
        "{failures:?}"
    );
    assert_eq!(failures[1].0, 4);
    assert!(
        failures[1]
            .1
            .starts_with("TypeError: returned list, the column holds a struct"),
        "{failures:?}"
    );
}

#[test]
fn a_class_is_checked_without_initialization_and_called_once_initialized() {
    let source = "class Scale:\n    def __init__(self, factor, offset=0):\n        self.factor = factor\n        self.offset = offset\n\n    def __call__(self, x: int) -> int:\n        return x * self.factor + self.offset\n";
    // A build: the class is only checked; its signature is its __call__'s, without self.
    let checked = prepare(source, "Scale");
    let params: Vec<&str> = checked
        .signature()
        .params
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(params, ["x"]);
    let mut init = spec(source, "Scale");
    init.init = Some(r#"{"factor": 10, "offset": 1}"#.into());
    let udf = runtime().prepare_python(&init).unwrap();
    let input = batch(vec![("x", Arc::new(Int64Array::from(vec![1, 2, 3])))]);
    let out = call(&udf, "t1", &input, &DataType::Int64).unwrap();
    assert_eq!(
        out.array.as_primitive::<Int64Type>().values(),
        &[11, 21, 31]
    );
    // A missing argument is the class's own TypeError, at load.
    let mut bad = spec(source, "Scale");
    bad.init = Some("{}".into());
    let err = runtime().prepare_python(&bad).unwrap_err().to_string();
    assert!(err.contains("TypeError") && err.contains("factor"), "{err}");
    // A plain function takes no initialization.
    let mut func = spec("def f(x):\n    return x\n", "f");
    func.init = Some(r#"{"factor": 1}"#.into());
    let err = runtime().prepare_python(&func).unwrap_err().to_string();
    assert!(err.contains("takes no initialization"), "{err}");
}
