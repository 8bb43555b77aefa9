// Layers of a small convolutional network (gpu/network.py runs an ONNX graph with them), float32,
// one or several inputs ("samples") of any sizes per launch: every kernel reads each sample's
// tensors and sizes from a Sample table (blockIdx.z picks the sample; blocks past a sample's size
// return), so the windows of a batch run each layer in one launch. Each sample is NCHW with N = 1;
// gpu/network.py captures the launches of one input alone in a CUDA graph.
//
// conv2d:   out[co, y, x] = bias[co] + sum_{ci, i, j} w[co, ci, i, j] in[ci, y + i - pad, x + j - pad]
//           (zero outside), then the activation `act` (0 none, 1 max(0, .), 2 min(max(0, .), 6));
//           stride 1, dilation 1, one group, square odd kernel K >= 3. A block of 16 x 16 threads
//           computes a tile of 16 columns x 16 ROWS rows (blockIdx.x, row-major over the
//           sample's tiles) of CO output channels, each thread ROWS pixels (rows 16 apart) x CO
//           channels: the input tile (with its halo) and the tile's weights of CI input channels
//           at a time sit in shared memory, the weights of one tap for the CO channels side by
//           side so that a thread reads them as float4. conv2d_k*: ROWS 1, CO 8 (many short
//           blocks: small planes); conv2d_wide_k*: ROWS 2, CO 16 (large planes, batches). Split
//           over input channels: with `ci_split` < c_in, blockIdx.y also picks a group of
//           ci_split input channels, and the block writes its partial sum (no bias, no
//           activation) to out[split] (splits, c_out, rows, cols); conv_sum then adds the splits
//           in order, the bias and the activation. Deep layers of a small image have few tiles:
//           splitting gives the device more, shorter blocks.
// pointwise: a 1 x 1 convolution (stride 1, one group), out[co, p] = act(bias[co] + sum_ci
//           w[co, ci] in[ci, p] (+ extra[co, p] with `residual`: an Add of a computed tensor
//           folded in)). A block of blockDim.x pixels x blockDim.y slices computes blockDim.x
//           pixels (blockIdx.x) of CO_TILE output channels (blockIdx.y): thread (x, s) sums the
//           input channels s, s + slices, ... of its pixel, and the slices' sums meet in shared
//           memory. Many slices for many input channels on few pixels (the deep layers), few
//           for large planes: one launch either way. pointwise_staged: the same, the block's
//           weights first copied to shared memory (for large planes: blocks of much work).
// conv2d_strided: the same sum with stride `stride` (out[co, y, x] reads in[ci, stride * y + i -
//           pad, stride * x + j - pad]), for the first layer of an encoder (few input channels):
//           a thread computes one output pixel (blockIdx.x) of STRIDED_CO output channels
//           (blockIdx.y), their weights in shared memory one input channel at a time, so that
//           each input value it reads serves all of them.
// depthwise3: one 3 x 3 filter per channel (ONNX Conv with group = channels), padding 1, stride
//           1 or 2, bias and activation; one output per thread (depthwise3_wide: four along a
//           row, their inputs read once for all of them; each summed in the same order).
// max_pool: K x K windows with stride K, no padding (floor of the size).
// resize_linear: bilinear, half-pixel coordinates (ONNX Resize mode "linear",
//           coordinate_transformation_mode "half_pixel"), source coordinates clamped at 0 and at
//           the last pixel, as ONNX Runtime computes it.
// copy_floats: a concatenation along channels is one copy per input into its channel range.
// relu, sigmoid: elementwise, in place allowed.

// One sample's part of a launch (gpu/network.py SAMPLE_DTYPE): its input and output, the output's
// size (rows x cols; rows = 1, cols = n for the elementwise kernels), the input's size, a
// resize's scales, and a second input (pointwise's residual).
struct Sample {
    const float* in;
    float* out;
    int rows, cols, in_rows, in_cols;
    float scale_y, scale_x;
    const float* extra;
};

#define TILE 16
#define CO_TILE 8    // pointwise: output channels per block
#define STAGED_CHANNELS 512  // pointwise_staged: most input channels

