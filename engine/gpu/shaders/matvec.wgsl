// y = W x (+ y when accumulate == 1). W (rows, cols) row-major; one invocation per row.
struct Params { rows: u32, cols: u32, accumulate: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p.rows) { return; }
    let base = i * p.cols;
    var acc = 0.0;
    for (var j = 0u; j < p.cols; j = j + 1u) {
        acc = acc + w[base + j] * x[j];
    }
    if (p.accumulate == 1u) { y[i] = y[i] + acc; } else { y[i] = acc; }
}
