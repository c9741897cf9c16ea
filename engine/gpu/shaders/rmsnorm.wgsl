// y = x * rsqrt(mean(x^2) + eps) * w, one workgroup over a (d,) vector.
struct Params { d: u32, eps: f32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    var s = 0.0;
    for (var j = lid.x; j < p.d; j = j + 64u) { s = s + x[j] * x[j]; }
    part[lid.x] = s;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) { part[lid.x] = part[lid.x] + part[lid.x + stride]; }
        workgroupBarrier();
    }
    let r = inverseSqrt(part[0] / f32(p.d) + p.eps);
    for (var j = lid.x; j < p.d; j = j + 64u) { y[j] = x[j] * r * w[j]; }
}
