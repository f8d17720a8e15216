//! A client certificate's principal: its subject as an RFC 2253 distinguished name
//! (as Java's `X500Principal.getName()` writes it, which is what Kafka's rules match),
//! mapped by Kafka's `ssl.principal.mapping.rules`.
//!
//! Rules are tried in order; the first whose pattern matches the whole name gives the
//! principal: `RULE:pattern/replacement/` with an optional `L` or `U` after the last
//! slash to lower- or upper-case the result, and `DEFAULT` for the name itself. A name
//! no rule matches cannot authenticate, as in Kafka.

use regex::Regex;
use x509_parser::prelude::{AttributeTypeAndValue, X509Name};

/// How a result is cased after the replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: Regex,
        /// In `regex`'s syntax (`${1}`), from Java's (`$1`).
        replacement: String,
        case: Case,
    },
}

/// Kafka's `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalRules(Vec<Rule>);

impl PrincipalRules {
    /// Parses rules in Kafka's form, e.g.
    /// `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT`.
    pub fn parse(text: &str) -> Result<PrincipalRules, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("rule {rest:?} has no '/' after its pattern"))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| format!("rule {rest:?} has no '/' after its replacement"))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                // Kafka's patterns are matched against the whole name.
                let pattern = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
                    format!("rule pattern {pattern:?} is not a regular expression: {e}")
                })?;
                rules.push(Rule::Replace {
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "{rest:?} is neither RULE:pattern/replacement/ nor DEFAULT"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("expected ',' between rules before {rest:?}")),
            }
        }
        if rules.is_empty() {
            return Err("no rule given (the default is DEFAULT)".to_string());
        }
        Ok(PrincipalRules(rules))
    }

    /// The principal name for a distinguished name; `None` when no rule matches.
    pub fn map(&self, name: &str) -> Option<String> {
        self.0.iter().find_map(|rule| match rule {
            Rule::Default => Some(name.to_string()),
            Rule::Replace {
                pattern,
                replacement,
                case,
            } => {
                let captures = pattern.captures(name)?;
                let mut out = String::new();
                captures.expand(replacement, &mut out);
                Some(match case {
                    Case::Keep => out,
                    Case::Lower => out.to_lowercase(),
                    Case::Upper => out.to_uppercase(),
                })
            }
        })
    }
}

/// The text up to the next unescaped `/`, and what follows it.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &text[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's replacement syntax (`$1`, `\$` for a dollar) in `regex`'s (`${1}`, `$$`).
fn java_replacement(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// A certificate subject in RFC 2253 form, as Java writes it: the most specific
/// attribute first (`CN=alice,OU=eng,O=example`), keyword names for the attributes
/// RFC 2253 names, the dotted OID and `#`-hex DER for the others.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<String>>().join("+"))
        .collect();
    rdns.into_iter().rev().collect::<Vec<String>>().join(",")
}

fn attribute(attr: &AttributeTypeAndValue<'_>) -> String {
    let oid = attr.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    match (keyword, attr.as_str()) {
        (Some(k), Ok(value)) => format!("{k}={}", escape(value)),
        _ => format!("{oid}=#{}", der_hex(attr)),
    }
}

/// RFC 2253's escapes for an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An attribute value's DER (tag, length, content) in hex.
fn der_hex(attr: &AttributeTypeAndValue<'_>) -> String {
    let value = attr.attr_value();
    let data = value.data;
    let mut der = vec![value.tag().0 as u8];
    match data.len() {
        n if n < 0x80 => der.push(n as u8),
        n if n <= 0xff => der.extend([0x81, n as u8]),
        n => der.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    der.extend_from_slice(data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_rules_map_as_kafka_documents() {
        let rules = PrincipalRules::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT",
        )
        .expect("Kafka's documented example parses");
        assert_eq!(
            rules.map("CN=kafka-user1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            Some("kafka-user1".to_string())
        );
        assert_eq!(
            rules.map("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US"),
            Some("duke@javasoft".to_string())
        );
        assert_eq!(
            rules.map("OU=JavaSoft,CN=ADMIN,O=Sun"),
            Some("admin".to_string())
        );
        assert_eq!(rules.map("O=nobody"), Some("O=nobody".to_string()));
    }

    #[test]
    fn no_matching_rule_gives_no_principal_and_bad_rules_are_refused() {
        let rules = PrincipalRules::parse("RULE:^CN=([^,]+),O=strata$/$1/U").expect("parses");
        assert_eq!(rules.map("CN=alice,O=strata"), Some("ALICE".to_string()));
        assert_eq!(rules.map("CN=alice,O=other"), None);
        for bad in [
            "",
            "RULE:^CN=(.*$/$1/",
            "RULE:abc",
            "DEFAULT DEFAULT",
            "SOMETHING",
        ] {
            assert!(
                PrincipalRules::parse(bad).is_err(),
                "{bad:?} must be refused"
            );
        }
        let escaped = PrincipalRules::parse(r"RULE:^CN=(.*)$/\$$1\/x/").expect("parses");
        assert_eq!(escaped.map("CN=a"), Some("$a/x".to_string()));
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("Sun, Inc."), "Sun\\, Inc.");
        assert_eq!(escape("#1 "), "\\#1\\ ");
        assert_eq!(escape("a+b=c"), "a\\+b=c");
    }
}
