//! `email_parts`: splits an email address into a struct `{user: Utf8, domain: Utf8}` (a
//! multi-output UDF: each child becomes its own column). The domain is lowercased. An
//! invalid address gives nulls in both children, never an error.

use lancet_sdk::arrow_array::{GenericStringArray, OffsetSizeTrait};
use lancet_sdk::arrow_buffer::{BooleanBuffer, Buffer, NullBuffer};
use lancet_sdk::prelude::*;
use std::hint::black_box;

use wide::u8x16;

/// Bytes of an address the fast path reads at once; longer addresses (rare: RFC 5321 caps the
/// user part alone at 64) take the char path.
const WINDOW: usize = 64;

/// `(user, domain)` of a plausible address: one `@`, a non-empty user without spaces, and a
/// dotted domain of non-empty alphanumeric/hyphen labels. Deliberately not RFC 5322.
pub fn split_email(text: &str) -> Option<(&str, &str)> {
    let mut window = [0; WINDOW];
    let n = text.len().min(WINDOW);
    window[..n].copy_from_slice(&text.as_bytes()[..n]);
    match scan(text.len(), &Classes::for_text(n, &window, &Bounds::new())) {
        Scanned::Split { start, at, end } => Some((&text[start..at], &text[at + 1..end])),
        Scanned::Invalid => None,
        Scanned::NotAscii => split_unicode(text),
    }
}

enum Scanned {
    /// A valid address: user `[start, at)`, domain `(at, end)`.
    Split {
        start: usize,
        at: usize,
        end: usize,
    },
    Invalid,
    /// Some byte is not ASCII: the answer needs chars (Unicode spaces and letters).
    NotAscii,
}

/// Which bytes of a window are in each class the rules care about: bit `i` of a mask is byte
/// `i`. Built 16 bytes at a time with `wide`'s portable SIMD (simd128 in the Wasm module,
/// SSE2 natively), so that [`scan`] applies the rules with a few bit operations per address
/// instead of a branchy loop per byte, the code Wasm compilers handle worst (this halved
/// the UDF's time, in Wasm and natively alike).
struct Classes {
    space: u64,
    at: u64,
    dot: u64,
    hyphen: u64,
    /// ASCII letters and digits.
    word: u64,
    /// Bytes >= 0x80: not ASCII.
    high: u64,
}

impl Classes {
    /// Classifies the first `BLOCKS` 16-byte blocks of `window` (the rest count as no class).
    // `of`, `for_text` and `scan` are forced inline: LLVM kept them as calls, and a call that
    // returns a struct returns it through memory (in Wasm, the shadow stack in linear memory).
    // Inlined, the masks stay in registers: Wasm 40.3 -> 32.5 ns/row, native 19.4 -> 16.9.
    #[inline(always)]
    fn of<const BLOCKS: usize>(window: &[u8; WINDOW], bounds: &Bounds) -> Self {
        let mut m = Classes {
            space: 0,
            at: 0,
            dot: 0,
            hyphen: 0,
            word: 0,
            high: 0,
        };
        let splat = u8x16::splat;
        for (k, block) in window.as_chunks::<16>().0[..BLOCKS].iter().enumerate() {
            let v = u8x16::new(*block);
            let bits = |lanes: u8x16| (lanes.to_bitmask() as u64) << (16 * k);
            // A range as one unsigned comparison, `c - lo <= bound` (wrapping).
            let within = |c: u8x16, lo: u8, bound: u8x16| (c - splat(lo)).simd_le(bound);
            m.space |= bits(v.simd_eq(splat(b' ')) | within(v, b'\t', bounds.tab_to_cr));
            m.at |= bits(v.simd_eq(splat(b'@')));
            m.dot |= bits(v.simd_eq(splat(b'.')));
            m.hyphen |= bits(v.simd_eq(splat(b'-')));
            m.word |=
                bits(within(v | splat(0x20), b'a', bounds.letter) | within(v, b'0', bounds.digit));
            m.high |= bits(v);
        }
        m
    }

