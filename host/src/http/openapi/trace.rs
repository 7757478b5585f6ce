//! A type-recording serde `Deserializer`: see the module doc.
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde_json::{Map, Value, json};

pub const REF_PREFIX: &str = "#/components/schemas/";
/// Deeper nesting than this is taken for recursion.
const MAX_DEPTH: usize = 16;

#[derive(Debug)]
pub struct Untraceable(pub String);

impl std::fmt::Display for Untraceable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Untraceable {}

impl de::Error for Untraceable {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Untraceable(msg.to_string())
    }
}

/// Writes the schema of whatever is deserialized from it into `out`; struct schemas go to
/// `defs` (by struct name) and `out` gets a `$ref`.
pub struct Tracer<'a> {
    out: &'a mut Value,
    defs: &'a mut Map<String, Value>,
    depth: usize,
}

impl<'a> Tracer<'a> {
    pub fn new(out: &'a mut Value, defs: &'a mut Map<String, Value>) -> Self {
        Tracer {
            out,
            defs,
            depth: 0,
        }
    }
}

pub fn is_nullable(schema: &Value) -> bool {
    match &schema["type"] {
        Value::Array(types) => types.iter().any(|t| t == "null"),
        _ => schema["anyOf"]
            .as_array()
            .is_some_and(|alts| alts.iter().any(|a| a["type"] == "null")),
    }
}

fn nullable(schema: Value) -> Value {
    match &schema["type"] {
        Value::String(t) => {
            let mut s = schema.clone();
            s["type"] = json!([t, "null"]);
            s
        }
        _ => json!({"anyOf": [schema, {"type": "null"}]}),
    }
}

macro_rules! leaf {
    ($method:ident, $visit:ident, $value:expr, $schema:tt) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Untraceable> {
            *self.out = json!($schema);
            visitor.$visit($value)
        }
    };
}

