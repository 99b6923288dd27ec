//! Lowerings compared with the real ExecuTorch 1.5.1 payloads: structure, ids, dims, flags,
//! and byte for byte where no constant differs.

use super::*;

fn manifest() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/manifest.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// A node's fields as the manifest names them: its serde fields, `type`, and `num_dims`
/// beside a permutation.
fn node_fields(k: &XNodeKind) -> serde_json::Map<String, Value> {
    let v = serde_json::to_value(k).unwrap();
    let mut m = v.as_object().unwrap().values().next().unwrap().as_object().unwrap().clone();
    if let Some(n) = m.get("perm").and_then(|p| p.as_array()).map(|p| p.len()) {
        m.insert("num_dims".into(), n.into());
    }
    m.insert("type".into(), Value::from(k.type_name()));
    m
}

fn check_against_fixture(name: &str, p: &LoweredProgram, check_handles: bool) {
    let m = manifest();
    let pat = &m["patterns"][name];
    let graphs = xgraphs(p);
    assert_eq!(graphs.len() as u64, pat["n_delegates"].as_u64().unwrap(), "{name}: delegates");
    let outside: usize = pat["outside_ops"].as_object().unwrap().values().map(|v| v.as_u64().unwrap() as usize).sum();
    assert_eq!(p.summary.outside.len(), outside, "{name}: outside ops");
    for (k, (payload, xg)) in pat["payloads"].as_array().unwrap().iter().zip(&graphs).enumerate() {
        let want = &payload["graph"];
        let ctx = format!("{name} payload {k}");
        assert_eq!(xg.version, want["version"].as_str().unwrap(), "{ctx}");
        assert_eq!(xg.num_externs as u64, want["num_externs"].as_u64().unwrap(), "{ctx}");
        assert_eq!(serde_json::to_value(&xg.input_ids).unwrap(), want["input_ids"], "{ctx}");
        assert_eq!(serde_json::to_value(&xg.output_ids).unwrap(), want["output_ids"], "{ctx}");
        let wn = want["nodes"].as_array().unwrap();
        assert_eq!(xg.nodes.len(), wn.len(), "{ctx}: node count");
        for (j, (ours, theirs)) in xg.nodes.iter().zip(wn).enumerate() {
            let f = node_fields(&ours.kind);
            for (key, val) in theirs.as_object().unwrap() {
                if key == "index" {
                    continue;
                }
                if key == "debug_handle" {
                    if check_handles {
                        assert_eq!(Value::from(ours.debug_handle), *val, "{ctx} node {j} debug_handle");
                    }
                    continue;
                }
                assert_eq!(f.get(key), Some(val), "{ctx} node {j} field {key}");
            }
            assert_eq!(ours.output_min_max, None, "{ctx} node {j}");
        }
        let wv = want["values"].as_array().unwrap();
        assert_eq!(xg.values.len(), wv.len(), "{ctx}: value count");
        for (j, (ours, theirs)) in xg.values.iter().zip(wv).enumerate() {
            let c = format!("{ctx} value {j}");
            assert_eq!(Value::from(ours.id_out), theirs["id_out"], "{c}");
            assert_eq!(ours.datatype.name(), theirs["datatype"].as_str().unwrap(), "{c}");
            assert_eq!(serde_json::to_value(&ours.dims).unwrap(), theirs["dims"], "{c}");
            assert_eq!(Value::from(ours.external_id), theirs["external_id"], "{c}");
            assert_eq!(Value::from(ours.flags), theirs["flags"], "{c}");
            assert_eq!(Value::from(ours.constant_buffer_idx), theirs["constant_buffer_idx"], "{c}");
            match (&ours.quant, theirs["quant_params"].as_object()) {
                (None, None) => {}
                (Some(XQuant::PerTensor { scale, zero_point }), Some(q)) => {
                    assert_eq!(q["type"], "PerTensorQuant", "{c}");
                    let bits = u32::from_str_radix(q["scale_f32_bits"].as_str().unwrap().trim_start_matches("0x"), 16);
                    assert_eq!(scale.to_bits(), bits.unwrap(), "{c}: scale");
                    assert_eq!(Value::from(*zero_point), q["zero_point"], "{c}");
                }
                (a, b) => panic!("{c}: quant {a:?} vs {b:?}"),
            }
        }
        let wc = want["constant_data"].as_array().unwrap();
        assert_eq!(xg.constant_data.len(), wc.len(), "{ctx}: constants");
        for (ours, theirs) in xg.constant_data.iter().zip(wc).skip(1) {
            assert_eq!(Value::from(ours.size), theirs["size"], "{ctx}: constant size");
        }
    }
}

