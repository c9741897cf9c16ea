// cursor += 1 (moves to the next prompt token inside one submission).
@group(0) @binding(0) var<storage, read_write> cursor: array<u32>;

@compute @workgroup_size(1)
fn main() {
    cursor[0] = cursor[0] + 1u;
}
