//! The crate's only `unsafe` code: XNNPACK's and pthreadpool's C API, resolved by name at run
//! time from the wheel's two shared objects, behind safe handles.
//!
//! The prototypes are XNNPACK's public `include/xnnpack.h` (and pthreadpool's `pthreadpool.h`);
//! no header ships in the wheel, so they are written out here. Soundness rests on these
//! invariants, each kept in this file and nowhere else:
//! - every function pointer was resolved by its C name from a library that stays loaded for the
//!   rest of the process (an [`Api`] is built only by [`Api::load`] and the crate keeps it in a
//!   `static`), and its Rust type is that C prototype;
//! - a handle ([`Subgraph`], [`Runtime`], [`ThreadPool`]) owns its C object and deletes it once;
//! - every pointer XNNPACK keeps past a call (static tensor data, per-channel scales) points into
//!   a heap buffer that the subgraph owns and hands to the runtime made from it, so it outlives
//!   both; every buffer holds at least what XNNPACK reads from it (element count times element
//!   size, checked before the call) plus `XNN_EXTRA_BYTES`, which XNNPACK may read beyond;
//! - the runtime owns the buffers of its external values; `setup` checks each against the value's
//!   current shape before handing XNNPACK its pointer, and `invoke` runs only after a `setup` that
//!   succeeded since the last reshape or rebinding;
//! - [`Runtime`] and [`ThreadPool`] are neither `Send` nor `Sync`: one thread makes, runs and
//!   drops them (XNNPACK runtimes are not reentrant).
//!
//! One file over the usual length on purpose: every `unsafe` block of the crate is here, so
//! its soundness argument is in one place. (`lib.rs` allows `unsafe_code` for this module only.)

use crate::LoadError;
use libloading::Library;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::path::Path;
use std::rc::Rc;

/// `enum xnn_status` as returned (0 is success).
pub type RawStatus = c_int;

/// `XNN_EXTRA_BYTES`: how far past a tensor's data XNNPACK may read.
pub const EXTRA_BYTES: usize = 16;
/// `XNN_MAX_TENSOR_DIMS`.
pub const MAX_DIMS: usize = 6;
const STATUS_INVALID_PARAMETER: RawStatus = 2;

/// `enum xnn_datatype` members the compiler defines, with the header's codes. Like the
/// prototypes, these are declarations of the library's ABI (element sizes follow from them);
/// the start-up probe checks each code against the loaded build by converting known values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Datatype {
    Fp32 = 1,
    Fp16 = 2,
    Qint8 = 3,
    Quint8 = 4,
    Qint32 = 5,
    Qcint8 = 6,
    Qcint32 = 7,
    Bf16 = 14,
}

impl Datatype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Datatype::Fp32 | Datatype::Qint32 | Datatype::Qcint32 => 4,
            Datatype::Fp16 | Datatype::Bf16 => 2,
            Datatype::Qint8 | Datatype::Quint8 | Datatype::Qcint8 => 1,
        }
    }

    /// The header's name (`xnn_datatype_fp32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Fp32 => "xnn_datatype_fp32",
            Datatype::Fp16 => "xnn_datatype_fp16",
            Datatype::Qint8 => "xnn_datatype_qint8",
            Datatype::Quint8 => "xnn_datatype_quint8",
            Datatype::Qint32 => "xnn_datatype_qint32",
            Datatype::Qcint8 => "xnn_datatype_qcint8",
            Datatype::Qcint32 => "xnn_datatype_qcint32",
            Datatype::Bf16 => "xnn_datatype_bf16",
        }
    }
}
const STATUS_INVALID_STATE: RawStatus = 3;

type SubgraphPtr = *mut c_void;
type RuntimePtr = *mut c_void;
type PoolPtr = *mut c_void;

/// `struct xnn_external_value`.
#[repr(C)]
struct ExternalValue {
    id: u32,
    data: *mut c_void,
}

/// `struct xnn_binary_params`.
#[repr(C)]
struct BinaryParams {
    output_min: f64,
    output_max: f64,
}

/// `union xnn_unary_params`: its largest member, `clamp { float min; float max; }` (the other
/// members are one float at offset 0, so this has the union's size and alignment).
#[repr(C)]
struct UnaryParams {
    min: f32,
    max: f32,
}

