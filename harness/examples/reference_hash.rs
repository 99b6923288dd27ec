//! Hash check for reference changes: one line per fuzz case with a hash of its inputs, its
//! outputs and every node value (graph under test and magnitude twin), then one line per
//! `data::generate` grid cell. Run it before and after a change and diff the files.
//!
//! cargo run --release -p harness --example reference_hash -- SEED CASES [EVAL] > out.txt
//!
//! Each line has two hashes: of the exact bits, and with every NaN as one value (which NaN
//! comes out of a sum of two NaNs is up to the compiler's operand order).

use harness::gen::{nth_case, GenConfig};
use harness::oracle::case_inputs;
use harness::patterns;
use reference::data::{generate, DataOptions, Distribution};
use reference::{ElemType, MemoryFormat, Tensor, TensorData, TensorSpec};
use std::hash::{DefaultHasher, Hasher};

/// Feeds a tensor to both hashers: shape, format, quant, then each element's bits.
fn feed(h: &mut [DefaultHasher; 2], t: &Tensor) {
    for h in h.iter_mut() {
        h.write_usize(t.shape.len());
        t.shape.iter().for_each(|&s| h.write_usize(s));
        h.write_u8(t.format as u8);
        h.write_u32(t.quant.map_or(0, |q| q.scale.to_bits()));
        h.write_i32(t.quant.map_or(0, |q| q.zero_point));
        h.write_u8(t.dtype() as u8);
    }
    for i in 0..t.data.len() {
        let bits = t.data.bits(i);
        let nan = match &t.data {
            TensorData::F32(v) => v[i].is_nan(),
            TensorData::F16(v) => v[i].is_nan(),
            TensorData::Bf16(v) => v[i].is_nan(),
            TensorData::Qs8(_) => false,
        };
        h[0].write_u32(bits);
        h[1].write_u32(if nan { 0x7fc0_0000 } else { bits });
    }
}

fn feed_result(h: &mut [DefaultHasher; 2], r: &Result<Vec<Tensor>, String>) {
    match r {
        Ok(ts) => ts.iter().for_each(|t| feed(h, t)),
        Err(e) => h.iter_mut().for_each(|h| h.write(e.as_bytes())),
    }
}

type Eval = fn(&reference::Graph, &[Tensor]) -> Result<Vec<Tensor>, String>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20261130);
    let cases: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let (run, run_all): (Eval, Eval) = match args.get(3).map(String::as_str) {
        None | Some("plain") => (
            |g, i| reference::eval::run(g, i).map_err(|e| e.to_string()),
            |g, i| reference::eval::run_all(g, i).map_err(|e| e.to_string()),
        ),
        Some("fast") => (
            |g, i| reference::fast::run(g, i).map_err(|e| e.to_string()),
            |g, i| reference::fast::run_all(g, i).map_err(|e| e.to_string()),
        ),
        Some(other) => panic!("unknown evaluator {other}"),
    };
    let cfg = GenConfig::default();
    for index in 0..cases {
        let case = nth_case(seed, index, &cfg);
        let mut h = [DefaultHasher::new(), DefaultHasher::new()];
        match patterns::build(&case) {
            Err(e) => h.iter_mut().for_each(|h| h.write(e.to_string().as_bytes())),
            Ok(built) => {
                for (r, run_shape) in case.runs().iter().enumerate() {
                    let shapes = patterns::run_input_shapes(&case, &built.graph, run_shape);
                    let inputs = match case_inputs(&case, &built, r, &shapes) {
                        Ok(i) => i,
                        Err(e) => {
                            h.iter_mut().for_each(|h| h.write(e.to_string().as_bytes()));
                            continue;
                        }
                    };
                    inputs.iter().for_each(|t| feed(&mut h, t));
                    feed_result(&mut h, &run(&built.graph, &inputs));
                    feed_result(&mut h, &run_all(&built.graph, &inputs));
                    if let Some(twin) = built.magnitude(&case) {
                        let tin = patterns::magnitude_inputs(&case, &inputs);
                        tin.iter().for_each(|t| feed(&mut h, t));
                        feed_result(&mut h, &run_all(twin, &tin));
                    }
                }
            }
        }
        println!("case {index} {:016x} {:016x}", h[0].finish(), h[1].finish());
    }
    // data::generate over every dtype, format, distribution and specials setting.
    let shapes: [&[usize]; 5] = [&[], &[7], &[3, 5], &[2, 3, 4, 5], &[1, 17, 3, 9]];
    for dtype in ElemType::ALL {
        for shape in shapes {
            for cl in [false, true] {
                let mut spec = TensorSpec::new(dtype, shape);
                if dtype == ElemType::Qs8 {
                    spec = TensorSpec::qs8(shape, reference::QuantParams::new(0.05, -3));
                }
                if cl {
                    if shape.len() != 4 {
                        continue;
                    }
                    spec = spec.with_format(MemoryFormat::ChannelsLast);
                }
                for dist in Distribution::ALL {
                    for specials in [false, true] {
                        let mut h = [DefaultHasher::new(), DefaultHasher::new()];
                        for s in 0..20u64 {
                            let opts = DataOptions { specials, distribution: Some(dist) };
                            feed(&mut h, &generate(&spec, seed.wrapping_add(s), &opts));
                        }
                        println!(
                            "generate {dtype} {shape:?} cl={cl} {dist:?} specials={specials} {:016x} {:016x}",
                            h[0].finish(),
                            h[1].finish()
                        );
                    }
                }
            }
        }
    }
}
