typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 gen(u32 tag, u32 row, u32 col, u32 epoch) {
    u32 h = tag * 0x9E3779B9u ^ row * 0x85EBCA6Bu ^ col * 0xC2B2AE35u ^ epoch * 0x27D4EB2Fu;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    return h;
}

__device__ __forceinline__ void wait_cycles(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}

extern "C" __global__ void bump(u32* epoch) { *epoch += 1; }

// One thread spinning for a known number of cycles: times the SM clock against the host's.
extern "C" __global__ void spin(long long cycles) { wait_cycles(cycles); }

__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Sweeps `rows` rows of dst in address order; all blocks share each row, then wait.
// copy = 1: dst = src (same row width); copy = 0: dst = gen(tag, …), src is read too.
// times[2 slot]: when block 0 started (ns, the GPU's global timer); times[2 slot + 1]: when the
// last block finished.
extern "C" __global__ void sweep(const u32* src, u32 src_row_words, u32* dst, u32 dst_row_words,
                                 u32 rows, u32 tag, const u32* epoch, long long fixed_cycles,
                                 long long row_cycles, u32 copy, u32 keep, u64* times, u32 slot) {
    if (blockIdx.x == 0 && threadIdx.x == 0) { times[2 * slot] = now_ns(); }
    u32 e = *epoch;
    wait_cycles(fixed_cycles);
    u32 stride = gridDim.x * blockDim.x;
    u32 tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (u32 r = 0; r < rows; ++r) {
        const u32* s = src + (u64)r * src_row_words;
        u32* d = dst + (u64)r * dst_row_words;
        for (u32 c = tid; c < dst_row_words; c += stride) {
            u32 v = s[c % src_row_words];
            d[c] = copy ? v : (gen(tag, r, c, e) ^ (v & keep));
        }
        wait_cycles(row_cycles);
    }
    __syncthreads();
    if (threadIdx.x == 0) { atomicMax(&times[2 * slot + 1], now_ns()); }
}

extern "C" __global__ void verify(const u32* cache, u32 row_words, u32 rows, u32 tag,
                                  const u32* epoch, u32* row_bad, u32* replay_bad) {
    u32 e = *epoch;
    u64 n = (u64)rows * row_words;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u32 r = (u32)(i / row_words), c = (u32)(i % row_words);
        if (cache[i] != gen(tag, r, c, e)) { atomicOr(&row_bad[r], 1u); atomicOr(replay_bad, 1u); }
    }
}

extern "C" __global__ void tally(u32* replay_bad, u32* racing) {
    if (*replay_bad) { *racing += 1; *replay_bad = 0; }
}

// The bandwidth hog of --load: read-modify-write over a large buffer.
extern "C" __global__ void hog(u32* buf, u64 words) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        buf[i] = buf[i] * 1664525u + 1013904223u;
    }
}