    /// Classifies just enough of `window` for text of `len` bytes.
    #[inline(always)]
    fn for_text(len: usize, window: &[u8; WINDOW], bounds: &Bounds) -> Self {
        if len <= 32 {
            Self::of::<2>(window, bounds)
        } else {
            Self::of::<4>(window, bounds)
        }
    }
}

/// The upper bounds of the byte ranges the rules test (`c - lo <= bound`), made opaque to
/// LLVM once per column with `black_box`. As constants, LLVM rewrites `x <= 25` as `x < 26`:
/// natively x86 turns either into two instructions (min, equal), but Wasm's `i8x16.lt_u`
/// becomes four in cranelift (min, equal, all-ones, xor) where `le_u` is two.
struct Bounds {
    /// `\t` to `\r`.
    tab_to_cr: u8x16,
    digit: u8x16,
    letter: u8x16,
}

impl Bounds {
    fn new() -> Self {
        let bound = |b: u8| black_box(u8x16::splat(b));
        Bounds {
            tab_to_cr: bound(4),
            digit: bound(9),
            letter: bound(25),
        }
    }
}

/// Bits `[lo, hi)`, `lo <= hi <= 64`.
fn span(lo: u32, hi: u32) -> u64 {
    let below = |n: u32| if n >= 64 { !0 } else { (1u64 << n) - 1 };
    below(hi) & !below(lo)
}

/// The rules of [`split_unicode`] for the text whose `len` bytes start the window `m`
/// classifies. Longer text than the window answers `NotAscii` (go and use the chars).
#[inline(always)]
fn scan(len: usize, m: &Classes) -> Scanned {
    if len > WINDOW {
        return Scanned::NotAscii;
    }
    let n = len as u32;
    let text = span(0, n);
    if m.high & text != 0 {
        return Scanned::NotAscii;
    }
    // Trim: the first and one past the last byte that is not a space.
    let solid = text & !m.space;
    if solid == 0 {
        return Scanned::Invalid;
    }
    let (start, end) = (solid.trailing_zeros(), 64 - solid.leading_zeros());
    let ats = m.at & span(start, end);
    if ats == 0 {
        return Scanned::Invalid;
    }
    let at = ats.trailing_zeros();
    let user = span(start, at);
    let domain = span(at + 1, end);
    // Labels are `[A-Za-z0-9-]+` and do not start or end with `-`: so no dot may start a
    // label (follow the `@` or a dot) or follow a hyphen, no hyphen may start a label, and
    // the last byte is neither.
    let label_start = (m.dot | 1 << at) << 1;
    let after_hyphen = m.hyphen << 1;
    let bad = (domain & !(m.word | m.dot | m.hyphen))
        | (domain & m.dot & (label_start | after_hyphen))
        | (domain & m.hyphen & label_start);
    let last = 1u64 << (end - 1);
    let valid = user != 0
        && m.space & user == 0
        && bad == 0
        && m.dot & domain != 0
        && (m.dot | m.hyphen) & last == 0;
    if !valid {
        return Scanned::Invalid;
    }
    Scanned::Split {
        start: start as usize,
        at: at as usize,
        end: end as usize,
    }
}

/// The same rules over chars, for text with non-ASCII bytes.
#[inline(never)]
fn split_unicode(text: &str) -> Option<(&str, &str)> {
    let (user, domain) = text.trim().split_once('@')?;
    let user_ok = !user.is_empty() && !user.contains(char::is_whitespace);
    let domain_ok = domain.contains('.')
        && domain.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_alphanumeric() || c == '-')
        });
    (user_ok && domain_ok).then_some((user, domain))
}

