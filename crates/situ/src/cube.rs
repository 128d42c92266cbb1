//! The fused path on CubeCL (feature `cube`): a forward kernel, a backward kernel, and the
//! [`SituBackend`] implementation for burn-cubecl's unfused `CubeBackend`.
//!
//! **Kernel design.** Both kernels are elementwise over the `[N, f]` output grid, one unit per
//! *vector* of `V` consecutive columns, `V` the widest of the client's IO-optimized vector
//! sizes (4 × f32 = 16-byte loads on CUDA) that divides `f`, every row stride and every
//! buffer's byte offset — so an `f` not divisible by 4 falls back to 2 or 1, never to a wrong
//! read. A unit at `(row, col)` reads the gate vector at `mid[row, col]` and the up vector at
//! `mid[row, f + col]` (two coalesced streams), computes everything in registers and writes:
//!
//! * forward: one vector of `h [N, f]` — 12 bytes moved per f32 output;
//! * backward: reads `dh[row, col]` too and writes both halves of `d(mid) [N, 2f]` — 20 bytes.
//!
//! Launch: 256 units per cube (`CubeDim::new_1d(256)`), `ceil(N·f/V / 256)` cubes spread by
//! `calculate_cube_count_elemwise`; units past the end return. Row strides are kernel
//! arguments, so a pitched (row-padded) input is read in place instead of copied.

use burn::tensor::Shape;
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement, kernel::into_contiguous,
    tensor::CubeTensor,
};
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};

use crate::counters::FUSED;
use crate::fused::SituBackend;

/// Units per cube.
pub(crate) const CUBE_UNITS: u32 = 256;

#[cube(launch_unchecked)]
fn situ_forward_kernel<F: Float, N: Size>(
    mid: &Array<Vector<F, N>>,
    out: &mut Array<Vector<F, N>>,
    fv: usize,
    units: usize,
    mid_rs: usize,
    out_rs: usize,
    cap: f32,
) {
    let p = ABSOLUTE_POS;
    if p >= units {
        terminate!();
    }
    let row = p / fv;
    let col = p % fv;
    let gi = row * mid_rs + col;
    let g = mid[gi];
    let u = mid[gi + fv];
    let c = Vector::<F, N>::new(F::cast_from(cap));
    let one = Vector::<F, N>::new(F::new(1.0));
    let zero = Vector::<F, N>::new(F::new(0.0));
    let gc = Vector::tanh(g / c) * c;
    let uc = Vector::tanh(u / c) * c;
    let s = one / (one + Vector::exp(zero - gc));
    out[row * out_rs + col] = s * gc * uc;
}

#[cube(launch_unchecked)]
#[allow(
    clippy::too_many_arguments,
    reason = "a kernel's launch signature: three arrays, their row strides and shape, the cap"
)]
fn situ_backward_kernel<F: Float, N: Size>(
    mid: &Array<Vector<F, N>>,
    dh: &Array<Vector<F, N>>,
    dmid: &mut Array<Vector<F, N>>,
    fv: usize,
    units: usize,
    mid_rs: usize,
    dh_rs: usize,
    dmid_rs: usize,
    cap: f32,
) {
    let p = ABSOLUTE_POS;
    if p >= units {
        terminate!();
    }
    let row = p / fv;
    let col = p % fv;
    let gi = row * mid_rs + col;
    let g = mid[gi];
    let u = mid[gi + fv];
    let d = dh[row * dh_rs + col];
    let c = Vector::<F, N>::new(F::cast_from(cap));
    let one = Vector::<F, N>::new(F::new(1.0));
    let zero = Vector::<F, N>::new(F::new(0.0));
    let tg = Vector::tanh(g / c);
    let tu = Vector::tanh(u / c);
    let gc = tg * c;
    let uc = tu * c;
    let s = one / (one + Vector::exp(zero - gc));
    let oi = row * dmid_rs + col;
    dmid[oi] = d * uc * s * (one + gc * (one - s)) * (one - tg * tg);
    dmid[oi + fv] = d * s * gc * (one - tu * tu);
}

