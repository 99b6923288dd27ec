//! `DELEGATE_FORCE_SCALAR=1` forces the portable kernels whatever the options ask for. Alone in
//! its test binary: it sets a process environment variable.

use delegate::runtime::{resolve_simd, Program, RunOptions, SimdLevel};
use delegate::{lower, LoweringMode};
use reference::graph::{GraphBuilder, TensorSpec};

#[test]
fn force_scalar_overrides_every_level() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 40]));
    let m = g.mean(x, &[1], true);
    let graph = g.finish(&[m]).unwrap();
    let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
    let before = Program::new(&lowered, &RunOptions::default()).unwrap();
    std::env::set_var("DELEGATE_FORCE_SCALAR", "1");
    for level in [SimdLevel::Auto, SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Scalar] {
        assert_eq!(resolve_simd(level).unwrap().name(), "scalar", "{level:?}");
        let opts = RunOptions { simd: level, ..Default::default() };
        assert_eq!(Program::new(&lowered, &opts).unwrap().isa_name(), "scalar");
    }
    std::env::set_var("DELEGATE_FORCE_SCALAR", "0");
    assert_eq!(resolve_simd(SimdLevel::Auto).unwrap(), delegate::runtime::simd::Isa::best());
    std::env::remove_var("DELEGATE_FORCE_SCALAR");
    assert_eq!(before.isa_name(), delegate::runtime::simd::Isa::best().name());
}
