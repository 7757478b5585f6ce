//! A grammar of SQL filters for fuzzing: well-formed predicates over the columns of a test
//! table, mixed with every literal form, function, cast, operator and construct we know of, and
//! random token soup. Only std and arrow: the black-box tests compile this same file
//! (`tests/api/predicate_fuzz.rs`) to send the same predicates over HTTP.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

/// xorshift64*: deterministic, so a failure names a seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const COLUMNS: &[&str] = &[
    "id", "name", "score", "flag", "payload", "tags", "ts", "vec", "meta", "meta.a", "meta.b",
    "`name`", "missing", "ID", "small",
];

const LITERALS: &[&str] = &[
    "0",
    "1",
    "-1",
    "42",
    "3.5",
    "-0.0",
    "1e308",
    "1e309",
    "-9223372036854775808",
    "9223372036854775807",
    "18446744073709551616",
    "0x10",
    ".5",
    "'x'",
    "''",
    "'%a_'",
    "\"dq\"",
    "X'00ff'",
    "X'0'",
    "TRUE",
    "FALSE",
    "NULL",
    "$1",
    "?",
    ":p",
    "@v",
    "@@v",
    "N'x'",
    "$$x$$",
    "$t$x$t$",
    "B'x'",
    "R'x'",
    "E'x\\n'",
    "U&'x'",
    "'''x'''",
    "DATE '2024-01-01'",
    "TIMESTAMP '2024-01-01 00:00:00'",
    "TIME '12:00'",
    "INTERVAL '1 day'",
    "INTERVAL 1 DAY",
    "DATE 'nope'",
    "[1, 2]",
    "[1.0, 2.0, 3.0, 4.0]",
    "ARRAY[1, 2]",
    "{'a': 1}",
    "'2024-01-01'::date",
    "CAST(1 AS TINYINT)",
];

const FUNCTIONS: &[&str] = &[
    "lower",
    "upper",
    "abs",
    "length",
    "char_length",
    "coalesce",
    "nullif",
    "concat",
    "substr",
    "substring",
    "trim",
    "round",
    "floor",
    "ceil",
    "sqrt",
    "ln",
    "power",
    "contains",
    "starts_with",
    "regexp_match",
    "regexp_like",
    "regexp_replace",
    "array_has",
    "array_has_any",
    "array_length",
    "array_element",
    "cardinality",
    "date_part",
    "date_trunc",
    "to_timestamp",
    "now",
    "random",
    "md5",
    "sha256",
    "digest",
    "to_hex",
    "cast",
    "count",
    "sum",
    "max",
    "no_such_fn",
    "json_extract",
    "json_get",
    "struct",
    "named_struct",
    "get_field",
    "arrow_typeof",
    "make_array",
    "repeat",
    "lpad",
    "split_part",
    "strpos",
    "encode",
    "decode",
    "btrim",
    "initcap",
    "chr",
    "ascii",
    "nanvl",
    "isnan",
    "iszero",
    "l2_distance",
    "cosine_distance",
    "array_distance",
];

const TYPES: &[&str] = &[
    "INT",
    "BIGINT",
    "TINYINT",
    "SMALLINT",
    "INT UNSIGNED",
    "FLOAT",
    "DOUBLE",
    "REAL",
    "DECIMAL(10, 2)",
    "DECIMAL(76, 2)",
    "DECIMAL",
    "VARCHAR",
    "STRING",
    "TEXT",
    "BOOLEAN",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP(3)",
    "TIMESTAMP(9)",
    "TIMESTAMP WITH TIME ZONE",
    "TIME",
    "BINARY",
    "BYTEA",
    "BLOB",
    "JSON",
    "UUID",
    "INTERVAL",
    "INT[]",
    "FLOAT[4]",
    "STRUCT<a INT>",
    "VARCHAR(3)",
    "CHAR",
    "NUMERIC",
    "UNSIGNED",
    "DATETIME",
    "LARGE BINARY",
];

