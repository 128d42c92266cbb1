//! Result files read leniently: a missing field reads as null, so that a table shows `–`
//! rather than failing on an optional one.

/// A recorded result file (`repro/results/*.json`).
pub type Json = serde_json::Value;

static NULL: Json = Json::Null;

/// Lenient access to a [`Json`] value.
pub trait Field {
    /// The field `key`, or null.
    fn at(&self, key: &str) -> &Json;
    /// The number, or NaN.
    fn num(&self) -> f64;
    /// The string, or `""`.
    fn str(&self) -> &str;
    /// The array, or an empty one.
    fn arr(&self) -> &[Json];
    /// Whether it is `true`.
    fn yes(&self) -> bool;
    /// Any value as a table cell: strings unquoted, null as `–`, arrays in brackets.
    fn text(&self) -> String;
}

impl Field for Json {
    fn at(&self, key: &str) -> &Json {
        self.get(key).unwrap_or(&NULL)
    }

    fn num(&self) -> f64 {
        self.as_f64().unwrap_or(f64::NAN)
    }

    fn str(&self) -> &str {
        self.as_str().unwrap_or("")
    }

    fn arr(&self) -> &[Json] {
        self.as_array().map_or(&[], Vec::as_slice)
    }

    fn yes(&self) -> bool {
        self.as_bool() == Some(true)
    }

    fn text(&self) -> String {
        match self {
            Json::Number(n) => n.to_string(),
            Json::String(s) => s.clone(),
            Json::Bool(b) => b.to_string(),
            Json::Null => "–".into(),
            Json::Array(v) => {
                let items: Vec<String> = v.iter().map(Field::text).collect();
                format!("[{}]", items.join(", "))
            }
            Json::Object(_) => "{…}".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_read_as_null() {
        let j: Json = serde_json::json!({"a": {"b": [1, "x", null]}, "ok": true, "n": 2.5});
        assert_eq!(j.at("a").at("b").text(), "[1, x, –]");
        assert_eq!(j.at("missing").at("deeper").text(), "–");
        assert!(j.at("missing").num().is_nan());
        assert_eq!(j.at("n").num(), 2.5);
        assert!(j.at("ok").yes() && !j.at("n").yes());
        assert_eq!(j.at("a").arr().len(), 0);
        assert_eq!(j.at("a").at("b").arr().len(), 3);
        assert_eq!(j.at("ok").str(), "");
        assert_eq!(j.at("a").text(), "{…}");
    }
}