/// How one launch was configured (recorded by the gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchInfo {
    /// Elements per vector load/store.
    pub vector: usize,
    /// Units (one per output vector).
    pub units: usize,
    /// Units per cube.
    pub cube_dim: u32,
    /// Cubes launched (x·y·z).
    pub cubes: u64,
}

fn row_major_2d<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    // Last dim must be dense; rows may be pitched.
    if t.meta.strides()[1] == 1 {
        t
    } else {
        into_contiguous(t)
    }
}

fn dims2<R: CubeRuntime>(t: &CubeTensor<R>) -> (usize, usize, usize) {
    let shape = t.meta.shape();
    assert_eq!(shape.num_dims(), 2, "situ kernels take rank-2 tensors");
    (shape[0], shape[1], t.meta.strides()[0])
}

/// Elements the array argument must span: `(rows − 1)·row_stride + width`.
fn span(rows: usize, width: usize, rs: usize) -> usize {
    if rows == 0 {
        0
    } else {
        (rows - 1) * rs + width
    }
}

fn vector_width<R: CubeRuntime>(
    t: &CubeTensor<R>,
    f: usize,
    strides: &[usize],
    others: &[&CubeTensor<R>],
) -> usize {
    let elem = t.dtype.size();
    t.client
        .io_optimized_vector_sizes(elem)
        .find(|&v| {
            f.is_multiple_of(v)
                && strides.iter().all(|s| s.is_multiple_of(v))
                && std::iter::once(t)
                    .chain(others.iter().copied())
                    .all(|x| (x.handle.offset_start.unwrap_or(0) as usize).is_multiple_of(v * elem))
        })
        .unwrap_or(1)
}

fn config<R: CubeRuntime>(
    t: &CubeTensor<R>,
    units: usize,
    vector: usize,
) -> (CubeCount, CubeDim, LaunchInfo) {
    let dim = CubeDim::new_1d(CUBE_UNITS);
    let count = calculate_cube_count_elemwise(&t.client, units.max(1), dim);
    let cubes = match &count {
        CubeCount::Static(x, y, z) => u64::from(*x) * u64::from(*y) * u64::from(*z),
        _ => 0,
    };
    (
        count,
        dim,
        LaunchInfo {
            vector,
            units,
            cube_dim: CUBE_UNITS,
            cubes,
        },
    )
}

/// A dense `[rows, cols]` tensor of `F`, uninitialized.
pub fn empty_dense<R: CubeRuntime, F: FloatElement>(
    like: &CubeTensor<R>,
    rows: usize,
    cols: usize,
) -> CubeTensor<R> {
    let handle = like.client.empty(rows * cols * core::mem::size_of::<F>());
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::new([rows, cols]),
        handle,
        F::dtype(),
    )
}

/// Forward kernel into a caller-owned `out [N, f]` (the gate passes a poisoned one).
pub fn forward_into<R: CubeRuntime, F: FloatElement>(
    mid: CubeTensor<R>,
    out: &CubeTensor<R>,
    cap: f32,
) -> LaunchInfo {
    let mid = row_major_2d(mid);
    let (n, w, mid_rs) = dims2(&mid);
    assert!(w.is_multiple_of(2), "mid must be [N, 2f]");
    let f = w / 2;
    let (on, of, out_rs) = dims2(out);
    assert_eq!((on, of), (n, f), "out must be [N, f]");
    assert_eq!(
        out.meta.strides()[1],
        1,
        "out must be dense in its last dim"
    );
    let v = vector_width(&mid, f, &[mid_rs, out_rs], &[out]);
    let fv = f / v;
    let units = n * fv;
    let (count, dim, info) = config(&mid, units, v);
    if units > 0 {
        let mid_len = span(n, w, mid_rs);
        let out_len = span(n, f, out_rs);
        // SAFETY: every index the kernel forms is below the spans passed here (row < n,
        // col < f/v, gate/up offsets < w/v), and units past `units` return before any access.
        unsafe {
            situ_forward_kernel::launch_unchecked::<F, R>(
                &mid.client,
                count,
                dim,
                v,
                ArrayArg::from_raw_parts(mid.handle.clone(), mid_len),
                ArrayArg::from_raw_parts(out.handle.clone(), out_len),
                fv,
                units,
                mid_rs / v,
                out_rs / v,
                cap,
            );
        }
    }
    FUSED.fwd(1);
    info
}

