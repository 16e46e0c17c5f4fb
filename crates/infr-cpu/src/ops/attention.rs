//! Attention over the paged KV cache (the non-flash path of llama.cpp's `build_attn_mha`:
//! `kq = k·q`, `softmax(kq * scale + mask)`, `kqv = v·kq`). With an f16 cache, q and the
//! probabilities are rounded to f16 as ggml's f16 matmuls do; with a q8_0 cache (which
//! llama.cpp runs through flash attention) q is rounded to q8_0 and the probabilities stay f32,
//! as `ggml_compute_forward_flash_attn_ext_f16` does for a q8_0 K and V.

use half::f16;
use infr_core::{AttnParams, StepInputs};
use rayon::prelude::*;

use crate::kv::{KvLayer, KvStore};
use crate::simd::vecf;

/// Cache slot of position `pos` in a sequence with pages `pages`.
#[inline]
fn slot(pages: &[u32], page_size: usize, pos: usize) -> usize {
    pages[pos / page_size] as usize * page_size + pos % page_size
}

/// One head's key or value row as attention reads it: converted to f32, or in an f16 cache.
#[derive(Clone, Copy)]
enum KvRow<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl<'a> KvRow<'a> {
    /// The row `d` wide at element `at`: in the step's gathered f32 copy when there is one,
    /// else in place in an f16 `store` (where the CPU has the fused f16 kernels), else
    /// converted from `store` into `scratch`.
    fn get(copy: Option<&'a [f32]>, store: &'a KvStore, at: usize, d: usize, scratch: &'a mut [f32]) -> Self {
        match (copy, store.f16_slice().filter(|_| vecf::f16_fused())) {
            (Some(c), _) => KvRow::F32(&c[at..at + d]),
            (None, Some(h)) => KvRow::F16(&h[at..at + d]),
            (None, None) => {
                store.read(at, &mut scratch[..d]);
                KvRow::F32(&scratch[..d])
            }
        }
    }

    /// `q · row`.
    fn dot(self, q: &[f32]) -> f32 {
        match self {
            KvRow::F32(k) => vecf::dot(q, k),
            KvRow::F16(k) => vecf::dot_f16(q, k),
        }
    }

    /// `y += s * row`.
    fn axpy_into(self, y: &mut [f32], s: f32) {
        match self {
            KvRow::F32(v) => vecf::axpy(y, s, v),
            KvRow::F16(v) => vecf::axpy_f16(y, s, v),
        }
    }
}

/// Most tokens of one sequence in a step for which attention reads the cache rows in place.
const DIRECT_MAX_TOKENS: usize = 2;

/// Append the step's K and V rows to the cache.
pub(crate) fn write_kv(layer: &mut KvLayer, k: &[f32], v: &[f32], inp: &StepInputs<'_>, page_size: usize) {
    for t in 0..inp.tokens.len() {
        let seq = &inp.seqs[inp.token_seq[t] as usize];
        let s = slot(layer.pages_of(seq), page_size, inp.positions[t] as usize);
        layer.k.write(s * layer.k_width, &k[t * layer.k_width..(t + 1) * layer.k_width]);
        layer.v.write(s * layer.v_width, &v[t * layer.v_width..(t + 1) * layer.v_width]);
    }
}

