// Causal depthwise conv, one step: shift the (e, k) window, append x = xz[:e], u = silu(conv + b).
struct Params { e: u32, k: u32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xz: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> window: array<f32>;
@group(0) @binding(5) var<storage, read_write> u: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.e) { return; }
    let base = c * p.k;
    for (var j = 0u; j + 1u < p.k; j = j + 1u) { window[base + j] = window[base + j + 1u]; }
    window[base + p.k - 1u] = xz[c];
    var acc = b[c];
    for (var j = 0u; j < p.k; j = j + 1u) { acc = acc + w[base + j] * window[base + j]; }
    u[c] = acc / (1.0 + exp(-acc));
}
