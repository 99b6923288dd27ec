//! The graph of each pattern: the graph under test, its magnitude twin or its wide twin.

use super::ctx::{signed_weight_like, smallest_normal, Ctx};
use super::knobs::{conv_out, graph_mean_dims, heads, kernel, mean_perm, mlp_hidden, pool_conv, swapped};
use super::{invalid_field, q_in, q_out, Kind, NotApplicable, Q_ADD, Q_CONV, Q_REQ};
use crate::case::{Case, InvalidCase, Pattern};
use reference::graph::{Graph, TensorSpec, T};
use reference::{ElemType, GraphBuilder, QuantParams};

pub(super) fn input_spec(case: &Case, dt: ElemType) -> TensorSpec {
    let mut spec = TensorSpec::new(dt, &case.shape).with_format(case.format);
    for &d in &case.dynamic {
        spec = spec.dynamic(d);
    }
    spec
}

/// Builds one of the two graphs; also returns the qs8 output steps.
pub(super) fn build_graph(case: &Case, kind: Kind) -> Result<(Graph, Vec<Option<f32>>), NotApplicable> {
    let (abs, wide) = (kind == Kind::Magnitude, kind == Kind::Wide);
    let q = case.dtype == ElemType::Qs8 && kind == Kind::UnderTest;
    let dt = if kind != Kind::UnderTest || case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype };
    // The floor is the largest smallest-normal of the types the graph rounds to.
    let floor = abs.then(|| {
        let l = smallest_normal(case.dtype);
        case.mean_dtype.map_or(l, |d| l.max(smallest_normal(d)))
    });
    let cx = Ctx { g: GraphBuilder::new(), case, abs, wide, dt, q, floor, next_weight: std::cell::Cell::new(0) };
    let g = &cx.g;
    let x_in = g.input("x", input_spec(case, dt));
    // QK-norm's magnitude twin also takes the true values.
    let actual_in = (abs && case.pattern == Pattern::QkNorm).then(|| g.input("x_true", input_spec(case, dt)));
    let x = cx.qdq(x_in, q_in(case));
    let (dims, keepdim) = graph_mean_dims(case);
    let rank = case.shape.len();
    let step = |qp: QuantParams| q.then_some(qp.scale);
    let mut steps = vec![];
    let outputs: Vec<T> = match case.pattern {
        Pattern::Random => return invalid_field("pattern", "a random graph is built by `patterns::random`"),
        Pattern::Mean => {
            // qs8, variant bit 0: the mean reads a requantizing copy, `dq -> copy -> q` with
            // other parameters on each side (a same-layout memory-format copy, or with bit 1
            // a same-shape reshape), which no pass may fold into one qs8 copy.
            let x = if q && case.variant & 1 == 1 {
                let copy = if case.variant & 2 != 0 && case.dynamic.is_empty() {
                    let shape: Vec<i64> = case.shape.iter().map(|&d| d as i64).collect();
                    g.reshape(x, &shape)
                } else {
                    g.to_format(x, case.format)
                };
                cx.qdq(copy, Q_REQ)
            } else {
                x
            };
            // Variant bit 4: a permute first (after the copy, which reads the input's shape
            // and format), the mean's dims renumbered to reduce the same input dims.
            let x = match mean_perm(case) {
                Some(p) => g.permute(x, &p.iter().map(|&d| d as i64).collect::<Vec<_>>()),
                None => x,
            };
            steps.push(step(q_out(case)));
            vec![cx.qdq(cx.mean(x, &dims, keepdim, true), q_out(case))]
        }
        // `x + x`: its operands are one value, there is no order to swap.
        Pattern::AddMean | Pattern::Gap => {
            let s = cx.qdq(g.add(x, x), Q_ADD);
            steps.push(step(q_out(case)));
            vec![cx.qdq(cx.mean(s, &dims, keepdim, case.pattern == Pattern::AddMean), q_out(case))]
        }
        Pattern::RmsNorm => {
            if q {
                return invalid_field("dtype", "rms_norm has no qs8 form");
            }
            vec![cx.rms_norm(x, case.shape[rank - 1], None)]
        }
        Pattern::QkNorm => {
            if q {
                return invalid_field("dtype", "qk_norm has no qs8 form");
            }
            let (b, s, e) = (case.shape[0] as i64, case.shape[1] as i64, case.shape[2]);
            let h = heads(case);
            let dh = e / h;
            let heads = |v: T| g.reshape(v, &[b, s, h as i64, dh as i64]);
            let wq = cx.weight(&[e, e]);
            let qh = heads(cx.linear(x, wq, None));
            let normed = match actual_in {
                Some(a) => {
                    // The true-valued projection needs the signed weights (and no floor).
                    let wq_true = signed_weight_like(&cx, &[e, e], 0);
                    let qa = heads(g.linear(a, wq_true, None));
                    cx.rms_norm(qh, dh, Some(qa))
                }
                None => cx.rms_norm(qh, dh, None),
            };
            let flat = g.reshape(normed, &[b, s, e as i64]);
            let wo = cx.weight(&[e, e]);
            vec![cx.linear(flat, wo, None)]
        }
        Pattern::PreNormMlp => {
            if q {
                return invalid_field("dtype", "pre_norm_mlp has no qs8 form");
            }
            let d = case.shape[rank - 1];
            let f = mlp_hidden(case);
            let n = cx.rms_norm(x, d, None);
            let (w1, b1) = (cx.weight(&[f, d]), cx.weight(&[f]));
            let h = g.relu(cx.linear(n, w1, Some(b1)));
            let (w2, b2) = (cx.weight(&[d, f]), cx.weight(&[d]));
            let out = cx.linear(h, w2, Some(b2));
            vec![if swapped(case) { g.add(out, x) } else { g.add(x, out) }]
        }
        Pattern::ConvMean => {
            let y = cx.qdq(cx.conv(x, case.shape[1], conv_out(case), kernel(case)), Q_CONV);
            steps.push(step(q_out(case)));
            vec![cx.qdq(cx.mean(y, &dims, keepdim, false), q_out(case))]
        }
        Pattern::ConvMeanConv => {
            if q {
                return invalid_field(
                    "dtype",
                    "conv_mean_conv has no qs8 form (the last conv would amplify the mean's step)",
                );
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            let m = cx.mean(y, &dims, keepdim, false);
            vec![cx.conv(m, 1, 4, kernel(case))]
        }
        Pattern::ConvSubMean => {
            if q {
                return invalid_field("dtype", "conv_sub_mean has no qs8 form");
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            let m = cx.mean(y, &dims, keepdim, false);
            if swapped(case) {
                // Sub does not commute: `(-1 * m) + y`, the NHWC conv output second. Both
                // are exact rewrites in IEEE arithmetic (`-m` is exact, `y + (-m)` is `y - m`
                // rounded once); the magnitude twin adds `|m|`.
                let neg = if abs { m } else { g.mul(m, cx.scalar(-1.0)) };
                vec![g.add(neg, y)]
            } else {
                vec![cx.sub(y, m)]
            }
        }
        Pattern::AdaptivePool => {
            let y = if pool_conv(case) {
                cx.qdq(cx.conv(x, case.shape[1], conv_out(case), kernel(case)), Q_CONV)
            } else {
                x
            };
            steps.push(step(q_out(case)));
            vec![cx.qdq(g.adaptive_avg_pool2d(y, [1, 1]), q_out(case))]
        }
        Pattern::SharedInput => {
            // Variant bit 1: the conv is defined (visited) before the mean.
            let conv_first = case.variant & 2 != 0;
            let mut conv = None;
            if conv_first {
                conv = Some(cx.conv(x, case.shape[1], conv_out(case), kernel(case)));
            }
            let m = cx.qdq(cx.mean(x, &dims, keepdim, false), q_out(case));
            let c = conv.unwrap_or_else(|| cx.conv(x, case.shape[1], conv_out(case), kernel(case)));
            steps.push(step(q_out(case)));
            steps.push(step(Q_CONV));
            vec![m, cx.qdq(c, Q_CONV)]
        }
    };
    steps.resize(outputs.len(), None);
    let graph =
        cx.g.finish(&outputs).map_err(|e| InvalidCase::new("pattern", format!("the case does not build: {e}")))?;
    Ok((graph, steps))
}
