//! Attention over the paged KV cache (the non-flash path of llama.cpp's `build_attn_mha`:
//! `kq = k·q`, `softmax(kq * scale + mask)`, `kqv = v·kq`). With an f16 cache, q and the
//! probabilities are rounded to f16 as ggml's f16 matmuls do.

use half::f16;
use infr_core::{AttnParams, StepInputs};
use rayon::prelude::*;

use crate::kv::KvLayer;
use crate::matmul::dot_f32;

/// Cache slot of position `pos` in a sequence with pages `pages`.
#[inline]
fn slot(pages: &[u32], page_size: usize, pos: usize) -> usize {
    pages[pos / page_size] as usize * page_size + pos % page_size
}

/// Append the step's K and V rows to the cache.
pub(crate) fn write_kv(layer: &mut KvLayer, k: &[f32], v: &[f32], inp: &StepInputs<'_>, page_size: usize) {
    for t in 0..inp.tokens.len() {
        let seq = &inp.seqs[inp.token_seq[t] as usize];
        let s = slot(seq.pages, page_size, inp.positions[t] as usize);
        layer.k.write(s * layer.k_width, &k[t * layer.k_width..(t + 1) * layer.k_width]);
        layer.v.write(s * layer.v_width, &v[t * layer.v_width..(t + 1) * layer.v_width]);
    }
}

fn round16(x: &mut [f32]) {
    for v in x {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// Attention for every token and head; `q` is `[n_tokens, n_head * dk]`, returns
/// `[n_tokens, n_head * dv]`.
pub(crate) fn attention(
    layer: &KvLayer,
    q: &[f32],
    inp: &StepInputs<'_>,
    p: &AttnParams,
    page_size: usize,
) -> Vec<f32> {
    let (nh, nkv) = (p.n_head as usize, p.n_kv_head as usize);
    let (dk, dv) = (p.head_dim_k as usize, p.head_dim_v as usize);
    let group = nh / nkv;
    let n = inp.tokens.len();
    let f16_cache = layer.k.is_f16();
    let mut out = vec![0f32; n * nh * dv];
    out.par_chunks_mut(dv).enumerate().for_each(|(idx, o)| {
        let (t, h) = (idx / nh, idx % nh);
        let kvh = h / group;
        let seq = &inp.seqs[inp.token_seq[t] as usize];
        let pos = inp.positions[t] as usize;
        let lo = match p.window {
            Some(w) => (pos + 1).saturating_sub(w as usize),
            None => 0,
        };
        let mut qh = q[(t * nh + h) * dk..(t * nh + h + 1) * dk].to_vec();
        if f16_cache {
            round16(&mut qh);
        }
        let mut kbuf = vec![0f32; dk];
        let mut scores = Vec::with_capacity(pos + 1 - lo);
        for j in lo..=pos {
            let s = slot(seq.pages, page_size, j);
            layer.k.read(s * layer.k_width + kvh * dk, &mut kbuf);
            let mut sc = dot_f32(&qh, &kbuf) * p.scale;
            if let Some(cap) = p.softcap {
                sc = (sc / cap).tanh() * cap;
            }
            scores.push(sc);
        }
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s as f64;
        }
        let inv = (1.0 / sum) as f32;
        for s in scores.iter_mut() {
            *s *= inv;
        }
        if f16_cache {
            round16(&mut scores);
        }
        let mut vbuf = vec![0f32; dv];
        for (jj, j) in (lo..=pos).enumerate() {
            let s = slot(seq.pages, page_size, j);
            layer.v.read(s * layer.v_width + kvh * dv, &mut vbuf);
            let w = scores[jj];
            for (a, b) in o.iter_mut().zip(&vbuf) {
                *a += w * b;
            }
        }
    });
    out
}