#[test]
fn fixture_a_b_c_h_match_executorch_1_5_1() {
    check_against_fixture("a", &low(&pattern_a(), Main), true);
    check_against_fixture("b", &low(&pattern_b(), Main), true);
    check_against_fixture("c", &low(&pattern_c(), Main), true);
    check_against_fixture("h", &low(&pattern_h(), Main), true);
}

#[test]
fn fixtures_without_constants_are_byte_identical_to_executorch() {
    // a and h carry no weights, so lowering + the writer must give ExecuTorch's payload
    // byte for byte (header, flatbuffer, no constant data).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    for (name, g) in [("a", pattern_a()), ("h", pattern_h())] {
        let want = std::fs::read(format!("{dir}{name}.d0.xnn")).unwrap();
        for mode in MODES {
            let p = low(&g, mode);
            let got = delegate::serialize::write(xgraphs(&p)[0]);
            assert!(got == want, "{name} {mode}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
        }
    }
}

/// The bytes of a named constant in a fixture's `.pte` (ExecuTorch keeps weights there).
fn pte_named(name: &str, key: &str) -> Vec<u8> {
    let m = manifest();
    let pte = &m["patterns"][name]["pte"];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    let bytes = std::fs::read(format!("{dir}{}", pte["file"].as_str().unwrap())).unwrap();
    let entry = pte["named_data"].as_array().unwrap().iter().find(|e| e["key"] == key).unwrap();
    let (off, size) = (entry["file_offset"].as_u64().unwrap() as usize, entry["size"].as_u64().unwrap() as usize);
    bytes[off..off + size].to_vec()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// A conv with ExecuTorch's exact weights: the serialized filter (OHWI, or [1, kh, kw, O]
/// for depthwise) turned back into the graph's OIHW.
fn fixture_conv(g: &GraphBuilder, x: T, filter: &[u8], bias: &[u8], o: usize, i: usize, dw: bool) -> T {
    let f = f32s(filter);
    let mut oihw = vec![0f32; f.len()];
    for oo in 0..o {
        for ii in 0..i {
            for h in 0..3 {
                for w in 0..3 {
                    let src = if dw { (h * 3 + w) * o + oo } else { ((oo * 3 + h) * 3 + w) * i + ii };
                    oihw[((oo * i + ii) * 3 + h) * 3 + w] = f[src];
                }
            }
        }
    }
    let wt = g.constant(Tensor::f32(&[o, i, 3, 3], oihw));
    let b = g.constant(Tensor::f32(&[o], f32s(bias)));
    g.conv2d(x, wt, Some(b), Conv2dParams::default())
}

/// ExecuTorch's constant table: every entry by name (sha256 of its bytes) in the .pte.
fn as_named(xg: &XnnGraph) -> XnnGraph {
    use sha2::Digest;
    let mut out = xg.clone();
    for c in out.constant_data.iter_mut().skip(1) {
        let data = &xg.constant_bytes[c.offset as usize..(c.offset + c.size) as usize];
        let hex: String = sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
        *c = delegate::xnn::ConstantDataOffset { offset: u64::MAX, size: c.size, named_key: Some(hex) };
    }
    out.constant_bytes.clear();
    out
}

#[test]
fn conv_fixtures_are_byte_identical_with_executorchs_weights() {
    let m = manifest();
    let key = |name: &str, d: usize, k: usize| {
        m["patterns"][name]["payloads"][d]["graph"]["constant_data"][k]["named_key"].as_str().unwrap().to_string()
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    // b: conv(3->8) -> GAP, in every mode.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = fixture_conv(&g, x, &pte_named("b", &key("b", 0, 1)), &pte_named("b", &key("b", 0, 2)), 8, 3, false);
    let gap = g.mean(y, &[2, 3], true);
    let gb = g.finish(&[gap]).unwrap();
    // c: conv(3->8) -> mean(1) -> depthwise conv(1->4), Main only (two payloads).
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = fixture_conv(&g, x, &pte_named("c", &key("c", 0, 1)), &pte_named("c", &key("c", 0, 2)), 8, 3, false);
    let mm = g.mean(y, &[1], true);
    let z = fixture_conv(&g, mm, &pte_named("c", &key("c", 1, 1)), &pte_named("c", &key("c", 1, 2)), 4, 1, true);
    let gc = g.finish(&[z]).unwrap();
    let cases = [("b", &gb, MODES.to_vec()), ("c", &gc, vec![Main])];
    for (name, graph, modes) in cases {
        for mode in modes {
            let p = low(graph, mode);
            for (k, xg) in xgraphs(&p).into_iter().enumerate() {
                let want = std::fs::read(format!("{dir}{name}.d{k}.xnn")).unwrap();
                let got = delegate::serialize::write(&as_named(xg));
                assert!(got == want, "{name}.d{k} {mode}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
            }
        }
    }
}

fn qparam(bits: u32, zp: i32) -> QuantParams {
    QuantParams::new(f32::from_bits(bits), zp)
}

fn pattern_i_b() -> Graph {
    let wq: Vec<i8> = (0..8 * 27).map(|i: i32| (i * 37) % 255 - 127).map(|v| v as i8).collect();
    pattern_i_b_with(wq, values(8, 5))
}

/// i_b with the given OIHW int8 filter and fp32 bias.
fn pattern_i_b_with(wq: Vec<i8>, bias: Vec<f32>) -> Graph {
    pattern_i_b_head(wq, bias, false)
}

/// i_b ending in `AdaptiveAvgPool2d(1)` instead of the mean.
fn pattern_i_b_pool(wq: Vec<i8>, bias: Vec<f32>) -> Graph {
    pattern_i_b_head(wq, bias, true)
}

fn pattern_i_b_head(wq: Vec<i8>, bias: Vec<f32>, pool: bool) -> Graph {
    let (sx, zx) = (0x3ccf23ae, -35);
    let (sw, sc, zc) = (0x3ac6212e, 0x3c9183c1, -17);
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let xq = g.quantize(x, f32::from_bits(sx), zx);
    let xd = g.dequantize(xq, f32::from_bits(sx), zx);
    let w = g.constant(Tensor::qs8(&[8, 3, 3, 3], wq, qparam(sw, 0)));
    let wd = g.dequantize(w, f32::from_bits(sw), 0);
    let b = g.constant(Tensor::f32(&[8], bias));
    let y = g.conv2d(xd, wd, Some(b), Conv2dParams::default());
    let yd = g.dequantize(g.quantize(y, f32::from_bits(sc), zc), f32::from_bits(sc), zc);
    let m = if pool { g.adaptive_avg_pool2d(yd, [1, 1]) } else { g.mean(yd, &[2, 3], true) };
    let md = g.dequantize(g.quantize(m, f32::from_bits(sc), zc), f32::from_bits(sc), zc);
    g.finish(&[md]).unwrap()
}

#[test]
fn fixture_i_b_is_byte_identical() {
    // ExecuTorch's int8 filter (OHWI) and int32 bias from the .pte; the fp32 bias that
    // quantizes back to that int32 is q * s_in * s_w.
    let m = manifest();
    let key = |k: usize| {
        m["patterns"]["i_b"]["payloads"][0]["graph"]["constant_data"][k]["named_key"].as_str().unwrap().to_string()
    };
    let ohwi = pte_named("i_b", &key(1));
    let mut oihw = vec![0i8; ohwi.len()];
    for o in 0..8 {
        for i in 0..3 {
            for hw in 0..9 {
                oihw[(o * 3 + i) * 9 + hw] = ohwi[(o * 9 + hw) * 3 + i] as i8;
            }
        }
    }
    let scale = (f32::from_bits(0x3ccf23ae) as f64 * f32::from_bits(0x3ac6212e) as f64) as f32;
    let qb = pte_named("i_b", &key(2));
    let bias: Vec<f32> =
        qb.chunks_exact(4).map(|c| (i32::from_le_bytes(c.try_into().unwrap()) as f64 * scale as f64) as f32).collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    let want = std::fs::read(format!("{dir}i_b.d0.xnn")).unwrap();
    // Only the weights are ExecuTorch's; ids, dims, quant params and the debug handles
    // (2/3/4, numbered as PT2E's exported graph numbers them) are the lowering's own.
    for mode in MODES {
        let p = low(&pattern_i_b_with(oihw.clone(), bias.clone()), mode);
        let got = delegate::serialize::write(&as_named(xgraphs(&p)[0]));
        assert!(got == want, "i_b {mode}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
        // The same conv then AdaptiveAvgPool2d(1): the same file.
        let p = low(&pattern_i_b_pool(oihw.clone(), bias.clone()), mode);
        let got = delegate::serialize::write(&as_named(xgraphs(&p)[0]));
        assert!(got == want, "i_b as adaptive_avg_pool2d {mode}: {} bytes vs {}", got.len(), want.len());
    }
}

#[test]
fn fixture_i_b_qs8_conv_gap_matches_executorch_1_5_1() {
    for mode in MODES {
        let p = low(&pattern_i_b(), mode);
        check_against_fixture("i_b", &p, true);
        assert_eq!(counts(&p.summary), (1, 2, 1, 0, 2, vec![]));
    }
    // The bias is int32 at scale s_in * s_w, round half to even.
    let p = low(&pattern_i_b(), Main);
    let xg = xgraphs(&p)[0];
    let bias = &xg.constant_data[2];
    let s = f32::from_bits(0x3ccf23ae) as f64 * f32::from_bits(0x3ac6212e) as f64;
    let raw = &xg.constant_bytes[bias.offset as usize..][..32];
    for (k, b) in values(8, 5).into_iter().enumerate() {
        let q = i32::from_le_bytes(raw[k * 4..k * 4 + 4].try_into().unwrap());
        assert_eq!(q, (b as f64 / (s as f32) as f64).round_ties_even() as i32);
    }
}

#[test]
fn main_reasons_are_executorchs_words() {
    // ExecuTorch 1.5.1's MeanDimConfig, as its own partitioner reported them for c and e.
    let m = manifest();
    for (name, g) in [("c", pattern_c()), ("e", rmsnorm())] {
        let want: Vec<&str> =
            m["patterns"][name]["mean_why_not"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        let p = low(&g, Main);
        let got: Vec<&str> = p.summary.outside.iter().map(|o| o.reason.as_str()).collect();
        assert_eq!(got, want, "{name}");
    }
    // Its other mean.dim reasons (generic_node_configs.py), each hit in its check order.
    let lone = |dims: &[i64], keep: bool, dtype: Option<ElemType>, shape: &[usize]| {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(shape));
        let y = match dtype {
            Some(d) => g.mean_dtype(x, dims, keep, d),
            None => g.mean(x, dims, keep),
        };
        let p = low(&g.finish(&[y]).unwrap(), Main);
        p.summary.outside.iter().map(|o| o.reason.clone()).collect::<Vec<_>>()
    };
    /// dims, keepdim, dtype argument, input shape, reason.
    type Row<'a> = (&'a [i64], bool, Option<ElemType>, &'a [usize], &'a str);
    let cases: [Row; 6] = [
        (&[-1], true, None, &[2, 8], "mean.dim only supports averaging 4D tensors, got tensor of rank 2"),
        // Rank first: a 5-D GAP-like mean is refused for its rank.
        (&[2, 3], true, None, &[1, 2, 3, 3, 2], "mean.dim only supports averaging 4D tensors, got tensor of rank 5"),
        (&[2, 3], false, Some(ElemType::F32), &[1, 2, 3, 3], "mean.dim does not support dtype"),
        (
            &[1],
            true,
            None,
            &[1, 2, 3, 3],
            "mean.dim only supports averaging 4D tensors across the innermost dimensions",
        ),
        (&[], true, None, &[1, 2, 3, 3], "mean.dim only supports averaging 4D tensors across the innermost dimensions"),
        (&[-1, -2], false, None, &[1, 2, 3, 3], "mean.dim only supports keepdim=True"),
    ];
    for (dims, keep, dtype, shape, want) in cases {
        assert_eq!(lone(dims, keep, dtype, shape), vec![want.to_string()], "{dims:?} keepdim={keep} {shape:?}");
    }
}

/// The bytes of constant-segment entry `k` of a fixture's `.pte` (the manifest's offsets;
/// sizes from the next offset or the segment's end).
fn pte_constant(name: &str, k: usize) -> Vec<u8> {
    let m = manifest();
    let pte = &m["patterns"][name]["pte"];
    let cs = &pte["constant_segment"];
    let seg = &pte["segments"][cs["segment_index"].as_u64().unwrap() as usize];
    let (base, size) = (seg["file_offset"].as_u64().unwrap() as usize, seg["size"].as_u64().unwrap() as usize);
    let offs: Vec<usize> = cs["offsets"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap() as usize).collect();
    let end = offs.get(k + 1).copied().unwrap_or(size);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    let bytes = std::fs::read(format!("{dir}{}", pte["file"].as_str().unwrap())).unwrap();
    bytes[base + offs[k]..base + end].to_vec()
}

/// e: ExecuTorch's RMSNorm with its own weight and eps (constant-segment entries 1 and 2).
fn pattern_e() -> Graph {
    let w = f32s(&pte_constant("e", 1));
    let eps = f32s(&pte_constant("e", 2));
    assert_eq!((w.len(), eps.clone()), (256, vec![1e-6]));
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 16, 256]));
    let ms = g.mean(g.mul(x, x), &[-1], true);
    let r = g.rsqrt(g.add(ms, g.scalar(eps[0])));
    let y = g.mul(g.mul(x, r), g.constant(Tensor::f32(&[256], w)));
    g.finish(&[y]).unwrap()
}

