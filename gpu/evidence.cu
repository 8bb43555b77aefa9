// Evidence planes of the score kinds `surface`, `centre`, `cross` and `sine` on the device, by the
// rules of core/scores.py, core/surface.py and core/gradient.py (gpu/evidence.py is the host side):
//
// * surface: the model's input planes (block means, percentile stretch, mirror padding and the
//   endpoint plane of core.surface.model_inputs), then (after the network, network.cu) the
//   surface and path probabilities, the model's trust at the clicks and the membership
//   sqrt(p' s); its ridge is the largest of the clicked-offset ridge of core/offset.py (runs
//   along the normal of [a, b] to the surface mask's edge, a tent around the clicks' relative
//   cross-position), CENTRE_WEIGHT x the centring of `centre` and the model's path;
// * centre: per-endpoint colour similarity exp(-|x - c|^2 / 2s^2) in float32 (the larger of the
//   two models), the band mask (similarity blurred with sigma = 1 > 0.5) walked across [a, b] near
//   a and b for the band width, and the similarity blurred with sigma = CENTRE_BLUR x width
//   (truncate 3), term -(1 - blurred + LENGTH_COST);
// * cross / sine: separable Gaussian-derivative gradient of every band (truncate 4), the band
//   with the largest magnitude kept at each pixel.
//
// Blurs are float64, separable (columns of the window first, then rows), with numpy.pad's
// "symmetric" border (scipy's "reflect"), like core/gradient.py. Products and sums that the CPU
// takes in float32 or without fused multiply-add are written with explicit rounding intrinsics,
// so the planes agree with the CPU's to float32 rounding.
//
// Pixels are (rows, cols, bands) float32 with a row pitch (floats), so a window can be read in
// place from a whole image resident on the device.
//
// The kernels of `surface` and `centre` take a table of windows (struct Window, one per window,
// gpu/kernels.py WINDOW_DTYPE): window blockIdx.z of the table, its buffers and constants. A
// grid covers the largest window of the table; blocks outside a smaller window return. So one
// launch serves every window of a batch of traces, and a single trace is a table of one.

#define MAX_BANDS 16
#define MAX_TAPS 255
#define MASK_TAPS 9  // sigma = 1, truncate 4: radius 4
#define SELECT_COUNTS (4 * 4 * 256)  // the radix select's counts: 4 passes x 4 ranks x 256 digits

struct SelectState;

struct Window {
    const float* pix;           // the window's first pixel; pitch floats a row
    float* sim;                 // (rows, cols): similarity, then the membership
    double* tmp;                // (rows, cols): the centring blur's columns pass
    float* out;                 // (rows, cols): the plane
    unsigned char* mask;        // (rows, cols): the surface mask
    float* ahead;               // (rows, cols): runs along +normal
    float* behind;              // (rows, cols): runs along -normal
    float* probability;         // (rows, cols): the model's surface probability
    float* path;                // (rows, cols): the model's path, or NULL (no path)
    float* partial;             // value_range's partial ranges (2 a block)
    float* range;               // [min, max] of the window's pixels
    double* kernel;             // centre_kernel's output: sigma, radius, width, taps
    float* means;               // (used + 1, model_rows, model_cols): the model's planes
    unsigned int* hist;         // the radix select's counts (SELECT_COUNTS)
    SelectState* state;         // the radix select's states (4)
    double* stretch;            // the band percentiles [low, high]
    float* input;               // (5, input_rows, input_cols): the network's input
    const float* logits;        // (2, logit_rows, logit_cols): the network's output
    const int* patches;         // n_patches pixel indices of the endpoint patches
    double* trust;              // the model's trust at the clicks
    double models[2 + 2 * MAX_BANDS];  // spread_a, spread_b, mean_a[bands], mean_b[bands]
    double centre[8 + MASK_TAPS];      // ax, ay, bx, by, nx, ny, width_reach, centre_blur, mask w
    double ridge[9];            // ax, ay, chord x, chord y, chord . chord, open_width, tolerance,
                                // centre_weight, length_cost
    double quantiles[2];        // the stretch percentiles as fractions
    double model_trust, length_cost, open_width;
    float clicks[4];            // a and b in the model's pixels (ax, ay, bx, by)
    float reach, clip_low, clip_high, pad;
    int rows, cols, bands, pitch;
    int step, model_rows, model_cols, used;
    int input_rows, input_cols, logit_rows, logit_cols;
    int n_patches, click_a, click_b;
    int twin;                   // the table index of this window's model run at its second
                                // resolution (core.surface.model_steps), or -1
    float* padded;              // where the window leaves the image: the plane padded (pad_planes),
                                // (padded_rows, padded_cols); else NULL (`out` is the plane)
    int pad_top, pad_left, padded_rows, padded_cols;
};
static_assert(sizeof(Window) == 800, "gpu/kernels.py WINDOW_DTYPE");

// numpy.pad(mode="symmetric") index: reflect about the edges, repeating with period 2n.
__device__ __forceinline__ int reflect(int i, int n)
{
    const int period = 2 * n;
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - 1 - i;
}

__device__ __forceinline__ float pixel(const float* pix, int pitch, int bands, int r, int c, int band)
{
    return __ldg(pix + (size_t)r * pitch + (size_t)c * bands + band);
}

