//! One node's backward step: the op bodies' `backward`, on buffer handles.

use super::*;

impl Exec<'_> {
    /// One node's backward step.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over every graph op, each arm that op's `backward` in burn's \
                  order: splitting it would scatter the table"
    )]
    pub(super) fn step(&mut self, node: usize) {
        let g = self.f.g;
        let nd = &g.nodes[node];
        self.at = Label::new(
            format!("∂{}", nd.name),
            format!("{} backward", nd.op.label()),
            Family::Backward,
        );
        let inputs: Vec<usize> = nd.inputs.iter().map(|t| t.0).collect();
        let tracked = |i: usize| g.nodes[i].tracked.then_some(i);
        let saved = |i: usize| nd.saves.contains(&TensorId(i));
        match &nd.op {
            Op::Matmul => {
                let (l, r) = (inputs[0], inputs[1]);
                let lv = saved(l).then(|| self.retrieve(l));
                let rv = saved(r).then(|| self.retrieve(r));
                let Some(grad) = self.consume(node) else {
                    return;
                };
                let parents = [tracked(l), tracked(r)];
                let dup = self.duplicate(grad, &parents);
                if let (Some(gl), Some(rv)) = (dup[0], rv) {
                    let o = self.matmul(gl, rv, self.bytes(l));
                    self.register(l, o);
                }
                if let (Some(gr), Some(lv)) = (dup[1], lv) {
                    let o = self.matmul(lv, gr, self.bytes(r));
                    self.register(r, o);
                }
            }
            Op::Mul | Op::Div => {
                let (l, r) = (inputs[0], inputs[1]);
                let lv = saved(l).then(|| self.retrieve(l));
                let rv = saved(r).then(|| self.retrieve(r));
                let Some(grad) = self.consume(node) else {
                    return;
                };
                let parents = [tracked(l), tracked(r)];
                let dup = self.duplicate(grad, &parents);
                if matches!(nd.op, Op::Mul) {
                    if let (Some(gl), Some(rv)) = (dup[0], rv) {
                        let o = self.binary(gl, rv);
                        self.register(l, o);
                    }
                    if let (Some(gr), Some(lv)) = (dup[1], lv) {
                        let o = self.binary(gr, lv);
                        self.register(r, o);
                    }
                } else {
                    // `float_div`'s backward: `rhs` duplicated per tracked parent.
                    let rv = rv.expect("div saves its rhs");
                    let rdup = self.duplicate(rv, &parents);
                    if let (Some(gl), Some(r1)) = (dup[0], rdup[0]) {
                        let recip = self.unary(r1);
                        let o = self.binary(gl, recip);
                        self.register(l, o);
                    }
                    if let (Some(gr), Some(r2), Some(lv)) = (dup[1], rdup[1], lv) {
                        let neg = self.unary(lv);
                        let c = self.clone_val(r2);
                        let sq = self.binary(c, r2);
                        let value = self.binary(neg, sq);
                        let o = self.binary(gr, value);
                        self.register(r, o);
                    }
                }
            }
            Op::AddSub(kind) => {
                let Some(grad) = self.consume(node) else {
                    return;
                };
                let parents = [tracked(inputs[0]), tracked(inputs[1])];
                let dup = self.duplicate(grad, &parents);
                if let Some(gl) = dup[0] {
                    self.register(inputs[0], gl);
                }
                if let Some(gr) = dup[1] {
                    let o = if *kind == "sub" { self.unary(gr) } else { gr };
                    self.register(inputs[1], o);
                }
            }
            Op::Slice { .. } => {
                let Some(grad) = self.consume(node) else {
                    return;
                };
                // `zeros(parent shape)`, then `slice_assign` into it (unique: in place).
                let z = self.new_buf(self.bytes(inputs[0]));
                self.drop_val(grad);
                self.register(inputs[0], z);
            }
            Op::Scalar(kind) => {
                let Some(grad) = self.consume(node) else {
                    return;
                };
                // add/sub_scalar pass the gradient on; mul/div_scalar scale it.
                let o = if kind.starts_with("mul") || kind.starts_with("div") {
                    self.unary(grad)
                } else {
                    grad
                };
                self.register(inputs[0], o);
            }
            Op::Unary(kind) => {
                let input = self.retrieve(inputs[0]);
                let state = self.unary(input);
                let Some(grad) = self.consume(node) else {
                    self.drop_val(state);
                    return;
                };
                let value = if *kind == "tanh" {
                    // `1 - tanh(x)^2`: `powi_scalar(state, 2)` is `mul(state.clone(), state)`.
                    let c = self.clone_val(state);
                    let sq = self.binary(c, state);
                    let neg = self.unary(sq);
                    self.unary(neg)
                } else {
                    state
                };
                let o = self.binary(grad, value);
                self.register(inputs[0], o);
            }
            Op::Sigmoid => {
                let input = self.retrieve(inputs[0]);
                let output = self.unary(input);
                let Some(grad) = self.consume(node) else {
                    self.drop_val(output);
                    return;
                };
                let c = self.clone_val(output);
                let neg = self.unary(output);
                let one_minus = self.unary(neg);
                let value = self.binary(c, one_minus);
                let o = self.binary(value, grad);
                self.register(inputs[0], o);
            }
            Op::Reduce(_) => {
                let Some(grad) = self.consume(node) else {
                    return;
                };
                let o = self.new_buf(self.bytes(inputs[0]));
                self.drop_val(grad);
                self.register(inputs[0], o);
            }
            Op::Custom { backward_temps, .. } => {
                let Some(grad) = self.consume(node) else {
                    return;
                };
                let saved_vals: Vec<Val> = inputs
                    .iter()
                    .filter(|&&i| saved(i))
                    .map(|&i| self.retrieve(i))
                    .collect();
                let temps: Vec<Val> = backward_temps
                    .iter()
                    .map(|s| self.new_buf(s.bytes(g.dtype)))
                    .collect();
                let outs: Vec<(usize, Val)> = inputs
                    .iter()
                    .filter(|&&i| g.nodes[i].tracked)
                    .map(|&i| (i, self.new_buf(self.bytes(i))))
                    .collect();
                for t in temps {
                    self.drop_val(t);
                }
                for v in saved_vals {
                    self.drop_val(v);
                }
                self.drop_val(grad);
                for (i, o) in outs {
                    self.register(i, o);
                }
            }
            Op::Param | Op::Input => {}
        }
    }
}