/// A Utf8 column being built (validity is shared by both output columns), in buffers sized
/// up front: the hot path writes into spare capacity and never grows a Vec. A possible call
/// in the row loop (growing a Vec) made cranelift keep the row's vectors on the stack, as
/// x86 has no callee-saved vector registers.
struct Utf8Out {
    /// The text so far. Its spare capacity is always at least `WINDOW` plus the text of the
    /// rows still to come (each row adds at most its own text's length).
    values: Vec<u8>,
    /// Capacity beyond that, from growing ahead (see [`Self::push`]).
    headroom: usize,
    /// One per row plus one, filled as rows end.
    offsets: Vec<i32>,
    rows: usize,
}

impl Utf8Out {
    /// For `rows` rows of at most `bytes` bytes of text in all (more is allowed, slower).
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        Self {
            values: Vec::with_capacity(bytes + WINDOW),
            headroom: 0,
            offsets: vec![0; rows + 1],
            rows: 0,
        }
    }

    /// Appends `src[..len]` by copying all of `src` and cutting back: a fixed-size copy is a
    /// few vector moves, a variable-length one a call (in Wasm, out to the host).
    fn push_prefix(&mut self, src: &[u8; WINDOW], len: usize) {
        let len = len.min(WINDOW);
        self.values.spare_capacity_mut()[..WINDOW].write_copy_of_slice(src);
        // SAFETY: the `len <= WINDOW` bytes past the old length were just written.
        unsafe { self.values.set_len(self.values.len() + len) };
    }

    /// Appends any bytes taken from a row of `text_len` bytes (the char path). Capacity
    /// planned for `text_len` bytes covers them, unless lowercasing made them longer: the
    /// excess comes out of `headroom`, which grows (at least doubling the buffer) when short,
    /// so every later row still finds its `WINDOW` bytes.
    #[inline(never)]
    fn push(&mut self, bytes: &[u8], text_len: usize) {
        let excess = bytes.len().saturating_sub(text_len);
        if excess > self.headroom {
            let grow = excess.max(self.values.capacity());
            let spare = self.values.capacity() - self.values.len();
            self.values.reserve_exact(spare + grow);
            self.headroom += grow;
        }
        self.headroom -= excess;
        self.values.extend_from_slice(bytes);
    }

    /// [`Self::push_prefix`], ASCII capitals lowercased on the way.
    fn push_prefix_lowercase(&mut self, src: &[u8; WINDOW], len: usize, bounds: &Bounds) {
        let mut lower = [0; WINDOW];
        for (block, out) in src
            .as_chunks::<16>()
            .0
            .iter()
            .zip(lower.as_chunks_mut::<16>().0)
        {
            let v = u8x16::new(*block);
            let upper = (v - u8x16::splat(b'A')).simd_le(bounds.letter);
            *out = (v | (upper & u8x16::splat(0x20))).to_array();
        }
        self.push_prefix(&lower, len);
    }

    fn end_row(&mut self) {
        self.rows += 1;
        self.offsets[self.rows] = self.values.len() as i32;
    }

    fn finish(self, nulls: &NullBuffer) -> Result<ArrayRef, UdfError> {
        utf8_column_from_bytes(self.values, self.offsets, Some(nulls.clone()))
    }
}

pub fn email_parts(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let input = arg(batch, 0)?;
    match input.data_type() {
        DataType::Utf8 => split_column(input.as_string::<i32>()),
        DataType::LargeUtf8 => split_column(input.as_string::<i64>()),
        // Views keep their text in several buffers: gather it into one.
        DataType::Utf8View => split_column(&StringArray::from_iter(input.as_string_view())),
        other => Err(udf_error!("expected a string column, got {other}")),
    }
}

