//! The manifest's `config` map as the guest sees it.
//!
//! The host passes it to `lancet_init` as a JSON object of strings. A tiny parser lives here
//! because serde_json would roughly double the size of a small UDF module for one flat object.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::UdfError;

/// Key/value configuration from the UDF's manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: BTreeMap<String, String>,
}

impl Config {
    /// A configuration of these entries (tests build one; a guest gets its own from
    /// [`config()`](crate::config)).
    pub fn new(entries: BTreeMap<String, String>) -> Self {
        Self { entries }
    }

    /// Parses the JSON object of strings the host sends to `lancet_init`.
    pub fn from_json(text: &str) -> Result<Self, UdfError> {
        Parser::new(text).object().map(Self::new)
    }

    /// The value of `key`, as the manifest's `config` gives it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// Parses `key` as `T`; `Ok(None)` when absent, an error naming the key when unparsable.
    pub fn parse<T: FromStr>(&self, key: &str) -> Result<Option<T>, UdfError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| crate::udf_error!("config `{key}`: cannot parse {v:?}")),
        }
    }

    /// Every entry, by key.
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.entries
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration passed to `lancet_init`; empty when the module has no init or runs natively.
pub fn config() -> &'static Config {
    static EMPTY: OnceLock<Config> = OnceLock::new();
    CONFIG
        .get()
        .unwrap_or_else(|| EMPTY.get_or_init(Config::default))
}

pub(crate) fn set_config(config: Config) -> Result<(), UdfError> {
    CONFIG
        .set(config)
        .map_err(|_| UdfError::new("lancet_init called twice on one instance"))
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, pos: 0 }
    }

    fn err(&self, what: &str) -> UdfError {
        crate::udf_error!("config JSON: {what} at byte {}", self.pos)
    }

    fn skip_ws(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), UdfError> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected `{}`", byte as char)))
        }
    }

    fn object(mut self) -> Result<BTreeMap<String, String>, UdfError> {
        let mut map = BTreeMap::new();
        self.expect(b'{')?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_ws();
                let key = self.string()?;
                self.expect(b':')?;
                self.skip_ws();
                let value = self.string()?;
                map.insert(key, value);
                self.skip_ws();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(self.err("expected `,` or `}`")),
                }
            }
        }
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.err("trailing characters"));
        }
        Ok(map)
    }

    fn string(&mut self) -> Result<String, UdfError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let stop = rest
                .find(['"', '\\'])
                .ok_or_else(|| self.err("unterminated string"))?;
            out.push_str(&rest[..stop]);
            self.pos += stop + 1;
            if rest.as_bytes()[stop] == b'"' {
                return Ok(out);
            }
            let esc = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
            self.pos += 1;
            match esc {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => out.push(self.unicode_escape()?),
                _ => return Err(self.err("bad escape")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, UdfError> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let v = u32::from_str_radix(digits, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, UdfError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            // JSON spells non-BMP characters as a UTF-16 surrogate pair.
            if !self.text[self.pos..].starts_with("\\u") {
                return Err(self.err("lone surrogate"));
            }
            self.pos += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.err("bad surrogate pair"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.err("invalid code point"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flat_string_objects() {
        let c = Config::from_json(r#" { "a" : "1", "b":"x\"y\\z\n", "e": "\u00e9\ud83d\ude00" } "#)
            .unwrap();
        assert_eq!(c.get("a"), Some("1"));
        assert_eq!(c.get("b"), Some("x\"y\\z\n"));
        assert_eq!(c.get("e"), Some("é😀"));
        assert_eq!(c.parse::<f64>("a").unwrap(), Some(1.0));
        assert_eq!(c.parse::<f64>("missing").unwrap(), None);
        assert!(c.parse::<f64>("b").is_err());
        assert_eq!(Config::from_json("{}").unwrap(), Config::default());
    }

    #[test]
    fn rejects_non_string_values_and_garbage() {
        for bad in [
            "",
            "[]",
            r#"{"a": 1}"#,
            r#"{"a": "1",}"#,
            r#"{"a": "1"} x"#,
            r#"{"a": "\ud800"}"#,
            r#"{"a": "\q"}"#,
            r#"{"a": "unterminated}"#,
        ] {
            assert!(Config::from_json(bad).is_err(), "{bad:?} should fail");
        }
    }
}
