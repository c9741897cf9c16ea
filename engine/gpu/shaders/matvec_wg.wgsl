// y = W x (+ y when accumulate == 1), one 64-wide workgroup per row (for real GPUs: coalesced
// loads and a tree reduction in workgroup memory). W (rows, cols) row-major.
struct Params { rows: u32, cols: u32, accumulate: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = wg.x;
    let base = i * p.cols;
    var acc = 0.0;
    for (var j = lid.x; j < p.cols; j = j + 64u) {
        acc = acc + w[base + j] * x[j];
    }
    part[lid.x] = acc;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) { part[lid.x] = part[lid.x] + part[lid.x + stride]; }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        if (p.accumulate == 1u) { y[i] = y[i] + part[0]; } else { y[i] = part[0]; }
    }
}