// The activation of a convolution's output: 0 none, 1 ReLU, 2 ReLU6.
__device__ __forceinline__ float activate(float v, int act)
{
    if (act == 1) return fmaxf(v, 0.0f);
    if (act == 2) return fminf(fmaxf(v, 0.0f), 6.0f);
    return v;
}

// Thread g of a one-value-per-thread launch over a sample's channels x rows x cols outputs: g,
// and its channel c, row y and column x; -1 past the last output.
__device__ __forceinline__ long long output_position(int channels, int rows, int cols, int& c,
                                                     int& y, int& x)
{
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long plane = (long long)rows * cols;
    if (g >= channels * plane) return -1;
    c = (int)(g / plane);
    const int rest = (int)(g - c * plane);
    y = rest / cols;
    x = rest - y * cols;
    return g;
}

// K x K kernel; CO output channels and ROWS rows per thread; CI input channels per
// pass through shared memory.
template <int K, int CO, int ROWS, int CI>
__device__ __forceinline__ void conv2d(const Sample* __restrict__ samples,
                                       const float* __restrict__ w,
                                       const float* __restrict__ bias, int c_in, int c_out,
                                       int act, int ci_split)
{
    constexpr int PAD = K / 2;
    constexpr int TILE_ROWS = TILE * ROWS;
    constexpr int SPAN_X = TILE + K - 1, SPAN_Y = TILE_ROWS + K - 1;
    __shared__ float tile[CI][SPAN_Y][SPAN_X];
    __shared__ __align__(16) float weights[CI][K * K][CO];
    const Sample sample = samples[blockIdx.z];
    const int rows = sample.rows, cols = sample.cols;
    const int tiles_x = (cols + TILE - 1) / TILE;
    if ((int)blockIdx.x >= tiles_x * ((rows + TILE_ROWS - 1) / TILE_ROWS)) return;  // past it
    const float* __restrict__ in = sample.in;
    float* __restrict__ out = sample.out;
    const int y0 = (blockIdx.x / tiles_x) * TILE_ROWS, x0 = (blockIdx.x % tiles_x) * TILE;
    const int co_tiles = (c_out + CO - 1) / CO;
    const int split = blockIdx.y / co_tiles;
    const int co0 = (blockIdx.y - split * co_tiles) * CO;
    const int ci_begin = split * ci_split, ci_end = min(c_in, ci_begin + ci_split);
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * TILE + tx;
    const size_t plane = (size_t)rows * cols;
    float acc[ROWS][CO];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int o = 0; o < CO; ++o) acc[r][o] = 0.0f;
    for (int ci0 = ci_begin; ci0 < ci_end; ci0 += CI) {
        for (int i = t; i < CI * SPAN_Y * SPAN_X; i += TILE * TILE) {
            const int c = i / (SPAN_Y * SPAN_X), rest = i - c * SPAN_Y * SPAN_X;
            const int r = rest / SPAN_X, q = rest - r * SPAN_X;
            const int yy = y0 + r - PAD, xx = x0 + q - PAD;
            float v = 0.0f;
            if (ci0 + c < ci_end && yy >= 0 && yy < rows && xx >= 0 && xx < cols)
                v = __ldg(in + (size_t)(ci0 + c) * plane + (size_t)yy * cols + xx);
            tile[c][r][q] = v;
        }
        for (int i = t; i < CI * CO * K * K; i += TILE * TILE) {
            const int c = i / (CO * K * K), rest = i - c * CO * K * K;
            const int o = rest / (K * K), tap = rest - o * K * K;
            float v = 0.0f;
            if (ci0 + c < ci_end && co0 + o < c_out)
                v = __ldg(w + ((size_t)(co0 + o) * c_in + ci0 + c) * K * K + tap);
            weights[c][tap][o] = v;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < CI; ++c) {
#pragma unroll
            for (int i = 0; i < K; ++i) {
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    float tap[CO];
                    const float4* w4 = reinterpret_cast<const float4*>(weights[c][i * K + j]);
#pragma unroll
                    for (int q = 0; q < CO / 4; ++q) {
                        const float4 f = w4[q];
                        tap[4 * q] = f.x;
                        tap[4 * q + 1] = f.y;
                        tap[4 * q + 2] = f.z;
                        tap[4 * q + 3] = f.w;
                    }
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        const float v = tile[c][ty + r * TILE + i][tx + j];
#pragma unroll
                        for (int o = 0; o < CO; ++o) acc[r][o] = fmaf(tap[o], v, acc[r][o]);
                    }
                }
            }
        }
        __syncthreads();
    }
    const int x = x0 + tx;
    if (x >= cols) return;
    out += (size_t)split * c_out * plane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int y = y0 + ty + r * TILE;
        if (y >= rows) break;
