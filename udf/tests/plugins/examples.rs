//! The example UDFs compute what they should, through the real Wasm runtime.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Float64Array, Int32Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Fields};
use lancet_udf::{Limits, OnError, UdfError};

use crate::common::{batch, define, limits, manifest, shared, wasm};

#[test]
fn score_weights_two_numeric_columns() {
    let rt = shared();
    let udf = define(rt, "score", "score", &[]).unwrap();
    let a: ArrayRef = Arc::new(Float64Array::from(vec![Some(10.0), Some(1.0), None]));
    let b: ArrayRef = Arc::new(Int64Array::from(vec![Some(20), None, Some(3)]));
    let input = batch(vec![("a", a.clone()), ("b", b.clone())]);
    let out = rt
        .invoke(&udf, "t1", &input, Some(&DataType::Float64), &limits())
        .unwrap();
    let out = out.as_primitive::<Float64Type>();
    assert!((out.value(0) - 13.0).abs() < 1e-9);
    assert!(out.is_null(1) && out.is_null(2));

    // Config reaches the guest through lancet_init.
    let udf = define(
        rt,
        "score",
        "score",
        &[("weight_a", "1"), ("weight_b", "-1")],
    )
    .unwrap();
    let out = rt.invoke(&udf, "t1", &input, None, &limits()).unwrap();
    assert_eq!(out.as_primitive::<Float64Type>().value(0), -10.0);

    // ...and init can refuse it, which is the definition's fault.
    let err = define(rt, "score", "score", &[("weight_a", "heavy")]).unwrap_err();
    assert!(matches!(err, UdfError::Init { .. }), "{err}");
    assert!(err.is_definition_error());
    assert!(err.to_string().contains("weight_a"), "{err}");
}

#[test]
fn slugify_normalises_text() {
    let rt = shared();
    let udf = define(rt, "slugify", "slugify", &[]).unwrap();
    let text: ArrayRef = Arc::new(StringArray::from(vec![
        Some("Hello, World!"),
        None,
        Some("  Crème Brûlée, 2 × Ñandú!"),
        Some("---"),
    ]));
    let out = rt
        .invoke(
            &udf,
            "t1",
            &batch(vec![("t", text)]),
            Some(&DataType::Utf8),
            &limits(),
        )
        .unwrap();
    let out = out.as_string::<i32>();
    let got: Vec<_> = out.iter().collect();
    assert_eq!(
        got,
        vec![
            Some("hello-world"),
            None,
            Some("creme-brulee-2-nandu"),
            Some("")
        ]
    );
}

#[test]
fn embed_gives_normalised_deterministic_vectors() {
    let rt = shared();
    let udf = define(rt, "embed", "embed", &[]).unwrap();
    let text: ArrayRef = Arc::new(StringArray::from(vec![
        Some("the quick brown fox"),
        Some("The QUICK brown fox!"),
        Some("quick brown foxes"),
        Some("database compaction"),
        Some("..."),
        None,
    ]));
    let want = DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 32);
    let out = rt
        .invoke(
            &udf,
            "t1",
            &batch(vec![("t", text)]),
            Some(&want),
            &limits(),
        )
        .unwrap();
    let out = out.as_fixed_size_list();
    let row =
        |i: usize| -> Vec<f32> { out.value(i).as_primitive::<Float32Type>().values().to_vec() };
    let dot = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    assert!((dot(&row(0), &row(0)) - 1.0).abs() < 1e-5, "L2-normalised");
    assert_eq!(row(0), row(1), "case and punctuation do not matter");
    assert!(
        dot(&row(0), &row(2)) > dot(&row(0), &row(3)),
        "similar text is closer"
    );
    assert!(out.is_null(4) && out.is_null(5));
    // The same function compiled natively gives bit-identical vectors.
    let mut native = vec![0f32; 32];
    embed::Embedder::default().embed_into("the quick brown fox", &mut native);
    assert_eq!(row(0), native);
}

#[test]
fn email_parts_returns_a_struct_of_two_columns() {
    let rt = shared();
    let udf = define(rt, "email_parts", "email_parts", &[]).unwrap();
    let emails: ArrayRef = Arc::new(StringArray::from(vec![
        Some("Ada.Lovelace@Example.COM"),
        Some("not an email"),
        None,
        Some("bob@mail.example.org"),
    ]));
    let want = DataType::Struct(Fields::from(vec![
        Field::new("user", DataType::Utf8, true),
        Field::new("domain", DataType::Utf8, true),
    ]));
    let out = rt
        .invoke(
            &udf,
            "t1",
            &batch(vec![("e", emails)]),
            Some(&want),
            &limits(),
        )
        .unwrap();
    let out = out.as_struct();
    let user: Vec<_> = out.column(0).as_string::<i32>().iter().collect();
    let domain: Vec<_> = out.column(1).as_string::<i32>().iter().collect();
    assert_eq!(user, vec![Some("Ada.Lovelace"), None, None, Some("bob")]);
    assert_eq!(
        domain,
        vec![Some("example.com"), None, None, Some("mail.example.org")]
    );
}

