//! `--dump-graph`: the driver's graphs of the captured configurations read back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use graphrace::driver::{ByteAccess, DriverGraph, DriverNode, GraphDump, Region, RegionHome};
use graphrace::program::{Home, TensorId};
use graphrace::{Config, Mode, capture, decode_step};

use crate::Args;
use crate::gpu::{Gpu, dptr, driver_version};

/// Captures every captured configuration of `repro/graphrace/` and writes the graphs the
/// driver built, read back node by node and edge by edge.
pub(crate) fn dump_graphs(
    gpu: &Gpu,
    args: &Args,
    command: String,
    name: String,
    path: &Path,
) -> Result<()> {
    let sessions = args.sessions[0];
    let mut files: Vec<PathBuf> = std::fs::read_dir("repro/graphrace")
        .context("reading repro/graphrace (run from the repository's root)")?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    let mut graphs = vec![];
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "toml"))
    {
        let text = std::fs::read_to_string(file)?;
        let config = Config::parse(&file.display().to_string(), &text)?;
        if config.mode != Mode::Captured {
            continue;
        }
        let g = dump_graph(gpu, &config, sessions, args.blocks)
            .with_context(|| format!("dumping the graph of {}", file.display()))?;
        let kernels = g.nodes.iter().filter(|n| n.kind == "kernel").count();
        println!(
            "{:>14}: {} nodes ({kernels} kernels), {} edges",
            g.config,
            g.nodes.len(),
            g.edges.len()
        );
        graphs.push(g);
    }
    let dump = GraphDump {
        command,
        gpu: name,
        driver: driver_version(),
        date: provenance::utc_now(),
        git_revision: option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into(),
        graphs,
    };
    std::fs::write(path, serde_json::to_string_pretty(&dump)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The step of `config` captured on the GPU, and its graph read back from the driver: every
/// node's type, a kernel's function and arguments (decoded with the signatures in `KERNELS`),
/// and every edge. The memory map is the GPU arm's own layout of the model's tensors.
#[expect(
    clippy::too_many_lines,
    reason = "one capture read back through raw driver calls, each `unsafe` block relying on \
              `captured` staying alive until the graph's nodes, edges and regions are all read"
)]
pub(crate) fn dump_graph(
    gpu: &Gpu,
    config: &Config,
    sessions: u32,
    blocks: u32,
) -> Result<DriverGraph> {
    use cudarc::driver::sys;
    let program = decode_step(config, sessions);
    let model = capture(&program).context("the model's capture")?;
    let b = gpu.buffers(&program, &model)?;
    gpu.main
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    // Which node each launch made, as the capture reports it: the node the stream's next
    // captured work would depend on.
    let mut made_by: HashMap<usize, usize> = HashMap::new();
    gpu.walk(&program, &b, blocks, 1.0, |op, stream| {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut deps, mut n): (*const sys::CUgraphNode, usize) = (std::ptr::null(), 0);
        // SAFETY: a capturing stream; the dependency array is the driver's, read at once.
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream.cu_stream(),
                &mut status,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut deps,
                std::ptr::null_mut(),
                &mut n,
            )
            .result()?;
            if n != 1 {
                bail!(
                    "after host op {op} the capture reports {n} dependencies, not the one node \
                     the launch made"
                );
            }
            made_by.insert(*deps as usize, op);
        }
        Ok(())
    })?;
    let captured = gpu
        .main
        .end_capture(CUgraphInstantiate_flags(0))?
        .context("the capture recorded nothing")?;
    let cu_graph = captured.cu_graph();

    let mut count = 0usize;
    let mut handles: Vec<sys::CUgraphNode> = vec![];
    // SAFETY: the graph is alive (`captured`); the first call sizes the second's buffer.
    unsafe {
        sys::cuGraphGetNodes(cu_graph, std::ptr::null_mut(), &mut count).result()?;
        handles.resize(count, std::ptr::null_mut());
        sys::cuGraphGetNodes(cu_graph, handles.as_mut_ptr(), &mut count).result()?;
    }
    handles.truncate(count);
    let index: HashMap<usize, usize> = (handles.iter().enumerate())
        .map(|(i, h)| (*h as usize, i))
        .collect();
    let mut edges_n = 0usize;
    let (mut from, mut to) = (vec![], vec![]);
    // SAFETY: as above; null edge data is allowed for graphs whose edges carry none (capture's).
    unsafe {
        let (none, no_data) = (std::ptr::null_mut(), std::ptr::null_mut());
        sys::cuGraphGetEdges_v2(cu_graph, none, none, no_data, &mut edges_n).result()?;
        from.resize(edges_n, std::ptr::null_mut());
        to.resize(edges_n, std::ptr::null_mut());
        let (f, t) = (from.as_mut_ptr(), to.as_mut_ptr());
        sys::cuGraphGetEdges_v2(cu_graph, f, t, no_data, &mut edges_n).result()?;
    }
    let edges = from
        .iter()
        .zip(&to)
        .take(edges_n)
        .map(|(f, t)| {
            let at = |h: &sys::CUgraphNode| index.get(&(*h as usize)).copied();
            at(f)
                .zip(at(t))
                .map(|(f, t)| [f, t])
                .context("an edge names a node cuGraphGetNodes did not list")
        })
        .collect::<Result<Vec<_>>>()?;

    let epoch = dptr(&b.epoch, &gpu.main);
    let mut nodes = vec![];
    for &h in &handles {
        let mut kind: u32 = u32::MAX;
        // SAFETY: written as a plain integer: a type newer than these bindings stays a number.
        unsafe { sys::cuGraphNodeGetType(h, (&raw mut kind).cast()).result()? };
        let host_op = made_by.get(&(h as usize)).copied();
        nodes.push(if kind == 0 {
            DriverNode {
                host_op,
                ..kernel_node(h)?
            }
        } else {
            DriverNode {
                kind: node_kind(kind),
                function: None,
                host_op,
                launch: None,
                args: vec![],
                accesses: vec![],
            }
        });
    }

    let times = dptr(&b.times, &gpu.main);
    let mut regions = vec![
        Region {
            name: "epoch".into(),
            start: epoch,
            end: epoch + 4,
            home: RegionHome::Harness,
            alloc_op: None,
            free_op: None,
            stream: None,
        },
        Region {
            name: "kernel times".into(),
            start: times,
            end: times + 16 * program.ops.len() as u64,
            home: RegionHome::Harness,
            alloc_op: None,
            free_op: None,
            stream: None,
        },
    ];
    for (t, tensor) in program.tensors.iter().enumerate() {
        let (Some(&start), Some(p)) = (b.ptr.get(&t), &model.placements[t]) else {
            continue;
        };
        let pooled = tensor.home == Home::Pool;
        regions.push(Region {
            name: tensor.name.clone(),
            start,
            end: start + program.bytes(TensorId(t)),
            home: if pooled {
                RegionHome::Pool
            } else {
                RegionHome::Static
            },
            alloc_op: pooled.then_some(p.alloc_op),
            free_op: p.free_op.filter(|_| pooled),
            stream: pooled.then_some(p.stream),
        });
    }
    drop(captured);
    Ok(DriverGraph {
        config: config.name.clone(),
        sessions,
        regions,
        nodes,
        edges,
    })
}

