//! *The method: from a dead run to a proven fix* (`src/method.md`): what its cells compute.

use cell_output::Table;

/// Step 2 of the method: every shape of two of `dims` (named sizes, each pair once, a dimension
/// with itself included) whose f32 or bf16 bytes equal one of the `failing` sizes, as rows of
/// failing size, shape and dtype. More than one shape may fit; the later steps decide.
pub fn shapes_table(failing: &[u64], dims: &[(&str, u64)]) -> Table {
    let mut t = Table::new(["failing size", "shape", "dtype"]);
    for &bytes in failing {
        for (i, (a, x)) in dims.iter().enumerate() {
            for (b, y) in &dims[i..] {
                for (dtype, size) in [("f32", 4), ("bf16", 2)] {
                    if x * y * size == bytes {
                        let shape = format!("[{a}, {b}] = [{x}, {y}]");
                        t.push([crate::bytes::exact(bytes), shape, dtype.to_string()]);
                    }
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Book;

    /// The chapter's own question: the SiTU recipe's two failing sizes, 32 and 64 MiB, are its
    /// activation's `[N, f]` and `[N, 2f]` tensors in f32.
    #[test]
    fn the_failing_sizes_factor_into_the_activations_shapes() {
        let r = Book::repository().recipe("situ").unwrap();
        let dims = [
            ("N = batch × seq_len", r.tokens()),
            ("d_ffn", r.d_ffn),
            ("2·d_ffn", r.gate_up_width()),
        ];
        let t = shapes_table(&[33_554_432, 67_108_864], &dims);
        let rows = t.rows();
        let f32_rows: Vec<_> = rows.iter().filter(|r| r[2] == "f32").collect();
        assert!(
            f32_rows
                .iter()
                .any(|r| r[1].starts_with("[N = batch × seq_len, d_ffn]"))
                && f32_rows
                    .iter()
                    .any(|r| r[1].starts_with("[N = batch × seq_len, 2·d_ffn]")),
            "{rows:?}"
        );
        assert!(
            rows.iter()
                .all(|r| r[0].starts_with("32 MiB") || r[0].starts_with("64 MiB"))
        );
        // A size nothing divides has no shape.
        assert!(shapes_table(&[3], &dims).rows().is_empty());
    }
}