// Smallest and largest value of the window (np.ptp's operands), per block: partial[2 block] = min,
// partial[2 block + 1] = max (blockDim.x a power of two, at most 1024).
extern "C" __global__ void value_range(const Window* __restrict__ windows)
{
    __shared__ float low[1024], high[1024];
    const Window& w = windows[blockIdx.z];
    float* partial = w.partial;
    float lo = INFINITY, hi = -INFINITY;
    const int per_row = w.cols * w.bands;
    for (int r = blockIdx.x; r < w.rows; r += gridDim.x) {  // a block a row, its threads along it
        const float* row = w.pix + (size_t)r * w.pitch;
        for (int k = threadIdx.x; k < per_row; k += blockDim.x) {
            const float v = __ldg(row + k);
            lo = fminf(lo, v);
            hi = fmaxf(hi, v);
        }
    }
    low[threadIdx.x] = lo;
    high[threadIdx.x] = hi;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            low[threadIdx.x] = fminf(low[threadIdx.x], low[threadIdx.x + half]);
            high[threadIdx.x] = fmaxf(high[threadIdx.x], high[threadIdx.x + half]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = low[0];
        partial[2 * blockIdx.x + 1] = high[0];
    }
}

// The n blocks' partial ranges into range[0] = min, range[1] = max: one block of one warp a window.
extern "C" __global__ void range_finish(const Window* __restrict__ windows, int n)
{
    const Window& w = windows[blockIdx.z];
    const float* partial = w.partial;
    float* out = w.range;
    float lo = INFINITY, hi = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        lo = fminf(lo, partial[2 * i]);
        hi = fmaxf(hi, partial[2 * i + 1]);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        lo = fminf(lo, __shfl_down_sync(0xffffffffu, lo, offset));
        hi = fmaxf(hi, __shfl_down_sync(0xffffffffu, hi, offset));
    }
    if (threadIdx.x == 0) {
        out[0] = lo;
        out[1] = hi;
    }
}

// Addition rounded to nearest, never fused (numpy's float64 and float32 sums).
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }

// numpy's pairwise summation of a contiguous float64 or float32 array (what ndarray.sum()
// computes: its DOUBLE_ and FLOAT_pairwise_sum).
template <typename T>
__device__ T pairwise_sum(const T* a, int n)
{
    if (n < 8) {
        T res = (T)-0.0;
        for (int i = 0; i < n; ++i) res = add_rn(res, a[i]);
        return res;
    }
    if (n <= 128) {
        T r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        int i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; ++j) r[j] = add_rn(r[j], a[i + j]);
        T res = add_rn(add_rn(add_rn(r[0], r[1]), add_rn(r[2], r[3])),
                       add_rn(add_rn(r[4], r[5]), add_rn(r[6], r[7])));
        for (; i < n; ++i) res = add_rn(res, a[i]);
        return res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return add_rn(pairwise_sum(a, n2), pairwise_sum(a + n2, n - n2));
}

// numpy's float32 sum over a patch's pixels of one band's n values, as its reductions over the
// pixel axis of a (n, bands) patch take them: pairwise where the values are contiguous (one
// band), one after the other where they are strided (several bands).
__device__ __forceinline__ float patch_sum(const float* values, int n, bool contiguous)
{
    if (contiguous) return __fadd_rn(0.0f, pairwise_sum(values, n));
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum = __fadd_rn(sum, values[i]);
    return sum;
}

// PATCH_RADIUS, SPREAD_FLOOR, RELATIVE_FLOOR, ABSOLUTE_FLOOR and STRETCH_SPAN_FLOOR come from the
// host (gpu.kernels.evidence_constants: core.scores' and core.surface's values).
#define PATCH_PIXELS ((2 * PATCH_RADIUS + 1) * (2 * PATCH_RADIUS + 1))

// core.scores.endpoint_similarity's colour models into models: thread e of a window's block
// (0: a, 1: b) takes the (2r+1)^2 patch around its click (core.scores.patch_colours: the click
// rounded half to even, the patch cut at the window's edges), its mean colour and spread
// (patch.mean(axis=0) and patch.std(axis=0).mean() in numpy's float32 operations, divisions by
// the count in float64), so the models equal the CPU's exactly.
extern "C" __global__ void colour_models(Window* __restrict__ windows)
{
    Window& w = windows[blockIdx.z];
    const int e = threadIdx.x;
    if (e >= 2) return;
    const int rows = w.rows, cols = w.cols, bands = w.bands;
    const int col = (int)rint(w.centre[2 * e]), row = (int)rint(w.centre[2 * e + 1]);
    const int r0 = max(row - PATCH_RADIUS, 0), r1 = min(row + PATCH_RADIUS + 1, rows);
    const int c0 = max(col - PATCH_RADIUS, 0), c1 = min(col + PATCH_RADIUS + 1, cols);
    const int n = max(r1 - r0, 0) * max(c1 - c0, 0);
    float values[PATCH_PIXELS], spreads[MAX_BANDS];
    for (int band = 0; band < bands; ++band) {
        int i = 0;
        for (int r = r0; r < r1; ++r)
            for (int c = c0; c < c1; ++c) values[i++] = pixel(w.pix, w.pitch, bands, r, c, band);
        const float mean = (float)__ddiv_rn((double)patch_sum(values, n, bands == 1), (double)n);
        for (i = 0; i < n; ++i) {
            const float difference = __fsub_rn(values[i], mean);
            values[i] = __fmul_rn(difference, difference);
        }
        const float variance = (float)__ddiv_rn((double)patch_sum(values, n, bands == 1),
                                                (double)n);
        spreads[band] = __fsqrt_rn(variance);
        w.models[2 + e * bands + band] = (double)mean;
    }
    w.models[e] = (double)(float)__ddiv_rn((double)__fadd_rn(0.0f, pairwise_sum(spreads, bands)),
                                           (double)bands);
}

