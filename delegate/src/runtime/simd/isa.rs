//! The instruction-set token: an [`Isa`] other than scalar can only be built by
//! [`Isa::avx2`]/[`Isa::avx512`], which check the CPU at run time, so holding one proves that
//! calling the `#[target_feature]` kernels compiled for it is legal. The [`multiversion!`]
//! macro compiles one safe body for the baseline, AVX2 and AVX-512 and dispatches on the token.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Level {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A detected instruction set. The field is private: a non-scalar `Isa` exists only if the
/// running CPU has the features its kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa(Level);

impl Isa {
    /// Plain Rust (auto-vectorized for the build's baseline, SSE2 on x86-64).
    pub const SCALAR: Isa = Isa(Level::Scalar);

    /// AVX2 + FMA + F16C, if the CPU has them.
    pub fn avx2() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
                return Some(Isa(Level::Avx2));
            }
        }
        None
    }

    /// AVX-512F and AVX-512BW (every AVX-512 CPU since Skylake-SP, Zen 4 included) plus
    /// everything [`Isa::avx2`] needs, if the CPU has them.
    pub fn avx512() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && Isa::avx2().is_some() {
                return Some(Isa(Level::Avx512));
            }
        }
        None
    }

    /// The widest available set.
    pub fn best() -> Isa {
        Isa::avx512().or_else(Isa::avx2).unwrap_or(Isa::SCALAR)
    }

    pub fn is_scalar(self) -> bool {
        self.0 == Level::Scalar
    }

    /// 32 vector registers of 16 lanes (AVX-512): room for the larger tiles of the panel
    /// product (`gemm_panels`' `wide`).
    pub fn wide_registers(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.0 == Level::Avx512
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            Level::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => "avx512",
        }
    }
}

/// Every available instruction set, scalar first (tests run all of them).
pub fn available_isas() -> Vec<Isa> {
    let mut v = vec![Isa::SCALAR];
    v.extend(Isa::avx2());
    v.extend(Isa::avx512());
    v
}

impl Isa {
    /// The level behind the token (for the dispatching code of this module; the token itself
    /// can only be made by the detecting constructors above).
    #[inline(always)]
    pub(super) fn level(self) -> Level {
        self.0
    }
}

// ------------------------------------------------------------------------------------------
// Multiversioned plain-Rust kernels: one body, compiled for the baseline, AVX2 and AVX-512.

macro_rules! multiversion {
    ($(#[$meta:meta])* pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        pub fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body_avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
            unsafe fn body_avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            match isa.level() {
                $crate::runtime::simd::isa::Level::Scalar => body($($arg),*),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa(Avx2)` is only built after run-time detection of these features;
                // the body is safe Rust (bounds-checked), so the features are the only precondition.
                $crate::runtime::simd::isa::Level::Avx2 => unsafe { body_avx2($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above for AVX-512F.
                $crate::runtime::simd::isa::Level::Avx512 => unsafe { body_avx512($($arg),*) },
            }
        }
    };
}

pub(super) use multiversion;
