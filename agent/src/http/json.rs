//! Request bodies read as their JSON Schema (`openapi.json`) describes them: objects
//! only where an object is asked for (serde would also take a struct from an array),
//! and integers as JSON Schema counts them: `2.0` is the integer 2 (an OpenAPI client
//! may well send it so), `2.5` is not an integer.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Number;

use super::problem::Problem;

/// The body as a `what` request, or why it is not one.
pub fn parse<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, Problem> {
    let bad =
        |why: String| Problem::bad_request(format!("the body is not a {what} request: {why}"));
    // Parsed straight into the request's types, with no tree of values first (a
    // produce body is mostly a hundred or so strings); the shape is read from the text.
    let why = match (serde_json::from_slice(body), shape(body)) {
        (Ok(request), Shape::Object) => return Ok(request),
        (Err(e), Shape::Object) => e.to_string(),
        // Refused for the first reason a reader would look for: not JSON at all, not
        // an object, or an array in an array (no array in these requests holds
        // arrays: one that does is a struct spelt as an array, which serde accepts).
        (_, shape) => match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Err(e) => e.to_string(),
            Ok(_) if shape == Shape::NotAnObject => "it must be a JSON object".to_string(),
            Ok(_) => "an array holds an array where objects are expected".to_string(),
        },
    };
    Err(bad(why))
}

#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Object,
    NotAnObject,
    NestedArray,
}

/// What a valid JSON text is at its top, and whether any array in it holds an array:
/// one pass over the bytes, skipping strings.
fn shape(json: &[u8]) -> Shape {
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Shape::NotAnObject;
    }
    // For each open container, whether it is an array.
    let mut open: Vec<bool> = Vec::new();
    let mut at = 0;
    while let Some(&b) = json.get(at) {
        at += 1;
        match b {
            // A string: on to its closing quote (most of a produce body is strings).
            b'"' => loop {
                // (`get`: a text that is not JSON may end inside an escape.)
                let rest = json.get(at..).unwrap_or_default();
                match memchr::memchr2(b'"', b'\\', rest) {
                    Some(i) if json[at + i] == b'\\' => at += i + 2,
                    Some(i) => {
                        at += i + 1;
                        break;
                    }
                    None => return Shape::Object,
                }
            },
            b'[' if open.last() == Some(&true) => return Shape::NestedArray,
            b'[' => open.push(true),
            b'{' => open.push(false),
            b']' | b'}' => {
                open.pop();
            }
            _ => {}
        }
    }
    Shape::Object
}

/// An answer's model as JSON text. (The models are structs of strings, numbers and
/// maps with string keys, which always serialize.)
pub fn text<T: serde::Serialize>(answer: &T) -> String {
    serde_json::to_string(answer).unwrap_or_else(|e| {
        tracing::error!(error = %e, "an answer did not serialize");
        String::new()
    })
}

/// The integer `n` is, if it is one (whatever its JSON spelling).
pub fn whole(n: &Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
            .map(|f| f as i64)
    })
}

/// For `#[serde(deserialize_with = "json::int")]` fields: an integer in range, in
/// any JSON spelling of it.
pub fn int<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    let n = Number::deserialize(d)?;
    whole(&n)
        .and_then(|i| T::try_from(i).ok())
        .ok_or_else(|| D::Error::custom(format!("{n} is not an integer in range")))
}

/// For `#[serde(default, deserialize_with = "json::opt")]` fields.
pub fn opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    let n: Option<Number> = Option::deserialize(d)?;
    n.map(|n| {
        whole(&n)
            .and_then(|i| T::try_from(i).ok())
            .ok_or_else(|| D::Error::custom(format!("{n} is not an integer in range")))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::{Shape, shape};

    #[test]
    fn the_shape_is_read_from_the_text_with_strings_skipped() {
        assert_eq!(shape(br#" {"messages": [{"value": "a"}]}"#), Shape::Object);
        assert_eq!(shape(br#"[{"value": "a"}]"#), Shape::NotAnObject);
        assert_eq!(shape(br#""text""#), Shape::NotAnObject);
        assert_eq!(shape(br#"{"messages": [["k", "v"]]}"#), Shape::NestedArray);
        assert_eq!(
            shape(br#"{"m": [{"h": [{"key": "k"}]}, [1]]}"#),
            Shape::NestedArray
        );
        // Brackets inside strings, escaped quotes included, are text.
        assert_eq!(
            shape(br#"{"messages": [{"value": "[[\"]] ["}], "x": "\\"}"#),
            Shape::Object
        );
        // Texts that are not JSON are read to their end without a fault.
        assert_eq!(shape(br#"{"a\"#), Shape::Object);
        assert_eq!(shape(br#"{"a"#), Shape::Object);
        // An array in an object in an array is not an array in an array.
        assert_eq!(
            shape(br#"{"messages": [{"headers": [{"key": "a"}]}]}"#),
            Shape::Object
        );
    }

    #[test]
    fn a_struct_spelt_as_an_array_is_refused() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Inner {
            a: i64,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Outer {
            items: Vec<Inner>,
        }
        assert!(super::parse::<Outer>(br#"{"items": [{"a": 1}]}"#, "test").is_ok());
        let refused = super::parse::<Outer>(br#"{"items": [[1]]}"#, "test").unwrap_err();
        assert!(
            refused.detail.contains("an array holds an array"),
            "{refused:?}"
        );
        assert!(super::parse::<Outer>(br#"[[{"a": 1}]]"#, "test").is_err());
    }
}