const BINARY_OPS: &[&str] = &[
    "=",
    "==",
    "!=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "<=>",
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "&",
    "|",
    "^",
    "#",
    "<<",
    ">>",
    "AND",
    "OR",
    "LIKE",
    "ILIKE",
    "NOT LIKE",
    "SIMILAR TO",
    "IS DISTINCT FROM",
    "IS NOT DISTINCT FROM",
    "->",
    "->>",
    "@>",
    "<@",
    "~",
    "!~",
    "~*",
    "DIV",
    "XOR",
    "REGEXP",
    "RLIKE",
    "@@",
    "&&",
    "?|",
];

const SOUP: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    ":",
    "::",
    ";",
    "*",
    "'",
    "\"",
    "`",
    "$",
    "?",
    "id",
    "name",
    "SELECT",
    "FROM",
    "WHERE",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "AND",
    "OR",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "BETWEEN",
    "CAST",
    "AS",
    "EXISTS",
    "ANY",
    "ALL",
    "ARRAY",
    "1",
    "'a'",
    "=",
    "<",
    "+",
    "-",
    "/",
    "%",
    "||",
    "INTERVAL",
    "DATE",
    "OVER",
    "PARTITION",
    "BY",
    "ORDER",
    "ESCAPE",
    "COLLATE",
    "AT",
    "TIME",
    "ZONE",
    "UNNEST",
    "TRY_CAST",
    "$1",
    "N'x'",
    "E'x'",
    "@",
    "#",
    "!",
    "~",
    "^",
    "&",
    "|",
    "=>",
    "->",
];

/// A random expression at most `depth` levels deep.
fn expr(rng: &mut Rng, depth: usize) -> String {
    let leaf = depth == 0 || rng.below(4) == 0;
    if leaf {
        return if rng.below(2) == 0 {
            rng.pick(COLUMNS).to_string()
        } else {
            rng.pick(LITERALS).to_string()
        };
    }
    let d = depth - 1;
    match rng.below(22) {
        0..=4 => format!("{} {} {}", expr(rng, d), rng.pick(BINARY_OPS), expr(rng, d)),
        5 => format!("NOT {}", expr(rng, d)),
        6 => format!("-{}", expr(rng, d)),
        7 => format!("({})", expr(rng, d)),
        8 => {
            let args: Vec<String> = (0..rng.below(4)).map(|_| expr(rng, d)).collect();
            format!("{}({})", rng.pick(FUNCTIONS), args.join(", "))
        }
        9 => format!("CAST({} AS {})", expr(rng, d), rng.pick(TYPES)),
        10 => format!("TRY_CAST({} AS {})", expr(rng, d), rng.pick(TYPES)),
        11 => format!("{}::{}", expr(rng, d), rng.pick(TYPES)),
        12 => {
            let items: Vec<String> = (0..1 + rng.below(4)).map(|_| expr(rng, d)).collect();
            let not = if rng.below(3) == 0 { "NOT " } else { "" };
            format!("{} {not}IN ({})", expr(rng, d), items.join(", "))
        }
        13 => format!(
            "{} BETWEEN {} AND {}",
            expr(rng, d),
            expr(rng, d),
            expr(rng, d)
        ),
        14 => format!(
            "{} IS {}",
            expr(rng, d),
            rng.pick(&[
                "NULL",
                "NOT NULL",
                "TRUE",
                "FALSE",
                "NOT TRUE",
                "UNKNOWN",
                "NOT FALSE",
            ])
        ),
        15 => format!(
            "CASE WHEN {} THEN {} ELSE {} END",
            expr(rng, d),
            expr(rng, d),
            expr(rng, d)
        ),
        16 => format!(
            "CASE {} WHEN {} THEN {} END",
            expr(rng, d),
            expr(rng, d),
            expr(rng, d)
        ),
        17 => format!("{}[{}]", expr(rng, d), expr(rng, d)),
        18 => format!("{} LIKE {} ESCAPE '\\'", expr(rng, d), expr(rng, d)),
        19 => format!(
            "{} {} ANY({})",
            expr(rng, d),
            rng.pick(&["=", "<", "<>"]),
            expr(rng, d)
        ),
        20 => rng
            .pick(&[
                "EXISTS (SELECT 1)",
                "id IN (SELECT id FROM t)",
                "(SELECT 1) = 1",
                "count(*) OVER () > 1",
                "id = ALL(SELECT 1)",
                "ts AT TIME ZONE 'UTC' > ts",
                "name COLLATE \"C\" = 'a'",
                "EXTRACT(YEAR FROM ts) = 2024",
                "POSITION('a' IN name) > 0",
                "TRIM(BOTH 'a' FROM name) = ''",
                "SUBSTRING(name FROM 1 FOR 2) = 'a'",
                "OVERLAY(name PLACING 'x' FROM 1) = 'x'",
                "INTERVAL '1' DAY + ts > ts",
                "(id, name) = (1, 'a')",
                "ROW(1, 2) IS NULL",
                "meta['a'] = 1",
                "tags[0] = 'a'",
                "vec[1:2] IS NULL",
                "GROUPING(id) = 1",
                "*",
                "t.*",
                "DEFAULT",
                "id = DEFAULT",
                "MATCH (name) AGAINST ('x')",
                "name @@ 'x'",
                "CONVERT(name, CHAR) = 'a'",
                "CEIL(score TO DAY) = 1",
                "id = -(-(-1))",
                "~id = 1",
                "!flag",
                "+id = 1",
                "id = +'1'",
            ])
            .to_string(),
        _ => {
            let n = 1 + rng.below(8);
            (0..n).map(|_| rng.pick(SOUP)).collect::<Vec<_>>().join(" ")
        }
    }
}