#[test]
fn fixture_e_feeds_eps_and_weight_as_delegate_inputs_byte_identical() {
    let g = pattern_e();
    let p = low(&g, Main);
    check_against_fixture("e", &p, true);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    for (k, xg) in xgraphs(&p).into_iter().enumerate() {
        let want = std::fs::read(format!("{dir}e.d{k}.xnn")).unwrap();
        let got = delegate::serialize::write(xg);
        assert!(got == want, "e.d{k}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
    }
    // The second delegate reads [mean, eps, x, w]: the two constants from constant slots
    // holding the graph's (the .pte's) data, as ExecuTorch feeds them from its constant segment.
    let Step::Delegate(d1) = &p.steps[2] else { panic!("step 2 is the second delegate") };
    let const_of = |s: usize| p.constants.iter().find(|(c, _)| *c == s).map(|(_, t)| t.clone());
    assert_eq!(const_of(d1.inputs[0]), None);
    assert_eq!(const_of(d1.inputs[2]), None);
    let eps = g.nodes.iter().find_map(|n| match &n.op {
        reference::Op::Constant { tensor } if tensor.shape.is_empty() => Some(tensor.clone()),
        _ => None,
    });
    assert_eq!(const_of(d1.inputs[1]), eps);
    assert_eq!(const_of(d1.inputs[3]).map(|t| t.shape), Some(vec![256]));
    // StaticMean: one delegate, the constants still outside it.
    for mode in [StaticMean, NhwcAware] {
        let p = low(&g, mode);
        let xg = xgraphs(&p)[0];
        assert_eq!((xg.num_externs, xg.constant_data.len()), (4, 1), "{mode}");
        assert_eq!(p.constants.len(), 2, "{mode}");
    }
}

#[test]
fn conv_weights_stay_in_the_payload_other_constants_are_inputs() {
    // conv(w, b) -> add(c): the conv's weight and bias are its config's dependencies (lifted
    // into the payload), the add's 4-D constant is a delegate input with a runtime layout copy.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let c = g.constant(Tensor::f32(&[1, 8, 6, 6], values(288, 9)));
    let z = g.add(y, c);
    let gr = g.finish(&[z]).unwrap();
    for mode in MODES {
        let p = low(&gr, mode);
        let xg = xgraphs(&p)[0];
        assert_eq!(xg.constant_data.len(), 3, "{mode}: reserved, filter, bias");
        assert_eq!(xg.num_externs, 3, "{mode}: x, the add's constant, the output");
        assert_eq!(p.constants.len(), 1, "{mode}");
        // Both inputs go to NHWC for the NHWC add, the result back: 3 transposes.
        assert_eq!(p.summary.transposes, 3, "{mode}");
    }
}

#[test]
fn adaptive_avg_pool2d_1_is_the_gap_payload_in_every_mode() {
    // a and h: AdaptiveAvgPool2d(1) gives ExecuTorch's x.mean([2,3], keepdim=True) file.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/executorch-1.5.1/");
    for (name, spec) in [("a", TensorSpec::f32(&[1, 8, 6, 6])), ("h", TensorSpec::f32(&[1, 8, 6, 6]).channels_last())] {
        let g = GraphBuilder::new();
        let x = g.input("x", spec);
        let y = g.adaptive_avg_pool2d(x, [1, 1]);
        let gr = g.finish(&[y]).unwrap();
        let want = std::fs::read(format!("{dir}{name}.d0.xnn")).unwrap();
        for mode in MODES {
            let p = low(&gr, mode);
            assert_eq!(counts(&p.summary), (1, if name == "a" { 2 } else { 1 }, 1, 0, 0, vec![]), "{name} {mode}");
            let got = delegate::serialize::write(xgraphs(&p)[0]);
            assert!(got == want, "{name} pool {mode}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
        }
    }
    // b: conv then the pool, with ExecuTorch's weights.
    let m = manifest();
    let key = |k: usize| {
        m["patterns"]["b"]["payloads"][0]["graph"]["constant_data"][k]["named_key"].as_str().unwrap().to_string()
    };
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = fixture_conv(&g, x, &pte_named("b", &key(1)), &pte_named("b", &key(2)), 8, 3, false);
    let pool = g.adaptive_avg_pool2d(y, [1, 1]);
    let gr = g.finish(&[pool]).unwrap();
    let want = std::fs::read(format!("{dir}b.d0.xnn")).unwrap();
    for mode in MODES {
        let p = low(&gr, mode);
        let got = delegate::serialize::write(&as_named(xgraphs(&p)[0]));
        assert!(got == want, "b pool {mode}: {} bytes vs ExecuTorch's {}", got.len(), want.len());
    }
    // A 3-D pool is a rank-3 mean: outside in Main (with MeanDimConfig's reason), a static
    // mean over dims [1, 2] after the change.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[8, 6, 6]));
    let pool = g.adaptive_avg_pool2d(x, [1, 1]);
    let gr = g.finish(&[pool]).unwrap();
    let p = low(&gr, Main);
    assert_eq!(p.summary.outside[0].reason, "mean.dim only supports averaging 4D tensors, got tensor of rank 3");
    for mode in [StaticMean, NhwcAware] {
        let p = low(&gr, mode);
        let xg = xgraphs(&p)[0];
        assert_eq!(
            xg.nodes[0].kind,
            XNodeKind::StaticMean { reduction_axes: vec![1, 2], input_id: 1, output_id: 0, flags: 0x40 }
        );
    }
}

#[test]
fn adaptive_avg_pool2d_other_output_sizes_are_refused_with_a_reason() {
    for size in [[2, 2], [1, 2], [0, 1]] {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
        g.adaptive_avg_pool2d(x, size);
        let err = g.finish(&[reference::graph::T(1)]).unwrap_err();
        assert_eq!(err.kind, reference::graph::GraphErrorKind::PoolOutputSize { output_size: size });
        let msg = err.to_string();
        assert!(msg.contains(&format!("output size {size:?} not supported")) && msg.contains("only [1, 1]"), "{msg}");
    }
}
