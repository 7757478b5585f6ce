//! `slugify`: text to a URL slug. Lowercase; common Latin accents folded to ASCII; other
//! letters and digits kept; every run of anything else becomes one `-`; no leading or
//! trailing `-`. "  Crème Brûlée, 2 × Ñandú!" -> "creme-brulee-2-nandu".

use lancet_sdk::prelude::*;

/// What each ASCII byte becomes in a slug: letters and digits themselves (lowercased),
/// everything else 0 (a separator). One table lookup instead of a chain of range tests.
const ASCII_SLUG: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            table[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// Bytes a slug of `text` can take: a separator and at most three bytes (a lowercased or
/// folded char) per input byte, and no input char is shorter than what it becomes.
pub fn max_slug_len(text: &str) -> usize {
    3 * text.len()
}

/// Writes the slug of `text` at the start of `out` (at least [`max_slug_len`] bytes) and
/// returns its length.
pub fn slugify_into(text: &str, out: &mut [u8]) -> usize {
    match slugify_common(text, out) {
        Some(len) => len,
        None => slugify_any(text, out),
    }
}

/// The fold of each char from U+00C0 to U+017F, as one or two ASCII bytes (the second 0 if
/// unused), or `[0, 0]` if [`fold_latin`] does not fold it.
const LATIN_FOLDS: [[u8; 2]; 0xC0] = {
    let mut table = [[0u8; 2]; 0xC0];
    let mut k = 0;
    while k < 0xC0 {
        if let Some(c) = char::from_u32(0xC0 + k as u32)
            && let Some(folded) = fold_latin(c)
        {
            let bytes = folded.as_bytes();
            table[k][0] = bytes[0];
            if bytes.len() > 1 {
                table[k][1] = bytes[1];
            }
        }
        k += 1;
    }
    table
};

/// [`slugify_any`] for text of ASCII and the Latin letters [`fold_latin`] folds (the common
/// case), or `None` at the first other char. It makes no call at all: with the out-of-line
/// char path in its loops, cranelift kept the loops' state on the stack (x86 has few
/// callee-saved registers), which cost slugify ~5% in Wasm.
#[inline(never)]
fn slugify_common(text: &str, out: &mut [u8]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut slug = Slug { w: 0, dash: false };
    let mut i = 0;
    loop {
        // ASCII, eight bytes per outer iteration while they last (measured ~5% faster in
        // Wasm than a byte loop alone: fewer interruption checks).
        while let Some(chunk) = bytes.get(i..i + 8) {
            if chunk.iter().fold(0, |acc, &b| acc | b) >= 0x80 {
                break;
            }
            chunk.iter().for_each(|&b| slug.ascii(out, b));
            i += 8;
        }
        // The rest of the run, a byte at a time.
        while let Some(&b) = bytes.get(i).filter(|b| b.is_ascii()) {
            i += 1;
            slug.ascii(out, b);
        }
        let Some(&lead) = bytes.get(i) else {
            return Some(slug.w);
        };
        // A two-byte char from U+00C0 to U+017F (lead byte 0xC3 to 0xC5) that folds.
        let second = *bytes.get(i + 1)?;
        let code = (((lead & 0x1F) as usize) << 6) | (second & 0x3F) as usize;
        let [first, more] = *LATIN_FOLDS.get(code.checked_sub(0xC0)?)?;
        if !(0xC3..=0xC5).contains(&lead) || first == 0 {
            return None;
        }
        slug.put(out, first);
        if more != 0 {
            slug.put(out, more);
        }
        i += 2;
    }
}

/// The slug of any text, char by char outside ASCII runs.
#[inline(never)]
fn slugify_any(text: &str, out: &mut [u8]) -> usize {
    let bytes = text.as_bytes();
    let mut slug = Slug { w: 0, dash: false };
    let mut i = 0;
    loop {
        // Only rows with chars the fast path does not handle get here: a plain byte loop.
        while let Some(&b) = bytes.get(i).filter(|b| b.is_ascii()) {
            i += 1;
            slug.ascii(out, b);
        }
        if i >= bytes.len() {
            return slug.w;
        }
        i = non_ascii(text, i, out, &mut slug);
    }
}

/// Output position, and whether a separator is owed before the next kept character (it is
/// only written then, so a slug never ends with one).
struct Slug {
    w: usize,
    dash: bool,
}

impl Slug {
    /// An ASCII input byte: kept (lowercased) or a separator.
    #[inline(always)]
    fn ascii(&mut self, out: &mut [u8], b: u8) {
        match ASCII_SLUG[b as usize] {
            0 => self.dash = true,
            c => self.put(out, c),
        }
    }

    #[inline(always)]
    fn put(&mut self, out: &mut [u8], c: u8) {
        if self.dash && self.w > 0 {
            out[self.w] = b'-';
            self.w += 1;
        }
        self.dash = false;
        out[self.w] = c;
        self.w += 1;
    }
}

/// The char starting at byte `i` (not ASCII); returns the index after it.
#[inline(never)]
fn non_ascii(text: &str, i: usize, out: &mut [u8], slug: &mut Slug) -> usize {
    let c = text[i..].chars().next().expect("i is on a char boundary");
    let mut put_str = |s: &str| s.bytes().for_each(|b| slug.put(out, b));
    if let Some(folded) = fold_latin(c) {
        put_str(folded);
    } else if c.is_alphanumeric() {
        let mut buf = [0u8; 4];
        c.to_lowercase()
            .for_each(|l| put_str(l.encode_utf8(&mut buf)));
    } else {
        slug.dash = true;
    }
    i + c.len_utf8()
}

/// ASCII spelling of the Latin-1 / Latin Extended-A letters that are common in titles.
const fn fold_latin(c: char) -> Option<&'static str> {
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
    map_str_bounded(arg(batch, 0)?, max_slug_len, |text, out| {
        Some(slugify_into(text, out))
    })
}

