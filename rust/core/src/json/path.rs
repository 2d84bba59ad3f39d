//! Ignore key paths (SPEC §9.4): `key(.key)*`, each key optionally followed by `[]`.
use super::value::{Str, Value};

/// A validated key path; the last segment is always a plain key.
#[derive(Clone, Debug)]
pub struct KeyPath {
    segments: Vec<Segment>,
}

#[derive(Clone, Debug)]
struct Segment {
    key: Str,
    /// `key[]`: descend into every element of the array under `key`.
    each: bool,
}

impl KeyPath {
    /// Parses a path; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<KeyPath, String> {
        if text.is_empty() {
            return Err("an empty key path".to_owned());
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let (key, each) = match part.strip_suffix("[]") {
                Some(k) => (k, true),
                None => (*part, false),
            };
            if key.is_empty() {
                return Err(format!("key path {text:?} has an empty key"));
            }
            if key.contains(['[', ']']) {
                return Err(format!(
                    "key path {text:?}: only `[]` (every element) may follow a key; indexes are not supported"
                ));
            }
            if each && i + 1 == parts.len() {
                return Err(format!("key path {text:?} must end with a key, not `[]`"));
            }
            segments.push(Segment { key: Str::from(key), each });
        }
        Ok(KeyPath { segments })
    }

    /// True when removing this path from `v` would change it.
    pub fn present_in(&self, v: &Value) -> bool {
        present(&self.segments, v)
    }

    /// Segment `k`: its key and whether it is followed by `[]` (every element).
    pub fn segment(&self, k: usize) -> Option<(&Str, bool)> {
        self.segments.get(k).map(|s| (&s.key, s.each))
    }

    /// The number of segments (at least one).
    pub fn depth(&self) -> usize {
        self.segments.len()
    }

    /// Removes what the path names from `v`; a missing or mistyped step removes nothing.
    pub fn remove_from(&self, v: &mut Value) {
        remove(&self.segments, v);
    }
}

fn present(segs: &[Segment], v: &Value) -> bool {
    let Some((seg, rest)) = segs.split_first() else { return false };
    let Value::Object(o) = v else { return false };
    let Some(child) = o.get(&seg.key) else { return false };
    if rest.is_empty() {
        return true;
    }
    if seg.each {
        match child {
            Value::Array(items) => items.iter().any(|item| present(rest, item)),
            _ => false,
        }
    } else {
        present(rest, child)
    }
}

fn remove(segs: &[Segment], v: &mut Value) {
    let Some((seg, rest)) = segs.split_first() else { return };
    let Value::Object(o) = v else { return };
    if rest.is_empty() {
        o.remove(&seg.key);
        return;
    }
    let Some(child) = o.get_mut(&seg.key) else { return };
    if seg.each {
        if let Value::Array(items) = child {
            for item in items {
                remove(rest, item);
            }
        }
    } else {
        remove(rest, child);
    }
}

#[cfg(test)]
mod tests {
    use super::KeyPath;
    use crate::json::parse;

    #[test]
    fn syntax() {
        assert!(KeyPath::parse("a").is_ok());
        assert!(KeyPath::parse("a.b").is_ok());
        assert!(KeyPath::parse("items[].sku").is_ok());
        assert!(KeyPath::parse("items[0].sku").is_err());
        assert!(KeyPath::parse("items[]").is_err());
        assert!(KeyPath::parse("a..b").is_err());
        assert!(KeyPath::parse("").is_err());
    }

    #[test]
    fn removal() {
        let mut v = parse(r#"{"items":[{"sku":1,"n":2},{"n":3},5],"a":{"b":1}}"#, 128).unwrap();
        let p = KeyPath::parse("items[].sku").unwrap();
        assert!(p.present_in(&v));
        p.remove_from(&mut v);
        assert!(!p.present_in(&v));
        assert_eq!(v, parse(r#"{"items":[{"n":2},{"n":3},5],"a":{"b":1}}"#, 128).unwrap());
        KeyPath::parse("a.b.c").unwrap().remove_from(&mut v);
        KeyPath::parse("a.b").unwrap().remove_from(&mut v);
        assert_eq!(v, parse(r#"{"items":[{"n":2},{"n":3},5],"a":{}}"#, 128).unwrap());
    }
}