/// The Wasm build answers exactly as the native one over every kind of row, in a batch long
/// enough for the guest's 64-row validity words and 64-byte text checks: non-ASCII text
/// (the char rules), addresses past the 64-byte window, nulls, invalid addresses.
#[test]
fn email_parts_in_wasm_matches_native() {
    let rt = shared();
    let udf = define(rt, "email_parts", "email_parts", &[]).unwrap();
    let rows: Vec<Option<String>> = (0..300)
        .map(|i| match i % 6 {
            0 => Some(format!("User.{i}@Mail{i}.Example.com")),
            1 => Some(format!("Zoë.{i}@Exämple{i}.ORG")),
            2 => Some(format!(
                "{}@long-domain.example.org",
                "u".repeat(40 + i % 30)
            )),
            3 => None,
            4 => Some(format!("no at sign {i}")),
            _ => Some(format!("  padded{i}@Example.COM\t")),
        })
        .collect();
    let emails: ArrayRef = Arc::new(StringArray::from(rows));
    let input = batch(vec![("e", emails)]);
    let wasm = rt.invoke(&udf, "t1", &input, None, &limits()).unwrap();
    let native = email_parts::email_parts(&input).unwrap();
    assert_eq!(&wasm, &native);
    let users = wasm.as_struct().column(0).as_string::<i32>().clone();
    assert_eq!(users.value(1), "Zoë.1");
    assert_eq!(users.null_count(), 100, "nulls and non-addresses");
}

#[test]
fn identity_returns_input_and_large_batches_are_split() {
    let rt = shared();
    let udf = define(rt, "identity_i64", "identity_i64", &[]).unwrap();
    let values: Vec<Option<i64>> = (0..10_000).map(|i| (i % 7 != 0).then_some(i * 3)).collect();
    let col: ArrayRef = Arc::new(Int64Array::from(values));
    let input = batch(vec![("x", col.clone())]);
    let small_calls = Limits {
        max_rows_per_call: 999,
        ..limits()
    };
    let out = rt
        .invoke(&udf, "t1", &input, Some(&DataType::Int64), &small_calls)
        .unwrap();
    assert_eq!(&out, &col);
    // Wrong input type is the guest's error, reported as such.
    let wrong: ArrayRef = Arc::new(Int32Array::from(vec![1]));
    let err = rt
        .invoke(&udf, "t1", &batch(vec![("x", wrong)]), None, &limits())
        .unwrap_err();
    assert!(matches!(err, UdfError::Guest { .. }), "{err}");
    assert!(err.to_string().contains("expected Int64"), "{err}");
    // Zero rows is a valid call.
    let empty = input.slice(0, 0);
    assert_eq!(
        rt.invoke(&udf, "t1", &empty, None, &limits())
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn instances_are_reused_per_tenant_and_never_shared() {
    let rt = shared();
    let udf = define(rt, "misbehave", "count_calls", &[]).unwrap();
    let one: ArrayRef = Arc::new(Int64Array::from(vec![0]));
    let input = batch(vec![("x", one)]);
    let calls = |tenant: &str| {
        let out = rt.invoke(&udf, tenant, &input, None, &limits()).unwrap();
        out.as_primitive::<Int64Type>().value(0)
    };
    assert_eq!(calls("reuse-a"), 1);
    assert_eq!(
        calls("reuse-a"),
        2,
        "the same instance served tenant a again"
    );
    assert_eq!(calls("reuse-b"), 1, "tenant b got its own instance");
    assert_eq!(calls("reuse-a"), 3);
    // Entry points of one module with one config share instances, so this guest error runs
    // in the instance above and keeps it; the trap then discards it.
    let fail = define(rt, "misbehave", "guest_error", &[]).unwrap();
    assert!(
        rt.invoke(&fail, "reuse-a", &input, None, &limits())
            .is_err()
    );
    assert_eq!(calls("reuse-a"), 4);
    let trap = define(rt, "misbehave", "trap", &[]).unwrap();
    assert!(
        rt.invoke(&trap, "reuse-a", &input, None, &limits())
            .is_err()
    );
    assert_eq!(
        calls("reuse-a"),
        1,
        "the trapped instance was replaced by a new one"
    );
    assert!(rt.stats().instances_reused > 0);
}

#[test]
fn on_error_null_nulls_only_the_failing_rows() {
    let rt = shared();
    let module = wasm("misbehave");
    let mut m = manifest(&module, "fail_negative", &[]);
    m.on_error = OnError::Null;
    rt.store_module(&m, Some(&module)).unwrap();
    let udf = rt.prepare(&m).unwrap();
    let col: ArrayRef = Arc::new(Int64Array::from(vec![1, -2, 3, 4, -5, 6, 7]));
    let out = rt
        .invoke_with_stats(
            &udf,
            "t1",
            &batch(vec![("x", col)]),
            Some(&DataType::Int64),
            &limits(),
        )
        .unwrap();
    let values: Vec<_> = out.array.as_primitive::<Int64Type>().iter().collect();
    assert_eq!(
        values,
        vec![Some(1), None, Some(3), Some(4), None, Some(6), Some(7)]
    );
    assert_eq!(out.nulled_rows, 2);
    assert_eq!(udf.nulled_rows(), 2);
}