#pragma unroll
        for (int o = 0; o < CO; ++o) {
            if (co0 + o >= c_out) break;
            const float v = acc[r][o] + (bias ? __ldg(bias + co0 + o) : 0.0f);
            out[(size_t)(co0 + o) * plane + (size_t)y * cols + x] = activate(v, act);
        }
    }
}

// out[c, p] = activation of bias[c] + sum_s partial[s, c, p] (s in order) (partial: the sample's
// `in`).
extern "C" __global__ void conv_sum(const Sample* __restrict__ samples,
                                    const float* __restrict__ bias, int splits, int channels,
                                    int act)
{
    const Sample sample = samples[blockIdx.z];
    const long long plane = (long long)sample.rows * sample.cols;
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)channels * plane) return;
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += __ldg(sample.in + (long long)s * channels * plane + g);
    if (bias) v += __ldg(bias + g / plane);
    sample.out[g] = activate(v, act);
}

#define CONV(NAME, K, CO, ROWS, CI, MIN_BLOCKS)                                                   \
    extern "C" __global__ void __launch_bounds__(TILE * TILE, MIN_BLOCKS) NAME(                    \
        const Sample* __restrict__ samples, const float* __restrict__ w,                           \
        const float* __restrict__ bias, int c_in, int c_out, int act, int ci_split)                \
    {                                                                                              \
        conv2d<K, CO, ROWS, CI>(samples, w, bias, c_in, c_out, act, ci_split);                     \
    }

// conv2d_k*: 16 x 16 output tiles of 8 channels (many blocks: small planes); conv2d_wide_k*:
// 16 x 32 tiles of 16 channels (more work per block: large planes, batches).
// (MIN_BLOCKS: resident blocks per multiprocessor the registers must allow.)
CONV(conv2d_k3, 3, 8, 1, 4, 4)
CONV(conv2d_k5, 5, 8, 1, 4, 4)
CONV(conv2d_k7, 7, 8, 1, 4, 4)
CONV(conv2d_wide_k3, 3, 16, 2, 8, 1)
CONV(conv2d_wide_k5, 5, 16, 2, 8, 1)
CONV(conv2d_wide_k7, 7, 16, 2, 4, 1)

// A pointwise output: `sum` + the channel's bias (+ the residual input), activated, at `at`.
__device__ __forceinline__ void pointwise_store(const Sample& sample, const float* bias, int co,
                                                size_t at, float sum, int act, int residual)
{
    if (bias) sum += __ldg(bias + co);
    if (residual) sum += __ldg(sample.extra + at);
    sample.out[at] = activate(sum, act);
}

