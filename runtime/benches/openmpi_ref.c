/* OpenMPI's figures for the collectives benchmark (`collectives.rs` compiles this with mpicc and
 * runs it under mpirun when both are installed), with the benchmark's own conventions: `size` is
 * the larger per-rank buffer; each sample is the mean time per call over `k` calls started
 * together after a barrier, as seen by the slowest rank; the figure is the median of the
 * samples. Samples are taken in the same order as there: per round, the copy floor, the
 * in-place floor, then one sample of each op, so that each call finds the caches as a rankwise
 * call of the same row does (at 16 MiB a sample is one call, and back-to-back samples of one op
 * would find their buffers warm where rankwise's find them evicted by the floors).
 * Prints one line per op and size on rank 0: "<op> <size> <seconds>".
 *
 * Usage: openmpi_ref <size>... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALL_REDUCE, ALL_GATHER, BROADCAST, REDUCE_SCATTER, ALL_TO_ALL, OPS };
static const char *NAMES[OPS] = {"AllReduce", "AllGather", "Broadcast", "ReduceScatter",
                                 "AllToAll"};

/* Calls per sample, as `plan` in collectives.rs: 16 MiB of traffic, 1..=2000 calls, fewer at
 * larger worlds. */
static long calls_per_sample(long size, int world) {
    long per = (16L << 20) / (size > 1 ? size : 1);
    if (per < 1) per = 1;
    if (per > 2000) per = 2000;
    int div = world < 1 ? 1 : (world > 4 ? 4 : world);
    per /= div;
    return per < 1 ? 1 : per;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run(int op, float *big, float *out, float *small, long n, long part, MPI_Comm comm) {
    switch (op) {
    case ALL_REDUCE: MPI_Allreduce(MPI_IN_PLACE, big, (int)n, MPI_FLOAT, MPI_SUM, comm); break;
    case ALL_GATHER: MPI_Allgather(small, (int)part, MPI_FLOAT, out, (int)part, MPI_FLOAT, comm); break;
    case BROADCAST: MPI_Bcast(big, (int)n, MPI_FLOAT, 0, comm); break;
    case REDUCE_SCATTER:
        MPI_Reduce_scatter_block(big, small, (int)part, MPI_FLOAT, MPI_SUM, comm);
        break;
    default: MPI_Alltoall(big, (int)part, MPI_FLOAT, out, (int)part, MPI_FLOAT, comm); break;
    }
}

/* Seconds per call over `k` calls of `op` (or a floor: -1 copy, -2 in-place), slowest rank. */
static double sample(int op, long k, float *big, float *out, float *small, long cnt, long part,
                     unsigned long *src, unsigned long *dst, long words) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (long c = 0; c < k; c++) {
        if (op == -1) {
            memcpy(dst, src, sizeof(unsigned long) * (size_t)words);
        } else if (op == -2) {
            for (long i = 0; i < words; i++) dst[i] += 1;
        } else {
            run(op, big, out, small, cnt, part, MPI_COMM_WORLD);
        }
        __asm__ volatile("" ::: "memory"); /* the floors' stores are not dead */
    }
    double mine = (MPI_Wtime() - t) / (double)k, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double times[OPS][11];
    for (int a = 1; a < argc; a++) {
        long size = atol(argv[a]);
        /* Samples per figure, as `plan` in collectives.rs. */
        int samples = size >= (16L << 20) ? 9 : 11;
        /* The benchmark's buffers: n floats in the larger buffer, n / world per part; the
         * floors' two buffers of `size` bytes. */
        long n = size / 4 > 0 ? size / 4 : 1;
        long part = n / world > 0 ? n / world : 1;
        long full = part * world > n ? part * world : n;
        long words = size / 8 > 0 ? size / 8 : 1;
        float *big = malloc(sizeof(float) * (size_t)full);
        float *out = malloc(sizeof(float) * (size_t)full);
        float *small = malloc(sizeof(float) * (size_t)part);
        unsigned long *src = malloc(sizeof(unsigned long) * (size_t)words);
        unsigned long *dst = malloc(sizeof(unsigned long) * (size_t)words);
        if (!big || !out || !small || !src || !dst) MPI_Abort(MPI_COMM_WORLD, 2);
        for (long i = 0; i < full; i++) big[i] = 1.0f, out[i] = 0.0f;
        for (long i = 0; i < part; i++) small[i] = 1.0f;
        for (long i = 0; i < words; i++) src[i] = 1, dst[i] = 0;
        long k = calls_per_sample(size, world);
        memcpy(dst, src, sizeof(unsigned long) * (size_t)words);
        for (int op = 0; op < OPS; op++) {
            long cnt = (op == ALL_REDUCE || op == BROADCAST) ? n : part * world;
            run(op, big, out, small, cnt, part, MPI_COMM_WORLD); /* warm-up */
            run(op, big, out, small, cnt, part, MPI_COMM_WORLD);
        }
        for (int s = 0; s < samples; s++) {
            sample(-1, k, big, out, small, 0, part, src, dst, words);
            sample(-2, k, big, out, small, 0, part, src, dst, words);
            for (int op = 0; op < OPS; op++) {
                long cnt = (op == ALL_REDUCE || op == BROADCAST) ? n : part * world;
                times[op][s] = sample(op, k, big, out, small, cnt, part, src, dst, words);
            }
        }
        for (int op = 0; op < OPS; op++) {
            qsort(times[op], (size_t)samples, sizeof(double), cmp);
            if (rank == 0) printf("%s %ld %.9e\n", NAMES[op], size, times[op][samples / 2]);
        }
        free(big);
        free(out);
        free(small);
        free(src);
        free(dst);
    }
    MPI_Finalize();
    return 0;
}