fn round16(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// Round to the q8_0 grid (blocks of 32 along each head's row; head dims are whole blocks).
fn round_q8_0(x: &mut [f32]) {
    let q = infr_quant::quantize(infr_quant::GgmlType::Q8_0, x).expect("head rows are whole q8_0 blocks");
    infr_quant::dequantize(infr_quant::GgmlType::Q8_0, &q, x).expect("same length");
}

/// The keys and values one sequence's queries can see in this step, converted to f32 once:
/// positions `lo..=hi`, rows of the layer's K/V width.
struct SeqKv {
    lo: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn gather_seq(layer: &KvLayer, pages: &[u32], page_size: usize, lo: usize, hi: usize) -> SeqKv {
    let n = hi + 1 - lo;
    let (kw, vw) = (layer.k_width, layer.v_width);
    let mut k = vec![0f32; n * kw];
    let mut v = vec![0f32; n * vw];
    // Copy page-contiguous runs in one call each.
    let mut pos = lo;
    while pos <= hi {
        let run = (page_size - pos % page_size).min(hi + 1 - pos);
        let s = slot(pages, page_size, pos);
        let r = pos - lo;
        layer.k.read(s * kw, &mut k[r * kw..(r + run) * kw]);
        layer.v.read(s * vw, &mut v[r * vw..(r + run) * vw]);
        pos += run;
    }
    SeqKv { lo, k, v }
}

/// Attention for every token and head; `q` is `[n_tokens, n_head * dk]`, returns
/// `[n_tokens, n_head * dv]`.
pub(crate) fn attention(
    layer: &KvLayer,
    q: &[f32],
    inp: &StepInputs<'_>,
    p: &AttnParams,
    sinks: Option<&[f32]>,
    page_size: usize,
) -> Vec<f32> {
    let (nh, nkv) = (p.n_head as usize, p.n_kv_head as usize);
    let (dk, dv) = (p.head_dim_k as usize, p.head_dim_v as usize);
    let (kw, vw) = (layer.k_width, layer.v_width);
    let group = nh / nkv;
    let n = inp.tokens.len();
    let f16_cache = layer.k.is_f16();
    let q8_cache = layer.k.is_q8_0();
    let lo_of = |pos: usize| match (p.window, p.chunk) {
        (Some(w), _) => (pos + 1).saturating_sub(w as usize),
        (None, Some(c)) => pos - pos % c as usize,
        (None, None) => 0,
    };
    // Visible key range per sequence of the step.
    let mut ranges: Vec<Option<(usize, usize)>> = vec![None; inp.seqs.len()];
    for t in 0..n {
        let pos = inp.positions[t] as usize;
        let r = &mut ranges[inp.token_seq[t] as usize];
        *r = Some(match *r {
            None => (lo_of(pos), pos),
            Some((lo, hi)) => (lo.min(lo_of(pos)), hi.max(pos)),
        });
    }
    // The keys row `t` sees, `lo..=hi`: causal up to its own position, or (bidirectional)
    // everything its sequence's step sees: from the window of its first row to its last row.
    let first_pos: Vec<usize> = {
        let mut first = vec![usize::MAX; inp.seqs.len()];
        for t in 0..n {
            let s = inp.token_seq[t] as usize;
            first[s] = first[s].min(inp.positions[t] as usize);
        }
        first
    };
    let keys_of = |t: usize| -> (usize, usize) {
        let s = inp.token_seq[t] as usize;
        if p.bidirectional {
            let hi = ranges[s].map_or(0, |r| r.1);
            (lo_of(first_pos[s]), hi)
        } else {
            let pos = inp.positions[t] as usize;
            (lo_of(pos), pos)
        }
    };
    // Decode steps (a token or two per sequence) read each cache row where it lies, one head
    // at a time; longer steps convert every sequence's visible rows to f32 once, as each
    // row then serves many queries.
    let mut per_seq = vec![0usize; inp.seqs.len()];
    for &s in inp.token_seq {
        per_seq[s as usize] += 1;
    }
    let whole_blocks = !q8_cache || (dk % 32 == 0 && dv % 32 == 0);
    let direct = whole_blocks && per_seq.iter().all(|&c| c <= DIRECT_MAX_TOKENS);
    let seq_kv: Vec<Option<SeqKv>> = if direct {
        Vec::new()
    } else {
        ranges
            .par_iter()
            .enumerate()
            .map(|(s, r)| r.map(|(lo, hi)| gather_seq(layer, layer.pages_of(&inp.seqs[s]), page_size, lo, hi)))
            .collect()
    };
    let mut out = vec![0f32; n * nh * dv];
    // One task per (token, KV head): the `group` query heads sharing that KV head read each
    // key and value row once. Per task scratch: the queries, their score rows and (reading
    // the cache directly) one head's key or value row.
    let scratch = || (Vec::<f32>::new(), Vec::<f32>::new(), vec![0f32; dk.max(dv)]);
    out.par_chunks_mut(group * dv).enumerate().for_each_init(scratch, |(qs, scores, row), (idx, o)| {
        let (t, kvh) = (idx / nkv, idx % nkv);
        let pages = layer.pages_of(&inp.seqs[inp.token_seq[t] as usize]);
        let kv = seq_kv.get(inp.token_seq[t] as usize).map(|kv| kv.as_ref().expect("range built for every sequence"));
        // Element offset of position `j`'s row of this KV head (`w` wide rows, `d` per head):
        // in the step's gathered copy when there is one, else in the cache.
        let at = |j: usize, w: usize, d: usize| match kv {
            Some(kv) => (j - kv.lo) * w + kvh * d,
            None => slot(pages, page_size, j) * w + kvh * d,
        };
        let (lo, pos) = keys_of(t);
        let npos = pos + 1 - lo;
        let h0 = kvh * group;
        qs.clear();
        qs.extend_from_slice(&q[(t * nh + h0) * dk..(t * nh + h0 + group) * dk]);
        if f16_cache {
            round16(qs);
        } else if q8_cache {
            round_q8_0(qs);
        }
        scores.clear();
        scores.resize(group * npos, 0.0);
        for j in lo..=pos {
            let kr = KvRow::get(kv.map(|kv| &kv.k[..]), &layer.k, at(j, kw, dk), dk, row);
            for g in 0..group {
                let mut sc = kr.dot(&qs[g * dk..(g + 1) * dk]) * p.scale;
                if let Some(cap) = p.softcap {
                    sc = (sc / cap).tanh() * cap;
                }
                scores[g * npos + j - lo] = sc;
            }
        }
        for (g, row) in scores.chunks_mut(npos).enumerate() {
            // A sink joins the softmax as a key without a value (`ggml_soft_max_add_sinks`).
            let sink = sinks.map(|s| s[h0 + g]);
            let mut max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if let Some(sk) = sink {
                max = max.max(sk);
            }
            let mut sum = vecf::exp_sub_sum(row, max);
            if let Some(sk) = sink {
                sum += (sk - max).exp() as f64;
            }
            let inv = (1.0 / sum) as f32;
            for s in row.iter_mut() {
                *s *= inv;
            }
            if f16_cache {
                round16(row);
            }
        }
        for j in lo..=pos {
            let vr = KvRow::get(kv.map(|kv| &kv.v[..]), &layer.v, at(j, vw, dv), dv, row);
            for (g, og) in o.chunks_mut(dv).enumerate() {
                vr.axpy_into(og, scores[g * npos + j - lo]);
            }
        }
    });
    out
}
