//! The pickle subset memory snapshots are written in (protocols 2 to 5 of plain data: dicts,
//! lists, tuples, strings, numbers), read into an arena where a memoized object is one node
//! however often it is referenced. A snapshot shares each stack's frames between events
//! through the memo; a reader that copies on reference multiplies them (serde-pickle 1.2 also
//! counts references wrongly when shared objects nest, and fails on real snapshots).
//!
//! Classes (`GLOBAL`, `REDUCE`, …) are refused: a snapshot holds none, and a pickle that has
//! them is something else (a checkpoint, a tensor). Every length is checked against the bytes
//! left before anything is allocated, and every opcode consumes input, so a mutated file ends
//! in an error, never a hang.

/// A node of the arena.
pub(crate) type Id = u32;

/// A value of the pickle.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// An integer that does not.
    BigInt,
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Bytes (their length).
    Bytes(usize),
    /// A list.
    List(Vec<Id>),
    /// A tuple.
    Tuple(Vec<Id>),
    /// A dict, its pairs in order.
    Dict(Vec<(Id, Id)>),
    /// A set or frozenset.
    Set,
}

/// A parsed pickle: its nodes and the top one.
#[derive(Clone, Debug)]
pub(crate) struct Pickle {
    nodes: Vec<Node>,
    /// The object the pickle holds.
    pub(crate) top: Id,
}

/// Most nodes a pickle may make: far above a two-million-event snapshot's, far below memory.
const MAX_NODES: usize = 1 << 26;

enum Item {
    Node(Id),
    Mark,
}

impl Pickle {
    /// The node `id`.
    pub(crate) fn node(&self, id: Id) -> &Node {
        &self.nodes[id as usize]
    }

    /// Parses `bytes`; the error says at which byte and why.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Pickle, String> {
        let mut p = Parser {
            bytes,
            at: 0,
            nodes: Vec::new(),
            stack: Vec::new(),
            memo: Vec::new(),
        };
        p.run()
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: Vec<Option<Id>>,
}

