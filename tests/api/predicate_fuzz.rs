//! Generated predicates over HTTP: every route that takes a filter or expression answers each
//! of them with a result or a 4xx, never a 5xx (lance's planner panicked on some literal forms,
//! answered 500). The in-process fuzzer (`host/src/sql_guard/fuzz.rs`) runs 100,000 of the same
//! grammar through the guard and lance's planner; this sends a sample through the real server.

use serde_json::{Value, json};

use crate::common::*;

#[path = "../../host/src/sql_guard/grammar.rs"]
mod grammar;

/// A route and the body it gets for one predicate.
type Route = (&'static str, fn(&str) -> Value);

/// How many predicates each route gets (a debug server plans one in a few milliseconds).
const PER_ROUTE: usize = 300;

#[tokio::test]
async fn generated_predicates_never_answer_5xx() {
    let s = Server::start().await;
    let batch = grammar::table_batch(grammar::table_schema());
    let (st, v) = s.post_arrow("/v1/table/fz/create", &batch).await;
    assert_eq!(st, 200, "{v}");
    let routes: [Route; 6] = [
        ("count_rows", |p| json!({ "predicate": p })),
        ("query", |p| json!({ "filter": p, "k": 10 })),
        ("query", |p| json!({ "columns": { "x": p }, "k": 10 })),
        (
            "explain_plan",
            |p| json!({ "query": { "filter": p, "k": 10 } }),
        ),
        (
            "update",
            |p| json!({ "predicate": p, "updates": [["name", "name"]] }),
        ),
        (
            "delete",
            |p| json!({ "predicate": format!("({p}) AND id = -42") }),
        ),
    ];
    let mut failures = Vec::new();
    let (mut answered, mut refused) = (0, 0);
    for (i, (route, body)) in routes.iter().enumerate() {
        for p in grammar::predicates(0xfa11 + i as u64, PER_ROUTE) {
            let (st, b) = s.post(&format!("/v1/table/fz/{route}"), body(&p)).await;
            match st {
                200 => answered += 1,
                400..=499 => {
                    // A refusal in the spec's error shape, with a message.
                    assert!(b["error"].as_str().is_some_and(|m| !m.is_empty()), "{b}");
                    refused += 1;
                }
                _ => failures.push(format!("{route} {st}: {p} -> {b}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} 5xx ({answered} answered, {refused} refused):\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Most random predicates are type errors (400s); with these seeds 95 are answered. Far
    // fewer would mean the grammar no longer reaches the planner.
    assert!(answered > 50, "only {answered} predicates were answered");
    // Nothing matched id = -42, and updates wrote names back unchanged: the rows are intact.
    assert_eq!(s.count("fz", json!({})).await, 3);
    assert_eq!(s.count("fz", json!({"predicate": "name = 'a'"})).await, 1);
}

/// The five predicates a fuzzing run found answering 500 (lance's planner reached a `todo!()`
/// on their literals): each is a 400 naming the field and the literal, on every route.
#[tokio::test]
async fn literals_lance_cannot_plan_are_400s_naming_them() {
    let s = Server::start().await;
    s.create_table("t", 5).await;
    for (predicate, named) in [
        ("id = $1", "placeholder"),
        ("text = N'x'", "national string"),
        ("text = $$x$$", "dollar-quoted"),
        ("text = B'x'", "byte string"),
        ("text = R'x'", "raw string"),
    ] {
        for (route, body, field) in [
            ("count_rows", json!({ "predicate": predicate }), "predicate"),
            ("delete", json!({ "predicate": predicate }), "predicate"),
            ("query", json!({ "filter": predicate, "k": 5 }), "filter"),
            (
                "explain_plan",
                json!({ "query": { "filter": predicate, "k": 5 } }),
                "filter",
            ),
        ] {
            let (st, b) = s.post(&format!("/v1/table/t/{route}"), body).await;
            assert_error(st, &b, 400, 13);
            let msg = b["error"].as_str().unwrap();
            assert!(
                msg.starts_with(&format!("{field}: ")) && msg.contains(named),
                "{route} {predicate}: {msg}"
            );
        }
    }
    // Nothing was deleted; plain literals still work.
    assert_eq!(s.count("t", json!({})).await, 5);
    assert_eq!(
        s.count("t", json!({"predicate": "text = 'row 1'"})).await,
        1
    );
}