// core.scores.endpoint_similarity into sim. models: [spread_a, spread_b, mean_a[bands],
// mean_b[bands]] (the means are float32 values; colour_models), range from value_range.
extern "C" __global__ void similarity(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = w.rows, cols = w.cols, bands = w.bands, pitch = w.pitch;
    if (c >= cols || r >= rows) return;
    const float* pix = w.pix;
    const double* models = w.models;
    const float* range = w.range;
    const double ptp = (double)__fsub_rn(range[1], range[0]);
    // SPREAD_FLOOR x range + core.scores.value_floor(range)
    const double floor_ = __dadd_rn(__dmul_rn(SPREAD_FLOOR, ptp),
                                    fmax(__dmul_rn(RELATIVE_FLOOR, ptp), ABSOLUTE_FLOOR));
    float best = 0.0f;
    for (int e = 0; e < 2; ++e) {
        const double spread = fmax(models[e], floor_);
        const float factor = (float)__ddiv_rn(-0.5, __dmul_rn(spread, spread));
        const double* mean = models + 2 + e * bands;
        float d2 = 0.0f;
        for (int band = 0; band < bands; ++band) {
            const float difference = __fsub_rn(pixel(pix, pitch, bands, r, c, band), (float)mean[band]);
            d2 = __fadd_rn(d2, __fmul_rn(difference, difference));
        }
        d2 = __fmul_rn(d2, factor);
        best = fmaxf(best, (float)exp((double)d2));
    }
    w.sim[(size_t)r * cols + c] = best;
}

// The sigma = 1 blur of the similarity at one pixel (columns first, then rows, as the whole-plane
// separable blur computes it there).
__device__ double mask_value(const float* sim, int rows, int cols, const double* w, int r, int c)
{
    double value = 0.0;
    for (int j = 0; j < MASK_TAPS; ++j) {
        const int cc = reflect(c + j - MASK_TAPS / 2, cols);
        double column = 0.0;
        for (int t = 0; t < MASK_TAPS; ++t)
            column = fma(w[t], (double)sim[(size_t)reflect(r + t - MASK_TAPS / 2, rows) * cols + cc],
                         column);
        value = fma(w[j], column, value);
    }
    return value;
}

// Whether core.scores._run_length's walk from (px, py) along (sx, sy) stops at ``distance``:
// the pixel there lies outside the window or off the mask (blurred similarity > 0.5).
__device__ bool walk_stops(const float* sim, int rows, int cols, const double* w, double px,
                           double py, double sx, double sy, int distance)
{
    const int c = (int)rint(__dadd_rn(px, __dmul_rn((double)distance, sx)));
    const int r = (int)rint(__dadd_rn(py, __dmul_rn((double)distance, sy)));
    return !(0 <= c && c < cols && 0 <= r && r < rows) || !(mask_value(sim, rows, cols, w, r, c) > 0.5);
}

// Band width at a and b, the centring sigma and its Gaussian kernel: one block a window.
// params (w.centre): [ax, ay, bx, by, nx, ny, width_reach, centre_blur, mask weights (9)].
// out (w.kernel): [sigma, radius, width, taps (2 radius + 1), reversed as
// core.gradient.filter_axis applies them].
extern "C" __global__ void centre_kernel(const Window* __restrict__ windows)
{
    const Window& win = windows[blockIdx.z];
    const float* sim = win.sim;
    const int rows = win.rows, cols = win.cols;
    const double* params = win.centre;
    double* out = win.kernel;
    __shared__ double runs[4];
    __shared__ int stop[4];
    __shared__ double phi[MAX_TAPS];
    __shared__ double total, sigma;
    __shared__ int radius;
    const double* w = params + 8;
    const int reach = (int)params[6];
    // The four walks (a and b, along +n and -n), every distance at once: the run ends at the
    // first distance where the walk stops (the run length is that distance - 1/2, or the reach).
    if (threadIdx.x < 4) stop[threadIdx.x] = reach + 1;
    __syncthreads();
    for (int i = threadIdx.x; i < 4 * reach; i += blockDim.x) {
        const int walk = i / reach, distance = i % reach + 1, e = walk / 2;
        const double sign = (walk % 2 == 0) ? 1.0 : -1.0;
        if (walk_stops(sim, rows, cols, w, params[2 * e], params[2 * e + 1], sign * params[4],
                       sign * params[5], distance))
            atomicMin(&stop[walk], distance);
    }
    __syncthreads();
    if (threadIdx.x < 4)
        runs[threadIdx.x] = stop[threadIdx.x] <= reach ? stop[threadIdx.x] - 0.5 : (double)reach;
    __syncthreads();
    if (threadIdx.x == 0) {
        const double width = __dadd_rn(__dadd_rn(runs[0], runs[1]), __dadd_rn(runs[2], runs[3])) / 2.0;
        sigma = fmax(__dmul_rn(params[7], width), 1.0);
        int r = (int)__dadd_rn(__dmul_rn(3.0, sigma), 0.5);
        r = min(r, (MAX_TAPS - 1) / 2);
        radius = r;
        out[0] = sigma;
        out[1] = (double)r;
        out[2] = width;
    }
    __syncthreads();
    const int taps = 2 * radius + 1;
    for (int i = threadIdx.x; i < taps; i += blockDim.x) {
        const double x = (double)(i - radius);
        phi[i] = exp(__ddiv_rn(__dmul_rn(__dmul_rn(-0.5, x), x), __dmul_rn(sigma, sigma)));
    }
    __syncthreads();
    if (threadIdx.x == 0) total = pairwise_sum(phi, taps);
    __syncthreads();
    for (int i = threadIdx.x; i < taps; i += blockDim.x) out[3 + taps - 1 - i] = __ddiv_rn(phi[i], total);
}

