//! `slugify`: text to a URL slug. Lowercase; common Latin accents folded to ASCII; other
//! letters and digits kept; every run of anything else becomes one `-`; no leading or
//! trailing `-`. "  Crème Brûlée, 2 × Ñandú!" -> "creme-brulee-2-nandu".

use lancet_sdk::prelude::*;

/// Writes the slug of `text` into `out` (appending).
pub fn slugify_into(text: &str, out: &mut String) {
    let start = out.len();
    // A separator is only written once a following kept character shows it is not trailing.
    let mut dash = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_alphanumeric() {
            separate(out, start, &mut dash);
            out.push(b.to_ascii_lowercase() as char);
            i += 1;
        } else if b.is_ascii() {
            dash = true;
            i += 1;
        } else {
            let c = text[i..].chars().next().expect("i is on a char boundary");
            i += c.len_utf8();
            if let Some(folded) = fold_latin(c) {
                separate(out, start, &mut dash);
                out.push_str(folded);
            } else if c.is_alphanumeric() {
                separate(out, start, &mut dash);
                out.extend(c.to_lowercase());
            } else {
                dash = true;
            }
        }
    }
}

fn separate(out: &mut String, start: usize, dash: &mut bool) {
    if *dash && out.len() > start {
        out.push('-');
    }
    *dash = false;
}

/// ASCII spelling of the Latin-1 / Latin Extended-A letters that are common in titles.
fn fold_latin(c: char) -> Option<&'static str> {
    Some(match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' | 'ā' | 'ą' => {
            "a"
        }
        'ç' | 'Ç' | 'ć' | 'č' => "c",
        'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' | 'ē' | 'ę' | 'ě' => "e",
        'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' | 'ī' => "i",
        'ñ' | 'Ñ' | 'ń' | 'ň' => "n",
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' | 'ō' | 'ő' => {
            "o"
        }
        'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' | 'ū' | 'ů' | 'ű' => "u",
        'ý' | 'ÿ' | 'Ý' => "y",
        'ś' | 'š' | 'Š' => "s",
        'ź' | 'ż' | 'ž' | 'Ž' => "z",
        'ł' | 'Ł' => "l",
        'ř' => "r",
        'ß' => "ss",
        'æ' | 'Æ' => "ae",
        'œ' | 'Œ' => "oe",
        _ => return None,
    })
}

pub fn slugify(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    map_str(arg(batch, 0)?, |text, out| {
        slugify_into(text, out);
        true
    })
}

export_udf!(slugify);

#[cfg(test)]
mod tests {
    use super::*;

    fn slug(s: &str) -> String {
        let mut out = String::new();
        slugify_into(s, &mut out);
        out
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("Hello, World!"), "hello-world");
        assert_eq!(slug("  Crème Brûlée, 2 × Ñandú!"), "creme-brulee-2-nandu");
        assert_eq!(slug("--a--b--"), "a-b");
        assert_eq!(slug("Straße"), "strasse");
        assert_eq!(slug("Привет Мир"), "привет-мир");
        assert_eq!(slug("!!!"), "");
    }
}
