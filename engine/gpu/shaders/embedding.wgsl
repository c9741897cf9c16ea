// h = E[tokens[cursor]]: E (v, d).
struct Params { d: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> cursor: array<u32>;
@group(0) @binding(3) var<storage, read> emb: array<f32>;
@group(0) @binding(4) var<storage, read_write> h: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    if (j >= p.d) { return; }
    let tok = tokens[cursor[0]];
    h[j] = emb[tok * p.d + j];
}
