/* Shows the Open MPI 4.1 race behind rankwise's rare "completed although it was not awaited"
 * failures (docs/decisions.md, session 47): MPI_Waitsome writes to its caller's stack after it
 * has returned, when a second thread completes requests at the same time.
 *
 * Waitsome puts one wake-up object on its own stack, hangs it on every pending request, and
 * counts it down once per completion; the first completion wakes it. A second thread that
 * completes another of those requests at that moment may count down after Waitsome returned.
 * Here the main thread exchanges small messages with every other rank and waits for them with
 * Waitsome, while a second thread polls an all-gather of its own (as rankwise's monitor does).
 * After each wait, `probe` fills the stack below the caller with a pattern and watches it for
 * a while: a word one less than the pattern is that late count-down.
 *
 *   mpicc -O1 -o race ompi_waitsome_race.c
 *   mpicc -O1 -DTESTSOME -o race_test ompi_waitsome_race.c
 *   mpirun --oversubscribe -np 4 ./race 60        (seconds)
 *
 * With -DTESTSOME the wait polls MPI_Testsome instead, which hangs nothing on a request.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

enum { PATTERN = 0x40000000, WORDS = 4096, PER = 8, MAX_RANKS = 16 };

static atomic_int stop;
static MPI_Comm mon;
static long changed;

/* The second thread: all-gathers on its own communicator, polled with MPI_Test. */
static void *monitor(void *arg) {
    (void)arg;
    int v = 1, out[MAX_RANKS];
    while (!atomic_load(&stop)) {
        MPI_Request r;
        MPI_Iallgather(&v, 1, MPI_INT, out, 1, MPI_INT, mon, &r);
        int flag = 0;
        while (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    }
    return NULL;
}

/* Fills the stack the wait just used with PATTERN and reports any word that changes. */
__attribute__((noinline)) static void probe(int scans) {
    volatile int area[WORDS];
    for (int i = 0; i < WORDS; i++) area[i] = PATTERN;
    for (int s = 0; s < scans; s++) {
        for (int i = 0; i < WORDS; i++) {
            if (area[i] != PATTERN) {
                changed++;
                fprintf(stderr, "stack word %d changed to %x\n", i, (unsigned)area[i]);
                area[i] = PATTERN;
            }
        }
    }
}

int main(int argc, char **argv) {
    int provided, me, n;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (provided < MPI_THREAD_MULTIPLE || n > MAX_RANKS) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_dup(MPI_COMM_WORLD, &mon);
    pthread_t t;
    pthread_create(&t, NULL, monitor, NULL);

    static char sbuf[PER][64], rbuf[MAX_RANKS][PER][64];
    MPI_Request reqs[2 * PER * MAX_RANKS];
    int idx[2 * PER * MAX_RANKS];
    double end = MPI_Wtime() + (argc > 1 ? atof(argv[1]) : 20.0);
    long rounds = 0, waits = 0;
    for (int go = 1; go;) {
        int k = 0;
        for (int j = 0; j < n; j++) {
            if (j == me) continue;
            for (int p = 0; p < PER; p++) {
                MPI_Irecv(rbuf[j][p], 64, MPI_BYTE, j, p, MPI_COMM_WORLD, &reqs[k++]);
                MPI_Isend(sbuf[p], 64, MPI_BYTE, j, p, MPI_COMM_WORLD, &reqs[k++]);
            }
        }
        for (int left = k; left > 0;) {
            int done;
#ifdef TESTSOME
            do MPI_Testsome(k, reqs, &done, idx, MPI_STATUSES_IGNORE); while (done == 0);
#else
            MPI_Waitsome(k, reqs, &done, idx, MPI_STATUSES_IGNORE);
#endif
            waits++;
            probe(4);
            if (done != MPI_UNDEFINED) left -= done;
        }
        if ((++rounds & 255) == 0) {
            int mine = MPI_Wtime() < end;
            MPI_Allreduce(&mine, &go, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        }
    }
    printf("rank %d: %ld rounds, %ld waits, %ld stack words changed after a wait\n", me, rounds,
           waits, changed);
    fflush(stdout);
    /* The monitors need not stop together: end the job rather than join. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 0);
    return 0;
}
