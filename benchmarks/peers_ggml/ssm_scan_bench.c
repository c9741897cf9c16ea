// Times ggml's CPU ssm_scan (Mamba-1 form: A per (channel, state)) on our bench shapes.
// Our own harness around ggml's public API; build and run with benchmarks/bench_scan_ggml.sh.
//
//   ssm_scan_bench B L E N THREADS REPEATS  ->  one JSON line: median and best ms per call
//
// Mamba-1 in ggml's layout (as llama.cpp calls it): x {1, E, L, B}, dt {E, L, B} (softplus applied
// inside the op), A {N, E}, B and C {N, 1, L, B}, state s {N, 1, E, B}. The op returns y and the
// last state; unlike our forward it does not apply the D skip or the SiLU gate.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml.h"
#include "ggml-cpu.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void fill(struct ggml_tensor * t, float lo, float hi, unsigned * seed) {
    float * d = (float *) t->data;
    for (int64_t i = 0; i < ggml_nelements(t); i++) {
        *seed = *seed * 1664525u + 1013904223u;
        d[i] = lo + (hi - lo) * (float) (*seed >> 8) / (float) (1u << 24);
    }
}

static int cmp(const void * a, const void * b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char ** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s B L E N THREADS REPEATS\n", argv[0]);
        return 2;
    }
    const int64_t nb = atoll(argv[1]), nl = atoll(argv[2]), ne = atoll(argv[3]), nn = atoll(argv[4]);
    const int threads = atoi(argv[5]), repeats = atoi(argv[6]);
    const size_t floats = (size_t) (nb * nl * ne * 3 + nb * nl * nn * 2 + ne * nn + nn * ne * nb * 2);
    struct ggml_init_params ip = {floats * sizeof(float) + (64u << 20), NULL, false};
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * s = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, nn, 1, ne, nb);
    struct ggml_tensor * x = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, ne, nl, nb);
    struct ggml_tensor * dt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne, nl, nb);
    struct ggml_tensor * A = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nn, ne);
    struct ggml_tensor * B = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, nn, 1, nl, nb);
    struct ggml_tensor * C = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, nn, 1, nl, nb);
    struct ggml_tensor * ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, nb);
    unsigned seed = 1;
    memset(s->data, 0, ggml_nbytes(s));
    fill(x, -1.0f, 1.0f, &seed);
    fill(dt, -4.0f, -1.0f, &seed);  // softplus -> delta in about [0.02, 0.3], as at init
    fill(A, -16.0f, -1.0f, &seed);
    fill(B, -1.0f, 1.0f, &seed);
    fill(C, -1.0f, 1.0f, &seed);
    for (int i = 0; i < nb; i++) ((int32_t *) ids->data)[i] = i;
    struct ggml_tensor * out = ggml_ssm_scan(ctx, s, x, dt, A, B, C, ids, 1);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, threads);  // warm-up
    double * ms = (double *) malloc(sizeof(double) * (size_t) repeats);
    for (int r = 0; r < repeats; r++) {
        double t0 = now_ms();
        ggml_graph_compute_with_ctx(ctx, gf, threads);
        ms[r] = now_ms() - t0;
    }
    qsort(ms, (size_t) repeats, sizeof(double), cmp);
    printf("{\"bench\": \"scan\", \"impl\": \"ggml ssm_scan\", \"kernel\": \"forward\", "
           "\"shape_blen\": [%lld, %lld, %lld, %lld], \"best_ms\": %.3f, \"median_ms\": %.3f, "
           "\"threads\": %d}\n", (long long) nb, (long long) nl, (long long) ne, (long long) nn,
           ms[0], ms[repeats / 2], threads);
    free(ms);
    ggml_free(ctx);
    return 0;
}
