//! Decode steps as CUDA graphs: a step's few hundred launches cost the host more time than
//! the GPU takes to run them on a small model, so a step of a layout seen before is recorded
//! once (stream capture) and then replayed with one call, its inputs copied into the buffer
//! the recording reads.
//!
//! A pass's [`Layout`] fixes every launch's shape and every input's place; the KV cache and
//! the matrix kernels' scratch buffers fix the rest of the addresses the kernels were
//! recorded with. The recorded ops take their activations from the pool's buffers for
//! recordings (see `pool`), at the same addresses on every replay; the logits' buffer is the
//! recording's own, which the caller gives back (drops) before the next replay, as it frees an
//! unrecorded pass's logits. Where the pool had no buffer of a size, the recorded op
//! allocates it in the graph, which then allocates it on every launch.
//!
//! Only passes of up to [`MAX_TOKENS`] tokens that all want logits (decode steps) are
//! recorded, from the second pass of their layout on (the first also creates what ops make
//! on first use: RoPE tables, the cuBLAS handle, scratch buffers). Passes that an observer
//! watches (trace, verify) always run op by op; `PLUMB_CUDA_GRAPHS=0` turns graphs off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{
    self, CUdeviceptr, CUgraphDependencyType, CUgraphEdgeData, CUgraphInstantiate_flags,
    CUgraphNodeType, CUstreamCaptureMode,
};
use cudarc::driver::{CudaGraph, CudaSlice, CudaStream, DevicePtr};
use plumb_model::{Activations, PassInputs, Result};

use crate::error::{error, failed};
use crate::kv_storage::CudaKvStorage;
use crate::pass_inputs::{pack, CudaPass, Layout};
use crate::pool::{Buffer, Mode, Parked, Pool};
use crate::tensor::CudaTensor;

/// Set to `0` to run every pass op by op.
pub const GRAPHS_ENV: &str = "PLUMB_CUDA_GRAPHS";
/// The most tokens of a recorded pass: decode steps of up to this many sequences.
const MAX_TOKENS: usize = 64;
/// Recordings kept; past this many (a server's batch sizes times context buckets), all are
/// dropped and recorded again as steps come.
const MAX_GRAPHS: usize = 128;
const OP: &str = "cuda_graph";

/// A recording's key: a pass layout over one KV cache (its `id`).
type Key = (Layout, u64);
/// The address and length of each of the matrix kernels' scratch buffers.
pub(crate) type Scratch = Vec<(CUdeviceptr, usize)>;

/// The recordings of one backend.
pub(crate) struct Graphs {
    enabled: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per layout: how many passes had it, and the buffer its recordings read.
    layouts: HashMap<Layout, LayoutBuffer>,
    /// Per layout and KV cache: its recording, or `None` where recording failed.
    graphs: HashMap<Key, Option<Recorded>>,
    /// The recording under way: its key and the scratch buffers it was started with.
    recording: Option<(Key, Scratch)>,
    replays: usize,
    /// The shape of the last recording, where the driver said.
    last_shape: Option<GraphShape>,
}

// SAFETY: a CudaGraph holds the driver's graph handles, which must not be used from two
// threads at once; every use is under the Mutex around State.
unsafe impl Send for State {}

#[derive(Default)]
struct LayoutBuffer {
    seen: usize,
    buffer: Option<Arc<CudaSlice<u32>>>,
}

struct Recorded {
    graph: CudaGraph,
    /// Where the graph writes the logits, and their rows and width.
    logits: RecordedLogits,
    n_tokens: usize,
    width: usize,
    /// The matrix kernels' scratch buffers that the graph was recorded with.
    scratch: Scratch,
}

/// Where a recording's logits lie.
enum RecordedLogits {
    /// In the recording's own buffer from the pool.
    Parked(Arc<Parked>),
    /// At the address the graph allocates them at on every launch.
    Allocated(CUdeviceptr),
}

impl Graphs {
    /// On unless `PLUMB_CUDA_GRAPHS=0`.
    pub fn from_env() -> Graphs {
        Graphs::new(std::env::var(GRAPHS_ENV).map_or(true, |v| v != "0"))
    }

    pub fn new(enabled: bool) -> Graphs {
        Graphs {
            enabled,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| error(OP, "a previous pass panicked"))
    }

