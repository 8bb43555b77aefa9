// Link scores of every stage on the device, by the rule of core/links.py:
// a link p -> q of length L gets K = max(2, ceil(L - LINK_SAMPLE_SLACK)) midpoint samples
// x_k = p + (k + 1/2)/K (q - p), each a bilinear sample of the evidence planes (0 outside the
// image) turned into a term by the sampler, and score = L/K * sum_k term(x_k). Positions,
// interpolation and the sum are `real`:
// float64 by default, positions and interpolation in the CPU's order of operations, so scores
// agree with the CPU backend to rounding; float32 when built with -DREAL=float (GPUs with a low
// float64 rate), which interpolates in the cheaper two-lerp form. Samples on the window's far
// edge use its last two pixels with weight 1 (the CPU's zero padding, with weight 0, gives the
// same value).
//
// A link whose ends lie at least a pixel inside both the image and the window has every sample
// inside both (the segment is convex, and a pixel is far more than the rounding of its
// positions), so its loop skips the per-sample bounds test and clamps: the same samples, fewer
// instructions.
//
// Evidence planes are interleaved per pixel: (rows, cols, P) float32, P = 1 (SCALAR) or 2
// (CROSS, SINE: gx, gy). LANES neighbouring threads (1 or 4) compute one link, lane l summing
// the samples l, l + LANES, ... (a link's samples spread over several threads: a click's hundred
// thousand links of up to a hundred samples each fill the device with shorter work), their sums
// added by warp shuffles; with LANES > 1 the sum's order is not the CPU's, which moves a score
// by a few units of the last place. One 1-D grid covers every stage, stage t owning the blocks
// (blockDim.x / LANES links each) from its first_block on (no idle blocks for the short stages
// at a and b).

#ifndef REAL
#define REAL double
#endif
typedef REAL real;

// LINK_SAMPLE_SLACK is core.links.SAMPLE_COUNT_SLACK, defined at compile time
// (gpu.kernels.link_constants): a length a rounding above a whole number of px takes as many
// samples as on the CPU.

#define SAMPLER_SCALAR 0
#define SAMPLER_CROSS 1
#define SAMPLER_SINE 2

struct LinkStage {
    const double* from;  // (n_from, 2) start points (x, y), image pixels
    const double* to;    // (n_to, 2) end points
    real* out;           // (n_from, n_to), or (n_to, n_from) when transposed
    int n_from, n_to;
    int transposed;
    int first_block;     // the stage's first block in the grid
};

struct Image {
    const float* planes;  // (rows, cols, P)
    int rows, cols;       // window size
    int col0, row0;       // image pixel at the window's [0, 0]
    int width, height;    // whole image; samples outside it contribute 0
    double tau;           // SINE: gradient-magnitude threshold
};

// Bilinear interpolation as core/links.py writes it (bilinear_coefficients): c0 + fx·c1 +
// fy·c2 + fx·fy·c3 with the coefficients taken exactly in float64; in float32 as two lerps
// across and one down (fewer operations, the same value to float32 rounding).
__device__ __forceinline__ double bilinear(float p00, float p01, float p10, float p11, double fx,
                                          double fy)
{
    const double c0 = p00;
    const double c1 = (double)p01 - c0, c2 = (double)p10 - c0;
    const double c3 = c0 - p01 - p10 + p11;
    return c0 + fx * c1 + fy * c2 + fx * fy * c3;
}

__device__ __forceinline__ float bilinear(float p00, float p01, float p10, float p11, float fx,
                                         float fy)
{
    const float top = fmaf(fx, p01 - p00, p00), bottom = fmaf(fx, p11 - p10, p10);
    return fmaf(fy, bottom - top, top);
}

// The term at window point (lx, ly). CHECKED: clamp the sample's pixel to the window; without
// it the caller guarantees that the sample lies inside the window, at least a pixel from its
// edges (so truncation is the floor).
template <int SAMPLER, bool CHECKED>
__device__ __forceinline__ real sample_term(const Image& im, real lx, real ly, real vx, real vy)
{
    const int ix = CHECKED ? min(max((int)floor(lx), 0), im.cols - 2) : (int)lx;
    const int iy = CHECKED ? min(max((int)floor(ly), 0), im.rows - 2) : (int)ly;
    const real fx = lx - ix, fy = ly - iy;
    const int at = iy * im.cols + ix;  // rows x cols x P < 2^31 (gpu/engine.py)
    if (SAMPLER == SAMPLER_SCALAR) {
        const float* p = im.planes + at;
        return bilinear(__ldg(p), __ldg(p + 1), __ldg(p + im.cols), __ldg(p + im.cols + 1), fx, fy);
    }
    const float2* p = reinterpret_cast<const float2*>(im.planes) + at;
    const float2 p00 = __ldg(p), p01 = __ldg(p + 1);
    const float2 p10 = __ldg(p + im.cols), p11 = __ldg(p + im.cols + 1);
    const real v0 = bilinear(p00.x, p01.x, p10.x, p11.x, fx, fy);
    const real v1 = bilinear(p00.y, p01.y, p10.y, p11.y, fx, fy);
    const real cross = fabs(v0 * vy - v1 * vx);
    if (SAMPLER == SAMPLER_CROSS) return cross;
    const real magnitude = sqrt(v0 * v0 + v1 * v1);
    return magnitude > (real)im.tau ? cross / magnitude : (real)0;
}

