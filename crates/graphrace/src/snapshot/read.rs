//! The snapshot's fields read one by one from the pickle's nodes, each error naming its
//! field (`device_traces[0][12].size`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::pickle::{Id, Node, Pickle};
use super::{Action, BlockAtDump, Frame, SegmentAtDump, SnapshotError, Stack, TraceEvent};
use crate::caching::{Conf, Setting};
use crate::rounding::Divisions;

pub(super) fn kind(n: &Node) -> &'static str {
    match n {
        Node::None => "None",
        Node::Bool(_) => "a bool",
        Node::Int(_) | Node::BigInt => "an integer",
        Node::Float(_) => "a float",
        Node::Bytes(_) => "bytes",
        Node::Str(_) => "a string",
        Node::List(_) => "a list",
        Node::Tuple(_) => "a tuple",
        Node::Set => "a set",
        Node::Dict(_) => "a dict",
    }
}

/// The pickle read field by field, each error naming its field; a stack's frames are read
/// once however many events share them.
pub(super) struct Doc<'a> {
    pub(super) p: &'a Pickle,
    pub(super) stacks: RefCell<HashMap<Id, Arc<Stack>>>,
}

impl Doc<'_> {
    fn wrong(&self, field: &str, want: &str, id: Id) -> SnapshotError {
        SnapshotError::Field {
            field: field.into(),
            reason: format!("expected {want}, found {}", kind(self.p.node(id))),
        }
    }

    /// The value of `key` in the dict `id` (`None` if `id` is not a dict or lacks it).
    pub(super) fn get(&self, id: Id, key: &str) -> Option<Id> {
        let Node::Dict(pairs) = self.p.node(id) else {
            return None;
        };
        pairs
            .iter()
            .find(|(k, _)| matches!(self.p.node(*k), Node::Str(s) if s == key))
            .map(|&(_, v)| v)
    }

    fn dict(&self, id: Id, field: &str) -> Result<Id, SnapshotError> {
        match self.p.node(id) {
            Node::Dict(_) => Ok(id),
            _ => Err(self.wrong(field, "a dict", id)),
        }
    }

    pub(super) fn list(&self, id: Id, field: &str) -> Result<&[Id], SnapshotError> {
        match self.p.node(id) {
            Node::List(l) | Node::Tuple(l) => Ok(l),
            _ => Err(self.wrong(field, "a list", id)),
        }
    }

    fn field(&self, id: Id, at: &str, key: &str) -> Result<Id, SnapshotError> {
        self.get(id, key).ok_or_else(|| SnapshotError::Field {
            field: format!("{at}.{key}"),
            reason: "missing".into(),
        })
    }

    fn integer(&self, id: Id, field: &str) -> Result<i64, SnapshotError> {
        match self.p.node(id) {
            Node::Int(n) => Ok(*n),
            Node::Bool(b) => Ok(i64::from(*b)),
            Node::BigInt => Err(SnapshotError::Field {
                field: field.into(),
                reason: "an integer that does not fit 64 bits".into(),
            }),
            _ => Err(self.wrong(field, "an integer", id)),
        }
    }

    fn unsigned(&self, id: Id, field: &str) -> Result<u64, SnapshotError> {
        let n = self.integer(id, field)?;
        u64::try_from(n).map_err(|_| SnapshotError::Field {
            field: field.into(),
            reason: format!("{n} is negative"),
        })
    }

    fn string(&self, id: Id, field: &str) -> Result<&str, SnapshotError> {
        match self.p.node(id) {
            Node::Str(s) => Ok(s),
            _ => Err(self.wrong(field, "a string", id)),
        }
    }

    /// `key` of the dict `id` as an unsigned integer, `default` when absent.
    fn number_or(&self, id: Id, at: &str, key: &str, default: u64) -> Result<u64, SnapshotError> {
        match self.get(id, key) {
            Some(v) => self.unsigned(v, &format!("{at}.{key}")),
            None => Ok(default),
        }
    }

    fn number(&self, id: Id, at: &str, key: &str) -> Result<u64, SnapshotError> {
        self.unsigned(self.field(id, at, key)?, &format!("{at}.{key}"))
    }

    pub(super) fn event(&self, id: Id, at: &str) -> Result<TraceEvent, SnapshotError> {
        self.dict(id, at)?;
        let name = self.string(self.field(id, at, "action")?, &format!("{at}.action"))?;
        let action = Action::parse(name).ok_or_else(|| SnapshotError::UnknownAction {
            field: format!("{at}.action"),
            action: name.into(),
        })?;
        // An `oom` names the device's free bytes where the others name an address.
        let addr = match action {
            Action::Oom => self.number_or(id, at, "device_free", 0)?,
            Action::Snapshot | Action::UserDefined => 0,
            _ => self.number(id, at, "addr")?,
        };
        let size = match action {
            Action::Snapshot | Action::UserDefined => 0,
            _ => self.number(id, at, "size")?,
        };
        let time_us = match self.get(id, "time_us") {
            Some(v) => self.integer(v, &format!("{at}.time_us"))?,
            None => 0,
        };
        let stack = match self.get(id, "frames") {
            Some(f) => self.stack(f, &format!("{at}.frames"))?,
            None => Arc::default(),
        };
        Ok(TraceEvent {
            action,
            addr,
            size,
            stream: self.number_or(id, at, "stream", 0)?,
            time_us,
            stack,
        })
    }

    fn stack(&self, id: Id, at: &str) -> Result<Arc<Stack>, SnapshotError> {
        if let Some(known) = self.stacks.borrow().get(&id) {
            return Ok(known.clone());
        }
        let mut stack = Stack::default();
        let (mut node, mut aten) = (None, None);
        for (i, &f) in self.list(id, at)?.iter().enumerate() {
            let at = format!("{at}[{i}]");
            self.dict(f, &at)?;
            let filename =
                self.string(self.field(f, &at, "filename")?, &format!("{at}.filename"))?;
            let name = self.string(self.field(f, &at, "name")?, &format!("{at}.name"))?;
            if filename.ends_with(".py") {
                stack.python.push(Frame {
                    name: name.into(),
                    filename: filename.into(),
                    line: self.number_or(f, &at, "line", 0)?,
                });
            } else if node.is_none()
                && let Some(n) = between(name, "torch::autograd::generated::", "::apply")
            {
                node = Some(n);
            } else if aten.is_none()
                && let Some(op) = between(name, "at::_ops::", "::call")
            {
                aten = Some(op);
            }
        }
        stack.op = node.or(aten).map(str::to_string);
        let stack = Arc::new(stack);
        self.stacks.borrow_mut().insert(id, stack.clone());
        Ok(stack)
    }

    pub(super) fn segment(
        &self,
        id: Id,
        at: &str,
        device: usize,
    ) -> Result<Option<SegmentAtDump>, SnapshotError> {
        self.dict(id, at)?;
        if self.number_or(id, at, "device", device as u64)? != device as u64 {
            return Ok(None);
        }
        // `(0, 0)` is the ordinary pool; a CUDA graph's private pool has an id of its own.
        let private_pool = match self.get(id, "segment_pool_id").map(|p| self.p.node(p)) {
            Some(Node::Tuple(pool) | Node::List(pool)) => {
                let ids: Vec<i64> = pool
                    .iter()
                    .map(|&x| match self.p.node(x) {
                        Node::Int(n) => *n,
                        _ => 0,
                    })
                    .collect();
                match ids.as_slice() {
                    [a, b] if (*a, *b) != (0, 0) => Some((*a, *b)),
                    _ => None,
                }
            }
            _ => None,
        };
        let address = self.number(id, at, "address")?;
        let mut blocks = Vec::new();
        // Blocks tile their segment in order; versions before 2.1 gave no block addresses.
        let mut next = address;
        let list = self.list(self.field(id, at, "blocks")?, &format!("{at}.blocks"))?;
        for (i, &b) in list.iter().enumerate() {
            let at = format!("{at}.blocks[{i}]");
            self.dict(b, &at)?;
            let state = self.string(self.field(b, &at, "state")?, &format!("{at}.state"))?;
            let block = BlockAtDump {
                address: self.number_or(b, &at, "address", next)?,
                size: self.number(b, &at, "size")?,
                requested_size: self.number_or(b, &at, "requested_size", 0)?,
                in_use: state.starts_with("active"),
            };
            next = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        Ok(Some(SegmentAtDump {
            address,
            total_size: self.number(id, at, "total_size")?,
            stream: self.number_or(id, at, "stream", 0)?,
            private_pool,
            blocks,
        }))
    }

    /// `allocator_settings` as the model's [`Setting`].
    pub(super) fn settings(&self, id: Id, at: &str) -> Result<Setting, SnapshotError> {
        self.dict(id, at)?;
        let mut setting = Setting::from(Conf::Default);
        if let Some(x) = self.get(id, "expandable_segments")
            && self.integer(x, &format!("{at}.expandable_segments"))? != 0
        {
            setting.layout = Conf::Expandable;
        }
        if let Some(x) = self.get(id, "max_split_size") {
            // -1 (SIZE_MAX in some versions) is unset.
            match self.p.node(x) {
                Node::Int(bytes) if *bytes > 0 && *bytes < i64::MAX => {
                    setting.max_split = Some(*bytes as u64)
                }
                Node::Int(_) | Node::BigInt => {}
                _ => return Err(self.wrong(&format!("{at}.max_split_size"), "an integer", x)),
            }
        }
        if let Some(x) = self.get(id, "garbage_collection_threshold") {
            let t = match self.p.node(x) {
                Node::Float(t) => *t,
                _ => self.integer(x, &format!("{at}.garbage_collection_threshold"))? as f64,
            };
            if t > 0.0 {
                setting.gc_threshold = Some(t);
            }
        }
        if let Some(x) = self.get(id, "roundup_power2_divisions") {
            let at = format!("{at}.roundup_power2_divisions");
            self.dict(x, &at)?;
            let Node::Dict(pairs) = self.p.node(x) else {
                unreachable!("checked above")
            };
            let mut divisions = [0; 16];
            for &(k, n) in pairs {
                let Node::Str(mb) = self.p.node(k) else {
                    continue;
                };
                if let Ok(mb) = mb.parse::<u64>()
                    && mb.is_power_of_two()
                {
                    divisions[(mb.trailing_zeros() as usize).min(15)] =
                        self.unsigned(n, &format!("{at}[{mb}]"))?;
                }
            }
            setting.divisions = Divisions(divisions);
        }
        Ok(setting)
    }

    /// When each `Optimizer.step` of `device` ended.
    pub(super) fn annotations(&self, id: Id, device: usize) -> Result<Vec<i64>, SnapshotError> {
        let mut ends = Vec::new();
        for (i, &a) in self.list(id, "external_annotations")?.iter().enumerate() {
            let at = format!("external_annotations[{i}]");
            let stage = self.get(a, "stage").map(|s| self.p.node(s));
            let name = self.get(a, "name").map(|s| self.p.node(s));
            let (Some(Node::Str(stage)), Some(Node::Str(name))) = (stage, name) else {
                continue;
            };
            let on_device = self.number_or(a, &at, "device", device as u64)? == device as u64;
            if stage == "END" && name.starts_with("Optimizer.step") && on_device {
                ends.push(self.integer(self.field(a, &at, "time_us")?, &format!("{at}.time_us"))?);
            }
        }
        ends.sort_unstable();
        Ok(ends)
    }
}

/// What lies between `start` and the first `end` after it, when `name` starts so and holds no
/// `::` in between.
fn between<'a>(name: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = name.strip_prefix(start)?;
    let word = &rest[..rest.find(end)?];
    (!word.is_empty() && !word.contains("::")).then_some(word)
}