// The pointwise kernels' sum. STAGED: the block's weights (c_in x CO_TILE, c_in <=
// STAGED_CHANNELS) are first copied to shared memory and each input channel's CO_TILE weights read
// as two float4; else read from global memory one by one (no staging: cheaper for blocks of
// little work, the deep layers' few pixels).
template <bool STAGED>
__device__ __forceinline__ void pointwise_sum(const Sample* __restrict__ samples,
                                              const float* __restrict__ w,
                                              const float* __restrict__ bias, int c_in,
                                              int c_out, int act, int residual)
{
    __shared__ float sums[256 * CO_TILE];  // [slice][output channel][pixel]
    __shared__ float4 staged[STAGED ? 2 * STAGED_CHANNELS : 1];  // [input channel][2]
    const Sample sample = samples[blockIdx.z];
    const int n = sample.rows * sample.cols;
    const int pixels = blockDim.x, slices = blockDim.y;
    const int p0 = blockIdx.x * pixels;
    if (p0 >= n) return;  // past this sample: the whole block
    const int co0 = blockIdx.y * CO_TILE, p = p0 + threadIdx.x, s = threadIdx.y;
    const int t = s * pixels + threadIdx.x;
    const float* __restrict__ filters[CO_TILE];  // the weight rows of the block's outputs
#pragma unroll
    for (int o = 0; o < CO_TILE; ++o) filters[o] = w + (size_t)min(co0 + o, c_out - 1) * c_in;
    if (STAGED) {
        float* flat = reinterpret_cast<float*>(staged);
        for (int i = t; i < c_in * CO_TILE; i += pixels * slices) {
            const int ci = i / CO_TILE, o = i - ci * CO_TILE;
            flat[i] = __ldg(w + (size_t)min(co0 + o, c_out - 1) * c_in + ci);
        }
        __syncthreads();
    }
    float acc[CO_TILE];
#pragma unroll
    for (int o = 0; o < CO_TILE; ++o) acc[o] = 0.0f;
    if (p < n) {
        const float* __restrict__ x = sample.in + p;
#pragma unroll 4
        for (int ci = s; ci < c_in; ci += slices) {
            const float v = __ldg(x + (size_t)ci * n);
            if (STAGED) {
                const float4 low = staged[2 * ci], high = staged[2 * ci + 1];
                acc[0] = fmaf(low.x, v, acc[0]);
                acc[1] = fmaf(low.y, v, acc[1]);
                acc[2] = fmaf(low.z, v, acc[2]);
                acc[3] = fmaf(low.w, v, acc[3]);
                acc[4] = fmaf(high.x, v, acc[4]);
                acc[5] = fmaf(high.y, v, acc[5]);
                acc[6] = fmaf(high.z, v, acc[6]);
                acc[7] = fmaf(high.w, v, acc[7]);
            } else {
#pragma unroll
                for (int o = 0; o < CO_TILE; ++o) acc[o] = fmaf(__ldg(filters[o] + ci), v, acc[o]);
            }
        }
    }
    if (slices == 1) {  // the whole block: its threads' sums are the outputs
        if (p >= n) return;
#pragma unroll
        for (int o = 0; o < CO_TILE; ++o) {
            if (co0 + o >= c_out) break;
            pointwise_store(sample, bias, co0 + o, (size_t)(co0 + o) * n + p, acc[o], act,
                            residual);
        }
        return;
    }
#pragma unroll
    for (int o = 0; o < CO_TILE; ++o) sums[(s * CO_TILE + o) * pixels + threadIdx.x] = acc[o];
    __syncthreads();
    for (int i = t; i < CO_TILE * pixels; i += pixels * slices) {
        const int o = i / pixels, q = i - o * pixels;
        if (co0 + o >= c_out || p0 + q >= n) continue;
        float v = 0.0f;
        for (int k = 0; k < slices; ++k) v += sums[(k * CO_TILE + o) * pixels + q];
        pointwise_store(sample, bias, co0 + o, (size_t)(co0 + o) * n + p0 + q, v, act, residual);
    }
}

#define POINTWISE(NAME, STAGED)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                       \
        const Sample* __restrict__ samples, const float* __restrict__ w,                           \
        const float* __restrict__ bias, int c_in, int c_out, int act, int residual)                \
    {                                                                                              \
        pointwise_sum<STAGED>(samples, w, bias, c_in, c_out, act, residual);                      \
    }

POINTWISE(pointwise, false)
POINTWISE(pointwise_staged, true)

#define STRIDED_CO 16   // conv2d_strided: output channels per thread
#define STRIDED_TAPS 49  // conv2d_strided: largest k * k (k <= 7)

