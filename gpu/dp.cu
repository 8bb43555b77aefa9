// Pair-state dynamic programme (docs/ENGINE.md) on the GPU.
//
// Every DP step has the same shape, forward (from a) or backward (from b):
//
//     out[o, r] = link[r, o] + max_{z in [lo[r, o], hi[r, o]]} prev[r, z]
//     arg[r, o] = the maximising z (-1 when the window is empty)
//
// r is the node the two links share, o the node at the far end of the new link and z the node
// at the far end of the old one. All matrices are row-major; `out` is written with the strides
// in `Step`, so that a forward step writes its result transposed (the next step reads rows).
// Scores are `real`: float64 by default, so that paths agree with the CPU backend except on exact
// ties, or float32 when built with -DREAL=float (GPUs with a low float64 rate; gpu/kernels.py).
// Ties break towards the smallest index.
//
// Two kernels compute a step:
//   dp_step_reduce: the paper's kernel: a 2D grid of blocks over the pairs (o, r), a 1D block of
//                   threads over z in the admissible window, max + argmax reduced in shared
//                   memory. O(d^3) work per stage at most; the general path.
//   dp_step_rmq:    one block per shared node r: the row prev[r, :] and its sparse table of
//                   range-maximum indices live in shared memory, and every window is answered by
//                   two table look-ups. O(d^2 log d) work per stage.
// blockIdx.y (rmq) or blockIdx.z (reduce) picks the Step, so the forward and the backward step of
// one round run in a single launch.


#ifndef REAL
#define REAL double
#endif
typedef REAL real;

#define FULL_MASK 0xffffffffu
#define NO_INDEX 0x7fffffff

struct Step {
    const real* prev;    // (n_r, n_p): row r holds the predecessor scores over z
    const real* link;    // (n_r, n_o): score of the new link
    const int* lo;       // (n_r, n_o): first admissible z
    const int* hi;       // (n_r, n_o): last admissible z (lo > hi: none)
    real* out;           // out[o * out_o_stride + r * out_r_stride], or null
    int* arg;            // (n_r, n_o): argmax z, -1 if none
    real* best;          // (n_r): max over o of out[o, r], or null
    int* best_arg;       // (n_r): its o, -1 if none
    int n_r, n_o, n_p;
    int out_o_stride, out_r_stride;
    int pad;
};

// (v, i) beats (bv, bi): larger value, then smaller index. NO_INDEX marks "nothing yet".
__device__ __forceinline__ bool better(real v, int i, real bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

// Max + argmax over the block (blockDim.x a multiple of 32); the result lands in thread 0.
__device__ void block_argmax(real& v, int& i)
{
    __shared__ real warp_v[32];
    __shared__ int warp_i[32];
    for (int offset = 16; offset > 0; offset >>= 1) {
        const real ov = __shfl_down_sync(FULL_MASK, v, offset);
        const int oi = __shfl_down_sync(FULL_MASK, i, offset);
        if (better(ov, oi, v, i)) { v = ov; i = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { warp_v[warp] = v; warp_i[warp] = i; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        v = lane < warps ? warp_v[lane] : -INFINITY;
        i = lane < warps ? warp_i[lane] : NO_INDEX;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const real ov = __shfl_down_sync(FULL_MASK, v, offset);
            const int oi = __shfl_down_sync(FULL_MASK, i, offset);
            if (better(ov, oi, v, i)) { v = ov; i = oi; }
        }
    }
}

// Sparse-table entry: index of the (first) maximum of row[z .. z + 2^level - 1].
__device__ __forceinline__ int table_at(const short* table, int n_p, int level, int z)
{
    return level == 0 ? z : table[(level - 1) * n_p + z];
}

extern "C" __global__ void dp_step_rmq(const Step* __restrict__ steps)
{
    const Step s = steps[blockIdx.y];
    const int r = blockIdx.x;
    if (r >= s.n_r) return;
    // Dynamic shared memory: row values (n_p reals), then levels 1.. of the index table.
    extern __shared__ __align__(8) unsigned char shared[];
    real* row = reinterpret_cast<real*>(shared);
    short* table = reinterpret_cast<short*>(row + s.n_p);
    const real* prev = s.prev + (size_t)r * s.n_p;
    for (int z = threadIdx.x; z < s.n_p; z += blockDim.x) row[z] = prev[z];
    __syncthreads();
    const int levels = 31 - __clz(s.n_p);
    for (int level = 1; level <= levels; ++level) {
        const int half = 1 << (level - 1);
        short* current = table + (level - 1) * s.n_p;
        for (int z = threadIdx.x; z + (1 << level) <= s.n_p; z += blockDim.x) {
            const int a = table_at(table, s.n_p, level - 1, z);
            const int b = table_at(table, s.n_p, level - 1, z + half);
            current[z] = (short)(row[b] > row[a] ? b : a);
        }
        __syncthreads();
    }
    real row_best = -INFINITY;
    int row_arg = NO_INDEX;
    for (int o = threadIdx.x; o < s.n_o; o += blockDim.x) {
        const size_t q = (size_t)r * s.n_o + o;
        const int lo = s.lo[q], hi = s.hi[q];
        real value = -INFINITY;
        int arg = -1;
        if (lo <= hi) {
            const int level = 31 - __clz(hi - lo + 1);
            int a = table_at(table, s.n_p, level, lo);
            const int b = table_at(table, s.n_p, level, hi - (1 << level) + 1);
            if (better(row[b], b, row[a], a)) a = b;
            value = s.link[q] + row[a];
            arg = a;
        }
        if (s.out) s.out[(size_t)o * s.out_o_stride + (size_t)r * s.out_r_stride] = value;
        s.arg[q] = arg;
        if (better(value, o, row_best, row_arg)) { row_best = value; row_arg = o; }
    }
    if (s.best) {
        block_argmax(row_best, row_arg);
        if (threadIdx.x == 0) {
            s.best[r] = row_best;
            s.best_arg[r] = row_arg == NO_INDEX ? -1 : row_arg;
        }
    }
}

extern "C" __global__ void dp_step_reduce(const Step* __restrict__ steps)
{
    const Step s = steps[blockIdx.z];
    const int o = blockIdx.x, r = blockIdx.y;
    if (o >= s.n_o || r >= s.n_r) return;
    const size_t q = (size_t)r * s.n_o + o;
    const int lo = s.lo[q], hi = s.hi[q];
    const real* prev = s.prev + (size_t)r * s.n_p;
    real value = -INFINITY;
    int arg = NO_INDEX;
    for (int z = lo + threadIdx.x; z <= hi; z += blockDim.x) {
        const real candidate = prev[z];
        if (arg == NO_INDEX || candidate > value) { value = candidate; arg = z; }
    }
    block_argmax(value, arg);
    if (threadIdx.x == 0) {
        if (arg == NO_INDEX) { value = -INFINITY; arg = -1; }
        else value += s.link[q];
        if (s.out) s.out[(size_t)o * s.out_o_stride + (size_t)r * s.out_r_stride] = value;
        s.arg[q] = arg;
    }
}

// best[r], best_arg[r] = max and argmax of the row values[r, :] (n_rows, n_cols).
extern "C" __global__ void row_argmax(const real* __restrict__ values, int n_rows, int n_cols,
                                      real* best, int* best_arg)
{
    const int r = blockIdx.x;
    if (r >= n_rows) return;
    real value = -INFINITY;
    int arg = NO_INDEX;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        const real candidate = values[(size_t)r * n_cols + c];
        if (better(candidate, c, value, arg)) { value = candidate; arg = c; }
    }
    block_argmax(value, arg);
    if (threadIdx.x == 0) {
        best[r] = value;
        best_arg[r] = arg == NO_INDEX ? -1 : arg;
    }
}

// Windows for the backward direction, from the forward ones of the same turn.
// lo, hi: (n_r, n_q), both non-increasing along q (core/guides.py's admissible_windows raises
// otherwise; the binary searches below depend on it). For every (r, o),
// o in [0, n_o), the q with lo[r, q] <= o <= hi[r, q] form one interval [rlo, rhi] (n_r, n_o).
extern "C" __global__ void reverse_windows(const int* __restrict__ lo, const int* __restrict__ hi,
                                           int n_r, int n_q, int n_o, int* rlo, int* rhi)
{
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)n_r * n_o) return;
    const int r = (int)(g / n_o), o = (int)(g % n_o);
    const int* lo_row = lo + (size_t)r * n_q;
    const int* hi_row = hi + (size_t)r * n_q;
    int low = 0, high = n_q;  // first q with lo[r, q] <= o
    while (low < high) {
        const int mid = (low + high) >> 1;
        if (lo_row[mid] <= o) high = mid; else low = mid + 1;
    }
    rlo[g] = low;
    low = 0; high = n_q;      // first q with hi[r, q] < o
    while (low < high) {
        const int mid = (low + high) >> 1;
        if (hi_row[mid] < o) high = mid; else low = mid + 1;
    }
    rhi[g] = low - 1;
}