impl<'de> Deserializer<'de> for Tracer<'_> {
    type Error = Untraceable;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Untraceable> {
        Err(Untraceable("a field takes any value".into()))
    }
    leaf!(deserialize_bool, visit_bool, false, {"type": "boolean"});
    leaf!(deserialize_i8, visit_i8, 0, {"type": "integer", "format": "int8"});
    leaf!(deserialize_i16, visit_i16, 0, {"type": "integer", "format": "int16"});
    leaf!(deserialize_i32, visit_i32, 0, {"type": "integer", "format": "int32"});
    leaf!(deserialize_i64, visit_i64, 0, {"type": "integer", "format": "int64"});
    leaf!(deserialize_u8, visit_u8, 0, {"type": "integer", "minimum": 0, "format": "uint8"});
    leaf!(deserialize_u16, visit_u16, 0, {"type": "integer", "minimum": 0, "format": "uint16"});
    leaf!(deserialize_u32, visit_u32, 0, {"type": "integer", "minimum": 0, "format": "uint32"});
    leaf!(deserialize_u64, visit_u64, 0, {"type": "integer", "minimum": 0, "format": "uint64"});
    leaf!(deserialize_f32, visit_f32, 0.0, {"type": "number", "format": "float"});
    leaf!(deserialize_f64, visit_f64, 0.0, {"type": "number", "format": "double"});
    leaf!(deserialize_char, visit_char, 'a', {"type": "string", "minLength": 1, "maxLength": 1});
    leaf!(deserialize_str, visit_str, "", {"type": "string"});
    leaf!(deserialize_string, visit_string, String::new(), {"type": "string"});
    leaf!(deserialize_bytes, visit_bytes, &[], {"type": "string"});
    leaf!(deserialize_byte_buf, visit_byte_buf, Vec::new(), {"type": "string"});

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Untraceable> {
        *self.out = json!({"type": "null"});
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Untraceable> {
        *self.out = json!({});
        v.visit_unit()
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Untraceable> {
        self.deserialize_str(v)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Untraceable> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Untraceable> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Untraceable> {
        let mut inner = Value::Null;
        let value = visitor.visit_some(Tracer {
            out: &mut inner,
            defs: &mut *self.defs,
            depth: self.depth,
        })?;
        *self.out = nullable(inner);
        Ok(value)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Untraceable> {
        let mut items = json!({});
        let value = visitor.visit_seq(One {
            slot: Some(&mut items),
            defs: &mut *self.defs,
            depth: self.depth,
        })?;
        *self.out = json!({"type": "array", "items": items});
        Ok(value)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Untraceable> {
        Err(Untraceable("a field is a tuple".into()))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        _: V,
    ) -> Result<V::Value, Untraceable> {
        Err(Untraceable("a field is a tuple struct".into()))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Untraceable> {
        let mut values = json!({});
        let value = visitor.visit_map(Entry {
            key_given: false,
            slot: Some(&mut values),
            defs: &mut *self.defs,
            depth: self.depth,
        })?;
        *self.out = json!({"type": "object", "additionalProperties": values});
        Ok(value)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Untraceable> {
        if self.depth >= MAX_DEPTH {
            return Err(Untraceable(format!("{name} nests too deep")));
        }
        let mut properties = Map::new();
        let mut required = Vec::new();
        let value = visitor.visit_map(Fields {
            fields,
            next: 0,
            properties: &mut properties,
            required: &mut required,
            defs: &mut *self.defs,
            depth: self.depth + 1,
        })?;
        let mut schema = json!({"type": "object", "title": name, "properties": properties});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        self.defs.insert(name.to_string(), schema);
        *self.out = json!({"$ref": format!("{REF_PREFIX}{name}")});
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Untraceable> {
        let first = variants
            .first()
            .ok_or_else(|| Untraceable("an enum has no variants".into()))?;
        *self.out = json!({"type": "string", "enum": variants});
        visitor.visit_enum(UnitVariant(first))
    }
}

/// A sequence of one traced element.
struct One<'b> {
    slot: Option<&'b mut Value>,
    defs: &'b mut Map<String, Value>,
    depth: usize,
}

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = Untraceable;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Untraceable> {
        let Some(slot) = self.slot.take() else {
            return Ok(None);
        };
        seed.deserialize(Tracer {
            out: slot,
            defs: &mut *self.defs,
            depth: self.depth,
        })
        .map(Some)
    }
}

/// A map of one entry: a string key and a traced value.
struct Entry<'b> {
    key_given: bool,
    slot: Option<&'b mut Value>,
    defs: &'b mut Map<String, Value>,
    depth: usize,
}

impl<'de> MapAccess<'de> for Entry<'_> {
    type Error = Untraceable;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Untraceable> {
        if self.key_given {
            return Ok(None);
        }
        self.key_given = true;
        let key: de::value::StrDeserializer<'_, Untraceable> = "key".into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Untraceable> {
        let slot = self
            .slot
            .take()
            .ok_or_else(|| Untraceable("map value asked twice".into()))?;
        seed.deserialize(Tracer {
            out: slot,
            defs: &mut *self.defs,
            depth: self.depth,
        })
    }
}

/// A struct's fields, each given once, in declaration order.
struct Fields<'b> {
    fields: &'static [&'static str],
    next: usize,
    properties: &'b mut Map<String, Value>,
    required: &'b mut Vec<&'static str>,
    defs: &'b mut Map<String, Value>,
    depth: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Untraceable;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Untraceable> {
        let Some(name) = self.fields.get(self.next) else {
            return Ok(None);
        };
        let key: de::value::StrDeserializer<'_, Untraceable> = (*name).into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Untraceable> {
        let name = self.fields[self.next];
        self.next += 1;
        let mut schema = Value::Null;
        let value = seed.deserialize(Tracer {
            out: &mut schema,
            defs: &mut *self.defs,
            depth: self.depth,
        })?;
        if !is_nullable(&schema) {
            self.required.push(name);
        }
        self.properties.insert(name.to_string(), schema);
        Ok(value)
    }
}

/// An enum value: its first variant, as a unit variant.
struct UnitVariant(&'static str);

impl<'de> EnumAccess<'de> for UnitVariant {
    type Error = Untraceable;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), Untraceable> {
        let name: de::value::StrDeserializer<'_, Untraceable> = self.0.into_deserializer();
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'de> VariantAccess<'de> for UnitVariant {
    type Error = Untraceable;

    fn unit_variant(self) -> Result<(), Untraceable> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Untraceable> {
        Err(Untraceable("an enum has data variants".into()))
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Untraceable> {
        Err(Untraceable("an enum has data variants".into()))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Untraceable> {
        Err(Untraceable("an enum has data variants".into()))
    }
}
