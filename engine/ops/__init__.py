"""Forward/backward pairs of free functions on NumPy arrays, one op per file.

Each public wrapper checks shapes and allocates; the private ``_*_kernel`` functions only compute.
All kernels are dtype-generic (float32 for training, float64 for gradient checks).
"""
