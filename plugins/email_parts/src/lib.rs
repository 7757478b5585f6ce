//! `email_parts`: splits an email address into a struct `{user: Utf8, domain: Utf8}` (a
//! multi-output UDF: each child becomes its own column). The domain is lowercased. An
//! invalid address gives nulls in both children, never an error.

use lancet_sdk::arrow_array::builder::StringBuilder;
use lancet_sdk::prelude::*;

/// `(user, domain)` of a plausible address: one `@`, a non-empty user without spaces, and a
/// dotted domain of non-empty alphanumeric/hyphen labels. Deliberately not RFC 5322.
pub fn split_email(text: &str) -> Option<(&str, &str)> {
    let (user, domain) = text.trim().split_once('@')?;
    let user_ok = !user.is_empty() && !user.contains(|c: char| c.is_whitespace() || c == '@');
    let domain_ok = domain.contains('.')
        && domain.split('.').all(|label| {
            let ok = |c: char| c.is_alphanumeric() || c == '-';
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && match label.is_ascii() {
                    true => label.bytes().all(|b| ok(b as char)),
                    false => label.chars().all(ok),
                }
        });
    (user_ok && domain_ok).then_some((user, domain))
}

pub fn email_parts(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let input = arg(batch, 0)?;
    let mut users = StringBuilder::with_capacity(input.len(), input.len() * 8);
    let mut domains = StringBuilder::with_capacity(input.len(), input.len() * 12);
    let mut lower = String::new();
    for_each_str(input, |value| match value.and_then(split_email) {
        Some((user, domain)) => {
            users.append_value(user);
            lower.clear();
            if domain.is_ascii() {
                lower.push_str(domain);
                lower.make_ascii_lowercase();
            } else {
                lower.extend(domain.chars().flat_map(char::to_lowercase));
            }
            domains.append_value(&lower);
        }
        None => {
            users.append_null();
            domains.append_null();
        }
    })?;
    struct_of(vec![
        ("user", Arc::new(users.finish())),
        ("domain", Arc::new(domains.finish())),
    ])
}

export_udf!(email_parts);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_plausible_addresses_only() {
        assert_eq!(
            split_email(" Ada.L@Example.COM "),
            Some(("Ada.L", "Example.COM"))
        );
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
        ] {
            assert_eq!(split_email(bad), None, "{bad:?}");
        }
    }
}