extern "C" __global__ void __launch_bounds__(256) conv2d_strided(
    const Sample* __restrict__ samples, const float* __restrict__ w,
    const float* __restrict__ bias, int c_in, int c_out, int k, int stride, int act)
{
    __shared__ float weights[STRIDED_TAPS][STRIDED_CO];  // one input channel's [tap][channel]
    const Sample sample = samples[blockIdx.z];
    const int rows = sample.rows, cols = sample.cols;
    const int in_rows = sample.in_rows, in_cols = sample.in_cols, pad = k / 2, taps = k * k;
    const int p0 = blockIdx.x * blockDim.x;
    if (p0 >= rows * cols) return;  // past this sample: the whole block
    const int p = p0 + threadIdx.x, co0 = blockIdx.y * STRIDED_CO;
    const int y = p / cols, x = p - (p / cols) * cols;
    float acc[STRIDED_CO];
#pragma unroll
    for (int o = 0; o < STRIDED_CO; ++o) acc[o] = 0.0f;
    for (int ci = 0; ci < c_in; ++ci) {
        __syncthreads();  // the last channel's weights are read
        for (int i = threadIdx.x; i < taps * STRIDED_CO; i += blockDim.x) {
            const int o = i / taps, tap = i - o * taps;
            weights[tap][o] = co0 + o < c_out
                ? __ldg(w + ((size_t)(co0 + o) * c_in + ci) * taps + tap) : 0.0f;
        }
        __syncthreads();
        if (p >= rows * cols) continue;
        const float* plane = sample.in + (size_t)ci * in_rows * in_cols;
        for (int i = 0; i < k; ++i) {
            const int yy = stride * y + i - pad;
            if (yy < 0 || yy >= in_rows) continue;
            for (int j = 0; j < k; ++j) {
                const int xx = stride * x + j - pad;
                if (xx < 0 || xx >= in_cols) continue;
                const float v = __ldg(plane + (size_t)yy * in_cols + xx);
                const float* f = weights[i * k + j];
#pragma unroll
                for (int o = 0; o < STRIDED_CO; ++o) acc[o] = fmaf(f[o], v, acc[o]);
            }
        }
    }
    if (p >= rows * cols) return;
#pragma unroll
    for (int o = 0; o < STRIDED_CO; ++o) {
        if (co0 + o >= c_out) break;
        const float v = acc[o] + (bias ? __ldg(bias + co0 + o) : 0.0f);
        sample.out[(size_t)(co0 + o) * rows * cols + p] = activate(v, act);
    }
}

// depthwise3: PX outputs along a row per thread (their inputs read once for all of them), each
// summed as one output alone would be (bias, then the taps in order).
template <int PX, int STRIDE>
__device__ __forceinline__ void depthwise3(const Sample* __restrict__ samples,
                                           const float* __restrict__ w,
                                           const float* __restrict__ bias, int channels, int act)
{
    constexpr int SPAN = STRIDE * (PX - 1) + 3;  // the inputs a row of PX outputs reads
    const Sample sample = samples[blockIdx.z];
    const int rows = sample.rows, cols = sample.cols;
    const int in_rows = sample.in_rows, in_cols = sample.in_cols;
    const int groups = (cols + PX - 1) / PX;
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long plane = (long long)rows * groups;
    if (g >= channels * plane) return;
    const int c = (int)(g / plane);
    const int rest = (int)(g - c * plane);
    const int y = rest / groups, x0 = (rest - y * groups) * PX;
    const float* p = sample.in + (size_t)c * in_rows * in_cols;
    float taps[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) taps[t] = __ldg(w + (size_t)c * 9 + t);
    const float start = bias ? __ldg(bias + c) : 0.0f;
    float v[PX];
#pragma unroll
    for (int q = 0; q < PX; ++q) v[q] = start;
    const int first = STRIDE * x0 - 1;
#pragma unroll
    for (int i = 0; i < 3; ++i) {
        const int yy = STRIDE * y + i - 1;
        if (yy < 0 || yy >= in_rows) continue;
        float line[SPAN];
#pragma unroll
        for (int s = 0; s < SPAN; ++s) {
            const int xx = first + s;
            line[s] = xx >= 0 && xx < in_cols ? __ldg(p + (size_t)yy * in_cols + xx) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 3; ++j) {
#pragma unroll
            for (int q = 0; q < PX; ++q) {
                const int xx = first + STRIDE * q + j;
                if (xx >= 0 && xx < in_cols)
                    v[q] = fmaf(taps[i * 3 + j], line[STRIDE * q + j], v[q]);
            }
        }
    }
    float* out = sample.out + ((size_t)c * rows + y) * cols;
#pragma unroll
    for (int q = 0; q < PX; ++q)
        if (x0 + q < cols) out[x0 + q] = activate(v[q], act);
}