impl Parser<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("cut short at byte {}: {n} more bytes wanted", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        let b = self.take(n)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Ok(u64::from_le_bytes(v))
    }

    fn len(&mut self, n: usize) -> Result<usize, String> {
        let len = self.uint(n)?;
        usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.bytes.len() - self.at)
            .ok_or_else(|| format!("at byte {}: a length of {len} passes the end", self.at))
    }

    fn push(&mut self, node: Node) -> Result<(), String> {
        if self.nodes.len() >= MAX_NODES {
            return Err(format!("more than {MAX_NODES} objects"));
        }
        self.nodes.push(node);
        self.stack.push(Item::Node((self.nodes.len() - 1) as Id));
        Ok(())
    }

    fn pop(&mut self) -> Result<Id, String> {
        match self.stack.pop() {
            Some(Item::Node(id)) => Ok(id),
            _ => Err(format!(
                "at byte {}: an object wanted on the stack",
                self.at
            )),
        }
    }

    fn top(&self) -> Result<Id, String> {
        match self.stack.last() {
            Some(Item::Node(id)) => Ok(*id),
            _ => Err(format!(
                "at byte {}: an object wanted on the stack",
                self.at
            )),
        }
    }

    /// Everything above the last mark, which is removed.
    fn since_mark(&mut self) -> Result<Vec<Id>, String> {
        let mark = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or_else(|| format!("at byte {}: no mark on the stack", self.at))?;
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .map(|i| match i {
                Item::Node(id) => id,
                Item::Mark => unreachable!("the last mark is below"),
            })
            .collect())
    }

    fn append(&mut self, list: Id, items: Vec<Id>) -> Result<(), String> {
        match &mut self.nodes[list as usize] {
            Node::List(l) => {
                l.extend(items);
                Ok(())
            }
            _ => Err(format!(
                "at byte {}: appending to what is not a list",
                self.at
            )),
        }
    }

    fn set_items(&mut self, dict: Id, items: Vec<Id>) -> Result<(), String> {
        if !items.len().is_multiple_of(2) {
            return Err(format!("at byte {}: a key without a value", self.at));
        }
        match &mut self.nodes[dict as usize] {
            Node::Dict(d) => {
                d.extend(items.chunks(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => Err(format!(
                "at byte {}: setting items of what is not a dict",
                self.at
            )),
        }
    }

    fn memo_put(&mut self, index: usize) -> Result<(), String> {
        let id = self.top()?;
        if index > self.nodes.len() {
            return Err(format!(
                "at byte {}: memo index {index} out of reach",
                self.at
            ));
        }
        if self.memo.len() <= index {
            self.memo.resize(index + 1, None);
        }
        self.memo[index] = Some(id);
        Ok(())
    }

    fn memo_get(&mut self, index: usize) -> Result<(), String> {
        let id = self
            .memo
            .get(index)
            .copied()
            .flatten()
            .ok_or_else(|| format!("at byte {}: memo {index} was never stored", self.at))?;
        self.stack.push(Item::Node(id));
        Ok(())
    }

    fn text(&mut self, n: usize) -> Result<(), String> {
        let len = self.len(n)?;
        let at = self.at;
        let s = std::str::from_utf8(self.take(len)?)
            .map_err(|_| format!("at byte {at}: a string that is not UTF-8"))?
            .to_string();
        self.push(Node::Str(s))
    }

    /// Pushes the scalar opcode `op` makes (its argument read), or says it is not one.
    fn scalar(&mut self, op: u8) -> Result<bool, String> {
        match op {
            b'N' => self.push(Node::None)?,
            0x88 => self.push(Node::Bool(true))?,
            0x89 => self.push(Node::Bool(false))?,
            b'J' => {
                let v = self.uint(4)? as u32 as i32;
                self.push(Node::Int(v.into()))?;
            }
            b'K' => {
                let v = self.uint(1)?;
                self.push(Node::Int(v as i64))?;
            }
            b'M' => {
                let v = self.uint(2)?;
                self.push(Node::Int(v as i64))?;
            }
            0x8a | 0x8b => {
                let n = self.len(if op == 0x8a { 1 } else { 4 })?;
                let b = self.take(n)?;
                let node = if n == 0 {
                    Node::Int(0)
                } else if n <= 8 {
                    let mut v = if b[n - 1] & 0x80 != 0 {
                        [0xff; 8]
                    } else {
                        [0; 8]
                    };
                    v[..n].copy_from_slice(b);
                    Node::Int(i64::from_le_bytes(v))
                } else {
                    Node::BigInt
                };
                self.push(node)?;
            }
            b'G' => {
                let b: [u8; 8] = self.take(8)?.try_into().expect("8 bytes");
                self.push(Node::Float(f64::from_be_bytes(b)))?;
            }
            b'X' => self.text(4)?,
            0x8c => self.text(1)?,
            0x8d => self.text(8)?,
            b'U' | b'T' | b'C' | b'B' | 0x8e => {
                let n = match op {
                    b'U' | b'C' => 1,
                    b'T' | b'B' => 4,
                    _ => 8,
                };
                let len = self.len(n)?;
                self.take(len)?;
                self.push(Node::Bytes(len))?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Does the memo opcode `op` (its argument read), or says it is not one.
    fn memo_op(&mut self, op: u8) -> Result<bool, String> {
        match op {
            0x94 => {
                let index = self.memo.len();
                self.memo_put(index)?;
            }
            b'q' => {
                let i = self.uint(1)? as usize;
                self.memo_put(i)?;
            }
            b'r' => {
                let i = self.uint(4)? as usize;
                self.memo_put(i)?;
            }
            b'h' => {
                let i = self.uint(1)? as usize;
                self.memo_get(i)?;
            }
            b'j' => {
                let i = self.uint(4)? as usize;
                self.memo_get(i)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn run(&mut self) -> Result<Pickle, String> {
        loop {
            let at = self.at;
            let op = self.take(1)?[0];
            match op {
                0x80 => {
                    let proto = self.uint(1)?;
                    if !(2..=5).contains(&proto) {
                        return Err(format!("pickle protocol {proto}; snapshots use 2 to 5"));
                    }
                }
                0x95 => {
                    self.uint(8)?;
                }
                b'.' => {
                    let top = self.pop()?;
                    return Ok(Pickle {
                        nodes: std::mem::take(&mut self.nodes),
                        top,
                    });
                }
                b'(' => self.stack.push(Item::Mark),
                b')' => self.push(Node::Tuple(Vec::new()))?,
                b']' => self.push(Node::List(Vec::new()))?,
                b'}' => self.push(Node::Dict(Vec::new()))?,
                0x8f => self.push(Node::Set)?,
                0x90 => {
                    self.since_mark()?;
                    self.top()?;
                }
                0x91 => {
                    self.since_mark()?;
                    self.push(Node::Set)?;
                }
                b't' => {
                    let items = self.since_mark()?;
                    self.push(Node::Tuple(items))?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Node::Tuple(items))?;
                }
                b'l' => {
                    let items = self.since_mark()?;
                    self.push(Node::List(items))?;
                }
                b'd' => {
                    let items = self.since_mark()?;
                    self.push(Node::Dict(Vec::new()))?;
                    let dict = self.top()?;
                    self.set_items(dict, items)?;
                }
                b'a' => {
                    let item = self.pop()?;
                    let list = self.top()?;
                    self.append(list, vec![item])?;
                }
                b'e' => {
                    let items = self.since_mark()?;
                    let list = self.top()?;
                    self.append(list, items)?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let dict = self.top()?;
                    self.set_items(dict, vec![key, value])?;
                }
                b'u' => {
                    let items = self.since_mark()?;
                    let dict = self.top()?;
                    self.set_items(dict, items)?;
                }
                _ if self.scalar(op)? || self.memo_op(op)? => {}
                b'c' | 0x93 | b'R' | 0x81 | 0x92 | b'b' | b'i' | b'o' => {
                    return Err(format!(
                        "byte {at} makes an object of a class (opcode {op:#04x}); a memory \
                         snapshot holds plain dicts and lists, so this pickle is something else"
                    ));
                }
                _ => {
                    return Err(format!(
                        "byte {at}: opcode {op:#04x} is not one a memory snapshot is written with"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memoized_object_is_one_node_however_often_it_is_referenced() {
        // [d, d] where d = {"a": 1}, written by CPython 3.12 (protocol 4).
        let bytes =
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01a\x94K\x01sh\x01e.";
        let p = Pickle::parse(bytes).unwrap();
        let Node::List(items) = p.node(p.top) else {
            panic!("{:?}", p.node(p.top))
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], items[1]);
        let Node::Dict(pairs) = p.node(items[0]) else {
            panic!()
        };
        assert_eq!(p.node(pairs[0].0), &Node::Str("a".into()));
        assert_eq!(p.node(pairs[0].1), &Node::Int(1));
    }

    #[test]
    fn a_class_or_a_cut_is_an_error_not_a_panic() {
        let class = b"\x80\x04\x8c\x08builtins\x8c\x03set\x93)R.";
        assert!(Pickle::parse(class).unwrap_err().contains("class"));
        assert!(
            Pickle::parse(b"\x80\x04X\xff\xff\xff\x7fab")
                .unwrap_err()
                .contains("passes the end")
        );
        assert!(Pickle::parse(b"").unwrap_err().contains("cut short"));
        assert!(
            Pickle::parse(b"\x80\x04h\x05.")
                .unwrap_err()
                .contains("never stored")
        );
        assert!(
            Pickle::parse(b"\x80\x04e.")
                .unwrap_err()
                .contains("no mark")
        );
    }
}