// Merge the two halves and backtrack on the device.
// best, best_arg (sizes[c]): per node j of the middle guide c, the best total over its successors
// k and which k. merge_arg[j, k]: the predecessor i. args[t]: the argmax table of step t
// (forward (n_t, n_{t+1}) for t < c, backward (n_{t+1}, n_t) for t >= c). links[t]: link scores
// of stage t, transposed for t >= c. sizes: n_0 .. n_{m+1}.
// result (2m + 4 doubles): [total, link score of stage 0..m, node index x_0..x_{m+1}].
extern "C" __global__ void finish(const real* __restrict__ best, const int* __restrict__ best_arg,
                                  const int* __restrict__ merge_arg,
                                  const unsigned long long* __restrict__ args,
                                  const unsigned long long* __restrict__ links,
                                  const int* __restrict__ sizes, int m, int c, double* result)
{
    const int n_best = sizes[c];
    real value = -INFINITY;
    int j = NO_INDEX;
    for (int r = threadIdx.x; r < n_best; r += blockDim.x)
        if (better(best[r], r, value, j)) { value = best[r]; j = r; }
    block_argmax(value, j);
    if (threadIdx.x != 0) return;
    result[0] = value;
    if (j == NO_INDEX || !(value > -INFINITY)) return;
    double* x = result + m + 2;
    x[0] = 0.0;
    x[m + 1] = 0.0;
    x[c] = j;
    x[c + 1] = best_arg[j];
    x[c - 1] = merge_arg[(size_t)j * sizes[c + 1] + best_arg[j]];
    for (int t = c - 1; t >= 1; --t) {
        const int* arg = reinterpret_cast<const int*>(args[t]);
        x[t - 1] = arg[(size_t)x[t] * sizes[t + 1] + (size_t)x[t + 1]];
    }
    for (int t = c; t <= m - 1; ++t) {
        const int* arg = reinterpret_cast<const int*>(args[t]);
        x[t + 2] = arg[(size_t)x[t + 1] * sizes[t] + (size_t)x[t]];
    }
    for (int t = 0; t <= m; ++t) {
        const real* link = reinterpret_cast<const real*>(links[t]);
        const size_t from = (size_t)x[t], to = (size_t)x[t + 1];
        result[1 + t] = t < c ? link[from * sizes[t + 1] + to] : link[to * sizes[t] + from];
    }
}