// Columns pass of the centring blur: tmp[r, c] = sum_t w[t] sim[reflect(r + t - R), c].
extern "C" __global__ void centre_blur_columns(const Window* __restrict__ windows)
{
    const Window& win = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = win.rows, cols = win.cols;
    if (c >= cols || r >= rows) return;
    const float* sim = win.sim;
    const double* kernel = win.kernel;
    double* tmp = win.tmp;
    const int radius = (int)kernel[1];
    const double* w = kernel + 3;
    double value = 0.0;
    for (int t = 0; t <= 2 * radius; ++t)
        value = fma(w[t], (double)__ldg(sim + (size_t)reflect(r + t - radius, rows) * cols + c), value);
    tmp[(size_t)r * cols + c] = value;
}

// Rows pass of the centring blur at (r, c): the centre ridge C, float64.
__device__ __forceinline__ double centre_ridge(const double* tmp, int cols, const double* kernel,
                                               int r, int c)
{
    const int radius = (int)kernel[1];
    const double* w = kernel + 3;
    const double* row = tmp + (size_t)r * cols;
    double value = 0.0;
    for (int t = 0; t <= 2 * radius; ++t) value = fma(w[t], __ldg(row + reflect(c + t - radius, cols)), value);
    return value;
}

// The term -(1 - ridge + length_cost), float32.
__device__ __forceinline__ float ridge_term(double ridge, double length_cost)
{
    return (float)(-__dadd_rn(__dsub_rn(1.0, ridge), length_cost));
}

// Rows pass of the centring blur and the term: out[r, c] = -(1 - C + length_cost), float32.
extern "C" __global__ void centre_blur_rows(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= w.cols || r >= w.rows) return;
    w.out[(size_t)r * w.cols + c] = ridge_term(centre_ridge(w.tmp, w.cols, w.kernel, r, c),
                                               w.length_cost);
}

// core.scores.pad_planes of a SCALAR plane: `out` (rows, cols) placed at (pad_top, pad_left) of
// `padded` (padded_rows, padded_cols), the rest filled with the plane's smallest value. One block
// a window (blockDim.x a power of two, at most 1024); windows with `padded` NULL return.
extern "C" __global__ void __launch_bounds__(1024) pad_planes(const Window* __restrict__ windows)
{
    __shared__ float low[1024];
    const Window& w = windows[blockIdx.z];
    if (w.padded == nullptr) return;
    const float* plane = w.out;
    const int n = w.rows * w.cols;
    float lo = INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) lo = fminf(lo, plane[i]);
    low[threadIdx.x] = lo;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) low[threadIdx.x] = fminf(low[threadIdx.x], low[threadIdx.x + half]);
        __syncthreads();
    }
    const float fill = low[0];
    const int cols = w.padded_cols, total = w.padded_rows * cols;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        const int r = i / cols - w.pad_top, c = i % cols - w.pad_left;
        w.padded[i] = (r >= 0 && r < w.rows && c >= 0 && c < w.cols)
                          ? plane[(size_t)r * w.cols + c] : fill;
    }
}

// ---- The clicked offset across the surface (core/offset.py) ----------------------------------
//
// The surface mask (membership blurred with sigma = 1 > 0.5, as the band width's walks see it),
// the runs from each surface pixel along +-normal of [a, b] to the mask's edge, and the tent
// around the clicks' relative cross-position t = behind / (ahead + behind), maxed with
// CENTRE_WEIGHT x the centre ridge.

// mask[r, c] = 1 where the sigma = 1 blur of the membership is > 0.5 (centre[8:]: its 9 reversed
// taps).
extern "C" __global__ void surface_mask(const Window* __restrict__ windows)
{
    const Window& win = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = win.rows, cols = win.cols;
    if (c >= cols || r >= rows) return;
    win.mask[(size_t)r * cols + c] = mask_value(win.sim, rows, cols, win.centre + 8, r, c) > 0.5;
}

// The widest closed cross-section (px): OPEN_WIDTH x max(width, 2), width = kernel[2].
__device__ __forceinline__ double widest_section(const double* kernel, double open_width)
{
    return __dmul_rn(open_width, fmax(kernel[2], 2.0));
}

// core.offset._run: ahead / behind = distance (px) from each mask pixel along +(nx, ny) / -(nx,
// ny) to the first pixel off the mask (nearest-pixel steps, floor(x + 0.5)), inf where the walk
// leaves the window or is longer than reach = int(widest) + 2; 0 off the mask.
extern "C" __global__ void offset_runs(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = w.rows, cols = w.cols;
    if (c >= cols || r >= rows) return;
    const unsigned char* mask = w.mask;
    const double* kernel = w.kernel;
    const double open_width = w.open_width, nx = w.centre[4], ny = w.centre[5];
    float* ahead = w.ahead;
    float* behind = w.behind;
    const size_t at = (size_t)r * cols + c;
    if (!mask[at]) {
        ahead[at] = 0.0f;
        behind[at] = 0.0f;
        return;
    }
    const int reach = (int)widest_section(kernel, open_width) + 2;
    for (int side = 0; side < 2; ++side) {
        const double sign = side == 0 ? 1.0 : -1.0;
        float run = INFINITY;
        for (int step = 1; step <= reach; ++step) {
            const double along = sign * (double)step;  // exact
            const int cc = (int)floor(__dadd_rn(__dadd_rn((double)c, __dmul_rn(along, nx)), 0.5));
            const int rr = (int)floor(__dadd_rn(__dadd_rn((double)r, __dmul_rn(along, ny)), 0.5));
            if (cc < 0 || rr < 0 || cc >= cols || rr >= rows) break;
            if (!__ldg(mask + (size_t)rr * cols + cc)) {
                run = (float)(step - 0.5);
                break;
            }
        }
        (side == 0 ? ahead : behind)[at] = run;
    }
}