/// The driver's name for a node type (`CUgraphNodeType`), lower case.
fn node_kind(kind: u32) -> String {
    let names = [
        "kernel",
        "memcpy",
        "memset",
        "host",
        "child_graph",
        "empty",
        "wait_event",
        "event_record",
        "ext_semas_signal",
        "ext_semas_wait",
        "mem_alloc",
        "mem_free",
        "batch_mem_op",
        "conditional",
    ];
    (names.get(kind as usize)).map_or_else(|| format!("type {kind}"), |n| n.to_string())
}

/// A kernel node read back: its function's name, launch shape and arguments, and the bytes
/// they make it read and write (by the kernel's code in `KERNELS`).
fn kernel_node(h: cudarc::driver::sys::CUgraphNode) -> Result<DriverNode> {
    use cudarc::driver::sys;
    // SAFETY: a kernel node (checked by the caller); the driver fills the struct.
    let params = unsafe {
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        sys::cuGraphKernelNodeGetParams_v2(h, &mut p).result()?;
        p
    };
    let mut name_ptr: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the function outlives the call; the name is a static string of the module.
    let function = unsafe {
        sys::cuFuncGetName(&mut name_ptr, params.func).result()?;
        std::ffi::CStr::from_ptr(name_ptr)
            .to_string_lossy()
            .into_owned()
    };
    // Each argument as its signature types it: (name, bytes).
    let signature: &[(&str, usize)] = match function.as_str() {
        "sweep" => &[
            ("src", 8),
            ("src_row_words", 4),
            ("dst", 8),
            ("dst_row_words", 4),
            ("rows", 4),
            ("tag", 4),
            ("epoch", 8),
            ("fixed_cycles", 8),
            ("row_cycles", 8),
            ("copy", 4),
            ("keep", 4),
            ("times", 8),
            ("slot", 4),
        ],
        "bump" => &[("epoch", 8)],
        other => bail!("a kernel `{other}` this binary did not launch"),
    };
    if params.kernelParams.is_null() {
        bail!("kernel `{function}` has no argument array (launched with `extra`?)");
    }
    let mut args = vec![];
    for (i, (arg, size)) in signature.iter().enumerate() {
        // SAFETY: the driver's copy of argument i, of the size the kernel's signature gives.
        let value = unsafe {
            let p = *params.kernelParams.add(i);
            match size {
                8 => std::ptr::read_unaligned(p as *const u64),
                _ => u64::from(std::ptr::read_unaligned(p as *const u32)),
            }
        };
        args.push((arg.to_string(), value));
    }
    let arg = |n: &str| args.iter().find(|(a, _)| a == n).map_or(0, |(_, v)| *v);
    let mut accesses = vec![];
    match function.as_str() {
        "sweep" => {
            let (src, src_words, dst) = (arg("src"), arg("src_row_words"), arg("dst"));
            let (dst_words, rows) = (arg("dst_row_words"), arg("rows"));
            accesses.push(ByteAccess {
                start: arg("epoch"),
                end: arg("epoch") + 4,
                write: false,
            });
            // Row r reads words 0..min(src, dst row) of src's row r: one range if that is the
            // whole row, else one per row.
            let read_words = src_words.min(dst_words);
            if read_words == src_words {
                accesses.push(ByteAccess {
                    start: src,
                    end: src + rows * src_words * 4,
                    write: false,
                });
            } else {
                for r in 0..rows {
                    let start = src + r * src_words * 4;
                    accesses.push(ByteAccess {
                        start,
                        end: start + read_words * 4,
                        write: false,
                    });
                }
            }
            accesses.push(ByteAccess {
                start: dst,
                end: dst + rows * dst_words * 4,
                write: true,
            });
            // Its own two timestamps.
            let stamps = arg("times") + 16 * arg("slot");
            accesses.push(ByteAccess {
                start: stamps,
                end: stamps + 16,
                write: true,
            });
        }
        _ => accesses.push(ByteAccess {
            start: arg("epoch"),
            end: arg("epoch") + 4,
            write: true,
        }),
    }
    Ok(DriverNode {
        kind: "kernel".into(),
        function: Some(function),
        host_op: None,
        launch: Some([params.gridDimX, params.blockDimX]),
        args,
        accesses,
    })
}