#define DEPTHWISE(NAME, PX)                                                                       \
    extern "C" __global__ void NAME(const Sample* __restrict__ samples,                            \
                                    const float* __restrict__ w, const float* __restrict__ bias,  \
                                    int channels, int stride, int act)                             \
    {                                                                                              \
        if (stride == 1)                                                                           \
            depthwise3<PX, 1>(samples, w, bias, channels, act);                                    \
        else                                                                                       \
            depthwise3<PX, 2>(samples, w, bias, channels, act);                                    \
    }

DEPTHWISE(depthwise3, 1)
DEPTHWISE(depthwise3_wide, 4)

extern "C" __global__ void max_pool(const Sample* __restrict__ samples, int channels, int k)
{
    const Sample sample = samples[blockIdx.z];
    const int out_rows = sample.rows, out_cols = sample.cols, cols = sample.in_cols;
    int c, y, x;
    const long long g = output_position(channels, out_rows, out_cols, c, y, x);
    if (g < 0) return;
    const float* p = sample.in + (size_t)c * sample.in_rows * cols + (size_t)(y * k) * cols + x * k;
    float best = -INFINITY;
    for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) best = fmaxf(best, __ldg(p + (size_t)i * cols + j));
    sample.out[g] = best;
}

extern "C" __global__ void resize_linear(const Sample* __restrict__ samples, int channels)
{
    const Sample sample = samples[blockIdx.z];
    const int out_rows = sample.rows, out_cols = sample.cols;
    const int rows = sample.in_rows, cols = sample.in_cols;
    int c, y, x;
    const long long g = output_position(channels, out_rows, out_cols, c, y, x);
    if (g < 0) return;
    const float sy = fminf(fmaxf((y + 0.5f) / sample.scale_y - 0.5f, 0.0f), (float)(rows - 1));
    const float sx = fminf(fmaxf((x + 0.5f) / sample.scale_x - 0.5f, 0.0f), (float)(cols - 1));
    const int y0 = (int)sy, x0 = (int)sx;
    const int y1 = min(y0 + 1, rows - 1), x1 = min(x0 + 1, cols - 1);
    const float fy = sy - y0, fx = sx - x0;
    const float* p = sample.in + (size_t)c * rows * cols;
    const float top = __ldg(p + (size_t)y0 * cols + x0) * (1.0f - fx) + __ldg(p + (size_t)y0 * cols + x1) * fx;
    const float bottom = __ldg(p + (size_t)y1 * cols + x0) * (1.0f - fx) + __ldg(p + (size_t)y1 * cols + x1) * fx;
    sample.out[g] = top * (1.0f - fy) + bottom * fy;
}

// The elementwise kernels: the sample's rows x cols floats.
extern "C" __global__ void copy_floats(const Sample* __restrict__ samples)
{
    const Sample sample = samples[blockIdx.z];
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < (long long)sample.rows * sample.cols) sample.out[g] = __ldg(sample.in + g);
}

extern "C" __global__ void relu(const Sample* __restrict__ samples)
{
    const Sample sample = samples[blockIdx.z];
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < (long long)sample.rows * sample.cols) sample.out[g] = fmaxf(sample.in[g], 0.0f);
}

extern "C" __global__ void sigmoid(const Sample* __restrict__ samples)
{
    const Sample sample = samples[blockIdx.z];
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < (long long)sample.rows * sample.cols)
        sample.out[g] = 1.0f / (1.0f + expf(-sample.in[g]));
}
