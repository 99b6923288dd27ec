//! The benchmark scenarios (issue 8): RMSNorm and mean rows in every dtype, and the
//! fp32 LLM-like and conv programs.

use super::*;

/// RMSNorm shapes of the change's threadpool sweep (notes §7.3).
pub const RMSNORM_SHAPES: [[usize; 3]; 10] = [
    [1, 1, 128],
    [1, 8, 64],
    [1, 8, 128],
    [1, 16, 256],
    [1, 32, 128],
    [1, 32, 512],
    [1, 64, 512],
    [1, 128, 128],
    [1, 32, 2048],
    [1, 128, 2048],
];
pub const MEAN_SHAPES: [[usize; 3]; 2] = [[1, 128, 128], [1, 128, 2048]];

pub(super) fn bench(c: &mut Catalog) {
    // fp32 first, then the LLM and conv programs, then the other dtypes: the sweep times in
    // catalog order, so the headline rows come first.
    bench_dtype_rows(c, ElemType::F32);
    bench_fp32_programs(c);
    for dtype in [ElemType::F16, ElemType::Bf16, ElemType::Qs8] {
        bench_dtype_rows(c, dtype);
    }
}

fn bench_dtype_rows(c: &mut Catalog, dtype: ElemType) {
    use Family::Bench;
    {
        let dn = dtype.name();
        for shape in RMSNORM_SHAPES {
            let lbl = label(&shape);
            let quick = dtype == ElemType::F32 && (shape == [1, 8, 64] || shape == [1, 128, 2048]);
            let p = c.add(
                Bench,
                format!("rmsnorm_{lbl}_{dn}"),
                format!("{dn} RMSNorm over the last dim of {lbl}"),
                "rmsnorm",
                lbl,
                dtype,
                move |g, w| {
                    let x = g.input("x", in_spec(dtype, &shape));
                    if dtype == ElemType::Qs8 {
                        let y = rmsnorm(g, q_dq(g, x, Q_IN), shape[2], ElemType::F32, w);
                        vec![q_dq(g, y, Q_OUT)]
                    } else {
                        vec![rmsnorm(g, x, shape[2], dtype, w)]
                    }
                },
            );
            p.quick = quick;
        }
        for shape in MEAN_SHAPES {
            let lbl = label(&shape);
            let quick = dtype == ElemType::F32 && shape == [1, 128, 128];
            let p = c.add(
                Bench,
                format!("mean_last_{lbl}_{dn}"),
                format!("{dn} bare x.mean(-1, keepdim=True) on {lbl}"),
                "mean_last",
                lbl,
                dtype,
                move |g, _| {
                    let x = g.input("x", in_spec(dtype, &shape));
                    if dtype == ElemType::Qs8 {
                        vec![q_dq(g, g.mean(q_dq(g, x, Q_IN), &[-1], true), Q_IN)]
                    } else {
                        vec![g.mean(x, &[-1], true)]
                    }
                },
            );
            p.quick = quick;
        }
    }
}

fn bench_fp32_programs(c: &mut Catalog) {
    use Family::Bench;
    let f = ElemType::F32;
    c.add(
        Bench,
        "rmsnorm_linear_1x32x512".into(),
        "RMSNorm over the last dim of 1x32x512 then Linear(512->512)".into(),
        "rmsnorm_linear",
        "1x32x512".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 32, 512]));
            let n = rmsnorm(g, x, 512, ElemType::F32, w);
            vec![linear(g, n, 512, 512, ElemType::F32, w)]
        },
    );
    for (phase, tokens) in [("decode", 1usize), ("prefill", 64)] {
        let lbl = format!("1x{tokens}x512");
        c.add(Bench, format!("mlp4_{phase}"), format!("4 pre-norm residual MLP blocks x + W2(relu(W1(RMSNorm(x)))), width 512, hidden 2048, {phase} ({tokens} tokens)"), &format!("mlp4_{phase}"), lbl, f, move |g, w| {
            let mut x = g.input("x", TensorSpec::f32(&[1, tokens, 512]));
            for _ in 0..4 {
                let n = rmsnorm(g, x, 512, ElemType::F32, w);
                let h = g.relu(linear(g, n, 512, 2048, ElemType::F32, w));
                x = g.add(x, linear(g, h, 2048, 512, ElemType::F32, w));
            }
            vec![x]
        });
    }
    c.add(
        Bench,
        "conv_mean_c_c96_56x56".into(),
        "conv(3->96, 1x1) -> mean(1, keepdim=True) on 1x3x56x56".into(),
        "conv_mean_c",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            vec![g.mean(conv(g, x, 3, 96, 1, 0, w), &[1], true)]
        },
    );
    let p = c.add(
        Bench,
        "conv_mean_conv_c96_56x56".into(),
        "conv(3->96, 1x1) -> mean(1, keepdim=True) -> conv(1->4, 1x1) on 1x3x56x56".into(),
        "conv_mean_conv",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            let m = g.mean(conv(g, x, 3, 96, 1, 0, w), &[1], true);
            vec![conv(g, m, 1, 4, 1, 0, w)]
        },
    );
    p.quick = true;
    c.add(
        Bench,
        "conv_sub_mean_c96_56x56".into(),
        "conv(3->96, 1x1) -> y - y.mean(1, keepdim=True) on 1x3x56x56".into(),
        "conv_sub_mean",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            let y = conv(g, x, 3, 96, 1, 0, w);
            vec![g.sub(y, g.mean(y, &[1], true))]
        },
    );
    for (heads, hd) in [(8usize, 64usize), (16, 128)] {
        let width = heads * hd;
        let p = c.add(
            Bench,
            format!("qknorm_{heads}x{hd}"),
            format!(
                "decode QK-norm: Linear({width}->{width}) -> view 1x1x{heads}x{hd} -> RMSNorm(-1) -> view -> Linear"
            ),
            "qknorm",
            format!("{heads}x{hd}"),
            f,
            move |g, w| {
                let x = g.input("x", TensorSpec::f32(&[1, 1, width]));
                let q = linear(g, x, width, width, ElemType::F32, w);
                let h = g.reshape(q, &[1, 1, heads as i64, hd as i64]);
                let n = rmsnorm(g, h, hd, ElemType::F32, w);
                let back = g.reshape(n, &[1, 1, width as i64]);
                vec![linear(g, back, width, width, ElemType::F32, w)]
            },
        );
        p.quick = heads == 8;
    }
}