macro_rules! api {
    ($( $lib:ident $field:ident = $name:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// The resolved C entry points, and the libraries that keep them valid.
        pub struct Api {
            $( $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            _xnnpack: Library,
            _threadpool: Library,
        }

        impl Api {
            fn resolve(xnnpack: Library, threadpool: Library, files: [&Path; 2]) -> Result<Api, LoadError> {
                Ok(Api {
                    $( $field: {
                        let (lib, file) = api!(@pick $lib, xnnpack, threadpool, files);
                        let name = concat!($name, "\0").as_bytes();
                        // SAFETY: the symbol is the C function of that name, whose prototype
                        // (from xnnpack.h / pthreadpool.h) is exactly the declared fn type; the
                        // library stays loaded as long as the `Api` (it is a field of it).
                        let f = unsafe { lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(name) };
                        *f.map_err(|e| LoadError::Symbol {
                            file: file.to_path_buf(),
                            symbol: $name,
                            message: e.to_string(),
                        })?
                    }, )*
                    _xnnpack: xnnpack,
                    _threadpool: threadpool,
                })
            }
        }
    };
    (@pick xnn, $x:ident, $t:ident, $files:ident) => { (&$x, $files[0]) };
    (@pick pool, $x:ident, $t:ident, $files:ident) => { (&$t, $files[1]) };
}

api! {
    xnn initialize = "xnn_initialize": fn(*const c_void) -> RawStatus;
    xnn create_subgraph = "xnn_create_subgraph": fn(u32, u32, *mut SubgraphPtr) -> RawStatus;
    xnn delete_subgraph = "xnn_delete_subgraph": fn(SubgraphPtr) -> RawStatus;
    xnn define_tensor_value = "xnn_define_tensor_value":
        fn(SubgraphPtr, c_int, usize, *const usize, *const c_void, u32, u32, *mut u32) -> RawStatus;
    xnn define_quantized_tensor_value = "xnn_define_quantized_tensor_value":
        fn(SubgraphPtr, c_int, i32, f32, usize, *const usize, *const c_void, u32, u32, *mut u32) -> RawStatus;
    xnn define_channelwise_quantized_tensor_value_v2 = "xnn_define_channelwise_quantized_tensor_value_v2":
        fn(SubgraphPtr, c_int, i32, *const f32, usize, usize, *const usize, *const c_void, u32, u32, *mut u32)
            -> RawStatus;
    xnn define_static_reduce = "xnn_define_static_reduce":
        fn(SubgraphPtr, c_int, usize, *const usize, u32, u32, u32) -> RawStatus;
    xnn define_global_average_pooling_2d = "xnn_define_global_average_pooling_2d":
        fn(SubgraphPtr, f32, f32, u32, u32, u32) -> RawStatus;
    xnn define_static_transpose = "xnn_define_static_transpose":
        fn(SubgraphPtr, usize, *const usize, u32, u32, u32) -> RawStatus;
    xnn define_static_reshape = "xnn_define_static_reshape":
        fn(SubgraphPtr, usize, *const usize, u32, u32, u32) -> RawStatus;
    xnn define_convolution_2d = "xnn_define_convolution_2d":
        fn(SubgraphPtr, u32, u32, u32, u32, u32, u32, u32, u32, u32, u32, u32, usize, usize, f32, f32,
           u32, u32, u32, u32, u32) -> RawStatus;
    xnn define_depthwise_convolution_2d = "xnn_define_depthwise_convolution_2d":
        fn(SubgraphPtr, u32, u32, u32, u32, u32, u32, u32, u32, u32, u32, u32, usize, f32, f32,
           u32, u32, u32, u32, u32) -> RawStatus;
    xnn define_fully_connected = "xnn_define_fully_connected":
        fn(SubgraphPtr, f32, f32, u32, u32, u32, u32, u32) -> RawStatus;
    xnn define_binary = "xnn_define_binary":
        fn(SubgraphPtr, c_int, *const BinaryParams, u32, u32, u32, u32) -> RawStatus;
    xnn define_unary = "xnn_define_unary":
        fn(SubgraphPtr, c_int, *const UnaryParams, u32, u32, u32) -> RawStatus;
    xnn define_convert = "xnn_define_convert": fn(SubgraphPtr, u32, u32, u32) -> RawStatus;
    xnn define_copy = "xnn_define_copy": fn(SubgraphPtr, u32, u32, u32) -> RawStatus;
    xnn create_runtime_v2 = "xnn_create_runtime_v2": fn(SubgraphPtr, PoolPtr, u32, *mut RuntimePtr) -> RawStatus;
    xnn reshape_external_value = "xnn_reshape_external_value":
        fn(RuntimePtr, u32, usize, *const usize) -> RawStatus;
    xnn reshape_runtime = "xnn_reshape_runtime": fn(RuntimePtr) -> RawStatus;
    xnn get_external_value_shape = "xnn_get_external_value_shape":
        fn(RuntimePtr, u32, *mut usize, *mut usize) -> RawStatus;
    xnn setup_runtime_v2 = "xnn_setup_runtime_v2": fn(RuntimePtr, usize, *const ExternalValue) -> RawStatus;
    xnn invoke_runtime = "xnn_invoke_runtime": fn(RuntimePtr) -> RawStatus;
    xnn delete_runtime = "xnn_delete_runtime": fn(RuntimePtr) -> RawStatus;
    pool pthreadpool_create = "pthreadpool_create": fn(usize) -> PoolPtr;
    pool pthreadpool_destroy = "pthreadpool_destroy": fn(PoolPtr);
    pool pthreadpool_get_threads_count = "pthreadpool_get_threads_count": fn(PoolPtr) -> usize;
}

impl Api {
    /// Opens `threadpool` then `xnnpack` (which needs it), resolves every symbol and
    /// initializes XNNPACK.
    pub fn load(xnnpack: &Path, threadpool: &Path) -> Result<Api, LoadError> {
        let open = |p: &Path| {
            // SAFETY: loading runs the library's initializers. These two are plain C/C++ shared
            // objects (XNNPACK, ExecuTorch's backend registration, pthreadpool) whose
            // initializers only register static tables; no Rust invariant depends on them.
            unsafe { Library::new(p) }.map_err(|e| LoadError::Open { path: p.to_path_buf(), message: e.to_string() })
        };
        let pool_lib = open(threadpool)?;
        let xnn_lib = open(xnnpack)?;
        let api = Api::resolve(xnn_lib, pool_lib, [xnnpack, threadpool])?;
        // SAFETY: a null allocator asks for the system allocator; xnn_initialize may be called
        // any number of times.
        let status = unsafe { (api.initialize)(std::ptr::null()) };
        if status != 0 {
            return Err(LoadError::Initialize { status });
        }
        Ok(api)
    }
}

/// Storage XNNPACK reads tensors from: 64-byte aligned, with at least `EXTRA_BYTES` readable
/// past its length.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// A byte buffer that XNNPACK may read `EXTRA_BYTES` beyond.
pub struct Buffer {
    blocks: Vec<Block>,
    len: usize,
}

impl Buffer {
    pub fn zeroed(len: usize) -> Buffer {
        Buffer { blocks: vec![Block([0; 64]); (len + EXTRA_BYTES).div_ceil(64)], len }
    }

    pub fn from_bytes(bytes: &[u8]) -> Buffer {
        let mut b = Buffer::zeroed(bytes.len());
        b.as_bytes_mut().copy_from_slice(bytes);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `blocks` holds `blocks.len() * 64 >= len` initialized bytes (plain arrays, no
        // padding), contiguous in one allocation, borrowed for `&self`'s lifetime.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, borrowed mutably and exclusively for `&mut self`'s lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), self.len) }
    }

    fn ptr(&self) -> *const c_void {
        self.blocks.as_ptr().cast()
    }
}

/// What a subgraph keeps alive for XNNPACK: static data and per-channel scales (never read
/// on this side: held so the memory XNNPACK points into stays allocated).
#[allow(dead_code)]
enum Kept {
    Data(Buffer),
    Scales(Box<[f32]>),
}

fn numel(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// An XNNPACK subgraph under construction. Methods return XNNPACK's status on refusal.
pub struct Subgraph {
    api: &'static Api,
    raw: SubgraphPtr,
    kept: Vec<Kept>,
    /// External value ids defined so far, with their element sizes.
    externals: Vec<(u32, usize)>,
}

impl Drop for Subgraph {
    fn drop(&mut self) {
        // SAFETY: `raw` came from xnn_create_subgraph and is deleted only here; no runtime
        // refers to a subgraph after its creation.
        unsafe { (self.api.delete_subgraph)(self.raw) };
    }
}

/// A tensor's static data (checked to cover its dims at its datatype's element size).
pub struct Static(pub Buffer);

impl Subgraph {
    pub fn new(api: &'static Api, external_value_ids: u32) -> Result<Subgraph, RawStatus> {
        let mut raw: SubgraphPtr = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for the call.
        let status = unsafe { (api.create_subgraph)(external_value_ids, 0, &mut raw) };
        if status != 0 || raw.is_null() {
            return Err(status);
        }
        Ok(Subgraph { api, raw, kept: Vec::new(), externals: Vec::new() })
    }

    /// Checks `data` against `dims` and keeps it; returns the pointer to hand XNNPACK.
    fn keep_data(
        &mut self,
        dims: &[usize],
        elem_size: usize,
        data: Option<Static>,
    ) -> Result<*const c_void, RawStatus> {
        if dims.len() > MAX_DIMS {
            return Err(STATUS_INVALID_PARAMETER);
        }
        let Some(Static(buf)) = data else { return Ok(std::ptr::null()) };
        let need = numel(dims).and_then(|n| n.checked_mul(elem_size)).ok_or(STATUS_INVALID_PARAMETER)?;
        if buf.len() < need {
            return Err(STATUS_INVALID_PARAMETER);
        }
        let ptr = buf.ptr();
        self.kept.push(Kept::Data(buf));
        Ok(ptr)
    }

    /// Records value `id` as external when XNNPACK allocates it so (no static data, an external
    /// flag: `set_allocation_type` in XNNPACK's tensor.c): `setup` must then bind it.
    fn note_external(&mut self, id: u32, flags: u32, has_data: bool, elem_size: usize) {
        if !has_data && flags & 3 != 0 {
            self.externals.push((id, elem_size));
        }
    }

    /// `xnn_define_tensor_value`.
    pub fn tensor(
        &mut self,
        datatype: Datatype,
        dims: &[usize],
        data: Option<Static>,
        external_id: u32,
        flags: u32,
    ) -> Result<u32, RawStatus> {
        let elem_size = datatype.size();
        let ptr = self.keep_data(dims, elem_size, data)?;
        let mut id = u32::MAX;
        // SAFETY: `dims` is valid for the call (XNNPACK copies it); `ptr` is null or a kept
        // buffer covering the tensor (checked above) that outlives subgraph and runtime.
        let status = unsafe {
            (self.api.define_tensor_value)(
                self.raw,
                datatype as c_int,
                dims.len(),
                dims.as_ptr(),
                ptr,
                external_id,
                flags,
                &mut id,
            )
        };
        if status != 0 {
            return Err(status);
        }
        self.note_external(id, flags, !ptr.is_null(), elem_size);
        Ok(id)
    }

    /// `xnn_define_quantized_tensor_value`.
    #[allow(clippy::too_many_arguments)]
    pub fn quantized_tensor(
        &mut self,
        datatype: Datatype,
        zero_point: i32,
        scale: f32,
        dims: &[usize],
        data: Option<Static>,
        external_id: u32,
        flags: u32,
    ) -> Result<u32, RawStatus> {
        let elem_size = datatype.size();
        let ptr = self.keep_data(dims, elem_size, data)?;
        let mut id = u32::MAX;
        // SAFETY: as in `tensor`.
        let status = unsafe {
            (self.api.define_quantized_tensor_value)(
                self.raw,
                datatype as c_int,
                zero_point,
                scale,
                dims.len(),
                dims.as_ptr(),
                ptr,
                external_id,
                flags,
                &mut id,
            )
        };
        if status != 0 {
            return Err(status);
        }
        self.note_external(id, flags, !ptr.is_null(), elem_size);
        Ok(id)
    }

    /// `xnn_define_channelwise_quantized_tensor_value_v2`; `scales` needs one entry per index of
    /// `dims[channel_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn channelwise_tensor(
        &mut self,
        datatype: Datatype,
        scales: Vec<f32>,
        channel_dim: usize,
        dims: &[usize],
        data: Option<Static>,
        external_id: u32,
        flags: u32,
    ) -> Result<u32, RawStatus> {
        let channels = *dims.get(channel_dim).ok_or(STATUS_INVALID_PARAMETER)?;
        if scales.len() < channels {
            return Err(STATUS_INVALID_PARAMETER);
        }
        let elem_size = datatype.size();
        let ptr = self.keep_data(dims, elem_size, data)?;
        let scales = scales.into_boxed_slice();
        let scale_ptr = scales.as_ptr();
        self.kept.push(Kept::Scales(scales));
        let mut id = u32::MAX;
        // SAFETY: as in `tensor`; `scale_ptr` points at `channels` or more floats in a kept
        // allocation (a boxed slice does not move when the box does).
        let status = unsafe {
            (self.api.define_channelwise_quantized_tensor_value_v2)(
                self.raw,
                datatype as c_int,
                0,
                scale_ptr,
                dims.len(),
                channel_dim,
                dims.as_ptr(),
                ptr,
                external_id,
                flags,
                &mut id,
            )
        };
        if status != 0 {
            return Err(status);
        }
        self.note_external(id, flags, !ptr.is_null(), elem_size);
        Ok(id)
    }

    fn check(status: RawStatus) -> Result<(), RawStatus> {
        if status == 0 {
            Ok(())
        } else {
            Err(status)
        }
    }

    /// `xnn_define_static_reduce`.
    pub fn static_reduce(
        &mut self,
        op: c_int,
        axes: &[usize],
        input: u32,
        output: u32,
        flags: u32,
    ) -> Result<(), RawStatus> {
        // SAFETY: `axes` is valid for the call; XNNPACK validates ids against its own tables.
        Self::check(unsafe {
            (self.api.define_static_reduce)(self.raw, op, axes.len(), axes.as_ptr(), input, output, flags)
        })
    }

    /// `xnn_define_global_average_pooling_2d`.
    pub fn global_average_pooling_2d(
        &mut self,
        min: f32,
        max: f32,
        input: u32,
        output: u32,
        flags: u32,
    ) -> Result<(), RawStatus> {
        // SAFETY: scalar arguments only.
        Self::check(unsafe { (self.api.define_global_average_pooling_2d)(self.raw, min, max, input, output, flags) })
    }

    /// `xnn_define_static_transpose`.
    pub fn static_transpose(&mut self, perm: &[usize], input: u32, output: u32, flags: u32) -> Result<(), RawStatus> {
        // SAFETY: `perm` is valid for the call (copied by XNNPACK).
        Self::check(unsafe {
            (self.api.define_static_transpose)(self.raw, perm.len(), perm.as_ptr(), input, output, flags)
        })
    }

    /// `xnn_define_static_reshape`.
    pub fn static_reshape(
        &mut self,
        new_shape: &[usize],
        input: u32,
        output: u32,
        flags: u32,
    ) -> Result<(), RawStatus> {
        // SAFETY: `new_shape` is valid for the call (copied by XNNPACK).
        Self::check(unsafe {
            (self.api.define_static_reshape)(self.raw, new_shape.len(), new_shape.as_ptr(), input, output, flags)
        })
    }

    /// `xnn_define_convolution_2d` (`g` in the C order: paddings top, right, bottom, left;
    /// kernel h, w; subsampling h, w; dilation h, w; groups).
    #[allow(clippy::too_many_arguments)]
    pub fn convolution_2d(
        &mut self,
        g: [u32; 11],
        group_input_channels: usize,
        group_output_channels: usize,
        min: f32,
        max: f32,
        ids: [u32; 4],
        flags: u32,
    ) -> Result<(), RawStatus> {
        let [pt, pr, pb, pl, kh, kw, sh, sw, dh, dw, groups] = g;
        let [input, filter, bias, output] = ids;
        // SAFETY: scalar arguments only; static data was checked when its value was defined.
        Self::check(unsafe {
            (self.api.define_convolution_2d)(
                self.raw,
                pt,
                pr,
                pb,
                pl,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
                groups,
                group_input_channels,
                group_output_channels,
                min,
                max,
                input,
                filter,
                bias,
                output,
                flags,
            )
        })
    }

    /// `xnn_define_depthwise_convolution_2d` (`g` as for [`Self::convolution_2d`], with the
    /// depth multiplier in place of groups).
    #[allow(clippy::too_many_arguments)]
    pub fn depthwise_convolution_2d(
        &mut self,
        g: [u32; 11],
        input_channels: usize,
        min: f32,
        max: f32,
        ids: [u32; 4],
        flags: u32,
    ) -> Result<(), RawStatus> {
        let [pt, pr, pb, pl, kh, kw, sh, sw, dh, dw, depth_multiplier] = g;
        let [input, filter, bias, output] = ids;
        // SAFETY: scalar arguments only.
        Self::check(unsafe {
            (self.api.define_depthwise_convolution_2d)(
                self.raw,
                pt,
                pr,
                pb,
                pl,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
                depth_multiplier,
                input_channels,
                min,
                max,
                input,
                filter,
                bias,
                output,
                flags,
            )
        })
    }

    /// `xnn_define_fully_connected`.
    pub fn fully_connected(&mut self, min: f32, max: f32, ids: [u32; 4], flags: u32) -> Result<(), RawStatus> {
        let [input, filter, bias, output] = ids;
        // SAFETY: scalar arguments only.
        Self::check(unsafe {
            (self.api.define_fully_connected)(self.raw, min, max, input, filter, bias, output, flags)
        })
    }

    /// `xnn_define_binary` with an output range.
    pub fn binary(&mut self, op: c_int, min: f64, max: f64, ids: [u32; 3], flags: u32) -> Result<(), RawStatus> {
        let params = BinaryParams { output_min: min, output_max: max };
        // SAFETY: `params` lives across the call (XNNPACK copies it).
        Self::check(unsafe { (self.api.define_binary)(self.raw, op, &params, ids[0], ids[1], ids[2], flags) })
    }

    /// `xnn_define_unary`; `clamp` gives the clamp parameters (null params otherwise).
    pub fn unary(
        &mut self,
        op: c_int,
        clamp: Option<(f32, f32)>,
        input: u32,
        output: u32,
        flags: u32,
    ) -> Result<(), RawStatus> {
        let params = clamp.map(|(min, max)| UnaryParams { min, max });
        let p = params.as_ref().map_or(std::ptr::null(), |p| p as *const UnaryParams);
        // SAFETY: `p` is null or points at `params`, alive across the call (copied by XNNPACK).
        Self::check(unsafe { (self.api.define_unary)(self.raw, op, p, input, output, flags) })
    }

    /// `xnn_define_convert`.
    pub fn convert(&mut self, input: u32, output: u32, flags: u32) -> Result<(), RawStatus> {
        // SAFETY: scalar arguments only.
        Self::check(unsafe { (self.api.define_convert)(self.raw, input, output, flags) })
    }

    /// `xnn_define_copy`.
    pub fn copy(&mut self, input: u32, output: u32, flags: u32) -> Result<(), RawStatus> {
        // SAFETY: scalar arguments only.
        Self::check(unsafe { (self.api.define_copy)(self.raw, input, output, flags) })
    }

    /// `xnn_create_runtime_v2` on `pool`; the subgraph is deleted afterwards (as ExecuTorch does),
    /// its kept buffers move to the runtime.
    pub fn create_runtime(mut self, pool: &Rc<ThreadPool>, flags: u32) -> Result<Runtime, RawStatus> {
        let mut raw: RuntimePtr = std::ptr::null_mut();
        // SAFETY: `self.raw` is a live subgraph, `pool.raw` a live pool that the runtime keeps
        // alive (an `Rc` clone below), `raw` a valid out-pointer.
        let status = unsafe { (self.api.create_runtime_v2)(self.raw, pool.raw, flags, &mut raw) };
        if status != 0 || raw.is_null() {
            return Err(status);
        }
        let externals = std::mem::take(&mut self.externals).into_iter().map(|(id, size)| (id, size, None)).collect();
        Ok(Runtime {
            api: self.api,
            raw,
            _kept: std::mem::take(&mut self.kept),
            _pool: pool.clone(),
            externals,
            ready: false,
            _not_send: PhantomData,
        })
    }
}

/// A created XNNPACK runtime with the buffers of its external values.
pub struct Runtime {
    api: &'static Api,
    raw: RuntimePtr,
    _kept: Vec<Kept>,
    _pool: Rc<ThreadPool>,
    /// (external id, element size, bound buffer).
    externals: Vec<(u32, usize, Option<Buffer>)>,
    /// `setup` succeeded and nothing was reshaped or rebound since.
    ready: bool,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: `raw` came from xnn_create_runtime_v2 and is deleted only here; the buffers
        // and the pool it points to are dropped after this (fields drop after `drop`).
        unsafe { (self.api.delete_runtime)(self.raw) };
    }
}

impl Runtime {
    fn external(&self, id: u32) -> Result<usize, RawStatus> {
        self.externals.iter().position(|e| e.0 == id).ok_or(STATUS_INVALID_PARAMETER)
    }

    /// `xnn_reshape_external_value`.
    pub fn reshape_external(&mut self, id: u32, dims: &[usize]) -> Result<(), RawStatus> {
        self.external(id)?;
        if dims.len() > MAX_DIMS {
            return Err(STATUS_INVALID_PARAMETER);
        }
        self.ready = false;
        // SAFETY: `dims` is valid for the call (copied by XNNPACK); `id` is an external value.
        Subgraph::check(unsafe { (self.api.reshape_external_value)(self.raw, id, dims.len(), dims.as_ptr()) })
    }

    /// `xnn_reshape_runtime`.
    pub fn reshape(&mut self) -> Result<(), RawStatus> {
        self.ready = false;
        // SAFETY: a live runtime.
        Subgraph::check(unsafe { (self.api.reshape_runtime)(self.raw) })
    }

    /// `xnn_get_external_value_shape`.
    pub fn external_shape(&self, id: u32) -> Result<Vec<usize>, RawStatus> {
        self.external(id)?;
        // Room for more than XNN_MAX_TENSOR_DIMS: XNNPACK writes at most that many.
        let mut dims = [0usize; 4 * MAX_DIMS];
        let mut n = 0usize;
        // SAFETY: `dims` has room for every dim XNNPACK writes (at most XNN_MAX_TENSOR_DIMS).
        let status = unsafe { (self.api.get_external_value_shape)(self.raw, id, &mut n, dims.as_mut_ptr()) };
        if status != 0 {
            return Err(status);
        }
        dims.get(..n).map(<[usize]>::to_vec).ok_or(STATUS_INVALID_STATE)
    }

    /// Binds `buffer` to external value `id` (needs a `setup` before the next `invoke`);
    /// returns the buffer it replaces.
    pub fn bind(&mut self, id: u32, buffer: Buffer) -> Result<Option<Buffer>, RawStatus> {
        let k = self.external(id)?;
        self.ready = false;
        Ok(self.externals[k].2.replace(buffer))
    }

    /// The buffer bound to external value `id`.
    pub fn buffer(&self, id: u32) -> Option<&Buffer> {
        self.externals.iter().find(|e| e.0 == id).and_then(|e| e.2.as_ref())
    }

    /// The bytes of the buffer bound to `id`, to write between invokes (the buffer stays where
    /// it is, so a `setup` made with it stays valid).
    pub fn buffer_mut(&mut self, id: u32) -> Option<&mut [u8]> {
        self.externals.iter_mut().find(|e| e.0 == id).and_then(|e| e.2.as_mut()).map(Buffer::as_bytes_mut)
    }

    /// `xnn_setup_runtime_v2` with every external value's buffer, each checked to hold its value
    /// at the current shape.
    pub fn setup(&mut self) -> Result<(), RawStatus> {
        self.ready = false;
        let mut values = Vec::with_capacity(self.externals.len());
        for k in 0..self.externals.len() {
            let (id, size) = (self.externals[k].0, self.externals[k].1);
            let need =
                numel(&self.external_shape(id)?).and_then(|n| n.checked_mul(size)).ok_or(STATUS_INVALID_STATE)?;
            let buf = self.externals[k].2.as_mut().ok_or(STATUS_INVALID_STATE)?;
            if buf.len() < need {
                return Err(STATUS_INVALID_STATE);
            }
            values.push(ExternalValue { id, data: buf.blocks.as_mut_ptr().cast() });
        }
        // SAFETY: every external value gets a buffer owned by `self` that holds its value at the
        // shape XNNPACK will use (plus XNN_EXTRA_BYTES); the buffers stay put until they are
        // rebound, which clears `ready` so `invoke` refuses to use the old pointers.
        Subgraph::check(unsafe { (self.api.setup_runtime_v2)(self.raw, values.len(), values.as_ptr()) })?;
        self.ready = true;
        Ok(())
    }

    /// `xnn_invoke_runtime`; refuses (invalid state) unless `setup` succeeded since the last
    /// reshape or rebinding.
    pub fn invoke(&mut self) -> Result<(), RawStatus> {
        if !self.ready {
            return Err(STATUS_INVALID_STATE);
        }
        // SAFETY: set up with live, large enough buffers (see `setup`).
        Subgraph::check(unsafe { (self.api.invoke_runtime)(self.raw) })
    }
}

// `setpriority(2)` from the C library (which `std` links): only for
// `ThreadPool::new_low_priority`.
extern "C" {
    fn setpriority(which: c_int, who: u32, prio: c_int) -> c_int;
}
/// `PRIO_PROCESS` of `<sys/resource.h>`.
const PRIO_PROCESS: c_int = 0;

/// A pthreadpool of a given size.
pub struct ThreadPool {
    api: &'static Api,
    raw: PoolPtr,
    _not_send: PhantomData<*const ()>,
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // SAFETY: `raw` came from pthreadpool_create; every runtime using it holds an `Rc` to
        // this pool, so none is alive any more.
        unsafe { (self.api.pthreadpool_destroy)(self.raw) };
    }
}

impl ThreadPool {
    /// `pthreadpool_create(threads)`, the caller counting as one of them; `None` when the pool
    /// cannot start or `threads` is 0 (which pthreadpool reads as "one per core").
    pub fn new(api: &'static Api, threads: usize) -> Option<Rc<ThreadPool>> {
        if threads == 0 {
            return None;
        }
        // SAFETY: a plain call; a null result means failure.
        let raw = unsafe { (api.pthreadpool_create)(threads) };
        (!raw.is_null()).then(|| Rc::new(ThreadPool { api, raw, _not_send: PhantomData }))
    }

    /// As [`ThreadPool::new`], with the pool's workers at the lowest scheduling priority (nice
    /// 19): for a pool with more threads than the CPUs it may run on. Between two operators of
    /// an invoke a worker spins (about a thousand `pause`s) waiting for the next one; on a shared
    /// core that spin takes the time of the thread that would post it (measured: 6.6 % of the
    /// fuzz loop's CPU time on one core). At nice 19 the caller's wake-up preempts the spinning
    /// worker. Results do not change: which thread computes a tile never changes its value.
    ///
    /// The pool is created on a helper thread that first lowers its own priority: Linux keeps
    /// nice values per thread and a new thread inherits its creator's, so the workers start at
    /// nice 19 and no other thread of the process is touched. `None` as for [`ThreadPool::new`],
    /// and also when the helper thread cannot start or lower its priority.
    pub fn new_low_priority(api: &'static Api, threads: usize) -> Option<Rc<ThreadPool>> {
        if threads == 0 {
            return None;
        }
        let raw = std::thread::Builder::new()
            .name("xnnpack-pool".into())
            .spawn(move || {
                // SAFETY: setpriority(2) with PRIO_PROCESS and who = 0 changes the calling
                // thread's nice value only (Linux: nice is per thread); no memory is involved.
                if unsafe { setpriority(PRIO_PROCESS, 0, 19) } != 0 {
                    return 0;
                }
                // SAFETY: a plain call; a null result means failure.
                unsafe { (api.pthreadpool_create)(threads) as usize }
            })
            .ok()?
            .join()
            .ok()?;
        // The pool is a heap object that no thread uses yet: from here on only the calling
        // thread runs it and drops it (the `!Send` handle keeps it there).
        let raw = raw as PoolPtr;
        (!raw.is_null()).then(|| Rc::new(ThreadPool { api, raw, _not_send: PhantomData }))
    }

    /// `pthreadpool_get_threads_count`.
    pub fn threads(&self) -> usize {
        // SAFETY: a live pool.
        unsafe { (self.api.pthreadpool_get_threads_count)(self.raw) }
    }
}