fn split_column<O: OffsetSizeTrait>(input: &GenericStringArray<O>) -> Result<ArrayRef, UdfError> {
    // Each row is seen through the VIEW bytes from its first byte on: the first WINDOW are
    // classified, and any WINDOW bytes from a position in those can be copied at once. The last
    // rows' views come from a zero-padded copy of the text's end.
    const VIEW: usize = 2 * WINDOW;
    let data = input.value_data();
    let tail_start = data.len().saturating_sub(VIEW);
    let mut tail = [0; 2 * VIEW];
    tail[..data.len() - tail_start].copy_from_slice(&data[tail_start..]);
    let bounds = Bounds::new();
    // Users and domains are each shorter than their rows' text (but for lowercasing some
    // non-ASCII letters): sized from it, since growing a Vec in Wasm also copies it (dlmalloc
    // has no mremap), which cost 2.4% of the UDF's time.
    let offsets = input.value_offsets();
    let text_bytes = (offsets[input.len()] - offsets[0]).as_usize();
    let mut users = Utf8Out::with_capacity(input.len(), text_bytes);
    let mut domains = Utf8Out::with_capacity(input.len(), text_bytes);
    // Validity, packed as it goes: a `Vec<bool>` packed afterwards cost ~1 ns/row in Wasm.
    let mut valid = Vec::with_capacity(input.len().div_ceil(64));
    let mut word = 0u64;
    for (i, &offset) in offsets[..input.len()].iter().enumerate() {
        let parts = input.is_valid(i) && {
            let text = input.value(i);
            let offset = offset.as_usize();
            let view: &[u8; VIEW] = match data.get(offset..offset + VIEW) {
                Some(view) => view.try_into().unwrap(),
                None => tail[offset - tail_start..][..VIEW].try_into().unwrap(),
            };
            let m = Classes::for_text(text.len(), view[..WINDOW].try_into().unwrap(), &bounds);
            match scan(text.len(), &m) {
                Scanned::Split { start, at, end } => {
                    users.push_prefix(view[start..][..WINDOW].try_into().unwrap(), at - start);
                    let domain = view[at + 1..][..WINDOW].try_into().unwrap();
                    domains.push_prefix_lowercase(domain, end - at - 1, &bounds);
                    true
                }
                Scanned::Invalid => false,
                Scanned::NotAscii => match split_unicode(text) {
                    Some((user, domain)) => {
                        users.push(user.as_bytes(), text.len());
                        let lower: String = domain.chars().flat_map(char::to_lowercase).collect();
                        domains.push(lower.as_bytes(), text.len());
                        true
                    }
                    None => false,
                },
            }
        };
        users.end_row();
        domains.end_row();
        word |= (parts as u64) << (i % 64);
        if i % 64 == 63 {
            valid.push(word);
            word = 0;
        }
    }
    if !input.len().is_multiple_of(64) {
        valid.push(word);
    }
    let nulls = NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(valid), 0, input.len()));
    struct_of(vec![
        ("user", users.finish(&nulls)?),
        ("domain", domains.finish(&nulls)?),
    ])
}