// The relative cross-position t of the pixel at ``at`` if its cross-section is closed, else 0.5
// (core.offset.offset_ridge's t at a click), float32 as numpy computes it.
__device__ __forceinline__ float click_position(const unsigned char* mask, const float* ahead,
                                                const float* behind, int at)
{
    const float total = __fadd_rn(ahead[at], behind[at]);
    return (mask[at] && isfinite(total)) ? __fdiv_rn(behind[at], total) : 0.5f;
}

// Rows pass of the centring blur and the road-line term: out[r, c] = -(1 - max(O, centre_weight
// x C, P) + length_cost), O = membership x max(0, 1 - |t - t*| / tolerance) where the
// cross-section is closed and at most widest px wide (else 0), t* the clicks' t interpolated
// along [a, b]; P the model's path (rows, cols), or no P where path is NULL.
// params (w.ridge): [ax, ay, chord x, chord y, chord . chord, open_width, tolerance,
// centre_weight, length_cost]; click_a, click_b: the flat indices of the pixels under a and b.
extern "C" __global__ void offset_blur_rows(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = w.rows, cols = w.cols;
    if (c >= cols || r >= rows) return;
    const double* tmp = w.tmp;
    const double* kernel = w.kernel;
    const float* membership = w.sim;
    const unsigned char* mask = w.mask;
    const float* ahead = w.ahead;
    const float* behind = w.behind;
    const float* path = w.path;
    const double* params = w.ridge;
    const int click_a = w.click_a, click_b = w.click_b;
    float* out = w.out;
    const size_t at = (size_t)r * cols + c;
    const double centre = __dmul_rn(params[7], centre_ridge(tmp, cols, kernel, r, c));
    double offset = 0.0;
    const float total = __fadd_rn(ahead[at], behind[at]);
    if (mask[at] && isfinite(total) && (double)total <= widest_section(kernel, params[5])) {
        const float first = click_position(mask, ahead, behind, click_a);
        const float change = __fsub_rn(click_position(mask, ahead, behind, click_b), first);
        double along = __ddiv_rn(__dadd_rn(__dmul_rn(__dsub_rn((double)c, params[0]), params[2]),
                                           __dmul_rn(__dsub_rn((double)r, params[1]), params[3])),
                                 params[4]);
        along = fmin(fmax(along, 0.0), 1.0);
        const double target = __dadd_rn((double)first, __dmul_rn(along, (double)change));
        const double position = (double)__fdiv_rn(behind[at], total);
        double tent = __dsub_rn(1.0, __ddiv_rn(fabs(__dsub_rn(position, target)), params[6]));
        tent = fmin(fmax(tent, 0.0), 1.0);
        offset = __dmul_rn((double)membership[at], tent);
    }
    double ridge = fmax(offset, centre);
    if (path) ridge = fmax(ridge, (double)path[at]);  // numpy: the float32 path taken exactly
    out[at] = ridge_term(ridge, params[8]);
}

// Columns pass of the gradient: per band, the smoothed (tmp[band, 0]) and differentiated
// (tmp[band, 1]) columns. weights: smooth taps then derivative taps, 2 radius + 1 each, reversed.
extern "C" __global__ void gradient_columns(const float* __restrict__ pix, int rows, int cols,
                                            int bands, int pitch, const double* __restrict__ weights,
                                            int radius, double* __restrict__ tmp)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= cols || r >= rows) return;
    const int taps = 2 * radius + 1;
    const size_t plane = (size_t)rows * cols;
    for (int band = 0; band < bands; ++band) {
        double smooth = 0.0, derivative = 0.0;
        for (int t = 0; t < taps; ++t) {
            const double v = (double)pixel(pix, pitch, bands, reflect(r + t - radius, rows), c, band);
            smooth = fma(weights[t], v, smooth);
            derivative = fma(weights[taps + t], v, derivative);
        }
        tmp[(2 * band) * plane + (size_t)r * cols + c] = smooth;
        tmp[(2 * band + 1) * plane + (size_t)r * cols + c] = derivative;
    }
}

// Rows pass of the gradient and the strongest band: planar (2, rows, cols) gx, gy for the host
// and the same interleaved (rows, cols, 2) for the link-score kernels.
extern "C" __global__ void gradient_rows(const double* __restrict__ tmp, int rows, int cols,
                                         int bands, const double* __restrict__ weights, int radius,
                                         float* __restrict__ planar, float2* __restrict__ interleaved)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= cols || r >= rows) return;
    const int taps = 2 * radius + 1;
    const size_t plane = (size_t)rows * cols;
    double best_gx = 0.0, best_gy = 0.0, best_magnitude = 0.0;
    for (int band = 0; band < bands; ++band) {
        const double* smooth = tmp + (2 * band) * plane + (size_t)r * cols;
        const double* derivative = tmp + (2 * band + 1) * plane + (size_t)r * cols;
        double gx = 0.0, gy = 0.0;
        for (int t = 0; t < taps; ++t) {
            const int cc = reflect(c + t - radius, cols);
            gx = fma(weights[taps + t], __ldg(smooth + cc), gx);
            gy = fma(weights[t], __ldg(derivative + cc), gy);
        }
        const double magnitude = __dadd_rn(__dmul_rn(gx, gx), __dmul_rn(gy, gy));
        if (band == 0 || magnitude > best_magnitude) {
            best_gx = gx;
            best_gy = gy;
            best_magnitude = magnitude;
        }
    }
    const float fx = (float)best_gx, fy = (float)best_gy;
    planar[(size_t)r * cols + c] = fx;
    planar[plane + (size_t)r * cols + c] = fy;
    interleaved[(size_t)r * cols + c] = make_float2(fx, fy);
}

