//! Python pickles of plain data (protocol 4, what `pickle.dump` writes by default on Python
//! 3.8–3.13, hence what PyTorch's `_dump_snapshot` writes), for the files other tools read: PyTorch's memory
//! snapshots, which its `memory_viz` opens, are a pickled dict of lists, strings and ints.
//!
//! Only what those files hold: `None`, bools, ints, floats, strings, lists, tuples and dicts
//! with string keys. No memo and no classes, so any pickle reader, PyTorch's JavaScript one
//! included (it takes protocols 2 to 4 and none of `GLOBAL`/`REDUCE`/`LONG4`), loads it. Every
//! opcode used dates from protocol 2; protocol 4's framing is optional and left out, as
//! CPython's reader allows.

/// A value to pickle.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int. memory_viz's reader keeps ints as JavaScript numbers, exact below 2⁵³: keep
    /// addresses and sizes under that.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A dict with string keys, in this order.
    Dict(Vec<(String, Value)>),
}

impl Value {
    /// A dict from `(key, value)` pairs.
    pub fn dict<K: Into<String>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Dict(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A string.
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        // Sizes and addresses: beyond i64 they are no memory a card has.
        Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Int(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

/// `value` as a protocol-4 pickle: `PROTO 4`, the value, `STOP`.
pub fn to_pickle(value: &Value) -> Vec<u8> {
    let mut out = vec![0x80, 4];
    write(value, &mut out);
    out.push(b'.');
    out
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::None => out.push(b'N'),
        Value::Bool(true) => out.push(0x88),
        Value::Bool(false) => out.push(0x89),
        Value::Int(n) => int(*n, out),
        Value::Float(x) => {
            out.push(b'G');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Value::Str(s) => {
            // BINUNICODE: a u32 length, then UTF-8.
            out.push(b'X');
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::List(items) => {
            out.push(b']');
            if !items.is_empty() {
                out.push(b'(');
                items.iter().for_each(|v| write(v, out));
                out.push(b'e');
            }
        }
        Value::Tuple(items) => match items.len() {
            0 => out.push(b')'),
            n @ 1..=3 => {
                items.iter().for_each(|v| write(v, out));
                out.push([0x85, 0x86, 0x87][n - 1]);
            }
            _ => {
                out.push(b'(');
                items.iter().for_each(|v| write(v, out));
                out.push(b't');
            }
        },
        Value::Dict(entries) => {
            out.push(b'}');
            if !entries.is_empty() {
                out.push(b'(');
                for (k, v) in entries {
                    write(&Value::Str(k.clone()), out);
                    write(v, out);
                }
                out.push(b'u');
            }
        }
    }
}

/// The shortest int opcode: `BININT1` (0–255), `BININT2` (to 65 535), `BININT` (32-bit
/// signed), else `LONG1` with the fewest little-endian two's-complement bytes.
fn int(n: i64, out: &mut Vec<u8>) {
    if (0..=0xff).contains(&n) {
        out.extend_from_slice(&[b'K', n as u8]);
    } else if (0..=0xffff).contains(&n) {
        out.push(b'M');
        out.extend_from_slice(&(n as u16).to_le_bytes());
    } else if let Ok(n) = i32::try_from(n) {
        out.push(b'J');
        out.extend_from_slice(&n.to_le_bytes());
    } else {
        let bytes = n.to_le_bytes();
        // Drop high bytes that only repeat the sign.
        let mut len = 8;
        while len > 1 {
            let (top, next) = (bytes[len - 1], bytes[len - 2]);
            let redundant = (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0);
            if !redundant {
                break;
            }
            len -= 1;
        }
        out.extend_from_slice(&[0x8a, len as u8]);
        out.extend_from_slice(&bytes[..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_take_the_shortest_opcode_cpython_would() {
        let p = |n: i64| to_pickle(&Value::Int(n))[2..].to_vec();
        assert_eq!(p(7), [b'K', 7, b'.']);
        assert_eq!(p(300), [b'M', 0x2c, 0x01, b'.']);
        assert_eq!(p(-1), [b'J', 0xff, 0xff, 0xff, 0xff, b'.']);
        // CPython: pickle.dumps(0x7f0000000000, 2)[2:] == b'\x8a\x06\x00\x00\x00\x00\x00\x7f.'
        assert_eq!(p(0x7f00_0000_0000), [0x8a, 6, 0, 0, 0, 0, 0, 0x7f, b'.']);
        // 2³¹ needs a fifth byte, its sign bit clear.
        assert_eq!(p(1 << 31), [0x8a, 5, 0, 0, 0, 0x80, 0, b'.']);
        assert_eq!(p(i64::MIN + 1)[..2], [0x8a, 8]);
    }

    #[test]
    fn empty_containers_need_no_mark() {
        assert_eq!(to_pickle(&Value::List(vec![])), [0x80, 4, b']', b'.']);
        assert_eq!(to_pickle(&Value::Dict(vec![])), [0x80, 4, b'}', b'.']);
        let t = to_pickle(&Value::Tuple(vec![Value::Int(0), Value::Int(0)]));
        assert_eq!(t, [0x80, 4, b'K', 0, b'K', 0, 0x86, b'.']);
    }
}
