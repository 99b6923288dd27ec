//! The runtime's SIMD kernels and the `unsafe` they need, in one room per job: CPU feature
//! detection and the instruction-set token ([`isa`]), byte-buffer casts ([`bytes`]), the mean
//! kernels ([`mean`]: hand-written AVX2/AVX-512 row and column sums), fp16/bf16 elementwise
//! chains in registers ([`narrow_chain`], AVX2), and the multiversioned plain-Rust kernels
//! ([`elementwise`], [`product`], [`panel`], [`convert`], [`transpose`]). Every kernel is
//! behind a safe function.
//!
//! Soundness rests on two private invariants, each checked in this module and nowhere else:
//! - an [`Isa`] other than scalar can only be built by [`Isa::avx2`]/[`Isa::avx512`], which
//!   check the CPU at run time, so holding one proves the `target_feature` calls are legal;
//! - every raw-pointer kernel is called only after its safe wrapper checked (with checked
//!   arithmetic) that every address it touches lies inside the slice.
//!
//! The pool's lifetime erasure (`JobRef`) lives next to the pool, in `pool::job`.

mod bytes;
mod convert;
mod elementwise;
mod isa;
mod mean;
mod narrow_chain;
mod panel;
mod product;
mod transpose;

pub use bytes::{bf16_bits, bf16_bits_mut, cast, cast_mut, lines_for, zeros_par, Line, Pod};
pub use convert::{
    bf16_to_f32, dequantize, f16_to_f32, f32_to_bf16, f32_to_f16, quantize, quantize_round_trip, round_to, Narrow,
};
pub use elementwise::{
    bin_apply, bin_rows, bin_sv, bin_vs, bin_vv, chain_rows, clamp_inplace, rsqrt, scale_rows, square, BinOp,
    ChainLayout, ChainStep, Src, CHAIN_ARGS, CHAIN_RANK,
};
pub use isa::{available_isas, Isa};
pub use mean::{
    col_sums_f32, col_sums_i8, row_sums_f32, row_sums_half, row_sums_i8, sum_rows_f32, sum_rows_i8, Half, Rows, Term,
};
pub use narrow_chain::{chain_narrow, narrow_chain_available, NarrowDst, NarrowOpd};
pub use panel::{gemm_panels, pack as pack_panels, packed_len, Panels};
pub use product::{
    conv_windows_f32, conv_windows_qs8, dot, dot_tile, gemm_rows, mul_acc, requantize, window_f32, window_qs8, Gemm,
    Lane, Requant, Start, Window,
};
pub use transpose::transpose_block_f32;