// ---- the `surface` kind: the model's input and output around core/surface.py ----------------

// The planes the model reads before core.surface.model_inputs stretches them: the window's
// `step` x `step` block means (core.surface._block_mean: edge padding, the strided views summed in
// float32 in row-major order of the offsets, then divided) of bands 0..2 (band 0 alone when the
// image has fewer than 3: used = 3 or 1) and of the similarity. out (w.means): (used + 1,
// model_rows, model_cols) float32, the bands first, the similarity last. The first block of each
// window also zeroes the radix select's counts (percentile_pass adds to them).
extern "C" __global__ void model_planes(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (blockIdx.x == 0 && blockIdx.y == 0)
        for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < SELECT_COUNTS;
             i += blockDim.x * blockDim.y)
            w.hist[i] = 0u;
    const int out_rows = w.model_rows, out_cols = w.model_cols;
    if (c >= out_cols || r >= out_rows) return;
    const int rows = w.rows, cols = w.cols, bands = w.bands, pitch = w.pitch, step = w.step;
    const float* pix = w.pix;
    const float* sim = w.sim;
    float* out = w.means;
    const int used = w.used;
    const size_t plane = (size_t)out_rows * out_cols, at = (size_t)r * out_cols + c;
    const float divisor = (float)(step * step);
    for (int k = 0; k <= used; ++k) {
        float total = 0.0f;
        for (int i = 0; i < step; ++i)
            for (int j = 0; j < step; ++j) {
                const int rr = min(r * step + i, rows - 1), cc = min(c * step + j, cols - 1);
                const float v = k < used ? pixel(pix, pitch, bands, rr, cc, k)
                                         : sim[(size_t)rr * cols + cc];
                total = (i == 0 && j == 0) ? v : __fadd_rn(total, v);
            }
        out[k * plane + at] = __fdiv_rn(total, divisor);
    }
}

// core.surface.surface_model from the network's logits (2 planes of logit_rows x logit_cols,
// channel-major, the model resolution's model_rows x model_cols in their top-left corner):
// sigmoid, and for step 2 the bilinear upsampling of core.surface._upsample (rows first, then
// columns, float32 weights), into probability (plane 0, the surface) and path (plane 1), each
// (rows, cols). A window with a twin (its run at a second resolution) takes the larger of the
// two runs' values.
__device__ __forceinline__ float probability_at(const float* logits, int logit_cols, int r, int c)
{
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-logits[(size_t)r * logit_cols + c])));
}

__device__ __forceinline__ void upsample_tap(int i, int step, int size, int& low, int& high,
                                             float& weight)
{
    const double position = fmin(fmax(((double)i + 0.5) / step - 0.5, 0.0), (double)(size - 1));
    low = (int)floor(position);
    high = min(low + 1, size - 1);
    weight = (float)(position - low);
}

// Plane k of run w's model output at window pixel (r, c).
__device__ __forceinline__ float model_value(const Window& w, int k, int r, int c)
{
    const int logit_rows = w.logit_rows, logit_cols = w.logit_cols, step = w.step;
    const float* plane = w.logits + (size_t)k * logit_rows * logit_cols;
    if (step == 1) return probability_at(plane, logit_cols, r, c);
    int r0, r1, c0, c1;
    float wr, wc;
    upsample_tap(r, step, w.model_rows, r0, r1, wr);
    upsample_tap(c, step, w.model_cols, c0, c1, wc);
    float column[2];
    for (int j = 0; j < 2; ++j) {
        const int cc = j == 0 ? c0 : c1;
        column[j] = __fadd_rn(__fmul_rn(probability_at(plane, logit_cols, r0, cc), __fsub_rn(1.0f, wr)),
                              __fmul_rn(probability_at(plane, logit_cols, r1, cc), wr));
    }
    return __fadd_rn(__fmul_rn(column[0], __fsub_rn(1.0f, wc)), __fmul_rn(column[1], wc));
}

extern "C" __global__ void surface_probability(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int rows = w.rows, cols = w.cols;
    if (c >= cols || r >= rows) return;
    for (int k = 0; k < 2; ++k) {
        float value = model_value(w, k, r, c);
        if (w.twin >= 0) value = fmaxf(value, model_value(windows[w.twin], k, r, c));
        (k == 0 ? w.probability : w.path)[(size_t)r * cols + c] = value;
    }
}

// The model's trust t = min(1, mean probability in the endpoint patches / model_trust): one block
// a window. patches: the n pixel indices (row * cols + col) of both patches. trust[0] = t.
extern "C" __global__ void surface_trust(const Window* __restrict__ windows)
{
    __shared__ double sums[256];
    const Window& w = windows[blockIdx.z];
    const float* probability = w.probability;
    const int* patches = w.patches;
    const int n = w.n_patches;
    const double model_trust = w.model_trust;
    double* trust = w.trust;
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += probability[patches[i]];
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const double mean = n ? (double)(float)(sums[0] / n) : 0.0;
        trust[0] = fmin(1.0, mean / model_trust);
    }
}