    /// The pass of `inputs`: in its layout's graph buffer from the second pass of a
    /// recordable layout on, else in a buffer of its own.
    /// The pass's activations come from the pool where it could be recorded (a decode step).
    pub fn begin_pass<'p>(
        &self,
        stream: &Arc<CudaStream>,
        pool: &Pool,
        inputs: &'p PassInputs<'p>,
    ) -> Result<CudaPass<'p>> {
        let n = inputs.n_tokens();
        let decode_step = n > 0 && n <= MAX_TOKENS && inputs.output_rows.len() == n;
        pool.set_mode(if decode_step { Mode::Shared } else { Mode::Off })?;
        if !self.enabled || !decode_step {
            return CudaPass::new(stream, inputs);
        }
        let (host, layout) = pack(inputs, true)?;
        let mut state = self.state()?;
        let entry = state.layouts.entry(layout.clone()).or_default();
        entry.seen += 1;
        if entry.seen < 2 {
            // In the graph's layout, so that its ops take buffers of the sizes the recording
            // will ask the pool for (the attention's partial results follow the padded
            // context): it then finds them all there.
            drop(state);
            return CudaPass::uploaded(stream, inputs, &host, layout);
        }
        let buffer = match &mut entry.buffer {
            Some(buffer) => buffer,
            slot => slot.insert(Arc::new(
                // SAFETY: filled below.
                unsafe { stream.alloc::<u32>(layout.len()) }.map_err(failed(OP))?,
            )),
        };
        // The last pass has ended, so nothing else holds the buffer.
        let Some(device) = Arc::get_mut(buffer) else {
            drop(state);
            return CudaPass::uploaded(stream, inputs, &host, layout);
        };
        // Queued after the last replay, which reads the previous step's inputs.
        stream.memcpy_htod(&host, device).map_err(failed(OP))?;
        Ok(CudaPass::in_buffer(
            inputs,
            Arc::clone(buffer),
            layout,
            true,
        ))
    }

    /// Launches the recording of `pass`'s layout over `kv`, if there is one: the logits. Not
    /// while a caller holds the logits of a launch (see `pool`): the pass then runs op by op.
    pub fn replay(
        &self,
        pool: &Arc<Pool>,
        pass: &CudaPass<'_>,
        kv: &CudaKvStorage,
        scratch: Scratch,
    ) -> Result<Option<CudaTensor>> {
        if !pass.in_graph_buffer || pool.holds_logits() {
            return Ok(None);
        }
        let mut state = self.state()?;
        let key = (pass.layout.clone(), kv.id);
        let Some(Some(recorded)) = state.graphs.get(&key) else {
            return Ok(None);
        };
        if recorded.scratch != scratch {
            // A larger batch replaced a scratch buffer that every recording reads.
            state.graphs.clear();
            return Ok(None);
        }
        let len = recorded.n_tokens * recorded.width;
        let parked = match &recorded.logits {
            RecordedLogits::Parked(parked) => match Buffer::parked_logits(pool, parked, len) {
                Some(buffer) => Some(buffer),
                None => return Ok(None),
            },
            RecordedLogits::Allocated(_) => None,
        };
        recorded.graph.launch().map_err(failed(OP))?;
        let data = match (parked, &recorded.logits) {
            (Some(buffer), _) => buffer,
            // SAFETY: the graph allocates the logits at this address on every launch, and
            // the tensor's drop frees them before the next launch, as the recorded pass's did.
            (None, RecordedLogits::Allocated(ptr)) => unsafe {
                Buffer::graph_logits(pool, *ptr, len)
            },
            (None, RecordedLogits::Parked(_)) => unreachable!("taken above"),
        };
        let logits = CudaTensor::from_buffer(recorded.n_tokens, recorded.width, data);
        state.replays += 1;
        Ok(Some(logits))
    }

    /// Starts recording `pass` over `kv` if its layout has no recording yet (nor a failed
    /// one).
    pub fn record(
        &self,
        pool: &Pool,
        pass: &CudaPass<'_>,
        kv: &CudaKvStorage,
        scratch: Scratch,
    ) -> Result<bool> {
        // The recording is launched once it ends, which a held replay's logits forbid (see
        // `replay`).
        if !pass.in_graph_buffer || pool.holds_logits() {
            return Ok(false);
        }
        let stream = pool.stream();
        let mut state = self.state()?;
        let key = (pass.layout.clone(), kv.id);
        if state.graphs.contains_key(&key) {
            return Ok(false);
        }
        if state.graphs.len() >= MAX_GRAPHS {
            state.graphs.clear();
        }
        if let Err(e) =
            stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        {
            tracing::warn!(error = %e, "cannot record a CUDA graph; steps run op by op");
            state.graphs.insert(key, None);
            return Ok(false);
        }
        state.recording = Some((key, scratch));
        pool.set_mode(Mode::Recording)?;
        Ok(true)
    }

    /// Ends the recording and launches it: the logits, or `None` where the recorded ops
    /// failed or held an op a graph cannot (a copy to the host), and the pass must run again
    /// op by op. Such a layout is not recorded again.
    pub fn finish(
        &self,
        pool: &Pool,
        logits: Result<CudaTensor>,
        scratch: Scratch,
    ) -> Result<Option<CudaTensor>> {
        let stream = pool.stream();
        pool.set_mode(Mode::Shared)?;
        let mut state = self.state()?;
        let (key, scratch_before) = state
            .recording
            .take()
            .ok_or_else(|| error(OP, "no recording under way"))?;
        // An error that a drop recorded during the recording (a free that the broken capture
        // refused) would stop end_capture before it ends the capture: taken first.
        let dropped = stream.context().check_err();
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        if scratch != scratch_before {
            // Cannot happen: the layout's first pass, unrecorded, sized them.
            return Err(error(
                OP,
                "a scratch buffer of the matrix kernels was replaced while a step was recorded",
            ));
        }
        let (graph, logits) = match (dropped, graph, logits) {
            (Ok(()), Ok(Some(graph)), Ok(logits)) => (graph, logits),
            (dropped, graph, logits) => {
                tracing::warn!(
                    error = ?graph.as_ref().err().or(dropped.as_ref().err()),
                    ops_failed = logits.is_err(),
                    "a decode step could not be recorded as a CUDA graph; it runs op by op"
                );
                // An allocation the graph made is no memory outside it: not to be freed.
                if let Ok(logits) = logits {
                    logits.into_buffer().forget_if_graph_allocated();
                }
                // Frees of recorded allocations after the recording broke left their errors.
                let _ = stream.context().check_err();
                state.graphs.insert(key, None);
                return Ok(None);
            }
        };
        // How many kernels may start before the one before them ends (see `launch`).
        state.last_shape = GraphShape::of(&graph);
        if let Some(shape) = &state.last_shape {
            tracing::debug!(
                nodes = shape.nodes,
                kernels = shape.kernels,
                memory = shape.memory,
                edges = shape.edges,
                programmatic = shape.programmatic,
                "recorded a decode step"
            );
        }
        let (n_tokens, width) = (logits.n_tokens(), logits.width());
        let ptr = logits.data().device_ptr(stream).0;
        let (buffer, parked) = logits.into_buffer().into_logits();
        graph.launch().map_err(failed(OP))?;
        let recorded = Recorded {
            graph,
            logits: match parked {
                Some(parked) => RecordedLogits::Parked(parked),
                None => RecordedLogits::Allocated(ptr),
            },
            n_tokens,
            width,
            scratch,
        };
        state.graphs.insert(key, Some(recorded));
        Ok(Some(CudaTensor::from_buffer(n_tokens, width, buffer)))
    }

    /// Passes replayed so far.
    pub fn replays(&self) -> usize {
        self.state.lock().map_or(0, |s| s.replays)
    }

    /// The shape of the last recording.
    pub fn last_shape(&self) -> Option<GraphShape> {
        self.state.lock().ok()?.last_shape.clone()
    }
}