// Whether image point (x, y) lies at least a pixel inside the image and inside the window
// (window column/row >= 1 and <= cols - 3 / rows - 3, so its pixel and the next are in).
__device__ __forceinline__ bool inside(const Image& im, double x, double y)
{
    const double lx = x - im.col0, ly = y - im.row0;
    return x >= 1 && y >= 1 && x <= im.width - 2 && y <= im.height - 2 && lx >= 1 && ly >= 1
           && lx <= im.cols - 3 && ly <= im.rows - 3;
}

// The stage that owns this block: the last whose first_block is <= blockIdx.x.
__device__ __forceinline__ int block_stage(const LinkStage* stages, int n_stages)
{
    __shared__ int owner;
    if (threadIdx.x == 0) {
        int low = 0, high = n_stages - 1;
        while (low < high) {
            const int middle = (low + high + 1) / 2;
            if (stages[middle].first_block <= (int)blockIdx.x) low = middle;
            else high = middle - 1;
        }
        owner = low;
    }
    __syncthreads();
    return owner;
}

template <int SAMPLER, int LANES>
__device__ __forceinline__ void link_scores(const LinkStage* stages, int n_stages, const Image& im)
{
    const LinkStage st = stages[block_stage(stages, n_stages)];
    const int lane = threadIdx.x % LANES;
    const long long g = (long long)((int)blockIdx.x - st.first_block) * (blockDim.x / LANES)
                        + threadIdx.x / LANES;
    const bool live = g < (long long)st.n_from * st.n_to;
    real total = 0;
    int count = 2;
    double length64 = 0;
    if (live) {
        int s, e;
        if (st.transposed) { e = (int)(g / st.n_from); s = (int)(g - (long long)e * st.n_from); }
        else { s = (int)(g / st.n_to); e = (int)(g - (long long)s * st.n_to); }
        // The sample count comes from the float64 length, so both precisions take the same
        // samples.
        const double px64 = st.from[2 * s], py64 = st.from[2 * s + 1];
        const double dx64 = st.to[2 * e] - px64, dy64 = st.to[2 * e + 1] - py64;
        length64 = sqrt(dx64 * dx64 + dy64 * dy64);
        count = max(2, (int)ceil(length64 - LINK_SAMPLE_SLACK));
        const real px = (real)px64, py = (real)py64, dx = (real)dx64, dy = (real)dy64;
        const real length = (real)length64;
        const real vx = dx / length, vy = dy / length;
        const real step = (real)1 / count;
        const real right = (real)(im.width - 1), bottom = (real)(im.height - 1);
        if (inside(im, px64, py64) && inside(im, px64 + dx64, py64 + dy64)) {
            if constexpr (sizeof(real) == sizeof(float)) {
                // float32: positions in window coordinates, first sample + k steps, one
                // rounding each (fewer operations per sample than the float64 form, as
                // accurate).
                const real sx = (real)(dx64 / count), sy = (real)(dy64 / count);
                const real lx0 = (real)(px64 - im.col0 + 0.5 * dx64 / count);
                const real ly0 = (real)(py64 - im.row0 + 0.5 * dy64 / count);
                real steps = (real)lane;
                for (int k = lane; k < count; k += LANES, steps += LANES)
                    total += sample_term<SAMPLER, false>(im, fmaf(steps, sx, lx0),
                                                         fmaf(steps, sy, ly0), vx, vy);
            } else {
                for (int k = lane; k < count; k += LANES) {
                    const real f = (k + (real)0.5) * step;
                    total += sample_term<SAMPLER, false>(im, (px + f * dx) - im.col0,
                                                         (py + f * dy) - im.row0, vx, vy);
                }
            }
        } else {
            for (int k = lane; k < count; k += LANES) {
                const real f = (k + (real)0.5) * step;
                const real x = px + f * dx, y = py + f * dy;
                if (x < 0 || y < 0 || x > right || y > bottom) continue;
                total += sample_term<SAMPLER, true>(im, x - im.col0, y - im.row0, vx, vy);
            }
        }
    }
    // The lanes' sums meet in the link's first lane (every thread of the warp takes part).
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2)
        total += __shfl_down_sync(0xffffffffu, total, offset, LANES);
    if (live && lane == 0) st.out[g] = total * (real)length64 * ((real)1 / count);
}

// link_scores_<sampler>_<lanes>: one thread per link, or 4 (gpu/kernels.py LINK_LANES).
#define LINK_SCORES(NAME, SAMPLER, LANES)                                                         \
    extern "C" __global__ void NAME(const LinkStage* __restrict__ stages, int n_stages, Image im) \
    {                                                                                              \
        link_scores<SAMPLER, LANES>(stages, n_stages, im);                                         \
    }
LINK_SCORES(link_scores_scalar_1, SAMPLER_SCALAR, 1)
LINK_SCORES(link_scores_cross_1, SAMPLER_CROSS, 1)
LINK_SCORES(link_scores_sine_1, SAMPLER_SINE, 1)
LINK_SCORES(link_scores_scalar_4, SAMPLER_SCALAR, 4)
LINK_SCORES(link_scores_cross_4, SAMPLER_CROSS, 4)
LINK_SCORES(link_scores_sine_4, SAMPLER_SINE, 4)
