// Round activations the way llama.cpp's CPU does before a matmul and back to f32, so the float
// matmul kernels see the same inputs as the reference (`type_traits_cpu[w].vec_dot_type`):
//   mode 0, Q8_K (k-quants, i-quants): one scale per 256, iscale = 127 / max|x|,
//     q = round(x * iscale), x' = q / iscale (`quantize_row_q8_K_ref`);
//   mode 1, Q8_0 / Q8_1 (legacy quants): one scale per 32, d = max|x| / 127, q = round(x / d),
//     x' = q * f16(d) (`quantize_row_q8_0_ref`);
//   mode 2, f16 weights: x' = f16(x);  mode 3, bf16 weights: x' = bf16(x), nearest even.
// With one large value in a group (the "massive activations" of the first token of Qwen2.5)
// the other values lose most of their precision; matching the reference needs the same loss.
// One workgroup per 256 elements, four per thread. The output is f32, or f16 for the
// cooperative matmul over f16 operands (`round_act16`).

struct Params {
    n_groups: u32,
    n_vec4: u32,
    mode: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{Y_TY}}>;

var<workgroup> red: array<f32, 64>;

fn round_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if (b & 0x7f800000u) == 0x7f800000u {
        return x;
    }
    let r = b + 0x7fffu + ((b >> 16u) & 1u);
    return bitcast<f32>(r & 0xffff0000u);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = wg_linear(wid, nwg);
    if g >= pc.n_groups {
        return;
    }
    let i = 64u * g + t;
    var x = vec4<f32>(0.0);
    if i < pc.n_vec4 {
        x = X[i];
    }
    let a = abs(x);
    red[t] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    var y = x;
    if pc.mode == 0u {
        for (var s = 32u; s > 0u; s >>= 1u) {
            if t < s {
                red[t] = max(red[t], red[t + s]);
            }
            workgroupBarrier();
        }
        let amax = red[0];
        y = vec4<f32>(0.0);
        if amax > 0.0 {
            let iscale = div_rn(127.0, amax);
            y = round(x * iscale) * div_rn(1.0, iscale);
        }
    } else if pc.mode == 1u {
        // The 8 threads of a block of 32 read each other's maxima.
        let b0 = t - t % 8u;
        var amax = 0.0;
        for (var j = 0u; j < 8u; j++) {
            amax = max(amax, red[b0 + j]);
        }
        let d = div_rn(amax, 127.0);
        y = vec4<f32>(0.0);
        if d > 0.0 {
            y = round(x * div_rn(1.0, d)) * round_f16(d);
        }
    } else if pc.mode == 2u {
        y = vec4<f32>(round_f16(x.x), round_f16(x.y), round_f16(x.z), round_f16(x.w));
    } else {
        y = vec4<f32>(round_bf16(x.x), round_bf16(x.y), round_bf16(x.z), round_bf16(x.w));
    }
    if i < pc.n_vec4 {
        {{STORE_Y}}
    }
}