/// Backward kernel into a caller-owned `dmid [N, 2f]`.
pub fn backward_into<R: CubeRuntime, F: FloatElement>(
    mid: CubeTensor<R>,
    dh: CubeTensor<R>,
    dmid: &CubeTensor<R>,
    cap: f32,
) -> LaunchInfo {
    let mid = row_major_2d(mid);
    let dh = row_major_2d(dh);
    let (n, w, mid_rs) = dims2(&mid);
    let f = w / 2;
    let (dn, df, dh_rs) = dims2(&dh);
    assert_eq!((dn, df), (n, f), "dh must be [N, f]");
    let (on, ow, dmid_rs) = dims2(dmid);
    assert_eq!((on, ow), (n, w), "dmid must be [N, 2f]");
    assert_eq!(
        dmid.meta.strides()[1],
        1,
        "dmid must be dense in its last dim"
    );
    let v = vector_width(&mid, f, &[mid_rs, dh_rs, dmid_rs], &[&dh, dmid]);
    let fv = f / v;
    let units = n * fv;
    let (count, dim, info) = config(&mid, units, v);
    if units > 0 {
        let (mid_len, dh_len, dmid_len) =
            (span(n, w, mid_rs), span(n, f, dh_rs), span(n, w, dmid_rs));
        // SAFETY: as in `forward_into`; `dh` is indexed over [n, f], `dmid` over [n, 2f].
        unsafe {
            situ_backward_kernel::launch_unchecked::<F, R>(
                &mid.client,
                count,
                dim,
                v,
                ArrayArg::from_raw_parts(mid.handle.clone(), mid_len),
                ArrayArg::from_raw_parts(dh.handle.clone(), dh_len),
                ArrayArg::from_raw_parts(dmid.handle.clone(), dmid_len),
                fv,
                units,
                mid_rs / v,
                dh_rs / v,
                dmid_rs / v,
                cap,
            );
        }
    }
    FUSED.bwd();
    info
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> SituBackend
    for CubeBackend<R, F, I, BT>
{
    fn situ_fused_forward(mid: CubeTensor<R>, cap: f32) -> CubeTensor<R> {
        let (n, w, _) = dims2(&mid);
        let out = empty_dense::<R, F>(&mid, n, w / 2);
        forward_into::<R, F>(mid, &out, cap);
        out
    }

    fn situ_fused_backward(mid: CubeTensor<R>, dh: CubeTensor<R>, cap: f32) -> CubeTensor<R> {
        let (n, w, _) = dims2(&mid);
        let dmid = empty_dense::<R, F>(&mid, n, w);
        backward_into::<R, F>(mid, dh, &dmid, cap);
        dmid
    }
}

/// A vectorized device-to-device copy, the bandwidth yardstick of the bench.
#[cube(launch_unchecked)]
fn copy_kernel<F: Float, N: Size>(
    src: &Array<Vector<F, N>>,
    dst: &mut Array<Vector<F, N>>,
    units: usize,
) {
    let p = ABSOLUTE_POS;
    if p >= units {
        terminate!();
    }
    dst[p] = src[p];
}

/// Copies dense `src` into dense `dst` (same element count, a multiple of 4) with 16-byte vectors.
pub fn copy_into<R: CubeRuntime, F: FloatElement>(src: &CubeTensor<R>, dst: &CubeTensor<R>) {
    let len = src.meta.shape().num_elements();
    assert_eq!(len, dst.meta.shape().num_elements());
    let v = if len.is_multiple_of(4) { 4 } else { 1 };
    let units = len / v;
    let (count, dim, _) = config(src, units, v);
    // SAFETY: units index [0, len / v) of both arrays.
    unsafe {
        copy_kernel::launch_unchecked::<F, R>(
            &src.client,
            count,
            dim,
            v,
            ArrayArg::from_raw_parts(src.handle.clone(), len),
            ArrayArg::from_raw_parts(dst.handle.clone(), len),
            units,
        );
    }
}