// The membership the `surface` kind centres on, in place of the similarity:
// sim <- sqrt((t p + (1 - t) s) s), float32 as core.scores computes it.
extern "C" __global__ void surface_membership(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= w.rows * w.cols) return;
    const float* probability = w.probability;
    const double* trust = w.trust;
    float* sim = w.sim;
    const float t = (float)trust[0];
    const float rest = (float)(1.0 - trust[0]);
    const float s = sim[i];
    const float surface = __fadd_rn(__fmul_rn(t, probability[i]), __fmul_rn(rest, s));
    sim[i] = __fsqrt_rn(__fmul_rn(surface, s));
}

// numpy.percentile(bands, q) (method "linear") of the model's band planes (the first used x
// model_rows x model_cols values of w.means), without sorting: the
// two order statistics around each quantile found by a radix select on the values' bits, 8 bits
// a pass from the top (`repeat` counts every value that many times, for a grey image's band
// used three times). Pass p (percentile_pass, a grid of blocks) counts, for each of the four
// wanted ranks, the values whose higher bits match the ones chosen so far, by their next 8 bits,
// into hist[p]; every block of the next pass (and percentile_finish) reads those counts to
// choose that digit. state[p] holds the chosen high bits and the ranks left, as block 0 of pass
// p saw them. q (w.quantiles): the two quantiles as fractions; out (w.stretch): [value at q0,
// value at q1] (float64, as numpy returns). hist (4 x 4 x 256) must be zero before pass 0.
__device__ __forceinline__ unsigned int order_key(float v)
{
    const unsigned int bits = __float_as_uint(v);
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ float key_value(unsigned int key)
{
    return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

struct SelectState {
    unsigned long long rank[4];  // rank left within the values matching prefix
    unsigned int prefix[4];      // the key's bits chosen so far
    double gamma[2];             // interpolation weight of each quantile
};
static_assert(sizeof(SelectState) == 64, "gpu/evidence.py reserves 64 bytes a state");

// The state before pass `pass` into shared `st` (1024 threads): the ranks of numpy's virtual
// index for pass 0, else the previous pass's state and counts: for each rank, the digit whose
// cumulative count first exceeds it (at most 255).
__device__ void select_state(int pass, long long total, const double* __restrict__ q,
                             const unsigned int* __restrict__ hist,
                             const SelectState* __restrict__ state, SelectState& st,
                             unsigned int (&cumulative)[4][256], unsigned int (&digit)[4])
{
    const int t = threadIdx.x / 256, bin = threadIdx.x % 256;
    if (pass == 0) {
        if (threadIdx.x < 2) {
            // numpy: virtual index n q + (1 + q (1 - 1 - 1)) - 1, its floor and the next index.
            const double index = __dsub_rn(__dadd_rn(__dmul_rn((double)total, q[threadIdx.x]),
                                                     __dadd_rn(1.0, __dmul_rn(q[threadIdx.x], -1.0))),
                                           1.0);
            const double below = floor(index);
            long long lo = (long long)below;
            lo = lo < 0 ? 0 : (lo > total - 1 ? total - 1 : lo);
            st.rank[2 * threadIdx.x] = lo;
            st.rank[2 * threadIdx.x + 1] = lo + 1 > total - 1 ? total - 1 : lo + 1;
            st.gamma[threadIdx.x] = __dsub_rn(index, below);
        }
        if (threadIdx.x < 4) st.prefix[threadIdx.x] = 0;
        __syncthreads();
        return;
    }
    if (threadIdx.x == 0) st = state[pass - 1];
    if (threadIdx.x < 4) digit[threadIdx.x] = 0;
    cumulative[t][bin] = hist[((pass - 1) * 4 + t) * 256 + bin];
    __syncthreads();
    for (int step = 1; step < 256; step *= 2) {  // inclusive prefix sums of each rank's counts
        const unsigned int add = bin >= step ? cumulative[t][bin - step] : 0u;
        __syncthreads();
        cumulative[t][bin] += add;
        __syncthreads();
    }
    if (cumulative[t][bin] <= st.rank[t] && bin < 255) atomicAdd(&digit[t], 1u);
    __syncthreads();
    if (threadIdx.x < 4) {
        const unsigned int b = digit[threadIdx.x];
        st.rank[threadIdx.x] -= b ? cumulative[threadIdx.x][b - 1] : 0u;
        st.prefix[threadIdx.x] |= b << (32 - 8 * pass);
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(1024) percentile_pass(const Window* __restrict__ windows,
                                                                 int pass)
{
    __shared__ SelectState st;
    __shared__ unsigned int cumulative[4][256];
    __shared__ unsigned int digit[4];
    __shared__ unsigned int histogram[4][256];
    const Window& w = windows[blockIdx.z];
    const float* values = w.means;
    const int n = w.used * w.model_rows * w.model_cols, repeat = 4 - w.used;
    const double* q = w.quantiles;
    unsigned int* hist = w.hist;
    SelectState* state = w.state;
    select_state(pass, (long long)n * repeat, q, hist, state, st, cumulative, digit);
    if (blockIdx.x == 0 && threadIdx.x == 0) state[pass] = st;
    const int shift = 24 - 8 * pass;
    const unsigned int mask = pass ? 0xffffffffu << (32 - 8 * pass) : 0u;
    histogram[threadIdx.x / 256][threadIdx.x % 256] = 0;
    __syncthreads();
    const int stride = gridDim.x * blockDim.x;
    for (int base = blockIdx.x * blockDim.x; base < n; base += stride) {
        const int i = base + threadIdx.x;
        const unsigned int key = i < n ? order_key(values[i]) : 0;
        const unsigned int bin = (key >> shift) & 255u;
        for (int t = 0; t < 4; ++t) {
            const bool counts = i < n && (key & mask) == st.prefix[t];
            // Lanes with the same bin add together (values of a window share their top bits).
            const unsigned int voting = __ballot_sync(0xffffffffu, counts);
            const unsigned int same = __match_any_sync(0xffffffffu, counts ? bin : 256u + t);
            if (counts && (__ffs(same & voting) - 1) == (int)(threadIdx.x & 31))
                atomicAdd(&histogram[t][bin], (unsigned int)(__popc(same & voting) * repeat));
        }
    }
    __syncthreads();
    const unsigned int count = histogram[threadIdx.x / 256][threadIdx.x % 256];
    if (count) atomicAdd(hist + (pass * 4 + threadIdx.x / 256) * 256 + threadIdx.x % 256, count);
}

extern "C" __global__ void __launch_bounds__(1024) percentile_finish(const Window* __restrict__ windows)
{
    __shared__ SelectState st;
    __shared__ unsigned int cumulative[4][256];
    __shared__ unsigned int digit[4];
    const Window& w = windows[blockIdx.z];
    const int n = w.used * w.model_rows * w.model_cols, repeat = 4 - w.used;
    const double* q = w.quantiles;
    const unsigned int* hist = w.hist;
    const SelectState* state = w.state;
    double* out = w.stretch;
    select_state(4, (long long)n * repeat, q, hist, state, st, cumulative, digit);
    if (threadIdx.x < 2) {
        // numpy's _lerp: b - a in float32, then in float64 a + d g, or b - d (1 - g) for g >= 0.5.
        const float a = key_value(st.prefix[2 * threadIdx.x]);
        const float b = key_value(st.prefix[2 * threadIdx.x + 1]);
        const double d = (double)__fsub_rn(b, a), g = st.gamma[threadIdx.x];
        out[threadIdx.x] = g >= 0.5 ? __dsub_rn((double)b, __dmul_rn(d, __dsub_rn(1.0, g)))
                                    : __dadd_rn((double)a, __dmul_rn(d, g));
    }
}

// core.surface.model_inputs on the device: the band planes stretched by their percentiles
// (range = [low, high] from band_percentiles, span core.surface.stretch_span: max(high - low,
// STRETCH_SPAN_FLOOR x max(|low|, |high|), ABSOLUTE_FLOOR)) and
// clipped to [clip_low, clip_high], the similarity, all mirrored ("reflect") to out_rows x out_cols, and
// core.surface.endpoint_plane over the whole out_rows x out_cols (not mirrored): clip(1 -
// min(|p - a|, |p - b|) / reach, 0, 1), float32 as numpy computes it, with the clicks (ax, ay),
// (bx, by) in the model's pixel coordinates and reach = ENDPOINT_REACH x max(|b - a|, 1e-3)
// (from the host). planes (w.means): (used + 1, model_rows, model_cols), used = 3 or 1 (a grey
// band taken three times); out (w.input): (5, input_rows, input_cols).
__device__ __forceinline__ int mirror(int i, int n)
{
    if (n == 1) return 0;
    const int period = 2 * (n - 1);
    i %= period;
    return i < n ? i : period - i;
}

__device__ __forceinline__ float click_distance(float x, float y, float px, float py)
{
    const float dx = __fsub_rn(x, px), dy = __fsub_rn(y, py);
    return __fsqrt_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)));
}

extern "C" __global__ void model_input(const Window* __restrict__ windows)
{
    const Window& w = windows[blockIdx.z];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int out_rows = w.input_rows, out_cols = w.input_cols;
    if (c >= out_cols || r >= out_rows) return;
    const float* planes = w.means;
    const int used = w.used, rows = w.model_rows, cols = w.model_cols;
    const double* range = w.stretch;
    const float clip_low = w.clip_low, clip_high = w.clip_high, reach = w.reach;
    const float ax = w.clicks[0], ay = w.clicks[1], bx = w.clicks[2], by = w.clicks[3];
    float* out = w.input;
    const size_t plane = (size_t)rows * cols, at = (size_t)mirror(r, rows) * cols + mirror(c, cols);
    const float low = (float)range[0];
    const double magnitude = fmax(fabs(range[0]), fabs(range[1]));
    const float span = (float)fmax(fmax(__dsub_rn(range[1], range[0]),
                                        __dmul_rn(STRETCH_SPAN_FLOOR, magnitude)),
                                   ABSOLUTE_FLOOR);
    const size_t out_plane = (size_t)out_rows * out_cols, out_at = (size_t)r * out_cols + c;
    for (int k = 0; k < 3; ++k) {
        const float v = __fdiv_rn(__fsub_rn(planes[(used == 3 ? k : 0) * plane + at], low), span);
        out[k * out_plane + out_at] = fminf(fmaxf(v, clip_low), clip_high);
    }
    out[3 * out_plane + out_at] = planes[used * plane + at];
    const float x = (float)c, y = (float)r;
    const float nearest = fminf(click_distance(x, y, ax, ay), click_distance(x, y, bx, by));
    out[4 * out_plane + out_at] = fminf(fmaxf(__fsub_rn(1.0f, __fdiv_rn(nearest, reach)), 0.0f), 1.0f);
}