export_udf!(slugify);

#[cfg(test)]
mod tests {
    use super::*;

    fn slug(s: &str) -> String {
        let mut out = vec![0; max_slug_len(s)];
        let n = slugify_into(s, &mut out);
        String::from_utf8(out[..n].to_vec()).unwrap()
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("Hello, World!"), "hello-world");
        assert_eq!(slug("  Crème Brûlée, 2 × Ñandú!"), "creme-brulee-2-nandu");
        assert_eq!(slug("--a--b--"), "a-b");
        assert_eq!(slug("Straße"), "strasse");
        assert_eq!(slug("Привет Мир"), "привет-мир");
        assert_eq!(slug("!!!"), "");
        // Lowercasing that grows a char: U+0130 (2 bytes) becomes "i\u{307}" (3 bytes).
        assert_eq!(slug("-İ-İ-"), "i\u{307}-i\u{307}");
        assert_eq!(slug("ß"), "ss");
    }

    /// The rules char by char, with none of the fast paths.
    fn reference(text: &str) -> String {
        let (mut out, mut dash) = (String::new(), false);
        for c in text.chars() {
            let piece = if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase().to_string()
            } else if let Some(folded) = fold_latin(c) {
                folded.to_string()
            } else if !c.is_ascii() && c.is_alphanumeric() {
                c.to_lowercase().to_string()
            } else {
                dash = true;
                continue;
            };
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push_str(&piece);
        }
        out
    }

    /// Text of ASCII and folded Latin letters takes the fast path, anything else the char
    /// path: mixes of both, at every position, give what the plain char rules give.
    #[test]
    fn both_paths_agree_with_the_char_rules() {
        let alphabet = [
            "a", "Z", "7", " ", "-", "!", "é", "Ñ", "ß", "ø", "Ł", "İ", "Ω", "ð", "×", "€",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for n in 0..3000 {
            let mut text = String::new();
            for _ in 0..n % 40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let pick = (seed % 24) as usize;
                text.push_str(alphabet.get(pick).copied().unwrap_or("q"));
            }
            assert_eq!(slug(&text), reference(&text), "{text:?}");
            let common = n % 3 == 0
                && text
                    .chars()
                    .all(|c| c.is_ascii() || fold_latin(c).is_some());
            if common {
                let mut out = vec![0; max_slug_len(&text)];
                assert!(slugify_common(&text, &mut out).is_some(), "{text:?}");
            }
        }
    }
}