/// `n` predicates from `seed`: the same ones on every run.
pub fn predicates(seed: u64, n: usize) -> Vec<String> {
    let mut rng = Rng(seed.max(1));
    (0..n)
        .map(|_| {
            let depth = 1 + rng.below(4);
            expr(&mut rng, depth)
        })
        .collect()
}

/// The table the predicates are written for: a column of each common type.
pub fn table_schema() -> Arc<Schema> {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("payload", DataType::Binary, true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("vec", DataType::FixedSizeList(item, 4), true),
        Field::new(
            "meta",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int32, true),
                Field::new("b", DataType::Utf8, true),
            ])),
            true,
        ),
        Field::new("small", DataType::Int32, true),
    ]))
}

/// Three rows of edge values (extremes, NaN, nulls, empty strings and lists).
pub fn table_batch(schema: Arc<Schema>) -> RecordBatch {
    let mut tags = ListBuilder::new(StringBuilder::new());
    tags.values().append_value("a");
    tags.append(true);
    tags.append(false);
    tags.values().append_value("b");
    tags.values().append_value("");
    tags.append(true);
    let mut vec = FixedSizeListBuilder::new(Float32Builder::new(), 4);
    for row in 0..3 {
        for i in 0..4 {
            vec.values().append_value((row * 4 + i) as f32);
        }
        vec.append(row != 1);
    }
    let meta = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Int32Array::from(vec![Some(1), None, Some(i32::MAX)])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec![Some("x"), Some(""), None])) as ArrayRef,
        ),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![0, i64::MAX, i64::MIN])),
        Arc::new(StringArray::from(vec![Some("a"), None, Some("%é_")])),
        Arc::new(Float64Array::from(vec![Some(0.0), Some(f64::NAN), None])),
        Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
        Arc::new(BinaryArray::from(vec![
            Some(&b"\x00"[..]),
            None,
            Some(&b""[..]),
        ])),
        Arc::new(tags.finish()),
        Arc::new(TimestampMicrosecondArray::from(vec![
            Some(0),
            None,
            Some(i64::MAX),
        ])),
        Arc::new(vec.finish()),
        Arc::new(meta),
        Arc::new(Int32Array::from(vec![Some(i32::MIN), Some(-1), None])),
    ];
    RecordBatch::try_new(schema, columns).expect("the fuzz batch matches its schema")
}