export_udf!(email_parts);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every string up to 5 bytes over an alphabet that exercises each rule, plus longer ones
    /// around the window's size.
    fn cases() -> Vec<String> {
        let alphabet = [b'a', b'B', b'1', b'.', b'-', b'@', b' ', b'\x0b', b'_'];
        let mut cases: Vec<String> = vec![
            "someone.else@sub-domain.example.org".into(),
            "  padded.user@Example.COM\t".into(),
            "trailing.dot@example.com.".into(),
            "in valid@example.com".into(),
        ];
        for len in 0..=5u32 {
            for mut k in 0..alphabet.len().pow(len) {
                let mut s = String::new();
                for _ in 0..len {
                    s.push(alphabet[k % alphabet.len()] as char);
                    k /= alphabet.len();
                }
                cases.push(s);
            }
        }
        for len in WINDOW - 3..=WINDOW + 2 {
            let user = "u".repeat(len - "@example.org".len());
            cases.push(format!("{user}@example.org"));
            cases.push(format!("{user}@example.or-"));
            cases.push(format!(" {}@x.org ", "u".repeat(len - 8)));
        }
        cases
    }

    #[test]
    fn mask_rules_agree_with_the_char_rules() {
        for case in &cases() {
            assert_eq!(split_email(case), split_unicode(case), "{case:?}");
        }
    }

    /// email_parts over `column`: each row's `(user, domain)`, or None.
    fn parts_of(column: ArrayRef) -> Vec<Option<(String, String)>> {
        let batch = RecordBatch::try_from_iter([("email", column)]).unwrap();
        let out = email_parts(&batch).unwrap();
        let out = out.as_struct();
        let (users, domains) = (
            out.column(0).as_string::<i32>(),
            out.column(1).as_string::<i32>(),
        );
        (0..out.len())
            .map(|i| {
                users
                    .is_valid(i)
                    .then(|| (users.value(i).to_string(), domains.value(i).to_string()))
            })
            .collect()
    }

    /// Large strings, string views, nulls and a sliced column give what plain strings give.
    #[test]
    fn every_string_layout_agrees() {
        let rows = [
            Some(" A@B.org"),
            None,
            Some("x@y"),
            Some("ü@Ü.de"),
            Some("q@r.st"),
        ];
        let plain = parts_of(Arc::new(StringArray::from(rows.to_vec())));
        assert_eq!(plain[0], Some(("A".into(), "b.org".into())));
        assert_eq!(plain[1..3], [None, None]);
        assert_eq!(plain[3], Some(("ü".into(), "ü.de".into())));
        let large = lancet_sdk::arrow_array::LargeStringArray::from(rows.to_vec());
        assert_eq!(parts_of(Arc::new(large)), plain);
        let views = lancet_sdk::arrow_array::StringViewArray::from(rows.to_vec());
        assert_eq!(parts_of(Arc::new(views)), plain);
        let sliced = StringArray::from(rows.to_vec()).slice(1, 4);
        assert_eq!(parts_of(Arc::new(sliced)), plain[1..]);
    }

    /// Lowercasing can lengthen a domain (`İ`, 2 bytes, is `i̇`, 3): the output must still
    /// fit when every later row is as long as its text allows.
    #[test]
    fn longer_lowercase_keeps_room_for_later_rows() {
        // 100 rows 6 bytes over their text, then rows only 2 bytes under theirs.
        let long = format!("u@{}.de", "d".repeat(57));
        let mut rows = vec!["a@İİİİİİİİ.de"; 100];
        rows.extend(vec![long.as_str(); 200]);
        let got = parts_of(Arc::new(StringArray::from(rows)));
        assert_eq!(got[0], Some(("a".into(), "i̇i̇i̇i̇i̇i̇i̇i̇.de".into())));
        assert_eq!(got[299], Some(("u".into(), long[2..].into())));
    }

    /// In a column each row's window holds the next rows' bytes: they must not matter.
    #[test]
    fn column_rows_agree_with_the_char_rules() {
        let cases = cases();
        let got = parts_of(Arc::new(StringArray::from_iter_values(&cases)));
        for (case, got) in cases.iter().zip(got) {
            let expected = split_unicode(case).map(|(u, d)| (u.to_string(), d.to_lowercase()));
            assert_eq!(got, expected, "{case:?}");
        }
    }

    #[test]
    fn splits_plausible_addresses_only() {
        assert_eq!(
            split_email(" Ada.L@Example.COM "),
            Some(("Ada.L", "Example.COM"))
        );
        assert_eq!(split_email("ü@Dömäin-1.Örg"), Some(("ü", "Dömäin-1.Örg")));
        assert_eq!(split_email("x@a-b.c1"), Some(("x", "a-b.c1")));
        for bad in [
            "",
            "no-at",
            "@x.com",
            "a@",
            "a@b",
            "a@@b.com",
            "a b@c.com",
            "a@b..com",
            "a@-b.com",
            "a@b-.com",
            "a@b.com.",
            "a@.b.com",
            "a@b.c_m",
            "a\x0bb@c.com",
            "a@b@c.com",
            "ü ser@x.org",
            "a@b..ünï.org",
        ] {
            assert_eq!(split_email(bad), None, "{bad:?}");
        }
    }
}