/// What a recording holds: its nodes, how many of them are kernels, its edges, and how many of
/// those are programmatic (a kernel that may start before the one before it has ended, see
/// `launch`). Stream capture makes an edge programmatic only between two kernels: an
/// allocation or a free between them orders the second after the whole first.
#[derive(Clone, Debug)]
pub struct GraphShape {
    pub nodes: usize,
    pub kernels: usize,
    /// Allocations and frees the recorded ops made in the graph (see `pool`).
    pub memory: usize,
    pub edges: usize,
    pub programmatic: usize,
}

impl GraphShape {
    /// `graph`'s shape, or `None` where the driver does not say.
    fn of(graph: &CudaGraph) -> Option<GraphShape> {
        let g = graph.cu_graph();
        let mut n = 0usize;
        // SAFETY: with null arrays the driver only writes the count.
        unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut n) }
            .result()
            .ok()?;
        let mut nodes = vec![std::ptr::null_mut(); n];
        // SAFETY: the array holds the n nodes asked for.
        unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut n) }
            .result()
            .ok()?;
        let (mut kernels, mut memory) = (0, 0);
        for &node in &nodes[..n] {
            let mut ty = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: node is one of the graph's.
            unsafe { sys::cuGraphNodeGetType(node, &mut ty) }
                .result()
                .ok()?;
            kernels += usize::from(ty == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL);
            memory += usize::from(matches!(
                ty,
                CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC
                    | CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE
            ));
        }
        let mut e = 0usize;
        let null = std::ptr::null_mut();
        // SAFETY: with null arrays the driver only writes the count.
        unsafe { sys::cuGraphGetEdges_v2(g, null, null, std::ptr::null_mut(), &mut e) }
            .result()
            .ok()?;
        let (mut from, mut to) = (vec![std::ptr::null_mut(); e], vec![std::ptr::null_mut(); e]);
        let mut data = vec![
            CUgraphEdgeData {
                from_port: 0,
                to_port: 0,
                type_: 0,
                reserved: [0; 5],
            };
            e
        ];
        // SAFETY: the three arrays hold the e edges asked for.
        unsafe {
            sys::cuGraphGetEdges_v2(
                g,
                from.as_mut_ptr(),
                to.as_mut_ptr(),
                data.as_mut_ptr(),
                &mut e,
            )
        }
        .result()
        .ok()?;
        let programmatic = CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
        Some(GraphShape {
            nodes: n,
            kernels,
            memory,
            edges: e,
            programmatic: data[..e].iter().filter(|d| d.type_ == programmatic).count(),
        })
    }
}
