//! Request bodies read as their JSON Schema (`openapi.json`) describes them: objects
//! only where an object is asked for (serde would also take a struct from an array),
//! and integers as JSON Schema counts them: `2.0` is the integer 2 (an OpenAPI client
//! may well send it so), `2.5` is not an integer.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

use super::problem::Problem;

/// The body as a `what` request, or why it is not one.
pub fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, Problem> {
    let bad =
        |why: String| Problem::bad_request(format!("the body is not a {what} request: {why}"));
    let value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if !value.is_object() {
        return Err(bad("it must be a JSON object".to_string()));
    }
    // No array in these requests holds arrays: one that does is a struct spelt as an
    // array, which serde would accept.
    if nested_array(&value) {
        return Err(bad(
            "an array holds an array where objects are expected".to_string()
        ));
    }
    serde_json::from_value(value).map_err(|e| bad(e.to_string()))
}

fn nested_array(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(|i| i.is_array() || nested_array(i)),
        Value::Object(map) => map.values().any(nested_array),
        _ => false,
    }
}

/// The integer `n` is, if it is one (whatever its JSON spelling).
pub fn whole(n: &Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
            .map(|f| f as i64)
    })
}

/// The integer a JSON value is, if it is one.
pub fn of(v: &serde_json::Value) -> Option<i64> {
    v.as_number().and_then(whole)
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
